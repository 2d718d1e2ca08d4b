/* test_families.c — model families beyond Llama against llama.cpp on the same files: small
 * random-weight GGUFs (`ringlm mkmodel`, the command in each tests/fixtures/families/NAME.expected)
 * with llama.cpp's greedy tokens after a 48-token prompt as the oracle (gen_families.py there;
 * llama.cpp reads the file with its own loader, so a writer or loader error shows). For
 * each file, the plain reference forward (kernels/rl_ref.c, float64) and ringlm as a user runs
 * it (libringlm, the cpu backend) must give llama.cpp's tokens up to the first near-tie.
 *
 * Near-tie: a generated position where llama.cpp's two largest logits are closer than the
 * file's arithmetic can order them: 0.01 for F32 files (fp32 sums in a different order), 0.1
 * for Q8_0 files (llama.cpp and ringlm both round activations to 8 bits, in different blocks
 * and orders). Past the first one the sequences may part legitimately, so only the tokens
 * before it are compared; at least 8 must be. A mixture of experts adds its routing: a
 * position where the reference's router margin (rl_ref_state.route_margin) is below 0.01 (F32)
 * or 0.05 (Q8_0) is a near-tie too, since a flipped expert moves every later logit.
 * The same weights written as a Hugging Face folder (model.safetensors, config.json) load to
 * the same model and the same tokens; families ringlm does not read are refused by name, and
 * Hugging Face mixture-of-experts folders (not read yet) as such.
 * Families: Qwen3 (per-head q/k norms, head_dim apart from dim / heads), Phi-3 (fused qkv and
 * gate_up, head_dim 16: the tiled attention kernel), mixture of experts (Mixtral's llama with a
 * router and stacked experts, Qwen3-MoE; 4 experts, 2 used per token).
 * Tests: runtime/model (GGUF and safetensors loaders: qwen3, phi3), kernels (rl_ref),
 * runtime/backend (cpu).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "tests/rl_test.h"
#include "clients/ringlm.h"
#include "kernels/rl_ref.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/rl_model_io.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

#define MAXT 64

struct expected {
	char mkmodel[512];             /* the `ringlm mkmodel` arguments of the model */
	uint32_t prompt[MAXT], tokens[MAXT];
	float gaps[MAXT];
	uint32_t np, nt, ng;
};

static uint32_t read_list(const char *line, const char *tag, void *out, int is_float)
{
	size_t tl = strlen(tag);
	if (strncmp(line, tag, tl) || line[tl] != ' ')
		return 0;
	uint32_t n = 0;
	const char *p = line + tl;
	while (n < MAXT) {
		char *end;
		double v = strtod(p, &end);
		if (end == p)
			break;
		if (is_float)
			((float *)out)[n++] = (float)v;
		else
			((uint32_t *)out)[n++] = (uint32_t)v;
		p = end;
	}
	return n;
}

static int load_expected(const char *path, struct expected *e)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[4096];
	memset(e, 0, sizeof *e);
	while (fgets(line, sizeof line, f)) {
		uint32_t n;
		if ((n = read_list(line, "prompt", e->prompt, 0)))
			e->np = n;
		else if ((n = read_list(line, "tokens", e->tokens, 0)))
			e->nt = n;
		else if ((n = read_list(line, "gaps", e->gaps, 1)))
			e->ng = n;
		else if (!strncmp(line, "mkmodel ", 8))
			snprintf(e->mkmodel, sizeof e->mkmodel, "%.*s", (int)strcspn(line + 8, "\n"), line + 8);
	}
	fclose(f);
	return e->np && e->nt && e->ng == e->nt ? 0 : -1;
}

/* how many of llama.cpp's tokens come before the first near-tie */
static uint32_t comparable(const struct expected *e, float tie)
{
	uint32_t k = 0;
	while (k < e->nt && e->gaps[k] >= tie)
		k++;
	return k;
}

/* the reference's greedy tokens after the prompt, out[n], and the router margin of the forward
 * that chose each (margin[n]) */
