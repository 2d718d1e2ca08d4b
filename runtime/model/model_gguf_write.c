/* model_gguf_write.c — rl_gguf_write: an rl_model as a standard GGUF v3 "llama" file that
 * llama.cpp and the gguf Python package read (and our loader reads back): all llama.* keys,
 * the vocabulary as tokenizer.ggml.* SentencePiece arrays, 2-D weights in f32/f16/bf16/q8_0
 * (q8_0 where a row is whole 32-weight blocks, f16 elsewhere), 1-D tensors in f32 (as
 * llama.cpp's converters do), tensors aligned to 32. Used by `ringlm mkmodel` to make random
 * models of real shapes, and by the tests for fixtures in every dtype. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_chat.h"
#include "runtime/model/model_internal.h"

#define ALIGN 32
enum { GT_U32 = 4, GT_I32 = 5, GT_F32 = 6, GT_BOOL = 7, GT_STR = 8, GT_ARR = 9 };

struct wt {                       /* one tensor to write */
	char name[48];
	uint64_t ne0, ne1;            /* ne0 = in (fastest), ne1 = out rows */
	const float *src;
	const float *src2;            /* rows from split on (a fused gate_up's up half), or NULL */
	uint64_t split;
	uint32_t experts;             /* > 1: ne1 rows are that many experts' stacked (a 3-D tensor) */
	int type;                     /* enum rl_dt */
	int permute;                  /* rows HF halves -> adjacent pairs, head size permute */
	uint64_t off;
};

struct w {
	FILE *f;
	int bad;
};

static void put(struct w *w, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, w->f) != n)
		w->bad = 1;
}
static void put32(struct w *w, uint32_t v) { put(w, &v, 4); }
static void put64(struct w *w, uint64_t v) { put(w, &v, 8); }
static void putstr(struct w *w, const char *s, size_t n) { put64(w, n); put(w, s, n); }
static void key(struct w *w, const char *k, uint32_t type) { putstr(w, k, strlen(k)); put32(w, type); }
static void kv_u32(struct w *w, const char *k, uint32_t v) { key(w, k, GT_U32); put32(w, v); }
static void kv_f32(struct w *w, const char *k, float v) { key(w, k, GT_F32); put(w, &v, 4); }
static void kv_str(struct w *w, const char *k, const char *v) { key(w, k, GT_STR); putstr(w, v, strlen(v)); }
static void kv_bool(struct w *w, const char *k, int v) { uint8_t b = v != 0; key(w, k, GT_BOOL); put(w, &b, 1); }

/* Vocabulary pieces back into SentencePiece form: spaces become ▁ and llama2.c's
 * "\n<s>\n"-style BOS/EOS lose their newlines. */
struct piece { const uint8_t *s; uint32_t len; float score; };

static size_t sp_len(const struct piece *p, int special)
{
	size_t n = 0, a = 0, b = p->len;
	if (special && b >= 2 && p->s[0] == '\n' && p->s[b - 1] == '\n') { a = 1; b--; }
	for (size_t i = a; i < b; i++)
		n += p->s[i] == ' ' ? 3 : 1;
	return n;
}

static void put_sp(struct w *w, const struct piece *p, int special)
{
	size_t a = 0, b = p->len;
	put64(w, sp_len(p, special));
	if (special && b >= 2 && p->s[0] == '\n' && p->s[b - 1] == '\n') { a = 1; b--; }
	for (size_t i = a; i < b; i++) {
		if (p->s[i] == ' ')
			put(w, "\xe2\x96\x81", 3);
		else
			put(w, &p->s[i], 1);
	}
}

static int token_type(const struct piece *p, uint32_t id, const struct rl_model_config *c)
{
	if (id == c->bos_id || id == c->eos_id)
		return 3;                                   /* control */
	if (p->len == 5 && !memcmp(p->s, "<unk>", 5))
		return 2;                                   /* unknown */
	if (p->len == 6 && !memcmp(p->s, "<0x", 3) && p->s[5] == '>')
		return 6;                                   /* byte */
	return 1;                                       /* normal */
}

/* Source row for output row r of a Q/K matrix with heads of hd rows: GGUF llama wants
 * adjacent pairs (2i, 2i+1) where HF has (i, i + hd/2). */
static uint64_t src_row(uint64_t r, uint64_t hd, int permute)
{
	if (!permute)
		return r;
	uint64_t h = r / hd, k = r % hd, i = k / 2, j = k % 2;
	return h * hd + j * (hd / 2) + i;
}

