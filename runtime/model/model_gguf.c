/* model_gguf.c — GGUF (v2/v3) reader: header, metadata key/values, tensor infos, data
 * offset; maps the llama-architecture keys and tensors onto rl_model and rebuilds the
 * tokenizer arrays as a llama2.c-layout vocabulary blob; loading is planning (every check)
 * then reading the plan into fp32. The metadata is parsed from a
 * buffer that grows by preads as the cursor advances; every count, length and offset in it
 * is checked against the file size before use. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_chat.h"
#include "tokenizer/rl_pretok.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/model_internal.h"

enum { GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STR, GT_ARR, GT_U64,
       GT_I64, GT_F64, GT_NTYPES };
static const uint8_t gt_size[GT_NTYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };


#define MAX_TENSORS  (1u << 20)
#define MAX_KV       (1u << 20)
#define MAX_KEY      65535
#define MAX_HEADER   (1ull << 30)

struct kv {                    /* offsets into g->buf (it moves when it grows) */
	uint64_t key, klen, val;   /* val: value bytes (string: its u64 length) */
	uint32_t type, atype;      /* atype, n: for arrays */
	uint64_t n;
};

struct tinfo {
	uint64_t name, nlen, ne[4], off;
	uint32_t ndim, type;
};

struct gguf {
	struct rl_mfile f;
	uint8_t *buf;
	uint64_t have, pos;
	char *err;
	size_t errlen;
	uint64_t n_tensors, n_kv, data_start;
	struct kv *kv;
	struct tinfo *ti;
};

#define GERR(g, ...) rl_model_err((g)->err, (g)->errlen, (g)->f.name, __VA_ARGS__)

/* Makes bytes [pos, pos+n) available in buf. */
static int need(struct gguf *g, uint64_t n)
{
	uint64_t end;
	if (__builtin_add_overflow(g->pos, n, &end) || end > g->f.size) {
		GERR(g, "truncated header: need %llu bytes at offset %llu, file has %llu",
		     (unsigned long long)n, (unsigned long long)g->pos, (unsigned long long)g->f.size);
		return -EINVAL;
	}
	if (end <= g->have)
		return 0;
	if (end > MAX_HEADER) {
		GERR(g, "metadata larger than %llu bytes", (unsigned long long)MAX_HEADER);
		return -EFBIG;
	}
	uint64_t want = g->have * 2 > end ? g->have * 2 : end;
	if (want < (1u << 20))
		want = 1u << 20;
	if (want > g->f.size)
		want = g->f.size;
	if (want > MAX_HEADER)
		want = MAX_HEADER;
	uint8_t *nb = realloc(g->buf, want);
	if (!nb) {
		GERR(g, "out of memory reading metadata");
		return -ENOMEM;
	}
	g->buf = nb;
	int rc = rl_mfile_pread(&g->f, g->buf + g->have, want - g->have, g->have, g->err, g->errlen);
	if (rc)
		return rc;
	g->have = want;
	return 0;
}

static int rd(struct gguf *g, void *dst, size_t n)
{
	int rc = need(g, n);
	if (rc)
		return rc;
	memcpy(dst, g->buf + g->pos, n);
	g->pos += n;
	return 0;
}

/* A string: u64 length, bytes. Records where the bytes are. */
static int rd_str(struct gguf *g, uint64_t maxlen, uint64_t *off, uint64_t *len, const char *what)
{
	int rc = rd(g, len, 8);
	if (rc)
		return rc;
	if (*len > maxlen) {
		GERR(g, "%s of length %llu at offset %llu exceeds %llu", what, (unsigned long long)*len,
		     (unsigned long long)(g->pos - 8), (unsigned long long)maxlen);
		return -EINVAL;
	}
	if ((rc = need(g, *len)))
		return rc;
	*off = g->pos;
	g->pos += *len;
	return 0;
}

/* Skips one value of type t (arrays recursively, at most 2 deep). */
static int skip_value(struct gguf *g, uint32_t t, int depth)
{
	if (t >= GT_NTYPES) {
		GERR(g, "unknown metadata value type %u at offset %llu", t, (unsigned long long)g->pos);
		return -EINVAL;
	}
	if (gt_size[t]) {
		int rc = need(g, gt_size[t]);
		g->pos += rc ? 0 : gt_size[t];
		return rc;
	}
	uint64_t off, len;
	if (t == GT_STR)
		return rd_str(g, g->f.size, &off, &len, "string");
	uint32_t at;
	uint64_t n;
	int rc;
	if ((rc = rd(g, &at, 4)) || (rc = rd(g, &n, 8)))
		return rc;
	if (depth >= 2 || at >= GT_NTYPES) {
		GERR(g, "unsupported array element type %u at offset %llu", at, (unsigned long long)g->pos);
		return -EINVAL;
	}
	if (gt_size[at]) {
		uint64_t bytes;
		if (__builtin_mul_overflow(n, gt_size[at], &bytes)) {
			GERR(g, "array of %llu elements overflows", (unsigned long long)n);
			return -EINVAL;
		}
		if ((rc = need(g, bytes)))
			return rc;
		g->pos += bytes;
		return 0;
	}
	/* every string or array element takes at least 8 bytes: bounds the loop by file size */
	if (n > (g->f.size - g->pos) / 8) {
		GERR(g, "array of %llu elements at offset %llu cannot fit in the file",
		     (unsigned long long)n, (unsigned long long)g->pos);
		return -EINVAL;
	}
	for (uint64_t i = 0; i < n; i++)
		if ((rc = skip_value(g, at, depth + 1)))
			return rc;
	return 0;
}