static int ref_greedy(const char *path, const struct expected *e, uint32_t n, uint32_t *out, double *margin)
{
	struct rl_model *m;
	char err[512];
	if (rl_model_load(path, NULL, &m, err, sizeof err)) {
		fprintf(stderr, "  %s\n", err);
		return -1;
	}
	struct rl_ref_state st;
	float *logits = malloc(m->cfg.vocab_size * sizeof *logits);
	if (!logits || rl_ref_state_init(&st, m, e->np + n)) {
		free(logits);
		rl_model_destroy(m);
		return -1;
	}
	uint32_t tok = e->prompt[0];
	for (uint32_t pos = 0; pos + 1 < e->np + n; pos++) {
		rl_ref_forward(m, &st, tok, pos, logits);
		if (pos + 1 < e->np) {
			tok = e->prompt[pos + 1];
			continue;
		}
		margin[pos + 1 - e->np] = st.route_margin;
		uint32_t best = 0;
		for (uint32_t v = 1; v < m->cfg.vocab_size; v++)
			if (logits[v] > logits[best])
				best = v;
		out[pos + 1 - e->np] = tok = best;
	}
	rl_ref_state_free(&st);
	free(logits);
	rl_model_destroy(m);
	return 0;
}

/* ringlm's greedy tokens (libringlm, embedded runtime, cpu backend, with ringlmd options
 * rt_args or none), out[n] */
static int ringlm_greedy(const char *path, const struct expected *e, uint32_t n, uint32_t *out, const char *rt_args)
{
	struct ringlm_params p = ringlm_default_params();
	p.model = path;
	p.backend = "cpu";
	p.runtime_args = rt_args;
	struct ringlm *cl;
	if (ringlm_connect(&p, &cl)) {
		fprintf(stderr, "  %s\n", ringlm_last_error());
		return -1;
	}
	struct ringlm_request r = ringlm_default_request();
	r.prompt = e->prompt;
	r.n_prompt = e->np;
	r.max_new = n;
	int rc = ringlm_submit(cl, &r, NULL);
	uint32_t got = 0;
	for (int done = rc != 0; !done;) {
		struct ringlm_event ev[64];
		int k = ringlm_wait(cl, ev, 64, 30000);
		if (k <= 0) {
			rc = -1;
			break;
		}
		for (int i = 0; i < k; i++) {
			if (ev[i].type == RINGLM_EV_TOKEN && got < n)
				out[got++] = ev[i].token;
			else if (ev[i].type != RINGLM_EV_TOKEN)
				done = 1;
		}
	}
	ringlm_close(cl);
	return rc || got != n ? -1 : 0;
}

/* path: the model (a GGUF, or a folder); exp: its llama.cpp expectations; rt_args: ringlmd
 * options (the context llama.cpp served, where the model's RoPE depends on it) */
static void family_case(const char *name, const char *gguf, const char *exp, float tie, double route_tie,
			const char *rt_args)
{
	struct expected e;
	REQUIRE(load_expected(exp, &e) == 0);
	uint32_t ref[MAXT], got[MAXT];
	double margin[MAXT];
	REQUIRE(ref_greedy(gguf, &e, e.nt, ref, margin) == 0);
	uint32_t k = comparable(&e, tie);
	for (uint32_t i = 0; i < k; i++)
		if (margin[i] < route_tie)
			k = i;
	CHECKF(k >= 8, "%s: only %u tokens before the first near-tie; regenerate with another seed", name, k);
	REQUIRE(ringlm_greedy(gguf, &e, e.nt, got, rt_args) == 0);
	uint32_t ref_same = 0, got_same = 0;
	while (ref_same < k && ref[ref_same] == e.tokens[ref_same])
		ref_same++;
	while (got_same < k && got[got_same] == e.tokens[got_same])
		got_same++;
	CHECKF(ref_same == k, "%s: the reference parts from llama.cpp at generated token %u (%u vs %u)", name,
	       ref_same, ref[ref_same], e.tokens[ref_same]);
	CHECKF(got_same == k, "%s: ringlm parts from llama.cpp at generated token %u (%u vs %u)", name, got_same,
	       got[got_same], e.tokens[got_same]);
	printf("  %-12s %u of %u tokens before the first near-tie (gap < %g): reference and cpu backend equal llama.cpp's\n",
	       name, k, e.nt, tie);
}

