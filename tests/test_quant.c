/* test_quant.c — the GGML block formats llama.cpp's quantized files hold (Q4_0 ... Q6_K,
 * IQ4_NL, IQ4_XS, Q8_0): each decoder against gguf-py's numpy dequantizers, block by block
 * and bit for bit (tests/fixtures/quant/oracle.bin, made by gen_quant_oracle.py there); the
 * conversion to bf16/f16 for the GPU upload; a file holding a type ringlm does not read,
 * refused by the type's name before any size check; and, per type, a small model written in
 * that format, loaded and served by the CPU backend, whose greedy tokens equal the plain
 * reference forward (kernels/rl_ref.c) over the decoded weights.
 * Tests: runtime/model (model_dtype, GGUF loader and writer, streaming conversion),
 * runtime/backend (cpu), kernels (rl_ref).
 */
#include <math.h>
#include "tests/rl_test.h"
#include "clients/ringlm.h"
#include "kernels/cpu_ops.h"
#include "kernels/rl_half.h"
#include "kernels/rl_ref.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"
#include "runtime/backend/rl_backend.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
	if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*n = (size_t)len;
	return b;
}

static const char *oracle_path(void)
{
	static char p[512];
	const char *here = getenv("RL_TEST_SRCDIR");
	snprintf(p, sizeof p, "%s/" FIXTURES "/quant/oracle.bin", here ? here : ".");
	return p;
}

/* Every block decodes to numpy's floats, bit for bit. */
static void quant_decoders_match_numpy(void)
{
	size_t n;
	uint8_t *b = slurp(oracle_path(), &n);
	if (!b)
		SKIP("tests/fixtures/quant/oracle.bin not found (run from the repository root)");
	REQUIRE(n >= 12 && !memcmp(b, "RLQO", 4));
	uint32_t ver, nt;
	memcpy(&ver, b + 4, 4);
	memcpy(&nt, b + 8, 4);
	REQUIRE(ver == 1);
	size_t o = 12;
	int seen[RL_DT_COUNT] = { 0 };
	for (uint32_t t = 0; t < nt; t++) {
		REQUIRE(o + 24 <= n);
		char name[9] = "";
		memcpy(name, b + o, 8);
		uint32_t ggml, nb, be, bb;
		memcpy(&ggml, b + o + 8, 4);
		memcpy(&nb, b + o + 12, 4);
		memcpy(&be, b + o + 16, 4);
		memcpy(&bb, b + o + 20, 4);
		o += 24;
		REQUIRE(o + (size_t)nb * bb + (size_t)nb * be * 4 <= n);
		int dt = rl_dt_from_name(name);
		const struct rl_dt_info *di = rl_dt_info(dt);
		CHECKF(di && di->ggml == ggml && di->blk_elems == be && di->blk_bytes == bb,
		       "%s: table says ggml %u, %u weights in %u bytes; gguf-py says ggml %u, %u in %u", name,
		       di ? di->ggml : 0, di ? di->blk_elems : 0, di ? di->blk_bytes : 0, ggml, be, bb);
		if (!di) {
			o += (size_t)nb * bb + (size_t)nb * be * 4;
			continue;
		}
		seen[dt] = 1;
		CHECK(rl_dt_of_ggml(ggml) == dt);
		float *y = malloc((size_t)nb * be * 4), *want = malloc((size_t)nb * be * 4);
		REQUIRE(y && want);
		CHECK(rl_dt_decode(dt, y, b + o, nb) == 0);
		memcpy(want, b + o + (size_t)nb * bb, (size_t)nb * be * 4);
		uint32_t bad = 0, first = 0;
		for (uint32_t i = 0; i < nb * be; i++) {
			uint32_t u, v;
			memcpy(&u, &y[i], 4);
			memcpy(&v, &want[i], 4);
			if (u != v && !bad++)
				first = i;
		}
		CHECKF(!bad, "%s: %u of %u weights differ from numpy (first: weight %u of block %u: %.9g, numpy %.9g)",
		       name, bad, nb * be, first % be, first / be, y[first], want[first]);
		printf("  %-6s %2u blocks of %3u weights: %s\n", name, nb, be, bad ? "DIFFER" : "bit-exact with gguf-py");
		/* the streaming conversion (GPU upload: bf16/f16) is that decode, rounded */
		for (int dd = RL_DT_F16; dd <= RL_DT_BF16; dd++) {
			uint16_t *c = malloc((size_t)nb * be * 2);
			REQUIRE(c);
			CHECK(rl_model_convert(c, dd, b + o, dt, (uint64_t)nb * be) == 0);
			uint32_t cbad = 0;
			for (uint32_t i = 0; i < nb * be; i++)
				cbad += c[i] != (dd == RL_DT_BF16 ? rl_f32_to_bf16(want[i]) : rl_f32_to_f16(want[i]));
			CHECKF(!cbad, "%s -> %s: %u weights differ", name, dd == RL_DT_BF16 ? "bf16" : "f16", cbad);
			free(c);
		}
		/* a length that is not whole blocks is refused */
		float tmp[4];
		CHECK(rl_model_convert(tmp, RL_DT_F32, b + o, dt, 3) == -EINVAL);
		free(y);
		free(want);
		o += (size_t)nb * bb + (size_t)nb * be * 4;
	}
	for (int dt = RL_DT_Q8_0; dt < RL_DT_COUNT; dt++)
		CHECKF(seen[dt], "%s has no oracle blocks: rerun gen_quant_oracle.py", rl_dt_info(dt)->name);
	free(b);
}

