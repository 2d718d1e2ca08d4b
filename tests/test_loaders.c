/* test_loaders.c — the model loaders: stories260K in llama2.c and GGUF form load to the same
 * model; GGUF written by rl_gguf_write (f32/f16/bf16) reads back; a safetensors checkpoint
 * written here loads with HF RoPE pairing; truncated, corrupted and oversized headers in every
 * format fail cleanly with -errno and one line naming the file.
 * Tests: runtime/model.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include "tests/rl_test.h"
#include "runtime/model/rl_model_io.h"
#include "tokenizer/rl_tok.h"

static int same_floats(const float *a, const float *b, size_t n, float tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabsf(a[i] - b[i]) <= tol * fmaxf(1.0f, fabsf(a[i]))))
			return 0;
	return 1;
}

/* Compares every tensor of a and b; tol relative (0: bit-equal values). */
static int same_weights(const struct rl_model *a, const struct rl_model *b, float tol)
{
	const struct rl_model_config *c = &a->cfg;
	size_t d = c->dim, h = c->hidden_dim, qd = (size_t)c->n_heads * c->head_dim,
	       kvd = (size_t)c->n_kv_heads * c->head_dim, v = c->vocab_size;
	int ok = same_floats(a->tok_emb, b->tok_emb, v * d, tol) &&
		 same_floats(a->wcls, b->wcls, v * d, tol) &&
		 same_floats(a->out_norm, b->out_norm, d, 0);
	for (uint32_t l = 0; ok && l < c->n_layers; l++) {
		const struct rl_layer *x = &a->layers[l], *y = &b->layers[l];
		ok = same_floats(x->attn_norm, y->attn_norm, d, 0) && same_floats(x->ffn_norm, y->ffn_norm, d, 0) &&
		     same_floats(x->wq, y->wq, qd * d, tol) && same_floats(x->wk, y->wk, kvd * d, tol) &&
		     same_floats(x->wv, y->wv, kvd * d, tol) && same_floats(x->wo, y->wo, d * qd, tol) &&
		     same_floats(x->w_gate, y->w_gate, h * d, tol) && same_floats(x->w_down, y->w_down, d * h, tol) &&
		     same_floats(x->w_up, y->w_up, h * d, tol);
		if (ok && x->bq)
			ok = same_floats(x->bq, y->bq, qd, 0) && same_floats(x->bk, y->bk, kvd, 0) &&
			     same_floats(x->bv, y->bv, kvd, 0);
	}
	return ok;
}

/* Two SentencePiece blobs hold the same pieces (a GGUF one adds a trailer: types, BOS, EOS) */
static int same_pieces(const void *a, uint32_t na, const void *b, uint32_t nb)
{
	struct rl_spm_trailer ta, tb;
	if (!a || !b)
		return 0;
	rl_tok_spm_trailer(a, na, &ta);
	rl_tok_spm_trailer(b, nb, &tb);
	return na - ta.len == nb - tb.len && !memcmp(a, b, na - ta.len);
}