/* e[]: name's expectations (FIXTURES/families/NAME.expected); g[]: its model, made by the
 * `ringlm mkmodel` command the expectations name, in the scratch folder (no model file is
 * committed: the oracle was run on the file this command writes). 0, or -1. */
static int fixture(const char *name, char *g, size_t gn, char *e, size_t en)
{
	struct expected x;
	snprintf(e, en, "%s/families/%s.expected", FIXTURES, name);
	snprintf(g, gn, "%s", rl_t_tmp(name));
	if (load_expected(e, &x) || !x.mkmodel[0])
		return -1;
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "build/ringlm mkmodel %s --out '%s.gguf' >/dev/null", x.mkmodel, g);
	strncat(g, ".gguf", gn - strlen(g) - 1);
	return system(cmd) == 0 ? 0 : -1;
}

static void families_match_llama_cpp(void)
{
	/* near-ties: of llama.cpp's final logits, and of the reference's routing */
	/* LongRoPE: llama.cpp served 256 positions, past the long set's original 64, short of
	 * the short set's 256; ringlm serves the same (the reference's 80 fall alike) */
	static const struct { const char *name; float tie; double route_tie; const char *rt; } cases[] = {
		{ "qwen3_f32", 0.01f, 0, NULL }, { "qwen3_q8_0", 0.1f, 0, NULL }, { "phi3_f32", 0.01f, 0, NULL },
		{ "phi3_f16", 0.02f, 0, NULL }, { "phi3_longrope_f32", 0.01f, 0, NULL }, { "phi3_partial_f32", 0.01f, 0, NULL },
		{ "phi3_shortrope_f32", 0.01f, 0, "--ctx 256" }, { "mixtral_f32", 0.01f, 0.01, NULL },
		{ "qwen3moe_f32", 0.01f, 0.01, NULL }, { "mixtral_q8_0", 0.1f, 0.05, NULL },
		{ "gemma3_f32", 0.01f, 0, NULL }, { "gemma3_q8_0", 0.1f, 0, NULL },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char g[256], e[256];
		REQUIRE(fixture(cases[i].name, g, sizeof g, e, sizeof e) == 0);
		family_case(cases[i].name, g, e, cases[i].tie, cases[i].route_tie, cases[i].rt);
	}
}

/* m's weights as a Hugging Face Qwen3, Phi-3 or Gemma 3 folder (F32, names of the HF
 * checkpoints; qwen3, phi3 and gemma3 GGUFs keep HF's row order, so nothing is permuted;
 * Phi-3's q/k/v and gate/up fused as its checkpoints hold them; Gemma's norms less the one HF
 * adds in its forward, its embedding tied) */
/* Rows of a llama GGUF's q or k matrix ([heads * hd, cols], each head's pairs adjacent:
 * llama.cpp's converter interleaves HF's halves) in HF's order: head row i < hd/2 is GGUF row
 * 2i, row hd/2 + i is 2i + 1 */
struct perm { float *buf; size_t used; };
static const float *hf_rows(struct perm *pm, const float *w, uint32_t heads, size_t hd, size_t cols)
{
	float *o = pm->buf + pm->used;
	for (uint32_t h = 0; h < heads; h++)
		for (size_t r = 0; r < hd; r++) {
			const size_t src = h * hd + (r < hd / 2 ? 2 * r : 2 * (r - hd / 2) + 1);
			memcpy(o + (h * hd + r) * cols, w + src * cols, cols * sizeof(float));
		}
	pm->used += heads * hd * cols;
	return o;
}

static const float *hf_norm(float *buf, size_t *used, const float *w, size_t n)
{
	float *o = buf + *used;
	for (size_t i = 0; i < n; i++)
		o[i] = w[i] - 1.0f;
	*used += n;
	return o;
}