static const struct kv *find_kv(const struct gguf *g, const char *key)
{
	size_t kl = strlen(key);
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (g->kv[i].klen == kl && !memcmp(g->buf + g->kv[i].key, key, kl))
			return &g->kv[i];
	return NULL;
}

/* Numeric value of key into *v; 0 when absent (v untouched), 1 when found, -EINVAL when of a
 * non-numeric type. */
static int get_num(struct gguf *g, const char *key, double *v)
{
	const struct kv *k = find_kv(g, key);
	if (!k)
		return 0;
	const uint8_t *p = g->buf + k->val;
	switch (k->type) {
	case GT_U8:  *v = *p; break;
	case GT_I8:  *v = (int8_t)*p; break;
	case GT_U16: { uint16_t x; memcpy(&x, p, 2); *v = x; break; }
	case GT_I16: { int16_t x; memcpy(&x, p, 2); *v = x; break; }
	case GT_U32: *v = rl_rd32(p); break;
	case GT_I32: *v = (int32_t)rl_rd32(p); break;
	case GT_U64: *v = (double)rl_rd64(p); break;
	case GT_I64: *v = (double)(int64_t)rl_rd64(p); break;
	case GT_F32: { float x; memcpy(&x, p, 4); *v = x; break; }
	case GT_F64: memcpy(v, p, 8); break;
	default:
		GERR(g, "metadata %s is not a number", key);
		return -EINVAL;
	}
	if (!isfinite(*v)) {
		GERR(g, "metadata %s is not finite", key);
		return -EINVAL;
	}
	return 1;
}