/* The writer's quantizers: decoded back, Q8_0 is within half its step of every weight, and
 * Q4_K (the draft format of speculative decoding) keeps a 4-bit format's relative error, its
 * largest error within a step of its sub-block; a type without one is refused. */
static void quantizers_round_trip(void)
{
	enum { N = 256 * 64 };
	static float x[N], y[N];
	static uint8_t q[N * 2];
	uint64_t st = 12345;
	for (int i = 0; i < N; i++) {            /* sums of uniforms (near normal), some outliers */
		float v = 0;
		for (int k = 0; k < 4; k++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			v += (float)(st >> 40) / (float)(1 << 24) - 0.5f;
		}
		x[i] = (i % 97 == 0 ? 8 : 1) * v * (1 + (i / 256) % 5);
	}
	const int types[2] = { RL_DT_Q8_0, RL_DT_Q4_K };
	const double max_rel[2] = { 0.01, 0.1 };
	for (int t = 0; t < 2; t++) {
		const struct rl_dt_info *d = rl_dt_info(types[t]);
		REQUIRE(rl_dt_quantize(types[t], q, x, N / d->blk_elems) == 0);
		REQUIRE(rl_dt_decode(types[t], y, q, N / d->blk_elems) == 0);
		double e2 = 0, x2 = 0;
		int bad = 0;
		for (int b = 0; b < N; b += 32) {     /* per 32 weights: Q8_0's block, Q4_K's sub-block */
			float lo = 0, hi = 0, amax = 0;
			for (int i = b; i < b + 32; i++) {
				lo = fminf(lo, x[i]);
				hi = fmaxf(hi, x[i]);
				amax = fmaxf(amax, fabsf(x[i]));
			}
			const float step = t ? (hi - lo) / 15 : amax / 127;
			for (int i = b; i < b + 32; i++) {
				const float e = fabsf(y[i] - x[i]);
				e2 += (double)e * e;
				x2 += (double)x[i] * x[i];
				bad += e > (t ? 2.0f : 0.56f) * step + 1e-6f;   /* Q8_0: half a step (d rounded to f16); Q4_K: its fit may give an outlier up to two */
			}
		}
		const double rel = sqrt(e2 / x2);
		printf("  %s: relative RMS error %.4f\n", d->name, rel);
		CHECKF(rel < max_rel[t] && bad == 0, "%s: relative error %.4f, %d weights beyond the bound", d->name, rel, bad);
	}
	CHECK(rl_dt_quantize(RL_DT_Q6_K, q, x, 1) == -ENOTSUP && rl_dt_quantize(RL_DT_F16, q, x, 1) == -ENOTSUP);
}