static void write_hf(const struct rl_model *m, const char *dir)
{
	const struct rl_model_config *c = &m->cfg;
	const size_t d = c->dim, h = c->hidden_dim, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	const int phi3 = c->fused_proj, gemma = c->post_norms;
	/* Gemma's norms as HF stores them: w - 1 (exact for weights in [0.5, 2]) */
	float *g1 = gemma ? malloc(((size_t)c->n_layers * (4 * d + 2 * hd) + d) * sizeof(float)) : NULL;
	size_t g1n = 0;
	/* a llama GGUF (Mixtral's) holds q/k rows in adjacent pairs: HF's halves order back */
	struct perm perm = { c->rope_halves ? NULL : malloc((size_t)c->n_layers * (qd + kvd) * d * sizeof(float)), 0 };
#define HFN(P, N) (gemma ? hf_norm(g1, &g1n, P, N) : (P))
	/* rows r of p, then (fused) r2 rows of p2 */
	struct { char name[128]; size_t r, cl, r2; const float *p, *p2; } t[256];
	int n = 0;
#define T2(nm, R, C, P, R2, P2) do { snprintf(t[n].name, 128, "%s", nm); t[n].r = R; t[n].cl = C; t[n].p = P; \
	t[n].r2 = R2; t[n].p2 = P2; n++; } while (0)
#define T(nm, R, C, P) T2(nm, R, C, P, 0, NULL)
	T("model.embed_tokens.weight", c->vocab_size, d, m->tok_emb);
	T("model.norm.weight", d, 0, HFN(m->out_norm, d));
	if (!c->tied_embeddings)
		T("lm_head.weight", c->vocab_size, d, m->wcls);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		char b[128];
#define TL(s, R, C, P) do { snprintf(b, 128, "model.layers.%u.%s", l, s); T(b, R, C, P); } while (0)
		TL("input_layernorm.weight", d, 0, HFN(L->attn_norm, d));
		if (phi3) {            /* q, k, v adjacent in the canonical layout */
			TL("self_attn.qkv_proj.weight", qd + 2 * kvd, d, L->wq);
			snprintf(b, 128, "model.layers.%u.mlp.gate_up_proj.weight", l);
			T2(b, h, d, L->w_gate, h, L->w_up);
		} else {
			TL("self_attn.q_proj.weight", qd, d, c->rope_halves ? L->wq : hf_rows(&perm, L->wq, c->n_heads, hd, d));
			TL("self_attn.k_proj.weight", kvd, d, c->rope_halves ? L->wk : hf_rows(&perm, L->wk, c->n_kv_heads, hd, d));
			TL("self_attn.v_proj.weight", kvd, d, L->wv);
			if (c->has_qk_norm) {
				TL("self_attn.q_norm.weight", hd, 0, HFN(L->q_norm, hd));
				TL("self_attn.k_norm.weight", hd, 0, HFN(L->k_norm, hd));
			}
			if (!c->n_experts) {
				TL("mlp.gate_proj.weight", h, d, L->w_gate);
				TL("mlp.up_proj.weight", h, d, L->w_up);
			}
		}
		/* experts one by one, as the checkpoints keep them: Qwen3-MoE's names, or Mixtral's */
		for (uint32_t e = 0; e < c->n_experts; e++) {
			const int q = c->has_qk_norm;
			if (!e)
				TL(q ? "mlp.gate.weight" : "block_sparse_moe.gate.weight", c->n_experts, d, L->router);
			char x[64];
#define TE(qn, mn, R, C, P) do { snprintf(x, sizeof x, q ? "mlp.experts.%u." qn ".weight" \
					  : "block_sparse_moe.experts.%u." mn ".weight", e); TL(x, R, C, P); } while (0)
			TE("gate_proj", "w1", h, d, L->gate_exps + e * h * d);
			TE("up_proj", "w3", h, d, L->up_exps + e * h * d);
			TE("down_proj", "w2", d, h, L->down_exps + e * d * h);
#undef TE
		}
		TL("self_attn.o_proj.weight", d, qd, L->wo);
		if (gemma) {
			TL("post_attention_layernorm.weight", d, 0, HFN(L->attn_post_norm, d));
			TL("pre_feedforward_layernorm.weight", d, 0, HFN(L->ffn_norm, d));
			TL("post_feedforward_layernorm.weight", d, 0, HFN(L->ffn_post_norm, d));
		} else {
			TL("post_attention_layernorm.weight", d, 0, L->ffn_norm);
		}
		if (!c->n_experts)
			TL("mlp.down_proj.weight", d, h, L->w_down);