static uint64_t tensor_bytes(const struct wt *t)
{
	uint64_t n = t->ne0 * t->ne1, bytes = 0;
	rl_dt_size(t->type, n, &bytes);       /* sizes were checked when the list was made */
	return bytes;
}

/* One row of a type with a quantizer (rl_dt_quantize), a block at a time. */
static void put_quantized(struct w *w, int type, const float *row, uint64_t n)
{
	const struct rl_dt_info *d = rl_dt_info(type);
	uint8_t blk[256];
	for (uint64_t b = 0; b < n; b += d->blk_elems) {
		rl_dt_quantize(type, blk, row + b, 1);
		put(w, blk, d->blk_bytes);
	}
}

/* One row of seeded random blocks whose largest |weight| is near the row's own (see
 * rl_gguf_write: no quantizer for these types). */
static void put_random_blocks(struct w *w, int type, const float *row, uint64_t n, uint64_t *rng)
{
	const struct rl_dt_info *d = rl_dt_info(type);
	float amax = 0;
	for (uint64_t i = 0; i < n; i++)
		amax = fabsf(row[i]) > amax ? fabsf(row[i]) : amax;
	uint8_t blk[256];
	for (uint64_t b = 0; b < n; b += d->blk_elems) {
		rl_dt_random_block(type, blk, rng, amax > 0 ? amax : 1e-3f);
		put(w, blk, d->blk_bytes);
	}
}

static void put_tensor(struct w *w, const struct wt *t, uint64_t hd, uint16_t *tmp, size_t tmpn)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ t->off;   /* reproducible per tensor */
	for (uint64_t r = 0; r < t->ne1 && !w->bad; r++) {
		const float *row = t->src2 && r >= t->split ? t->src2 + (r - t->split) * t->ne0
							      : t->src + src_row(r, hd, t->permute) * t->ne0;
		if (t->type == RL_DT_F32) {
			put(w, row, t->ne0 * 4);
			continue;
		}
		if (t->type == RL_DT_Q8_0 || t->type == RL_DT_Q4_K) {
			put_quantized(w, t->type, row, t->ne0);
			continue;
		}
		if (t->type != RL_DT_F16 && t->type != RL_DT_BF16) {
			put_random_blocks(w, t->type, row, t->ne0, &rng);
			continue;
		}
		for (uint64_t i = 0; i < t->ne0; i += tmpn) {
			size_t n = t->ne0 - i < tmpn ? t->ne0 - i : tmpn;
			for (size_t k = 0; k < n; k++)
				tmp[k] = t->type == RL_DT_F16 ? rl_f32_to_f16(row[i + k]) : rl_f32_to_bf16(row[i + k]);
			put(w, tmp, n * 2);
		}
	}
}