/* A whole number in [lo, hi], or dflt when absent (required: no default). */
static int get_uint(struct gguf *g, const char *key, int required, double lo, double hi,
		    uint32_t dflt, uint32_t *out)
{
	double v;
	int rc = get_num(g, key, &v);
	if (rc < 0)
		return rc;
	if (!rc) {
		if (required) {
			GERR(g, "missing metadata %s", key);
			return -EINVAL;
		}
		*out = dflt;
		return 0;
	}
	if (v != floor(v) || v < lo || v > hi) {
		GERR(g, "metadata %s = %g out of range [%g, %g]", key, v, lo, hi);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

/* String value of key as a NUL-terminated copy into out (truncated); 0 if absent. */
static int get_str(struct gguf *g, const char *key, char *out, size_t outlen)
{
	const struct kv *k = find_kv(g, key);
	if (!k)
		return 0;
	if (k->type != GT_STR) {
		GERR(g, "metadata %s is not a string", key);
		return -EINVAL;
	}
	uint64_t len = rl_rd64(g->buf + k->val);
	snprintf(out, outlen, "%.*s", (int)(len < outlen ? len : outlen - 1), (const char *)g->buf + k->val + 8);
	return 1;
}

static void gguf_free(struct gguf *g)
{
	free(g->buf);
	free(g->kv);
	free(g->ti);
	rl_mfile_close(&g->f);
}

/* Parses the header, metadata and tensor infos; computes data_start. */
static int gguf_parse(struct gguf *g, const char *path, char *err, size_t errlen)
{
	memset(g, 0, sizeof *g);
	g->err = err;
	g->errlen = errlen;
	int rc = rl_mfile_open(&g->f, path, err, errlen);
	if (rc)
		return rc;
	char magic[4];
	uint32_t version;
	if ((rc = rd(g, magic, 4)) || (rc = rd(g, &version, 4)))
		return rc;
	if (memcmp(magic, "GGUF", 4)) {
		GERR(g, "not a GGUF file");
		return -EINVAL;
	}
	if (version != 2 && version != 3) {
		GERR(g, "GGUF version %u not supported (2 and 3 are)", version);
		return -EINVAL;
	}
	if ((rc = rd(g, &g->n_tensors, 8)) || (rc = rd(g, &g->n_kv, 8)))
		return rc;
	if (g->n_tensors > MAX_TENSORS || g->n_kv > MAX_KV) {
		GERR(g, "implausible counts: %llu tensors, %llu metadata entries",
		     (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv);
		return -EINVAL;
	}
	/* a key/value takes >= 8+1+4+1 bytes and a tensor info >= 8+1+4+8+4+8: check the counts
	 * against the file before allocating for them */
	if (g->n_kv > g->f.size / 14 || g->n_tensors > g->f.size / 33) {
		GERR(g, "%llu tensors and %llu metadata entries cannot fit in %llu bytes",
		     (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv,
		     (unsigned long long)g->f.size);
		return -EINVAL;
	}
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
	g->ti = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->ti);
	if (!g->kv || !g->ti) {
		GERR(g, "out of memory");
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < g->n_kv; i++) {
		struct kv *k = &g->kv[i];
		if ((rc = rd_str(g, MAX_KEY, &k->key, &k->klen, "metadata key")) || (rc = rd(g, &k->type, 4)))
			return rc;
		if (k->type == GT_ARR) {
			if ((rc = need(g, 12)))
				return rc;
			k->atype = rl_rd32(g->buf + g->pos);
			k->n = rl_rd64(g->buf + g->pos + 4);
			k->val = g->pos + 12;
		} else {
			k->val = g->pos;
		}
		if ((rc = skip_value(g, k->type, 0))) {
			char why[200];
			snprintf(why, sizeof why, "%s", err);
			const char *w = strchr(why, ':') ? strchr(why, ':') + 2 : why;
			GERR(g, "metadata %.*s: %s", (int)(k->klen > 64 ? 64 : k->klen),
			     (const char *)g->buf + k->key, w);
			return rc;
		}
	}
	double align = 32;
	if ((rc = get_num(g, "general.alignment", &align)) < 0)
		return rc;
	uint64_t al = (uint64_t)align;
	if (align != (double)al || !al || (al & (al - 1)) || al > (1u << 24)) {
		GERR(g, "general.alignment %g is not a power of two", align);
		return -EINVAL;
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct tinfo *t = &g->ti[i];
		if ((rc = rd_str(g, 256, &t->name, &t->nlen, "tensor name")) || (rc = rd(g, &t->ndim, 4)))
			return rc;
		if (t->ndim < 1 || t->ndim > 4) {
			GERR(g, "tensor %.*s has %u dimensions", (int)t->nlen, g->buf + t->name, t->ndim);
			return -EINVAL;
		}
		if ((rc = rd(g, t->ne, 8 * t->ndim)) || (rc = rd(g, &t->type, 4)) || (rc = rd(g, &t->off, 8)))
			return rc;
		for (uint32_t d = t->ndim; d < 4; d++)
			t->ne[d] = 1;
		if (t->off % al) {
			GERR(g, "tensor %.*s offset %llu is not aligned to %llu", (int)t->nlen,
			     g->buf + t->name, (unsigned long long)t->off, (unsigned long long)al);
			return -EINVAL;
		}
		/* the type first, before any size check: an unsupported type is not corruption */
		if (rl_dt_of_ggml(t->type) < 0) {
			char names[256];
			rl_dt_names(names, sizeof names);
			GERR(g, "tensor %.*s has GGML type %s (%u), which ringlm does not read (it reads %s); "
			     "requantize with llama.cpp's llama-quantize to one of those", (int)t->nlen,
			     g->buf + t->name, rl_ggml_type_name(t->type), t->type, names);
			return -ENOTSUP;
		}
	}
	g->data_start = (g->pos + al - 1) / al * al;
	if (g->data_start > g->f.size && g->n_tensors) {
		GERR(g, "tensor data would start at %llu, past the end of the file (%llu)",
		     (unsigned long long)g->data_start, (unsigned long long)g->f.size);
		return -EINVAL;
	}
	return 0;
}

static const struct tinfo *find_tensor(const struct gguf *g, const char *name)
{
	size_t n = strlen(name);
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (g->ti[i].nlen == n && !memcmp(g->buf + g->ti[i].name, name, n))
			return &g->ti[i];
	return NULL;
}

/* Checks tensor `name` has shape {ne0, ne1} (ne1 = 1: a vector), a supported type and data
 * inside the file, and appends its read, as weight (field, layer), to p. */
/* Appends the read of tensor `name` [ne2 x ne1 rows of ne0] (ne2 > 1: stacked experts) as
 * weight (field, layer), or with fu of its rows [row0, row0 + ne1) out of fu->total (a fused
 * matrix). */
static int plan_tensor(struct gguf *g, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2, int field,
		       uint32_t layer, struct rl_model_plan *p, const struct rl_wfused *fu)
{
	const uint64_t total = fu ? fu->total : ne1, row0 = fu ? fu->row0 : 0;
	const struct tinfo *ti = find_tensor(g, name);
	if (!ti) {
		GERR(g, "missing tensor %s", name);
		return -EINVAL;
	}
	if (ti->ne[0] != ne0 || ti->ne[1] != total || ti->ne[2] != ne2 || ti->ne[3] != 1) {
		GERR(g, "tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, %llu]", name,
		     (unsigned long long)ti->ne[0], (unsigned long long)ti->ne[1],
		     (unsigned long long)ti->ne[2], (unsigned long long)ti->ne[3],
		     (unsigned long long)ne0, (unsigned long long)total, (unsigned long long)ne2);
		return -EINVAL;
	}
	int dt = rl_dt_of_ggml(ti->type);      /* known: checked when the infos were read */
	uint64_t nel = ne0 * ne1 * ne2, nbytes, skip, off, end;
	if (ne0 % rl_dt_info(dt)->blk_elems || rl_dt_size(dt, nel, &nbytes) || rl_dt_size(dt, ne0 * row0, &skip) ||
	    __builtin_add_overflow(ti->off, skip, &skip)) {
		GERR(g, "tensor %s: rows of %llu weights are not whole %s blocks of %u", name,
		     (unsigned long long)ne0, rl_dt_info(dt)->name, rl_dt_info(dt)->blk_elems);
		return -EINVAL;
	}
	if (__builtin_add_overflow(g->data_start, skip, &off) ||
	    __builtin_add_overflow(off, nbytes, &end) || end > g->f.size) {
		GERR(g, "tensor %s extends past end of file (offset %llu, size %llu, file %llu)", name,
		     (unsigned long long)skip, (unsigned long long)nbytes, (unsigned long long)g->f.size);
		return -EINVAL;
	}
	return rl_model_plan_add(p, 0, off, nbytes, nel, dt, field, layer, g->err, g->errlen);
}

/* RoPE factors as llama.cpp's converter stores them, f32 [rope dims / 2], one divisor per
 * RoPE pair's frequency: Llama 3's rope_freqs.weight, LongRoPE's rope_factors_short/long.weight.
 * Tensor `name` into dst[]. */
static int read_rope_freqs(struct gguf *g, const char *name, struct rl_model_config *c, float *dst)
{
	const struct tinfo *ti = find_tensor(g, name);
	uint64_t n = rl_rope_dims(c) / 2, off;
	if (!ti) {
		GERR(g, "missing tensor %s", name);
		return -EINVAL;
	}
	if (ti->type != 0 /* GGML F32 */ || ti->ne[0] != n || ti->ne[1] != 1 || ti->ne[2] != 1 || ti->ne[3] != 1) {
		GERR(g, "tensor %s must be F32 [%llu] (one factor per RoPE pair), has type %s and shape [%llu, %llu]",
		     name, (unsigned long long)n, rl_ggml_type_name(ti->type), (unsigned long long)ti->ne[0],
		     (unsigned long long)ti->ne[1]);
		return -EINVAL;
	}
	if (n > RL_ROPE_MAX_FREQS) {
		GERR(g, "%s with head_dim %u: at most %u RoPE factors are supported", name, c->head_dim, RL_ROPE_MAX_FREQS);
		return -ENOTSUP;
	}
	if (__builtin_add_overflow(g->data_start, ti->off, &off) || off > g->f.size || g->f.size - off < n * 4) {
		GERR(g, "tensor %s extends past end of file", name);
		return -EINVAL;
	}
	int rc = rl_mfile_pread(&g->f, dst, n * 4, off, g->err, g->errlen);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < n; i++)
		if (!(dst[i] > 0) || !isfinite(dst[i])) {
			GERR(g, "%s[%llu] = %g: RoPE factors must be positive and finite", name, (unsigned long long)i, dst[i]);
			return -EINVAL;
		}
	c->n_rope_freqs = (uint32_t)n;
	return 0;
}

/* Phi-3's LongRoPE as llama.cpp's converter writes it: the short and long factor sets, the
 * original context the short ones serve, and the attention factor. */
static int read_longrope(struct gguf *g, struct rl_model_config *c)
{
	double v;
	int rc;
	if ((rc = read_rope_freqs(g, "rope_factors_short.weight", c, c->rope_freqs)) ||
	    (rc = read_rope_freqs(g, "rope_factors_long.weight", c, c->rope_freqs_long)) ||
	    (rc = get_uint(g, "phi3.rope.scaling.original_context_length", 0, 1, 1 << 24, c->max_ctx, &c->rope_orig_ctx)))
		return rc;
	c->rope_attn_factor = 1.0f;
	if ((rc = get_num(g, "phi3.rope.scaling.attn_factor", &v)) < 0)
		return rc;
	if (rc && !(v > 0 && v < 100)) {
		GERR(g, "phi3.rope.scaling.attn_factor %g is not a positive factor", v);
		return -EINVAL;
	}
	if (rc)
		c->rope_attn_factor = (float)v;
	return 0;
}

/* String array key as pointers into g->buf (which must not grow meanwhile): NULL arrays and
 * -EINVAL when it is not an array of n strings (n = 0: any count, set in *n). */
static int str_array(struct gguf *g, const char *key, uint64_t *n, const char ***s, uint32_t **len)
{
	const struct kv *k = find_kv(g, key);
	*s = NULL;
	*len = NULL;
	if (!k || k->type != GT_ARR || k->atype != GT_STR || (*n && k->n != *n) || k->n > (1u << 24)) {
		GERR(g, "%s is not an array of %s strings", key, *n ? "one-per-token" : "merge");
		return -EINVAL;
	}
	*n = k->n;
	*s = malloc((*n + 1) * sizeof **s);
	*len = malloc((*n + 1) * sizeof **len);
	if (!*s || !*len) {
		GERR(g, "out of memory");
		return -ENOMEM;
	}
	uint64_t p = k->val;
	for (uint64_t i = 0; i < *n; i++) {
		uint64_t l = rl_rd64(g->buf + p);
		if (l > 65536) {
			GERR(g, "%s[%llu] is %llu bytes long", key, (unsigned long long)i, (unsigned long long)l);
			return -EINVAL;
		}
		(*s)[i] = (const char *)g->buf + p + 8;
		(*len)[i] = (uint32_t)l;
		p += 8 + l;
	}
	return 0;
}

/* A GGUF boolean key, or dflt when the file does not have it. */
static int get_flag(struct gguf *g, const char *key, int dflt)
{
	const struct kv *k = find_kv(g, key);
	return k && k->type == GT_BOOL ? g->buf[k->val] != 0 : dflt;
}

/* A byte-level BPE vocabulary ("gpt2": Llama 3, Qwen2, GPT-2 ...; "gemma4") as an rl_bpe.h
 * blob: tokens, token types, merges, and the pre-tokenizer tokenizer.ggml.pre names, with
 * its flags (rl_pretok.h's table); BOS and EOS before and after a text as the file says,
 * else as llama.cpp defaults for that pre-tokenizer. */
static int build_bpe_vocab(struct gguf *g, const char *pre_dflt, uint32_t n_vocab, uint32_t bos,
			   uint32_t eos, void **blob, uint32_t *size)
{
	char pre[64] = "";
	int rc = get_str(g, "tokenizer.ggml.pre", pre, sizeof pre);
	if (rc < 0)
		return rc;
	if (pre_dflt)
		snprintf(pre, sizeof pre, "%s", pre_dflt);
	const struct rl_pretok_def *def = rl_pretok_find(pre[0] ? pre : "default");
	if (!def) {
		GERR(g, "tokenizer.ggml.pre \"%s\" is not a pre-tokenizer llama.cpp or ringlm knows (llama-bpe, qwen2, smollm, gpt-4o ... are: tokenizer/rl_pretok.c lists them)", pre);
		return -ENOTSUP;
	}
	char spec[16384];
	size_t spec_len = rl_pretok_spec(def->exprs, 1, spec, sizeof spec);
	if (spec_len > sizeof spec) {
		GERR(g, "pre-tokenizer \"%s\" too long", pre);
		return -EINVAL;
	}
	const char **tok = NULL, **mer = NULL;
	uint32_t *tl = NULL, *ml = NULL;
	uint8_t *ty = NULL;
	uint64_t nt = n_vocab, nm = 0;
	if (!(rc = str_array(g, "tokenizer.ggml.tokens", &nt, &tok, &tl)) &&
	    !(rc = str_array(g, "tokenizer.ggml.merges", &nm, &mer, &ml))) {
		const struct kv *tt = find_kv(g, "tokenizer.ggml.token_type");
		if (tt && (tt->type != GT_ARR || tt->atype != GT_I32 || tt->n != n_vocab)) {
			GERR(g, "tokenizer.ggml.token_type is not an array of %u int32", n_vocab);
			rc = -EINVAL;
		} else if (!(ty = malloc(n_vocab))) {
			rc = -ENOMEM;
		} else {
			for (uint32_t i = 0; i < n_vocab; i++) {
				int32_t v = tt ? (int32_t)rl_rd32(g->buf + tt->val + 4ull * i) : RL_TT_NORMAL;
				ty[i] = v >= RL_TT_NORMAL && v <= RL_TT_BYTE ? (uint8_t)v : RL_TT_NORMAL;
			}
			uint32_t pf = def->flags, flags = (pf & RL_PRE_IGNORE_MERGES ? RL_BPE_IGNORE_MERGES : 0) |
				(pf & RL_PRE_RAW ? RL_BPE_RAW : 0) | (pf & RL_PRE_ESCAPE_WS ? RL_BPE_ESCAPE_WS : 0) |
				(pf & RL_PRE_NL_WHOLE ? RL_BPE_NL_WHOLE : 0);
			/* Gemma 4's files say no BOS and llama.cpp puts one all the same */
			if (!get_flag(g, "tokenizer.ggml.add_bos_token", (pf & RL_PRE_ADD_BOS) != 0) &&
			    !(pf & RL_PRE_NL_WHOLE))
				flags |= RL_BPE_NO_BOS;
			if (get_flag(g, "tokenizer.ggml.add_eos_token", 0))
				flags |= RL_BPE_ADD_EOS;
			rc = rl_bpe_blob(n_vocab, tok, tl, ty, (uint32_t)nm, mer, ml, spec, (uint32_t)spec_len,
					 bos, eos, flags, blob, size);
			if (rc)
				GERR(g, "vocabulary too large");
		}
	}
	free(tok); free(tl); free(mer); free(ml); free(ty);
	return rc;
}

/* Builds the llama2.c-layout blob from tokenizer.ggml.{tokens,scores} (SentencePiece "llama"
 * vocabularies only: their ▁ becomes a space, and BOS/EOS read "\n<s>\n" / "\n</s>\n" as in
 * llama2.c's tokenizer.bin), with rl_tok.h's long trailer (types, prefix, BOS, EOS); a
 * byte-level BPE one as build_bpe_vocab does. *blob = NULL when the file has no usable
 * vocabulary. */
static int build_vocab(struct gguf *g, uint32_t n_vocab, uint32_t bos, uint32_t eos,
		       void **blob, uint32_t *size)
{
	*blob = NULL;
	*size = 0;
	char model[32] = "";
	int rc = get_str(g, "tokenizer.ggml.model", model, sizeof model);
	const struct kv *tk = find_kv(g, "tokenizer.ggml.tokens");
	if (rc < 0)
		return rc;
	if (tk && !strcmp(model, "gpt2"))
		return build_bpe_vocab(g, NULL, n_vocab, bos, eos, blob, size);
	if (tk && !strcmp(model, "gemma4"))
		return build_bpe_vocab(g, "gemma4", n_vocab, bos, eos, blob, size);
	if (!tk || strcmp(model, "llama"))
		return 0;
	const struct kv *sc = find_kv(g, "tokenizer.ggml.scores");
	if (tk->type != GT_ARR || tk->atype != GT_STR || tk->n != n_vocab) {
		GERR(g, "tokenizer.ggml.tokens is not an array of %u strings", n_vocab);
		return -EINVAL;
	}
	if (sc && (sc->type != GT_ARR || sc->atype != GT_F32 || sc->n != n_vocab)) {
		GERR(g, "tokenizer.ggml.scores is not an array of %u floats", n_vocab);
		return -EINVAL;
	}
	/* pass 1: size (a ▁ shrinks from 3 bytes to 1; BOS/EOS grow by 2) */
	uint64_t total = 4, p = tk->val, maxlen = 1;
	for (uint32_t i = 0; i < n_vocab; i++) {
		uint64_t len = rl_rd64(g->buf + p), out = rl_tok_spm_spaces(NULL, (const char *)g->buf + p + 8, len);
		if (i == bos || i == eos)
			out += 2;
		if (out > 65536) {
			GERR(g, "token %u is %llu bytes long", i, (unsigned long long)out);
			return -EINVAL;
		}
		maxlen = out > maxlen ? out : maxlen;
		total += 8 + out;
		p += 8 + len;
	}
	/* the trailer: token types, and what the file says of the space prefix, BOS and EOS
	 * (llama.cpp's SentencePiece defaults: a prefix, BOS, no EOS) */
	const struct kv *tt = find_kv(g, "tokenizer.ggml.token_type");
	if (tt && (tt->type != GT_ARR || tt->atype != GT_I32 || tt->n != n_vocab)) {
		GERR(g, "tokenizer.ggml.token_type is not an array of %u int32", n_vocab);
		return -EINVAL;
	}
	const uint32_t spm_flags = (get_flag(g, "tokenizer.ggml.add_space_prefix", 1) ? 0 : RL_SPM_NO_PREFIX) |
		(get_flag(g, "tokenizer.ggml.add_bos_token", 1) ? 0 : RL_SPM_NO_BOS) |
		(get_flag(g, "tokenizer.ggml.add_eos_token", 0) ? RL_SPM_ADD_EOS : 0);
	total += n_vocab + 20;
	if (total > UINT32_MAX) {
		GERR(g, "vocabulary too large");
		return -EINVAL;
	}
	uint8_t *b = malloc(total);
	if (!b) {
		GERR(g, "out of memory");
		return -ENOMEM;
	}
	int32_t ml = (int32_t)maxlen;
	memcpy(b, &ml, 4);
	uint64_t o = 4;
	p = tk->val;
	for (uint32_t i = 0; i < n_vocab; i++) {
		uint64_t len = rl_rd64(g->buf + p);
		const uint8_t *s = g->buf + p + 8;
		float score = 0;
		if (sc)
			memcpy(&score, g->buf + sc->val + 4 * (uint64_t)i, 4);
		if (isnan(score)) {
			free(b);
			GERR(g, "token %u has a NaN score", i);
			return -EINVAL;
		}
		memcpy(b + o, &score, 4);
		uint64_t lo = o + 4, w = o + 8;
		int special = i == bos || i == eos;
		if (special)
			b[w++] = '\n';
		w += rl_tok_spm_spaces((char *)b + w, (const char *)s, len);
		if (special)
			b[w++] = '\n';
		int32_t l = (int32_t)(w - o - 8);
		memcpy(b + lo, &l, 4);
		o = w;
		p += 8 + len;
	}
	for (uint32_t i = 0; i < n_vocab; i++) {
		int32_t v = tt ? (int32_t)rl_rd32(g->buf + tt->val + 4ull * i) : RL_TT_NORMAL;
		b[o++] = v >= RL_TT_NORMAL && v <= RL_TT_BYTE ? (uint8_t)v : RL_TT_NORMAL;
	}
	const uint32_t tail[4] = { n_vocab, spm_flags, bos, eos };
	memcpy(b + o, tail, 16);
	memcpy(b + o + 16, RL_SPM_TRAILER2, 4);
	o += 20;
	*blob = b;
	*size = (uint32_t)o;
	return 0;
}

static int special_id(struct gguf *g, const char *key, uint32_t n_vocab, uint32_t *out)
{
	uint32_t v;
	int rc = get_uint(g, key, 0, 0, UINT32_MAX, UINT32_MAX, &v);
	*out = rc == 0 && v < n_vocab ? v : UINT32_MAX;
	return rc;
}

int rl_gguf_read_vocab(const char *path, void **blob, uint32_t *size, char *err, size_t errlen)
{
	struct gguf g;
	*blob = NULL;
	*size = 0;
	int rc = gguf_parse(&g, path, err, errlen);
	if (!rc) {
		const struct kv *tk = find_kv(&g, "tokenizer.ggml.tokens");
		uint32_t n = tk && tk->type == GT_ARR && tk->n <= (1u << 22) ? (uint32_t)tk->n : 0, bos, eos;
		if (!n) {
			GERR(&g, "no tokenizer.ggml.tokens vocabulary");
			rc = -ENOENT;
		} else if (!(rc = special_id(&g, "tokenizer.ggml.bos_token_id", n, &bos)) &&
			   !(rc = special_id(&g, "tokenizer.ggml.eos_token_id", n, &eos)) &&
			   !(rc = build_vocab(&g, n, bos, eos, blob, size)) && !*blob) {
			GERR(&g, "tokenizer model is neither SentencePiece \"llama\" nor byte-level BPE \"gpt2\"");
			rc = -ENOTSUP;
		}
	}
	gguf_free(&g);
	return rc;
}

/* Gemma 3's keys beyond the common ones, as llama.cpp reads them: the sliding window and its
 * layer pattern (a period, 6 when not stated, or a per-layer list that repeats one), the local
 * layers' RoPE base, the embedding scale sqrt(dim), and the 27B's query scale (1/sqrt(dim /
 * heads), where the others take 1/sqrt(head_dim)). A final logit soft-cap is refused. */
static int gemma3_config(struct gguf *g, struct rl_model_config *c)
{
	double v;
	int rc;
	rl_model_gemma3(c);
	if (c->n_layers == 62)
		c->attn_scale = 1.0f / sqrtf((float)(c->dim / c->n_heads));
	if ((rc = get_num(g, "gemma3.final_logit_softcapping", &v)) < 0)
		return rc;
	if (rc && v != 0) {
		GERR(g, "gemma3.final_logit_softcapping %g: a final logit soft-cap is not supported", v);
		return -ENOTSUP;
	}
	if ((rc = get_uint(g, "gemma3.attention.sliding_window", 0, 0, 1 << 24, 0, &c->sliding_window)))
		return rc;
	if (!c->sliding_window)
		return 0;
	const struct kv *k = find_kv(g, "gemma3.attention.sliding_window_pattern");
	if (k && k->type == GT_ARR) {           /* per layer: true for a local one */
		if (k->atype != GT_BOOL || k->n != c->n_layers) {
			GERR(g, "gemma3.attention.sliding_window_pattern is not one bool per layer");
			return -EINVAL;
		}
		const uint8_t *b = g->buf + k->val;
		uint32_t p = 0;
		while (p < c->n_layers && b[p])
			p++;
		c->swa_period = p < c->n_layers ? p + 1 : 0;
		for (uint32_t l = 0; l < c->n_layers; l++)
			if (!b[l] != (rl_layer_window(c, l) == 0)) {
				GERR(g, "gemma3.attention.sliding_window_pattern: local and global layers that do not repeat "
				     "with one period are not supported");
				return -ENOTSUP;
			}
	} else if ((rc = get_uint(g, "gemma3.attention.sliding_window_pattern", 0, 0, 4096, c->swa_period,
				   &c->swa_period))) {
		return rc;
	}
	if ((rc = get_num(g, "gemma3.rope.freq_base_swa", &v)) < 0)
		return rc;
	if (rc)
		c->rope_theta_local = (float)v;
	if (!(c->rope_theta_local > 0)) {
		GERR(g, "gemma3.rope.freq_base_swa %g is not a positive number", c->rope_theta_local);
		return -EINVAL;
	}
	return 0;
}

struct gguf_walk {
	struct gguf *g;
	struct rl_model_plan *p;
	uint32_t n_experts;
};

/* rl_wnames_walk's step: GGUF lists dimensions innermost first, [cols, rows] or [rows] */
static int gguf_plan_field(void *ctx, const char *name, int field, uint32_t layer, uint64_t rows, uint64_t cols,
			   const struct rl_wfused *fu)
{
	const struct gguf_walk *wk = ctx;
	const int exps = field == RL_W_GATE_EXPS || field == RL_W_UP_EXPS || field == RL_W_DOWN_EXPS;
	const uint64_t ne2 = exps ? wk->n_experts : 1;          /* stacked: [experts, rows, cols] */
	return plan_tensor(wk->g, name, cols ? cols : rows, (cols ? rows : 1) / ne2, ne2, field, layer, wk->p, fu);
}

int rl_model_plan_gguf(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
		       char *err, size_t errlen)
{
	struct gguf g;
	memset(p, 0, sizeof *p);
	int rc = gguf_parse(&g, path, err, errlen);
	if (rc)
		goto out;
	char arch[32] = "", key[96], typ[32] = "";
	if ((rc = get_str(&g, "general.architecture", arch, sizeof arch)) < 0)
		goto out;
	/* llama.cpp's converter permutes llama Q/K to adjacent pairs, not qwen2's or qwen3's */
	const int qwen2 = !strcmp(arch, "qwen2"), qwen3moe = !strcmp(arch, "qwen3moe"),
		  qwen3 = !strcmp(arch, "qwen3") || qwen3moe, phi3 = !strcmp(arch, "phi3"), gemma3 = !strcmp(arch, "gemma3");
	if (strcmp(arch, "llama") && strcmp(arch, "mistral") && !qwen2 && !qwen3 && !phi3 && !gemma3) {
		GERR(&g, "architecture \"%s\" not supported (llama, mistral, qwen2, qwen3, qwen3moe, phi3, gemma3 are)", arch);
		rc = -ENOTSUP;
		goto out;
	}
	/* mixture of experts: Mixtral is stored as llama with a router (ffn_gate_inp) and stacked
	 * experts; qwen3moe names each expert's width apart from the (unused) dense one */
	uint32_t n_exp = 0, n_used = 0, exp_ff = 0;
	snprintf(key, sizeof key, "%s.expert_count", arch);
	if ((rc = get_uint(&g, key, 0, 0, 1024, 0, &n_exp)))
		goto out;
	snprintf(key, sizeof key, "%s.expert_used_count", arch);
	if ((rc = get_uint(&g, key, 0, 0, 1024, 0, &n_used)))
		goto out;
	snprintf(key, sizeof key, "%s.expert_feed_forward_length", arch);
	if ((rc = get_uint(&g, key, 0, 0, 1 << 22, 0, &exp_ff)))
		goto out;
	if ((n_exp && (!n_used || n_used > n_exp || n_used > RL_MAX_EXPERTS_USED)) || (!n_exp && qwen3moe) ||
	    (!n_exp && find_tensor(&g, "blk.0.ffn_gate_inp.weight"))) {
		GERR(&g, "mixture of experts with %u experts, %u used per token: not supported (1..%u used of at least as many)",
		     n_exp, n_used, RL_MAX_EXPERTS_USED);
		rc = -ENOTSUP;
		goto out;
	}
	/* phi3's q/k/v and gate/up are fused, as llama.cpp's converter writes them */
	struct rl_model_config c = { .rope_halves = qwen2 || qwen3 || phi3, .has_qkv_bias = qwen2,
				     .has_qk_norm = qwen3, .fused_proj = phi3, .n_experts = n_exp,
				     .n_experts_used = n_used };
	uint32_t u;
#define U(field, name, req, lo, hi, dflt) do { snprintf(key, sizeof key, "%s." name, arch); \
	if ((rc = get_uint(&g, key, req, lo, hi, dflt, &u))) { goto out; } c.field = u; } while (0)
	U(dim, "embedding_length", 1, 1, 1 << 20, 0);
	U(hidden_dim, "feed_forward_length", !exp_ff, 1, 1 << 22, 0);
	if (exp_ff)
		c.hidden_dim = exp_ff;
	U(n_layers, "block_count", 1, 1, 4096, 0);
	U(n_heads, "attention.head_count", 1, 1, 4096, 0);
	U(n_kv_heads, "attention.head_count_kv", 0, 1, 4096, c.n_heads);
	U(max_ctx, "context_length", 0, 1, 1 << 24, 2048);
	U(head_dim, "attention.key_length", 0, 2, 4096, c.dim / c.n_heads);
	uint32_t vlen;
	snprintf(key, sizeof key, "%s.attention.value_length", arch);
	if ((rc = get_uint(&g, key, 0, 1, 4096, c.head_dim, &vlen)))
		goto out;
	if (vlen != c.head_dim) {
		GERR(&g, "value heads of %u and key heads of %u: different sizes not supported", vlen, c.head_dim);
		rc = -ENOTSUP;
		goto out;
	}
	uint32_t rope_dims;
	snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
	if ((rc = get_uint(&g, key, 0, 0, 4096, c.head_dim, &rope_dims)))
		goto out;
	if (!rope_dims || rope_dims % 2 || rope_dims > c.head_dim) {
		GERR(&g, "RoPE over %u of %u head dims: must be an even count, at most all of them", rope_dims, c.head_dim);
		rc = -EINVAL;
		goto out;
	}
	c.rope_dims = rope_dims < c.head_dim ? rope_dims : 0;   /* partial RoPE: Phi-4-mini's 96 of 128 */
	double v;
	c.rope_theta = 10000.0f;
	snprintf(key, sizeof key, "%s.rope.freq_base", arch);
	if ((rc = get_num(&g, key, &v)) < 0)
		goto out;
	if (rc)
		c.rope_theta = (float)v;
	c.norm_eps = 1e-5f;
	snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
	if ((rc = get_num(&g, key, &v)) < 0)
		goto out;
	if (rc)
		c.norm_eps = (float)v;
	c.rope_scale = 1.0f;
	snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
	if ((rc = get_str(&g, key, typ, sizeof typ)) < 0)
		goto out;
	if (rc && strcmp(typ, "linear") && strcmp(typ, "none")) {
		GERR(&g, "RoPE scaling \"%s\" not supported (linear is)", typ);
		rc = -ENOTSUP;
		goto out;
	}
	snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
	if ((rc = get_num(&g, key, &v)) < 0)
		goto out;
	if (rc && strcmp(typ, "none"))
		c.rope_scale = (float)v;
	if (gemma3 && (rc = gemma3_config(&g, &c)))
		goto out;
	rc = 0;
	if (!(c.rope_theta > 0) || !(c.norm_eps > 0) || !(c.rope_scale > 0) || c.n_heads % c.n_kv_heads) {
		GERR(&g, "bad hyperparameters (rope theta %g scale %g eps %g heads %u/%u)",
		     c.rope_theta, c.rope_scale, c.norm_eps, c.n_heads, c.n_kv_heads);
		rc = -EINVAL;
		goto out;
	}
	const struct tinfo *emb = find_tensor(&g, rl_wnames[RL_W_TOK_EMB].gguf);
	if (!emb || emb->ne[1] == 0 || emb->ne[1] > (1u << 22)) {
		GERR(&g, emb ? "token_embd.weight has %llu rows" : "missing tensor token_embd.weight",
		     emb ? (unsigned long long)emb->ne[1] : 0ull);
		rc = -EINVAL;
		goto out;
	}
	c.vocab_size = (uint32_t)emb->ne[1];
	c.tied_embeddings = !find_tensor(&g, rl_wnames[RL_W_WCLS].gguf);
	if (find_tensor(&g, "rope_freqs.weight") && (rc = read_rope_freqs(&g, "rope_freqs.weight", &c, c.rope_freqs)))
		goto out;
	if (phi3 && (find_tensor(&g, "rope_factors_long.weight") || find_tensor(&g, "rope_factors_short.weight")) &&
	    (rc = read_longrope(&g, &c)))
		goto out;
	if ((rc = special_id(&g, "tokenizer.ggml.bos_token_id", c.vocab_size, &c.bos_id)) ||
	    (rc = special_id(&g, "tokenizer.ggml.eos_token_id", c.vocab_size, &c.eos_id)))
		goto out;
	if ((rc = rl_model_weights_fit(&c, g.f.size, g.f.name, err, errlen)))
		goto out;
	if ((rc = rl_model_plan_init(p, &c, 4 + 16 * (size_t)c.n_layers, 1, g.f.name, err, errlen)))
		goto out;
	rl_model_plan_own_file(p, 0, &g.f);
	g.f = p->files[0];             /* still g's to read metadata through; the plan closes it */
	const struct kv *ct = find_kv(&g, "tokenizer.chat_template");
	if (ct && ct->type == GT_STR) {    /* its family, by its marker tokens */
		uint64_t len = rl_rd64(g.buf + ct->val);
		char *t = len < (1u << 24) ? malloc(len + 1) : NULL;
		if (t) {
			memcpy(t, g.buf + ct->val + 8, len);
			t[len] = 0;
			snprintf(p->chat_template, sizeof p->chat_template, "%s", rl_chat_name(rl_chat_detect(t)));
			rl_chat_default_system(t, p->chat_system, sizeof p->chat_system);
			free(t);
		}
	} else if (gemma3 && !ct) {        /* no template in the file (Gemma 3's base models): the
					    * turns every Gemma 3 is trained to */
		snprintf(p->chat_template, sizeof p->chat_template, "%s", rl_chat_name(RL_CHAT_GEMMA));
	}
	snprintf(p->arch, sizeof p->arch, "%s", arch);
	if (!get_str(&g, "general.name", p->name, sizeof p->name))
		snprintf(p->name, sizeof p->name, "%s", g.f.name);
	/* every field the shape has, named and shaped by the one table (rl_wnames_walk) */
	struct gguf_walk wk = { &g, p, c.n_experts };
	if ((rc = rl_wnames_walk(&c, 0, gguf_plan_field, &wk)))
		goto out;
	if ((rc = rl_model_plan_check(p, err, errlen)))
		goto out;
	if (tokenizer_path)
		rc = rl_model_read_tokenizer(tokenizer_path, c.vocab_size, &p->vocab_blob,
					     &p->vocab_blob_size, err, errlen);
	else
		rc = build_vocab(&g, c.vocab_size, c.bos_id, c.eos_id, &p->vocab_blob, &p->vocab_blob_size);
out:
	if (p->n_files)                /* the plan owns the file now: not gguf_free's to close */
		g.f = (struct rl_mfile){ .fd = -1 };
	gguf_free(&g);
	if (rc)
		rl_model_plan_close(p);
	return rc;
}

int rl_model_load_gguf(const char *path, const char *tokenizer_path, struct rl_model **out,
		       char *err, size_t errlen)
{
	return rl_model_load_planned(rl_model_plan_gguf, path, tokenizer_path, out, err, errlen);
}