static void test_stories_bin_vs_gguf(void)
{
	const char *bin = rl_t_model("stories260K.bin"), *gg = rl_t_model("stories260K.gguf"),
		   *tok = rl_t_model("tok512.bin");
	if (!bin || !gg || !tok)
		SKIP("stories260K.bin/.gguf or tok512.bin absent");
	struct rl_model *a, *b;
	char err[512];
	REQUIRE(rl_model_load(bin, tok, &a, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
	REQUIRE(rl_model_load(gg, NULL, &b, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
	const struct rl_model_config *x = &a->cfg, *y = &b->cfg;
	CHECK(x->dim == 64 && x->hidden_dim == 172 && x->n_layers == 5 && x->n_heads == 8 &&
	      x->n_kv_heads == 4 && x->head_dim == 8 && x->vocab_size == 512);
	CHECK(x->dim == y->dim && x->hidden_dim == y->hidden_dim && x->n_layers == y->n_layers &&
	      x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads && x->head_dim == y->head_dim &&
	      x->vocab_size == y->vocab_size && x->rope_theta == y->rope_theta &&
	      x->rope_scale == y->rope_scale && x->norm_eps == y->norm_eps &&
	      x->rope_halves == 0 && y->rope_halves == 0 && x->bos_id == y->bos_id && x->eos_id == y->eos_id);
	/* the converter wrote context_length 128 and a copy of the shared classifier as
	 * output.weight: those two fields legitimately differ */
	CHECK(x->max_ctx == 512 && y->max_ctx == 128 && x->tied_embeddings && !y->tied_embeddings);
	CHECK(same_weights(a, b, 0));
	CHECK(same_pieces(a->vocab_blob, a->vocab_blob_size, b->vocab_blob, b->vocab_blob_size));
	void *blob;
	uint32_t size;
	struct rl_spm_trailer tr;
	CHECK(rl_gguf_read_vocab(gg, &blob, &size, err, sizeof err) == 0 &&
	      same_pieces(blob, size, a->vocab_blob, a->vocab_blob_size));
	rl_tok_spm_trailer(blob, size, &tr);
	CHECK(tr.type && tr.n == 512 && tr.bos == 1 && tr.eos == 2 && tr.flags == 0 && tr.type[1] == 3 && tr.type[300] == 1);
	struct rl_tok *t;
	if (rl_tok_create(blob, size, &t, err, sizeof err) == 0) {
		int32_t ids[64];
		CHECK(rl_tok_encode(t, "Once upon a time", 16, 1, 0, ids, 64) > 2);
		rl_tok_destroy(t);
	} else {
		CHECKF(0, "%s", err);
	}
	free(blob);
	rl_model_destroy(a);
	rl_model_destroy(b);
}


/* A random small model (untied, GQA) with a synthetic vocabulary: stories260K widths, or
 * (mini) a smaller one whose mutated copies are cheap to write thousands of times. */
static struct rl_model *tiny_shape(int bias, int mini)
{
	struct rl_model_config c = { .dim = mini ? 16 : 64, .hidden_dim = mini ? 24 : 172, .n_layers = 2,
		.n_heads = mini ? 2 : 8, .n_kv_heads = mini ? 1 : 4, .head_dim = 8, .vocab_size = mini ? 300 : 1024, .max_ctx = 256, .rope_theta = 500000.0f,
		.rope_scale = 2.0f, .norm_eps = 1e-6f, .has_qkv_bias = bias, .bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[256];
	if (rl_model_alloc(&c, &m, err, sizeof err))
		return NULL;
	rl_model_fill_random(m, 42);
	if (rl_model_synth_vocab(c.vocab_size, &m->vocab_blob, &m->vocab_blob_size)) {
		rl_model_destroy(m);
		return NULL;
	}
	return m;
}

static struct rl_model *tiny(int bias) { return tiny_shape(bias, 0); }

/* Writes m as safetensors (HF names, bf16 2-D weights when bf16, Q/K rows permuted from
 * adjacent pairs to halves) plus config.json into dir. */
static int write_safetensors(const struct rl_model *m, const char *dir, int bf16)
{
	const struct rl_model_config *c = &m->cfg;
	size_t d = c->dim, h = c->hidden_dim, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	struct { char name[80]; size_t r, cl; const float *p; int perm; } t[64];
	int n = 0;
#define T(nm, R, C, P, PM) do { snprintf(t[n].name, 80, "%s", nm); t[n].r = R; t[n].cl = C; t[n].p = P; t[n].perm = PM; n++; } while (0)
	T("model.embed_tokens.weight", c->vocab_size, d, m->tok_emb, 0);
	T("model.norm.weight", d, 0, m->out_norm, 0);
	T("lm_head.weight", c->vocab_size, d, m->wcls, 0);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		char b[80];
#define TL(s, R, C, P, PM) do { snprintf(b, 80, "model.layers.%u.%s", l, s); T(b, R, C, P, PM); } while (0)
		TL("input_layernorm.weight", d, 0, L->attn_norm, 0);
		TL("self_attn.q_proj.weight", qd, d, L->wq, 1);
		TL("self_attn.k_proj.weight", kvd, d, L->wk, 1);
		TL("self_attn.v_proj.weight", kvd, d, L->wv, 0);
		TL("self_attn.o_proj.weight", d, qd, L->wo, 0);
		TL("post_attention_layernorm.weight", d, 0, L->ffn_norm, 0);
		TL("mlp.gate_proj.weight", h, d, L->w_gate, 0);
		TL("mlp.down_proj.weight", d, h, L->w_down, 0);
		TL("mlp.up_proj.weight", h, d, L->w_up, 0);
	}
	char *hdr = malloc(1 << 16);
	size_t o = 0, off = 0;
	o += sprintf(hdr + o, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int i = 0; i < n; i++) {
		int two = bf16 && t[i].cl;
		size_t bytes = t[i].r * (t[i].cl ? t[i].cl : 1) * (two ? 2 : 4);
		if (t[i].cl)
			o += sprintf(hdr + o, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],\"data_offsets\":[%zu,%zu]}",
				     t[i].name, two ? "BF16" : "F32", t[i].r, t[i].cl, off, off + bytes);
		else
			o += sprintf(hdr + o, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
				     t[i].name, t[i].r, off, off + bytes);
		off += bytes;
	}
	o += sprintf(hdr + o, "}");
	char path[600];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	FILE *f = fopen(path, "wb");
	uint64_t hl = o;
	fwrite(&hl, 8, 1, f);
	fwrite(hdr, 1, o, f);
	for (int i = 0; i < n; i++) {
		size_t cols = t[i].cl ? t[i].cl : 1;
		for (size_t r = 0; r < t[i].r; r++) {
			/* HF row (head, j*hd/2 + i) holds our adjacent-pair row (head, 2i + j) */
			size_t src = r;
			if (t[i].perm) {
				size_t hh = r / hd, k = r % hd, half = hd / 2;
				src = hh * hd + 2 * (k % half) + k / half;
			}
			const float *row = t[i].p + src * cols;
			for (size_t k = 0; k < cols; k++) {
				if (bf16 && t[i].cl) {
					uint32_t u; memcpy(&u, &row[k], 4);
					uint16_t b = (uint16_t)(u >> 16);   /* truncation: exactly representable below */
					fwrite(&b, 2, 1, f);
				} else {
					fwrite(&row[k], 4, 1, f);
				}
			}
		}
	}
	fclose(f);
	free(hdr);
	snprintf(path, sizeof path, "%s/config.json", dir);
	f = fopen(path, "w");
	fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %u, \"intermediate_size\": %u,\n"
		" \"num_hidden_layers\": %u, \"num_attention_heads\": %u, \"num_key_value_heads\": %u,\n"
		" \"rms_norm_eps\": 1e-06, \"rope_theta\": 500000.0, \"max_position_embeddings\": %u,\n"
		" \"vocab_size\": %u, \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": [2, 3],\n"
		" \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, \"name\": \"\\u00e9\\ud83e\\udd99\"}\n",
		c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->max_ctx, c->vocab_size);
	fclose(f);
	return n;
}

/* rope_halves = 1 means Q/K rows are in HF order: turn them back to compare. */
static void unpermute(float *w, size_t rows, size_t cols, size_t hd)
{
	float *tmp = malloc(rows * cols * sizeof *tmp);
	memcpy(tmp, w, rows * cols * sizeof *tmp);
	for (size_t r = 0; r < rows; r++) {
		size_t hh = r / hd, k = r % hd, half = hd / 2;
		memcpy(w + (hh * hd + 2 * (k % half) + k / half) * cols, tmp + r * cols, cols * sizeof *w);
	}
	free(tmp);
}

static void test_safetensors(void)
{
	struct rl_model *m = tiny(0);
	REQUIRE(m);
	char err[512];
	for (int bf = 0; bf < 2; bf++) {
		if (bf) {  /* make every 2-D weight exactly representable in bf16 */
			for (float *p = m->mem; p < (float *)m->mem + m->mem_size / 4; p++) {
				uint32_t u; memcpy(&u, p, 4); u &= 0xffff0000u; memcpy(p, &u, 4);
			}
		}
		const char *dir = rl_t_tmp(bf ? "st_bf16" : "st_f32");
		mkdir(dir, 0755);
		REQUIRE(write_safetensors(m, dir, bf) > 0);
		struct rl_model *b;
		/* the directory and the file itself (config.json beside it) both load */
		for (int asfile = 0; asfile < 2; asfile++) {
			char p[600];
			snprintf(p, sizeof p, asfile ? "%s/model.safetensors" : "%s", dir);
			REQUIRE(rl_model_load(p, NULL, &b, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
			const struct rl_model_config *c = &b->cfg;
			CHECK(c->rope_halves == 1 && !c->tied_embeddings && c->dim == 64 && c->n_kv_heads == 4 &&
			      c->head_dim == 8 && c->vocab_size == 1024 && c->rope_theta == 500000.0f &&
			      c->rope_scale == 2.0f && c->norm_eps == 1e-6f && c->bos_id == 1 && c->eos_id == 2 &&
			      c->max_ctx == 256 && !b->vocab_blob);
			for (uint32_t l = 0; l < c->n_layers; l++) {
				unpermute(b->layers[l].wq, 64, 64, 8);
				unpermute(b->layers[l].wk, 32, 64, 8);
			}
			b->cfg.rope_halves = 0;
			CHECK(same_weights(m, b, 0));
			/* and the writer permutes HF-ordered Q/K back for GGUF */
			if (!asfile && !bf) {
				rl_model_destroy(b);  /* reload: b was unpermuted in place above */
				REQUIRE(rl_model_load(p, NULL, &b, err, sizeof err) == 0);
				REQUIRE(rl_gguf_write(b, rl_t_tmp("from_st.gguf"), 0, err, sizeof err) == 0);
				rl_model_destroy(b);
				REQUIRE(rl_model_load(rl_t_tmp("from_st.gguf"), NULL, &b, err, sizeof err) == 0);
				CHECK(b->cfg.rope_halves == 0 && same_weights(m, b, 0));
			}
			rl_model_destroy(b);
		}
	}
	rl_model_destroy(m);
}

static int slow(void)
{
	const char *s = getenv("RL_SLOW");
	int v = s ? atoi(s) : 1;
	return v > 0 ? v : 1;
}

/* the whole file, with a NUL after its *n bytes so text files can be used as strings */
static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*n = ftell(f);
	rewind(f);
	uint8_t *b = malloc(*n + 1);
	if (b && fread(b, 1, *n, f) != *n) {
		free(b);
		b = NULL;
	}
	if (b)
		b[*n] = 0;
	fclose(f);
	return b;
}

static void spit(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (f) {
		fwrite(b, 1, n, f);
		fclose(f);
	}
}

/* Loads a (possibly) broken file: success is fine (a flipped weight byte is still a model),
 * failure must be -errno with one non-empty line naming a file. Returns rc. */
static int load_clean(const char *path, const char *name, const char *what)
{
	struct rl_model *m = NULL;
	char err[512];
	err[0] = 0;
	int rc = rl_model_load(path, NULL, &m, err, sizeof err);
	if (rc == 0) {
		CHECK(m != NULL);
		rl_model_destroy(m);
		return 0;
	}
	CHECKF(rc < 0 && rc > -4096 && err[0] && !strchr(err, '\n') &&
	       (strstr(err, name) || strstr(err, "config.json")), "%s: rc %d err '%s'", what, rc, err);
	return rc;
}

/* Truncations, byte flips and huge 32/64-bit values over a file's first `hdr` bytes. */
/* Every byte of the first KiB (fixed header fields), then every 13th (a prime, so every field
 * alignment is hit) — the fuzzers (make fuzz) cover the rest exhaustively. */
static size_t next_off(size_t i, size_t step)
{
	return i + (i < 1024 ? step : 13 * step);
}

static void hostile(const uint8_t *good, size_t n, size_t hdr, const char *path, const char *name,
		    int all_truncations_fail)
{
	uint8_t *b = malloc(n);
	char what[96];
	size_t step = slow();
	if (hdr > n)
		hdr = n;
	for (size_t cut = 0; cut < n; cut = cut < hdr ? next_off(cut, step) : cut + (n - hdr) / 32 + 1) {
		spit(path, good, cut);
		snprintf(what, sizeof what, "truncated at %zu", cut);
		int rc = load_clean(path, name, what);
		if (all_truncations_fail)
			CHECKF(rc < 0, "%s loaded", what);
	}
	for (size_t i = 0; i < hdr; i = next_off(i, step)) {
		memcpy(b, good, n);
		b[i] ^= 0xff;
		spit(path, b, n);
		snprintf(what, sizeof what, "byte %zu flipped", i);
		load_clean(path, name, what);
	}
	static const uint64_t big[] = { 0xffffffffffffffffull, 0x7fffffffffffffffull, 0x8000000000000000ull,
					0x00000000ffffffffull, 0x0000000100000000ull };
	for (size_t i = 0; i + 8 <= hdr; i = next_off(i, 4 * step)) {
		for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
			memcpy(b, good, n);
			memcpy(b + i, &big[k], 8);
			spit(path, b, n);
			snprintf(what, sizeof what, "0x%llx at %zu", (unsigned long long)big[k], i);
			load_clean(path, name, what);
		}
	}
	free(b);
}

static void test_hostile_gguf(void)
{
	struct rl_model *m = tiny_shape(1, 1);   /* with qkv bias: the optional tensors too */
	REQUIRE(m);
	char err[256];
	const char *good = rl_t_tmp("good.gguf");
	REQUIRE(rl_gguf_write(m, good, 1, err, sizeof err) == 0);
	rl_model_destroy(m);
	size_t n;
	uint8_t *b = slurp(good, &n);
	REQUIRE(b);
	/* the header (metadata, vocabulary, tensor infos) is the first ~8 KiB */
	hostile(b, n, 8192, rl_t_tmp("bad.gguf"), "bad.gguf", 1);
	free(b);
	/* not a GGUF at all, and a directory without a checkpoint */
	spit(rl_t_tmp("empty.bin"), "", 0);
	CHECK(load_clean(rl_t_tmp("empty.bin"), "empty.bin", "empty") == -EINVAL);
	CHECK(load_clean(rl_t_tmp("missing.gguf"), "missing.gguf", "missing") == -ENOENT);
	mkdir(rl_t_tmp("emptydir"), 0755);
	CHECK(load_clean(rl_t_tmp("emptydir"), "model.safetensors", "empty dir") == -ENOENT);
}

static void test_hostile_llama2c(void)
{
	/* a tiny llama2.c file: header + the right number of floats */
	int32_t h[7] = { 16, 24, 2, 4, 2, -40, 8 };
	size_t d = 16, hd = 24, L = 2, hs = 4, kvd = 8, v = 40;
	size_t floats = v * d + L * (d + d * d + 2 * d * kvd + d * d + d + 3 * d * hd) + d + 8 * hs + v * d;
	size_t n = 28 + floats * 4;
	uint8_t *b = calloc(1, n);
	REQUIRE(b);
	memcpy(b, h, 28);
	for (size_t i = 0; i < floats; i++) {
		float f = (float)(i % 97) / 97.0f;
		memcpy(b + 28 + 4 * i, &f, 4);
	}
	spit(rl_t_tmp("good.bin"), b, n);
	struct rl_model *m;
	char err[256];
	REQUIRE(rl_model_load(rl_t_tmp("good.bin"), NULL, &m, err, sizeof err) == 0);
	CHECK(!m->cfg.tied_embeddings && m->cfg.vocab_size == 40 && m->cfg.n_kv_heads == 2 &&
	      m->wcls[0] == (float)((floats - v * d) % 97) / 97.0f);
	rl_model_destroy(m);
	hostile(b, n, 28, rl_t_tmp("bad.bin"), "bad.bin", 1);
	/* every header field at hostile values */
	static const int32_t vals[] = { 0, -1, 1, 3, 0x7fffffff, -0x7fffffff - 1, 1 << 20 };
	for (int f = 0; f < 7; f++) {
		for (size_t k = 0; k < sizeof vals / sizeof *vals; k++) {
			uint8_t copy[28];
			memcpy(copy, b, 28);
			memcpy(copy + 4 * f, &vals[k], 4);
			FILE *fp = fopen(rl_t_tmp("bad.bin"), "wb");
			fwrite(copy, 1, 28, fp);
			fwrite(b + 28, 1, n - 28, fp);
			fclose(fp);
			char what[64];
			snprintf(what, sizeof what, "field %d = %d", f, vals[k]);
			load_clean(rl_t_tmp("bad.bin"), "bad.bin", what);
		}
	}
	/* a tokenizer whose size does not match the model */
	const char *tok = rl_t_model("tok512.bin");
	if (tok) {
		CHECK(rl_model_load(rl_t_tmp("good.bin"), tok, &m, err, sizeof err) == -EINVAL && strstr(err, "tok512.bin"));
	}
	free(b);
}

static void test_hostile_safetensors(void)
{
	struct rl_model *m = tiny(0);
	REQUIRE(m);
	const char *dir = rl_t_tmp("st_hostile");
	mkdir(dir, 0755);
	REQUIRE(write_safetensors(m, dir, 1) > 0);
	rl_model_destroy(m);
	char path[600], cfgp[600];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
	size_t n, cn;
	uint8_t *b = slurp(path, &n), *cfg = slurp(cfgp, &cn);
	REQUIRE(b && cfg);
	uint64_t hl;
	memcpy(&hl, b, 8);
	hostile(b, n, 8 + hl, path, "model.safetensors", 0);
	spit(path, b, n);
	/* a broken config.json: truncations and flips */
	for (size_t cut = 0; cut + 1 < cn; cut += slow()) {   /* all but the final newline */
		spit(cfgp, cfg, cut);
		CHECK(load_clean(dir, "config.json", "config truncated") < 0);
	}
	for (size_t i = 0; i < cn; i += slow()) {
		uint8_t *c = malloc(cn);
		memcpy(c, cfg, cn);
		c[i] ^= 0x5a;
		spit(cfgp, c, cn);
		/* a flipped digit can change a shape: then the shard's tensor is what mismatches */
		load_clean(dir, "model.safetensors", "config flipped");
		free(c);
	}
	const char *deep = "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[";
	spit(cfgp, deep, strlen(deep));
	CHECK(load_clean(dir, "config.json", "deep") == -EINVAL);
	free(b);
	free(cfg);
}

static void test_gguf_write_roundtrip(void)
{
	struct rl_model *m = tiny(0);
	REQUIRE(m);
	const float tol[3] = { 0, 1.0f / 1024, 1.0f / 128 };   /* half an ulp of f16 / bf16, x2 */
	const char *names[3] = { "rt_f32.gguf", "rt_f16.gguf", "rt_bf16.gguf" };
	char err[512];
	for (int dt = 0; dt < 3; dt++) {
		const char *p = rl_t_tmp(names[dt]);
		REQUIRE(rl_gguf_write(m, p, dt, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
		struct rl_model *b;
		REQUIRE(rl_model_load(p, NULL, &b, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
		CHECK(!memcmp(&m->cfg, &b->cfg, sizeof m->cfg));
		CHECKF(same_weights(m, b, tol[dt]), "dtype %d", dt);
		CHECK(same_pieces(b->vocab_blob, b->vocab_blob_size, m->vocab_blob, m->vocab_blob_size));
		rl_model_destroy(b);
	}
	/* the synthetic vocabulary tokenizes and round-trips text */
	struct rl_tok *t;
	REQUIRE(rl_tok_create(m->vocab_blob, m->vocab_blob_size, &t, err, sizeof err) == 0);
	int32_t ids[64];
	const char *text = "the cat sat, 42!";
	long n = rl_tok_encode(t, text, strlen(text), 1, 0, ids, 64);
	CHECK(n > 1 && n < (long)strlen(text));
	char out[64];
	size_t o = 0;
	for (long k = 1; k < n; k++) {
		size_t len;
		const char *s = rl_tok_decode(t, ids[k - 1], ids[k], &len);
		REQUIRE(s && o + len < sizeof out);
		memcpy(out + o, s, len);
		o += len;
	}
	out[o] = 0;
	CHECKF(!strcmp(out, text), "%s", out);
	rl_tok_destroy(t);
	rl_model_destroy(m);
}

/* Fuzzer findings (tests/fuzz/regress/): each input must be refused cleanly. The GGUF one
 * is a 9 KB file whose header claims a model of ~600M weights: the loader used to calloc
 * 2.4 GB before noticing the tensors are not there; now it refuses before allocating. */
static void test_fuzz_regressions(void)
{
	struct rl_model *m = NULL;
	char err[512] = "";
	const char *path = "tests/fuzz/regress/gguf/oom-138b9f69fdfb516f5111b99f30bdd6ab84dbc9aa";
	if (access(path, R_OK))
		SKIP("run from the repository root");
	CHECK(rl_model_load(path, NULL, &m, err, sizeof err) == -EINVAL);
	CHECKF(strstr(err, "truncated or corrupt"), "got: %s", err);
	CHECK(m == NULL);
}

/* Llama 3 rope scaling: the factors equal llama.cpp's converter's (fixture from
 * tests/fixtures/rope/gen_llama3_freqs.py); config.json's rope_scaling "llama3" and GGUF's
 * rope_freqs.weight both carry them, and the writer writes what the reader reads. */
static void test_llama3_rope_scaling(void)
{
	struct rl_model_config c = { .rope_theta = 500000.0f, .head_dim = 128 };
	REQUIRE(rl_rope_llama3_freqs(&c, 8, 1, 4, 8192) == 0);
	CHECK(c.n_rope_freqs == 64);
	FILE *f = fopen("tests/fixtures/rope/llama3_freqs.txt", "r");
	REQUIRE(f);
	char line[128];
	uint32_t n = 0, bad = 0, blended = 0;
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#')
			continue;
		float want = strtof(line, NULL);
		if (n < 64 && fabsf(c.rope_freqs[n] - want) > 1e-6f * want)
			bad++;
		blended += want > 1 && want < 8;
		n++;
	}
	fclose(f);
	CHECKF(n == 64 && bad == 0 && blended >= 4, "%u factors, %u differ, %u blended", n, bad, blended);
	CHECK(rl_rope_llama3_freqs(&c, 0.5f, 1, 4, 8192) == -EINVAL);
	CHECK(rl_rope_llama3_freqs(&c, 8, 4, 1, 8192) == -EINVAL);

	/* safetensors config.json with rope_scaling llama3, then GGUF round trip */
	struct rl_model *m = tiny(0), *b = NULL, *g = NULL;
	REQUIRE(m);
	char err[512], path[600];
	const char *dir = rl_t_tmp("st_llama3");
	mkdir(dir, 0755);
	REQUIRE(write_safetensors(m, dir, 0) > 0);
	snprintf(path, sizeof path, "%s/config.json", dir);
	size_t len;
	char *cj = (char *)slurp(path, &len);
	REQUIRE(cj);
	char *at = strstr(cj, "\"rope_scaling\"");
	REQUIRE(at);
	char *end = strchr(at, '}');
	REQUIRE(end);
	char out[4096];
	snprintf(out, sizeof out, "%.*s\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
		 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}%s",
		 (int)(at - cj), cj, end + 1);
	spit(path, out, strlen(out));
	free(cj);
	REQUIRE(rl_model_load(dir, NULL, &b, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
	struct rl_model_config want = { .rope_theta = 500000.0f, .head_dim = 8 };
	REQUIRE(rl_rope_llama3_freqs(&want, 8, 1, 4, 64) == 0);
	CHECK(b->cfg.n_rope_freqs == 4 && b->cfg.rope_scale == 1.0f &&
	      !memcmp(b->cfg.rope_freqs, want.rope_freqs, 4 * sizeof(float)));
	CHECK(b->cfg.rope_freqs[0] == 1.0f && b->cfg.rope_freqs[3] == 8.0f);
	REQUIRE(rl_gguf_write(b, rl_t_tmp("llama3.gguf"), 0, err, sizeof err) == 0);
	REQUIRE(rl_model_load(rl_t_tmp("llama3.gguf"), NULL, &g, err, sizeof err) == 0 || (fprintf(stderr, "%s\n", err), 0));
	CHECK(g->cfg.n_rope_freqs == 4 && !memcmp(g->cfg.rope_freqs, b->cfg.rope_freqs, 4 * sizeof(float)));
	rl_model_destroy(g);
	/* an unknown scaling type is named */
	snprintf(out, sizeof out, "{\"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2, "
		 "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"vocab_size\": 1024, "
		 "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}");
	spit(path, out, strlen(out));
	CHECK(rl_model_load(dir, NULL, &g, err, sizeof err) == -ENOTSUP && strstr(err, "yarn") &&
	      strstr(err, "llama3"));
	rl_model_destroy(b);
	rl_model_destroy(m);
}

int main(void)
{
	/* thousands of mutated files: keep them in memory (tmpfs) when there is one */
	if (rl_t_tmpdir_make("loaders"))
		return 1;
	RUN(test_gguf_write_roundtrip);
	RUN(test_safetensors);
	RUN(test_llama3_rope_scaling);
	RUN(test_hostile_gguf);
	RUN(test_hostile_llama2c);
	RUN(test_hostile_safetensors);
	RUN(test_stories_bin_vs_gguf);
	RUN(test_fuzz_regressions);
	rl_t_tmpdir_remove();
	TEST_MAIN_END();
}