static void tiny_cfg(struct rl_model_config *c)
{
	memset(c, 0, sizeof *c);
	c->dim = 256;                  /* K-quant rows are 256-weight blocks */
	c->hidden_dim = 512;
	c->n_layers = 2;
	c->n_heads = 4;
	c->n_kv_heads = 2;
	c->head_dim = 64;
	c->vocab_size = 384;
	c->max_ctx = 64;
	c->rope_theta = 10000;
	c->rope_scale = 1;
	c->norm_eps = 1e-5f;
	c->bos_id = 1;
	c->eos_id = UINT32_MAX;        /* greedy never stops early */
}

/* A type ringlm does not read is named, with the list it does read, before any size check
 * (the file is also far too small for its shape, which would otherwise be the message). */
static void quant_unknown_type_named(void)
{
	struct rl_model_config c;
	tiny_cfg(&c);
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 7);
	char path[] = "/tmp/rl-quant-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	close(fd);
	REQUIRE(rl_gguf_write(m, path, RL_DT_Q4_K, err, sizeof err) == 0);
	rl_model_destroy(m);
	/* retype the first 2-D tensor as IQ2_XXS (16) and cut the file to its header */
	size_t n;
	uint8_t *b = slurp(path, &n);
	REQUIRE(b);
	const char *name = "token_embd.weight";
	uint8_t *at = memmem(b, n, name, strlen(name));
	REQUIRE(at);
	uint32_t nd, ty = 16;
	memcpy(&nd, at + strlen(name), 4);
	memcpy(at + strlen(name) + 4 + 8 * nd, &ty, 4);
	FILE *f = fopen(path, "wb");
	REQUIRE(f && fwrite(b, 1, 4096, f) == 4096);
	fclose(f);
	free(b);
	int rc = rl_model_load(path, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "IQ2_XXS") && strstr(err, "Q4_K") && strstr(err, "llama-quantize") &&
	       !strstr(err, "truncated"), "rc %d: %s", rc, err);
	printf("  %s\n", err);
	unlink(path);
}

/* Greedy tokens of a model through ringlm's CPU backend (on the weights as stored) and
 * through the float64 reference (on the same weights decoded to fp32). */
/* the types the cpu backend's decode steps compute against 8-bit activations
 * (kernels/README.md's route table; test_qmatmul: within 4e-3 of the terms) */
static int q8_acts(int dt)
{
	return dt == RL_DT_Q8_0 || dt == RL_DT_Q4_K || dt == RL_DT_Q6_K || dt == RL_DT_Q4_0 || dt == RL_DT_Q4_1 ||
	       dt == RL_DT_Q5_0 || dt == RL_DT_Q5_1 || dt == RL_DT_IQ4_NL || dt == RL_DT_Q2_K || dt == RL_DT_Q3_K ||
	       dt == RL_DT_Q5_K || dt == RL_DT_IQ4_XS;
}