#undef TL
	}
#undef T
#undef T2
#undef HFN
	char *hdr = malloc(1 << 16), path[600];
	REQUIRE(hdr);
	size_t o = 0, off = 0;
	o += (size_t)sprintf(hdr + o, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int i = 0; i < n; i++) {
		const size_t bytes = (t[i].r + t[i].r2) * (t[i].cl ? t[i].cl : 1) * 4;
		if (t[i].cl)
			o += (size_t)sprintf(hdr + o, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
					     t[i].name, t[i].r + t[i].r2, t[i].cl, off, off + bytes);
		else
			o += (size_t)sprintf(hdr + o, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
					     t[i].name, t[i].r, off, off + bytes);
		off += bytes;
	}
	o += (size_t)sprintf(hdr + o, "}");
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	FILE *f = fopen(path, "wb");
	REQUIRE(f);
	const uint64_t hl = o;
	fwrite(&hl, 8, 1, f);
	fwrite(hdr, 1, o, f);
	for (int i = 0; i < n; i++) {
		fwrite(t[i].p, 4, t[i].r * (t[i].cl ? t[i].cl : 1), f);
		if (t[i].p2)
			fwrite(t[i].p2, 4, t[i].r2 * t[i].cl, f);
	}
	fclose(f);
	free(hdr);
	free(g1);
	free(perm.buf);
	snprintf(path, sizeof path, "%s/config.json", dir);
	f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %u,\n"
		" \"intermediate_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u,\n"
		" \"num_key_value_heads\": %u, \"head_dim\": %u, \"rms_norm_eps\": %g, \"rope_theta\": %.1f,\n"
		" \"max_position_embeddings\": %u, \"vocab_size\": %u, \"tie_word_embeddings\": %s,\n"
		" \"attention_bias\": false, \"bos_token_id\": 1, \"eos_token_id\": [2, 106]",
		gemma ? "Gemma3ForCausalLM" : phi3 ? "Phi3ForCausalLM" : !c->n_experts ? "Qwen3ForCausalLM"
		: c->has_qk_norm ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM",
		gemma ? "gemma3_text" : phi3 ? "phi3" : !c->n_experts ? "qwen3" : c->has_qk_norm ? "qwen3_moe" : "mixtral", c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
		c->head_dim, (double)c->norm_eps, (double)c->rope_theta, c->max_ctx, c->vocab_size,
		c->tied_embeddings ? "true" : "false");
	if (c->rope_orig_ctx) {        /* Phi-3 128k's LongRoPE */
		fprintf(f, ",\n \"original_max_position_embeddings\": %u, \"rope_scaling\": {\"type\": \"longrope\"",
			c->rope_orig_ctx);
		for (int k = 0; k < 2; k++) {
			fprintf(f, ", \"%s_factor\": [", k ? "long" : "short");
			for (uint32_t i = 0; i < c->n_rope_freqs; i++)
				fprintf(f, "%s%.9g", i ? ", " : "", (double)(k ? c->rope_freqs_long : c->rope_freqs)[i]);
			fprintf(f, "]");
		}
		fprintf(f, "}");
	}
	if (c->rope_dims)              /* Phi-4-mini's partial RoPE */
		fprintf(f, ",\n \"partial_rotary_factor\": %.9g", (double)c->rope_dims / c->head_dim);
	if (c->n_experts && c->has_qk_norm)
		fprintf(f, ",\n \"num_experts\": %u, \"num_experts_per_tok\": %u, \"moe_intermediate_size\": %u,"
			" \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": []",
			c->n_experts, c->n_experts_used, c->hidden_dim);
	else if (c->n_experts)
		fprintf(f, ",\n \"num_local_experts\": %u, \"num_experts_per_tok\": %u", c->n_experts, c->n_experts_used);
	if (gemma) {                   /* Gemma 3 1B's, with this model's window; layer types as the newer configs list them */
		fprintf(f, ",\n \"hidden_activation\": \"gelu_pytorch_tanh\", \"query_pre_attn_scalar\": %u,"
			" \"sliding_window\": %u, \"rope_local_base_freq\": %.1f, \"final_logit_softcapping\": null,"
			" \"attn_logit_softcapping\": null, \"rope_scaling\": null, \"layer_types\": [",
			c->head_dim, c->sliding_window, (double)c->rope_theta_local);
		for (uint32_t l = 0; l < c->n_layers; l++)
			fprintf(f, "%s\"%s\"", l ? ", " : "", rl_layer_window(c, l) ? "sliding_attention" : "full_attention");
		fprintf(f, "]");
	}
	fprintf(f, "}\n");
	fclose(f);
}