int rl_gguf_write(const struct rl_model *m, const char *path, enum rl_dt dtype, char *err, size_t errlen)
{
	const char *name = rl_model_basename(path);
	const struct rl_model_config *c = &m->cfg;
	if (!rl_dt_info(dtype)) {
		char names[256];
		rl_dt_names(names, sizeof names);
		rl_model_err(err, errlen, name, "weight type %d not writable (%s are)", (int)dtype, names);
		return -EINVAL;
	}
	/* gemma3 implies these (llama.cpp derives them from the name): refuse a mix it would misread */
	if ((c->post_norms || c->ffn_gelu || c->sliding_window || c->emb_scale > 0) &&
	    (!c->post_norms || !c->ffn_gelu || !c->has_qk_norm || c->emb_scale != sqrtf((float)c->dim) ||
	     c->n_experts || c->attn_scale > 0 || (c->sliding_window && !(c->rope_theta_local > 0)))) {
		rl_model_err(err, errlen, name, "a model with some of Gemma 3's traits but not all of them cannot be written "
			     "as GGUF (gemma3 implies post-norms, GELU, q/k norms, embeddings times sqrt(dim))");
		return -ENOTSUP;
	}
	if (c->rope_orig_ctx && (!c->fused_proj || !c->n_rope_freqs)) {
		rl_model_err(err, errlen, name, "LongRoPE is written for phi3 models (fused projections) with factors only");
		return -ENOTSUP;
	}
	uint32_t nv = 0;
	struct piece *pc = NULL;
	if (m->vocab_blob && m->vocab_blob_size >= 4 && !memcmp(m->vocab_blob, RL_BPE_MAGIC, 4)) {
		rl_model_err(err, errlen, name, "writing a byte-level BPE vocabulary is not supported; write without it");
		return -ENOTSUP;
	}
	if (m->vocab_blob) {
		int rc = rl_model_vocab_check(m->vocab_blob, m->vocab_blob_size, c->vocab_size, name, err, errlen);
		if (rc)
			return rc;
		nv = c->vocab_size;
		if (!(pc = calloc(nv, sizeof *pc))) {
			rl_model_err(err, errlen, name, "out of memory");
			return -ENOMEM;
		}
		const uint8_t *b = m->vocab_blob;
		size_t o = 4;
		for (uint32_t i = 0; i < nv; i++) {
			memcpy(&pc[i].score, b + o, 4);
			pc[i].len = rl_rd32(b + o + 4);
			pc[i].s = b + o + 8;
			o += 8 + pc[i].len;
		}
	}
	uint64_t hd = c->head_dim;
	size_t nt = RL_MODEL_MAX_SEGS(c->n_layers) + 2, k = 0;   /* + rope_freqs, or LongRoPE's two sets */
	struct wt *t = calloc(nt, sizeof *t);
	uint16_t *tmp = malloc(4096 * sizeof *tmp);
	if (!t || !tmp) {
		free(t); free(tmp); free(pc);
		rl_model_err(err, errlen, name, "out of memory");
		return -ENOMEM;
	}
	/* every field the shape has, named and shaped by the one table: globals, then layer by
	 * layer. Matrices in dtype (a block type only where rows are whole blocks, else F16), vectors
	 * f32; Q/K rows (and their biases) permuted to adjacent-pair RoPE for rope_halves. */
	for (int64_t pass = -1; pass < (int64_t)c->n_layers; pass++)
	for (int f = 0; f < RL_W_NFIELDS; f++) {
		const struct rl_wname *wn = &rl_wnames[f];
		uint32_t l = pass < 0 ? 0 : (uint32_t)pass;
		if (wn->per_layer != (pass >= 0) || rl_model_field_off(c, f, l) == UINT64_MAX)
			continue;
		struct rl_wfused fu;
		char fname[sizeof t->name];
		const int fused = rl_wname_fused(c, f, l, 0, fname, sizeof fname, &fu);
		if (fused && fu.row0)           /* k, v, up: written inside the fused matrix */
			continue;
		struct wt *x = &t[k++];
		rl_wname_format(f, l, 0, x->name, sizeof x->name);
		x->src = *rl_model_field_slot((struct rl_model *)m, f, l);
		int vec = wn->cols == RL_WD_NONE, bias = f == RL_W_BQ || f == RL_W_BK || f == RL_W_BV;
		uint64_t rows = rl_wdim(c, wn->rows), cols = rl_wdim(c, wn->cols);
		/* a bias is a one-column matrix, so it is permuted like the rows it belongs to */
		x->ne0 = bias ? 1 : vec ? rows : cols;
		x->ne1 = bias ? rows : vec ? 1 : rows;
		x->type = vec ? RL_DT_F32 : cols % rl_dt_info(dtype)->blk_elems ? RL_DT_F16 : (int)dtype;
		/* the embedding and LM head of a 4-bit file at 8 bits: llama.cpp's Q4_K files keep
		 * them at 6 (Q6_K), the argmax being what a 4-bit head would move most */
		if (dtype == RL_DT_Q4_K && (f == RL_W_TOK_EMB || f == RL_W_WCLS) && x->type == RL_DT_Q4_K)
			x->type = RL_DT_Q8_0;
		x->permute = c->rope_halves && !c->has_qk_norm && !c->fused_proj &&   /* qwen3, phi3 keep HF's order */
			     (f == RL_W_WQ || f == RL_W_WK || f == RL_W_BQ || f == RL_W_BK);
		if (f == RL_W_GATE_EXPS || f == RL_W_UP_EXPS || f == RL_W_DOWN_EXPS)
			x->experts = c->n_experts;
		if (fused) {                   /* q then k, v (contiguous in the canonical layout); gate then up */
			snprintf(x->name, sizeof x->name, "%s", fname);
			x->ne1 = fu.total;
			if (f == RL_W_GATE) {
				x->src2 = m->layers[l].w_up;
				x->split = rows;
			}
		}
	}
	/* RoPE factors where llama.cpp's converter puts them: Llama 3's rope_freqs, or LongRoPE's
	 * short and long sets */
	for (int set = 0; set < (c->rope_orig_ctx ? 2 : 1) && c->n_rope_freqs; set++) {
		struct wt *x = &t[k++];
		snprintf(x->name, sizeof x->name, "%s", !c->rope_orig_ctx ? "rope_freqs.weight"
			 : set ? "rope_factors_long.weight" : "rope_factors_short.weight");
		x->src = set ? c->rope_freqs_long : c->rope_freqs;
		x->ne0 = c->n_rope_freqs;
		x->ne1 = 1;
		x->type = RL_DT_F32;
	}
	/* biases are written as [1, n] for the row permutation; GGUF wants them 1-D */
	uint64_t data = 0;
	for (size_t i = 0; i < k; i++) {
		t[i].off = data;
		data += (tensor_bytes(&t[i]) + ALIGN - 1) / ALIGN * ALIGN;
	}
	/* metadata is far below 64 bytes per token plus 64 KiB */
	int rc = rl_model_check_space(path, data + 65536 + (uint64_t)nv * 64, err, errlen);
	if (rc) {
		free(t); free(tmp); free(pc);
		return rc;
	}
	struct w w = { fopen(path, "wb"), 0 };
	if (!w.f) {
		int e = errno;
		rl_model_err(err, errlen, name, "cannot create: %s", strerror(e));
		free(t); free(tmp); free(pc);
		return -e;
	}
	setvbuf(w.f, NULL, _IOFBF, 4 << 20);
	const char *chat = rl_chat_template_text(rl_chat_from_name(m->chat_template));
	const int moe_qwen = c->n_experts && c->has_qk_norm;
	const int swa = c->post_norms && c->sliding_window;
	const int no_prefix = nv && rl_model_vocab_prefixless(m->vocab_blob, m->vocab_blob_size);
	uint32_t n_kv = 15 + no_prefix + (c->rope_scale != 1.0f ? 2 : 0) + (c->rope_orig_ctx ? 2 : 0) + (nv ? 6 : 0) + (nv && chat[0] ? 1 : 0) +
			(c->n_experts ? 2 + moe_qwen : 0) + (swa ? 3 : 0);
	put(&w, "GGUF", 4);
	put32(&w, 3);
	put64(&w, k);
	put64(&w, n_kv);
	/* "llama" (Q/K permuted to adjacent pairs for HF-ordered models; with experts, Mixtral's),
	 * "gemma3" for one with post-norms, "qwen3" for a model with q/k norms ("qwen3moe" with
	 * experts), "phi3" for one with fused projections: those read with HF's (NEOX) rotation.
	 * gemma3's embedding scale, GELU and query scale are implied by the name, as llama.cpp
	 * reads it; this writer cannot state others. */
	const char *arch = c->post_norms ? "gemma3" : moe_qwen ? "qwen3moe" : c->has_qk_norm ? "qwen3" :
			   c->fused_proj ? "phi3" : "llama";
	char ak[64];
#define AK(k) (snprintf(ak, sizeof ak, "%s." k, arch), ak)
	kv_str(&w, "general.architecture", arch);
	kv_str(&w, "general.name", m->name[0] ? m->name : "ringlm");
	kv_u32(&w, "general.alignment", ALIGN);
	/* llama_ftype (llama.h), the "mostly" type llama.cpp reports */
	static const uint8_t ftype[RL_DT_COUNT] = {
		[RL_DT_F32] = 0, [RL_DT_F16] = 1, [RL_DT_BF16] = 32, [RL_DT_Q8_0] = 7, [RL_DT_Q4_0] = 2,
		[RL_DT_Q4_1] = 3, [RL_DT_Q5_0] = 8, [RL_DT_Q5_1] = 9, [RL_DT_Q2_K] = 10,
		[RL_DT_Q3_K] = 12, [RL_DT_Q4_K] = 15, [RL_DT_Q5_K] = 17, [RL_DT_Q6_K] = 18,
		[RL_DT_IQ4_NL] = 25, [RL_DT_IQ4_XS] = 30,
	};
	kv_u32(&w, "general.file_type", ftype[dtype]);
	kv_u32(&w, AK("context_length"), c->max_ctx);
	kv_u32(&w, AK("embedding_length"), c->dim);
	kv_u32(&w, AK("feed_forward_length"), c->hidden_dim);
	kv_u32(&w, AK("block_count"), c->n_layers);
	if (c->n_experts) {            /* Mixtral's llama, or qwen3moe (each expert's width apart) */
		kv_u32(&w, AK("expert_count"), c->n_experts);
		kv_u32(&w, AK("expert_used_count"), c->n_experts_used);
		if (moe_qwen)
			kv_u32(&w, AK("expert_feed_forward_length"), c->hidden_dim);
	}
	kv_u32(&w, AK("attention.head_count"), c->n_heads);
	kv_u32(&w, AK("attention.head_count_kv"), c->n_kv_heads);
	kv_u32(&w, AK("attention.key_length"), c->head_dim);
	kv_u32(&w, AK("attention.value_length"), c->head_dim);   /* llama.cpp's default is dim / heads */
	kv_u32(&w, AK("rope.dimension_count"), rl_rope_dims(c));
	kv_f32(&w, AK("rope.freq_base"), c->rope_theta);
	kv_f32(&w, AK("attention.layer_norm_rms_epsilon"), c->norm_eps);
	if (c->rope_scale != 1.0f) {
		kv_str(&w, AK("rope.scaling.type"), "linear");
		kv_f32(&w, AK("rope.scaling.factor"), c->rope_scale);
	}
	if (c->rope_orig_ctx) {        /* LongRoPE, as llama.cpp's converter writes Phi-3 128k's */
		kv_u32(&w, AK("rope.scaling.original_context_length"), c->rope_orig_ctx);
		kv_f32(&w, AK("rope.scaling.attn_factor"), c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0f);
	}
	if (swa) {
		kv_u32(&w, AK("attention.sliding_window"), c->sliding_window);
		kv_u32(&w, AK("attention.sliding_window_pattern"), c->swa_period);
		kv_f32(&w, AK("rope.freq_base_swa"), c->rope_theta_local);
	}
#undef AK
	if (nv) {
		kv_str(&w, "tokenizer.ggml.model", "llama");
		key(&w, "tokenizer.ggml.tokens", GT_ARR); put32(&w, GT_STR); put64(&w, nv);
		for (uint32_t i = 0; i < nv; i++)
			put_sp(&w, &pc[i], i == c->bos_id || i == c->eos_id);
		key(&w, "tokenizer.ggml.scores", GT_ARR); put32(&w, GT_F32); put64(&w, nv);
		for (uint32_t i = 0; i < nv; i++)
			put(&w, &pc[i].score, 4);
		key(&w, "tokenizer.ggml.token_type", GT_ARR); put32(&w, GT_I32); put64(&w, nv);
		for (uint32_t i = 0; i < nv; i++)
			put32(&w, (uint32_t)token_type(&pc[i], i, c));
		if (no_prefix)             /* Gemma's: no " " before the text */
			kv_bool(&w, "tokenizer.ggml.add_space_prefix", 0);
		kv_u32(&w, "tokenizer.ggml.bos_token_id", c->bos_id < nv ? c->bos_id : 1);
		kv_u32(&w, "tokenizer.ggml.eos_token_id", c->eos_id < nv ? c->eos_id : 2);
		if (chat[0])
			kv_str(&w, "tokenizer.chat_template", chat);
	}
	for (size_t i = 0; i < k; i++) {
		putstr(&w, t[i].name, strlen(t[i].name));
		if (t[i].ne0 == 1) {          /* bias: 1-D */
			put32(&w, 1);
			put64(&w, t[i].ne1);
		} else if (t[i].ne1 == 1) {   /* norm: 1-D */
			put32(&w, 1);
			put64(&w, t[i].ne0);
		} else if (t[i].experts > 1) {   /* stacked experts: [cols, rows of one, experts] */
			put32(&w, 3);
			put64(&w, t[i].ne0);
			put64(&w, t[i].ne1 / t[i].experts);
			put64(&w, t[i].experts);
		} else {
			put32(&w, 2);
			put64(&w, t[i].ne0);
			put64(&w, t[i].ne1);
		}
		put32(&w, (uint32_t)rl_ggml_of_dt(t[i].type));
		put64(&w, t[i].off);
	}
	static const uint8_t zero[ALIGN];
	long pos = ftell(w.f);
	if (pos < 0)
		w.bad = 1;
	else
		put(&w, zero, (ALIGN - pos % ALIGN) % ALIGN);
	uint64_t at = 0;
	for (size_t i = 0; i < k && !w.bad; i++) {
		put(&w, zero, t[i].off - at);
		put_tensor(&w, &t[i], hd, tmp, 4096);
		at = t[i].off + tensor_bytes(&t[i]);
	}
	int e = w.bad ? errno : 0;
	if (fclose(w.f) && !e)
		e = errno ? errno : EIO;
	free(t); free(tmp); free(pc);
	if (e || w.bad) {
		rl_model_err(err, errlen, name, "write failed: %s", strerror(e ? e : EIO));
		unlink(path);
		return -(e ? e : EIO);
	}
	return 0;
}