static void quant_models_serve_like_the_reference(void)
{
	struct rl_model_config c;
	tiny_cfg(&c);
	for (int dt = RL_DT_Q8_0; dt < RL_DT_COUNT; dt++) {
		const char *tn = rl_dt_info(dt)->name;
		struct rl_model *m;
		char err[512], path[64];
		REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
		rl_model_fill_random(m, 100 + dt);
		snprintf(path, sizeof path, "/tmp/rl-quant-%d-%s.gguf", (int)getpid(), tn);
		REQUIRE(rl_gguf_write(m, path, dt, err, sizeof err) == 0);
		rl_model_destroy(m);
		struct rl_model *lm;
		int rc = rl_model_load(path, NULL, &lm, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", tn, err);
		if (rc) {
			unlink(path);
			continue;
		}
		/* the reference, one token at a time */
		enum { NP = 5, NG = 24 };
		uint32_t prompt[NP] = { 1, 17, 200, 31, 5 }, want[NG];
		struct rl_ref_state st;
		REQUIRE(rl_ref_state_init(&st, lm, NP + NG) == 0);
		float *logits = malloc(c.vocab_size * sizeof *logits);
		REQUIRE(logits);
		uint32_t tok = prompt[0];
		float margin = INFINITY, gap[NG] = { 0 };
		for (uint32_t pos = 0; pos < NP + NG - 1; pos++) {
			rl_ref_forward(lm, &st, tok, pos, logits);
			if (pos + 1 < NP) {
				tok = prompt[pos + 1];
				continue;
			}
			uint32_t best = 0, second = 1;
			for (uint32_t v = 0; v < c.vocab_size; v++) {
				if (logits[v] > logits[best]) {
					second = best;
					best = v;
				} else if (v != best && logits[v] > logits[second]) {
					second = v;
				}
			}
			margin = fminf(margin, logits[best] - logits[second]);
			gap[pos + 1 - NP] = logits[best] - logits[second];
			want[pos + 1 - NP] = tok = best;
		}
		want[NG - 1] = 0;
		rl_ref_state_free(&st);
		free(logits);
		rl_model_destroy(lm);
		/* ringlm, as a user runs it */
		struct ringlm_params p = ringlm_default_params();
		p.model = path;
		p.backend = "cpu";
		struct ringlm *cl;
		rc = ringlm_connect(&p, &cl);
		CHECKF(rc == 0, "%s: %s", tn, ringlm_last_error());
		if (!rc) {
			struct ringlm_request r = ringlm_default_request();
			r.prompt = prompt;
			r.n_prompt = NP;
			r.max_new = NG - 1;
			REQUIRE(ringlm_submit(cl, &r, NULL) == 0);
			uint32_t got[NG] = { 0 }, ng = 0;
			int done = 0;
			struct ringlm_event ev[64];
			while (!done) {
				int k = ringlm_wait(cl, ev, 64, 30000);
				REQUIRE(k > 0);
				for (int i = 0; i < k; i++) {
					if (ev[i].type == RINGLM_EV_TOKEN && ng < NG)
						got[ng++] = ev[i].token;
					else if (ev[i].type != RINGLM_EV_TOKEN)
						done = 1;
				}
			}
			/* the cpu backend computes q8_acts types against 8-bit activations
			 * (test_qmatmul: within 1e-2 of the terms), so a near-tie of the reference
			 * may go either way there: tokens are compared up to the first position
			 * whose top-2 gap is below that path's tolerance; fp32 paths: all of them */
			float tol = q8_acts(dt) ? 0.05f : 0;
			uint32_t cmp = 0;
			while (cmp < NG - 1 && gap[cmp] >= tol)
				cmp++;
			int same = ng == NG - 1 && !memcmp(got, want, cmp * sizeof *got);
			CHECKF(same, "%s: ringlm's greedy tokens differ from the reference", tn);
			printf("  %-6s %u of %u greedy tokens compared, all equal the reference (smallest top-2 logit gap %.3g)\n",
			       tn, cmp, ng, margin);
			ringlm_close(cl);
		}
		unlink(path);
	}
}

/* Teacher-forced logits of the cpu backend on the weights as stored (a 12-row prefill chunk:
 * the decoded-tile path; then 12 decode steps: the dot paths) against the float64 reference
 * on the same weights decoded to fp32, for every type: max |difference| / max |logit|, with
 * the per-path tolerances of test_qmatmul (8-bit activations for Q8_0, Q4_K, Q6_K). */
static void stored_logits_follow_the_reference(void)
{
	struct rl_model_config c;
	tiny_cfg(&c);
	enum { N = 24, PRE = 12, BS = 16 };
	for (int dt = RL_DT_F32; dt < RL_DT_COUNT; dt++) {
		const char *tn = rl_dt_info(dt)->name;
		struct rl_model *m, *ref, *st;
		char err[512], path[64];
		REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
		rl_model_fill_random(m, 500 + dt);
		snprintf(path, sizeof path, "/tmp/rl-quantl-%d-%s.gguf", (int)getpid(), tn);
		REQUIRE(rl_gguf_write(m, path, dt, err, sizeof err) == 0);
		rl_model_destroy(m);
		REQUIRE(rl_model_load(path, NULL, &ref, err, sizeof err) == 0);
		REQUIRE(rl_model_load_stored(path, NULL, &st, err, sizeof err) == 0);
		unlink(path);
		CHECKF(st->layers[0].mq.dtype == dt && (dt == RL_DT_F32) == (st->layers[0].wq != NULL),
		       "%s: stored as %d", tn, st->layers[0].mq.dtype);
		struct rl_backend_params bp = { .n_kv_blocks = 4, .block_size = BS, .max_batch_tokens = 32,
						.max_seqs = 1, .threads = 1, .runtime_cpu = -1 };
		struct rl_backend *be;
		REQUIRE(rl_backend_cpu_create(st, &bp, &be, err, sizeof err) == 0);
		struct rl_ref_state rs;
		REQUIRE(rl_ref_state_init(&rs, ref, N) == 0);
		uint32_t toks[N], pos[N], row_seq[N] = { 0 }, table[4] = { 2, 0, 3, 1 };
		float *want = malloc(c.vocab_size * sizeof(float)), *got = malloc(c.vocab_size * sizeof(float));
		REQUIRE(want && got);
		for (uint32_t i = 0; i < N; i++)
			toks[i] = (i * 131 + 7) % c.vocab_size;
		double worst = 0;
		for (uint32_t done = 0; done < N;) {
			uint32_t q = done ? 1 : PRE;
			for (uint32_t r = 0; r < q; r++)
				pos[r] = done + r;
			struct rl_batch_seq s = { .q_start = 0, .q_len = q, .ctx_len = done + q,
						  .n_blocks = (done + q + BS - 1) / BS, .block_table = table, .sample = 1,
						  .sp = { .temperature = 0, .top_p = 1 } };
			struct rl_batch b = { .n_tokens = q, .n_seqs = 1, .n_prefill = done ? 0 : 1, .block_size = BS,
					      .tokens = toks + done, .pos = pos, .row_seq = row_seq, .seqs = &s };
			int32_t out;
			REQUIRE(rl_backend_launch(be, &b) == 0 && rl_backend_finish(be, &out) == 0);
			REQUIRE(rl_backend_cpu_logits(be, 0, got) == 0);
			for (uint32_t r = 0; r < q; r++)
				rl_ref_forward(ref, &rs, toks[done + r], done + r, want);
			done += q;
			double dmax = 0, lmax = 0;
			for (uint32_t v = 0; v < c.vocab_size; v++) {
				dmax = fmax(dmax, fabs((double)got[v] - want[v]));
				lmax = fmax(lmax, fabs(want[v]));
			}
			worst = fmax(worst, dmax / lmax);
		}
		/* 8-bit activations (decode over q8_acts types) or bf16 ones (the 12-row prefill over
		 * BF16 and block types on AVX512-BF16): the reduced-activation tolerance */
		int reduced = q8_acts(dt) || rl_cpu_qmatmul_bf16_acts(&st->layers[0].mq, PRE);
		double tol = reduced ? 3e-2 : 1e-4;
		CHECKF(worst <= tol, "%s: logits off by %.3g of the largest (tolerance %g)", tn, worst, tol);
		printf("  %-6s stored weights: logits within %.2g of the reference's largest (tolerance %g)\n", tn, worst, tol);
		free(want); free(got);
		rl_ref_state_free(&rs);
		rl_backend_destroy(be);
		rl_model_destroy(st);
		rl_model_destroy(ref);
	}
}

int main(void)
{
	RUN(quant_decoders_match_numpy);
	RUN(quantizers_round_trip);
	RUN(quant_unknown_type_named);
	RUN(quant_models_serve_like_the_reference);
	RUN(stored_logits_follow_the_reference);
	TEST_MAIN_END();
}