/* The F32 fixtures as Hugging Face folders: the same config and weights, and llama.cpp's
 * tokens again (a folder without tokenizer files has no vocabulary, which generation by ids
 * does not need) */
static void hf_folders_load_the_same(void)
{
	static const char *const names[] = { "qwen3_f32", "phi3_f32", "phi3_longrope_f32", "phi3_partial_f32", "gemma3_f32",
					     "qwen3moe_f32", "mixtral_f32" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char g[256], e[256], err[512], label[64];
		REQUIRE(fixture(names[i], g, sizeof g, e, sizeof e) == 0);
		struct rl_model *a, *b;
		REQUIRE(rl_model_load(g, NULL, &a, err, sizeof err) == 0);
		const char *dir = rl_t_tmp(names[i]);
		mkdir(dir, 0755);
		write_hf(a, dir);
		int rc = rl_model_load(dir, NULL, &b, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", names[i], err);
		if (!rc) {
			const struct rl_model_config *x = &a->cfg, *y = &b->cfg;
			CHECK(y->has_qk_norm == x->has_qk_norm && y->fused_proj == x->fused_proj && !y->has_qkv_bias &&
			      y->rope_halves && y->head_dim == x->head_dim && y->n_kv_heads == x->n_kv_heads &&
			      y->norm_eps == x->norm_eps && y->rope_theta == x->rope_theta);
			CHECK(y->post_norms == x->post_norms && y->ffn_gelu == x->ffn_gelu && y->emb_scale == x->emb_scale &&
			      y->attn_scale == x->attn_scale && y->sliding_window == x->sliding_window &&
			      y->swa_period == x->swa_period && y->rope_theta_local == x->rope_theta_local &&
			      y->tied_embeddings == x->tied_embeddings && y->n_experts == x->n_experts &&
			      y->n_experts_used == x->n_experts_used && y->hidden_dim == x->hidden_dim);
			CHECK(y->rope_dims == x->rope_dims && y->rope_orig_ctx == x->rope_orig_ctx && y->rope_attn_factor == x->rope_attn_factor &&
			      y->n_rope_freqs == x->n_rope_freqs &&
			      !memcmp(y->rope_freqs, x->rope_freqs, sizeof x->rope_freqs[0] * x->n_rope_freqs) &&
			      !memcmp(y->rope_freqs_long, x->rope_freqs_long, sizeof x->rope_freqs[0] * x->n_rope_freqs));
			/* the same bytes, but where q/k rows were reordered (Mixtral's llama GGUF) */
			CHECK(b->mem_size == a->mem_size && (!x->rope_halves || !memcmp(b->mem, a->mem, a->mem_size)));
			rl_model_destroy(b);
			snprintf(label, sizeof label, "%s (HF)", names[i]);
			family_case(label, dir, e, 0.01f, 0.01, NULL);
		}
		rl_model_destroy(a);
	}
}

/* Experts whose width is not a multiple of the packed blocks (40 rows: expert 1 starts inside
 * a 48-row F16 panel), written by ringlm and served: the cpu backend's greedy tokens equal the
 * reference's up to the first near-tie of the reference's own logits or routing (the fixtures
 * above have aligned experts). F16 and F32: a random fill's logits are too close for an 8-bit
 * type's tokens to say much; the integer kernels over row ranges that start inside a packed
 * group are test_qmatmul's odd column ranges. */
static void moe_unaligned_experts_serve_like_the_reference(void)
{
	struct rl_model_config c = { .dim = 64, .hidden_dim = 40, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
		.head_dim = 16, .vocab_size = 300, .max_ctx = 256, .rope_theta = 10000.0f, .rope_scale = 1.0f,
		.norm_eps = 1e-5f, .n_experts = 5, .n_experts_used = 2, .bos_id = 1, .eos_id = 2 };
	static const int types[] = { RL_DT_F16, RL_DT_F32 };
	for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
		struct rl_model *m;
		char err[512];
		REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
		rl_model_fill_random(m, 78);
		/* wider router margins than the random fill's, so that 8-bit activations leave most
		 * routings unambiguous */
		for (uint32_t l = 0; l < c.n_layers; l++)
			for (size_t i = 0; i < (size_t)c.n_experts * c.dim; i++)
				m->layers[l].router[i] *= 16;
		const char *path = rl_t_tmp("moe_unaligned.gguf");
		REQUIRE(rl_gguf_write(m, path, types[ti], err, sizeof err) == 0);
		rl_model_destroy(m);
		/* the reference's own tokens and gaps: an "expected" of its own */
		struct expected e = { .np = 20, .nt = 24 };
		for (uint32_t i = 0; i < e.np; i++)
			e.prompt[i] = 3 + (i * 37) % 290;
		struct rl_model *lm;
		REQUIRE(rl_model_load(path, NULL, &lm, err, sizeof err) == 0);
		struct rl_ref_state st;
		float *logits = malloc(c.vocab_size * sizeof *logits);
		REQUIRE(logits && rl_ref_state_init(&st, lm, e.np + e.nt) == 0);
		uint32_t tok = e.prompt[0];
		double margin[MAXT];
		for (uint32_t pos = 0; pos + 1 < e.np + e.nt; pos++) {
			rl_ref_forward(lm, &st, tok, pos, logits);
			if (pos + 1 < e.np) {
				tok = e.prompt[pos + 1];
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
			const uint32_t i = pos + 1 - e.np;
			e.gaps[i] = logits[best] - logits[second];
			margin[i] = st.route_margin;
			e.tokens[i] = tok = best;
		}
		e.ng = e.nt;
		rl_ref_state_free(&st);
		free(logits);
		rl_model_destroy(lm);
		uint32_t k = 0;
		/* near-ties as for the F32 fixtures: logits and routing margins below 0.01 */
		while (k < e.nt - 1 && e.gaps[k] >= 0.01f && margin[k] >= 0.01)
			k++;
		CHECKF(k >= 8, "%s: only %u tokens before the first near-tie", rl_dt_info(types[ti])->name, k);
		uint32_t got[MAXT];
		REQUIRE(ringlm_greedy(path, &e, e.nt - 1, got, NULL) == 0);
		uint32_t same = 0;
		while (same < k && got[same] == e.tokens[same])
			same++;
		CHECKF(same == k, "%s experts of 40 rows: ringlm parts from the reference at token %u of %u",
		       rl_dt_info(types[ti])->name, same, k);
		printf("  %-5s experts of 40 rows: %u tokens before the first near-tie equal the reference's\n",
		       rl_dt_info(types[ti])->name, k);
	}
}

/* Gemma's SentencePiece vocabulary puts no " " before the text (tokenizer.ggml.add_space_prefix
 * false): the same pieces (tok512.bin) in a gemma3 file and in stories260K.gguf tokenize as
 * llama.cpp tokenizes each (its ids, from llama-cpp-python 0.3.36), and the flag survives
 * rl_gguf_write */
static void gemma_vocabulary_has_no_dummy_prefix(void)
{
	const char *tok = rl_t_model("tok512.bin"), *stories = rl_t_model("stories260K.gguf");
	if (!tok || !stories)
		SKIP("../shared/models/tok512.bin or stories260K.gguf not found");
	const char *g = rl_t_tmp("vocab_gemma.gguf");
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "build/ringlm mkmodel --shape tiny --arch gemma3 --window 16 --seed 5 --dtype q8_0 "
		 "--tokenizer '%s' --out '%s' >/dev/null", tok, g);
	REQUIRE(system(cmd) == 0);
	static const int32_t want_gemma[] = { 1, 440, 411, 306, 414, 263, 304, 341 };
	static const int32_t want_stories[] = { 1, 346, 306, 414, 263, 304, 341 };
	const char *paths[] = { g, stories };
	for (int i = 0; i < 2; i++) {
		void *blob;
		uint32_t size;
		char err[512];
		struct rl_tok *t;
		REQUIRE(rl_gguf_read_vocab(paths[i], &blob, &size, err, sizeof err) == 0 && blob);
		CHECK(rl_model_vocab_prefixless(blob, size) == (i == 0));
		REQUIRE(rl_tok_create(blob, size, &t, err, sizeof err) == 0);
		int32_t ids[32];
		long n = rl_tok_encode(t, "Hello world", 11, 1, 0, ids, 32);
		const int32_t *want = i ? want_stories : want_gemma;
		const long nw = i ? 7 : 8;
		CHECKF(n == nw && !memcmp(ids, want, sizeof *ids * (size_t)nw), "%s: %ld ids, first %d %d", paths[i], n,
		       ids[0], ids[1]);
		size_t len;
		const char *p = rl_tok_decode(t, 1, ids[1], &len);   /* no dummy prefix to drop */
		CHECK(p && len >= 1);
		rl_tok_destroy(t);
		free(blob);
	}
}

/* Variants ringlm does not read are refused by name, in one line */
static void unsupported_families_refused(void)
{
	char err[512];
	struct rl_model *m;
	const char *dir = rl_t_tmp("refused_hf");
	mkdir(dir, 0755);
	char path[600];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"model_type\": \"gemma3\", \"text_config\": {\"hidden_size\": 64}, \"vision_config\": {}}\n");
	fclose(f);
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	REQUIRE(f);
	const char *h = "{}";
	uint64_t hl = 2;
	fwrite(&hl, 8, 1, f);
	fwrite(h, 1, 2, f);
	fclose(f);
	int rc = rl_model_load(dir, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "vision tower") && !strchr(err, '\n'), "rc %d: %s", rc, err);
	/* a Gemma 3 text config asking for what is not there */
	snprintf(path, sizeof path, "%s/config.json", dir);
	f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 64,"
		   " \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"vocab_size\": 300,"
		   " \"final_logit_softcapping\": 30.0}\n");
	fclose(f);
	rc = rl_model_load(dir, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "final_logit_softcapping") && !strchr(err, '\n'), "rc %d: %s", rc, err);
	/* Qwen2-MoE (a shared expert beside the routed ones), and a Qwen3-MoE asking for it */
	snprintf(path, sizeof path, "%s/config.json", dir);
	f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 64, \"intermediate_size\": 64,"
		   " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 300, \"num_experts\": 8}\n");
	fclose(f);
	rc = rl_model_load(dir, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "qwen2_moe") && !strchr(err, '\n'), "rc %d: %s", rc, err);
	f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 64,"
		   " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 300, \"num_experts\": 8,"
		   " \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"norm_topk_prob\": false}\n");
	fclose(f);
	rc = rl_model_load(dir, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "norm_topk_prob") && !strchr(err, '\n'), "rc %d: %s", rc, err);
	f = fopen(path, "w");
	REQUIRE(f);
	fprintf(f, "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 64,"
		   " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 300, \"num_local_experts\": 8}\n");
	fclose(f);
	rc = rl_model_load(dir, NULL, &m, err, sizeof err);
	CHECKF(rc == -ENOTSUP && strstr(err, "mixture of experts (8 experts)") && !strchr(err, '\n'), "rc %d: %s", rc, err);
}

int main(void)
{
	if (rl_t_tmpdir_make("families"))
		return 1;
	RUN(families_match_llama_cpp);
	RUN(hf_folders_load_the_same);
	RUN(moe_unaligned_experts_serve_like_the_reference);
	RUN(gemma_vocabulary_has_no_dummy_prefix);
	RUN(unsupported_families_refused);
	rl_t_tmpdir_remove();
	TEST_MAIN_END();
}
