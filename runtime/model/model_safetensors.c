/* model_safetensors.c — Hugging Face Llama checkpoints: one model.safetensors, or shards
 * listed by model.safetensors.index.json, with config.json beside them. Each safetensors file
 * is an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets}}, then the data. HF rotates RoPE halves, so rope_halves = 1. The file has no
 * SentencePiece vocabulary: a tokenizer.bin can be given. Loading is planning (every check)
 * then reading the plan into fp32. The JSON (untrusted) is parsed by jansson, strictly:
 * duplicate keys and NUL characters in strings are refused. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tokenizer/rl_chat.h"
#include "runtime/model/model_internal.h"
#include <jansson.h>

#define MAX_HEADER (100u << 20)
#define MAX_SHARDS 256

struct st_tensor { const char *name; int shard, dtype; uint64_t shape[4], ndim, off, nbytes; };

struct st {
	struct rl_mfile f[MAX_SHARDS];
	json_t *hdr[MAX_SHARDS];       /* parsed headers: tensor names point into them */
	int nf;
	struct st_tensor *t;
	size_t nt;
	char *err;
	size_t errlen;
};

static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	struct rl_mfile f;
	int rc = rl_mfile_open(&f, path, err, errlen);
	if (rc)
		return rc;
	if (f.size > (16u << 20)) {
		rl_model_err(err, errlen, f.name, "%llu bytes is too large for a JSON file", (unsigned long long)f.size);
		rl_mfile_close(&f);
		return -EFBIG;
	}
	*out = malloc(f.size + 1);
	if (!*out)
		rc = -ENOMEM;
	else if (!(rc = rl_mfile_pread(&f, *out, f.size, 0, err, errlen)))
		(*out)[f.size] = 0;
	*len = f.size;
	if (rc == -ENOMEM)
		rl_model_err(err, errlen, f.name, "out of memory");
	rl_mfile_close(&f);
	return rc;
}

/* Parses len bytes of untrusted JSON that must be an object: NULL with "what: why at byte N"
 * in err otherwise. */
static json_t *parse_object(const char *buf, size_t len, const char *name, const char *what,
			    char *err, size_t errlen)
{
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		rl_model_err(err, errlen, name, "%s%s at byte %d", what, je.text, je.position);
	else if (!json_is_object(j)) {
		rl_model_err(err, errlen, name, "%snot a JSON object", what);
		json_decref(j);
		j = NULL;
	}
	return j;
}

static json_t *parse_json_file(const char *path, char *err, size_t errlen, int *rc)
{
	char *s;
	size_t n;
	if ((*rc = read_file(path, &s, &n, err, errlen)))
		return NULL;
	json_t *j = parse_object(s, n, rl_model_basename(path), "", err, errlen);
	free(s);
	if (!j)
		*rc = -EINVAL;
	return j;
}

/* A JSON integer in [0, 2^53] (shapes and offsets): 0, or -1. */
static int get_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1ll << 53))
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Opens one safetensors file and appends its tensors. */
static int add_shard(struct st *s, const char *path)
{
	if (s->nf == MAX_SHARDS) {
		rl_model_err(s->err, s->errlen, rl_model_basename(path), "more than %d shards", MAX_SHARDS);
		return -EINVAL;
	}
	struct rl_mfile *f = &s->f[s->nf];
	int rc = rl_mfile_open(f, path, s->err, s->errlen);
	if (rc)
		return rc;
	s->nf++;
	uint64_t hl;
	if ((rc = rl_mfile_pread(f, &hl, 8, 0, s->err, s->errlen)))
		return rc;
	if (hl < 2 || hl > MAX_HEADER || hl > f->size - 8) {
		rl_model_err(s->err, s->errlen, f->name, "header length %llu invalid (file %llu bytes)",
			     (unsigned long long)hl, (unsigned long long)f->size);
		return -EINVAL;
	}
	char *h = malloc(hl);
	if (!h) {
		rl_model_err(s->err, s->errlen, f->name, "out of memory");
		return -ENOMEM;
	}
	if ((rc = rl_mfile_pread(f, h, hl, 8, s->err, s->errlen))) {
		free(h);
		return rc;
	}
	json_t *j = parse_object(h, hl, f->name, "header: ", s->err, s->errlen);
	free(h);
	if (!j)
		return -EINVAL;
	s->hdr[s->nf - 1] = j;
	struct st_tensor *nt = realloc(s->t, (s->nt + json_object_size(j)) * sizeof *nt);
	if (!nt) {
		rl_model_err(s->err, s->errlen, f->name, "out of memory");
		return -ENOMEM;
	}
	s->t = nt;
	uint64_t data = 8 + hl, room = f->size - data;
	const char *key;
	json_t *e;
	json_object_foreach(j, key, e) {
		if (!strcmp(key, "__metadata__"))
			continue;
		json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
		       *of = json_object_get(e, "data_offsets");
		struct st_tensor *t = &s->t[s->nt];
		memset(t, 0, sizeof *t);
		t->name = key;
		t->shard = s->nf - 1;
		if (!json_is_string(dt) || !json_is_array(sh) || json_array_size(sh) > 4 ||
		    !json_is_array(of) || json_array_size(of) != 2) {
			rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad header entry", t->name);
			return -EINVAL;
		}
		const char *dts = json_string_value(dt);
		t->dtype = !strcmp(dts, "F32") ? RL_DT_F32 : !strcmp(dts, "F16") ? RL_DT_F16 :
			   !strcmp(dts, "BF16") ? RL_DT_BF16 : -1;
		uint64_t nel = 1, o[2];
		for (size_t d = 0; d < json_array_size(sh); d++) {
			if (get_u64(json_array_get(sh, d), &t->shape[d]) ||
			    __builtin_mul_overflow(nel, t->shape[d], &nel)) {
				rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad shape", t->name);
				return -EINVAL;
			}
		}
		t->ndim = json_array_size(sh);
		for (int k = 0; k < 2; k++) {
			if (get_u64(json_array_get(of, k), &o[k])) {
				rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad data_offsets", t->name);
				return -EINVAL;
			}
		}
		if (o[0] > o[1] || o[1] > room) {
			rl_model_err(s->err, s->errlen, f->name, "tensor %.64s extends past end of file (offset %llu, size %llu, file %llu)",
				     t->name, (unsigned long long)(data + o[0]), (unsigned long long)(o[1] - o[0]),
				     (unsigned long long)f->size);
			return -EINVAL;
		}
		t->off = data + o[0];
		t->nbytes = o[1] - o[0];
		uint64_t want;
		/* dtypes we cannot convert only matter if the tensor is used: checked there */
		if (t->dtype >= 0 && (rl_dt_size(t->dtype, nel, &want) || want != t->nbytes)) {
			rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: %llu bytes for %llu %s elements",
				     t->name, (unsigned long long)t->nbytes, (unsigned long long)nel, dts);
			return -EINVAL;
		}
		s->nt++;
	}
	return 0;
}

static const struct st_tensor *find(const struct st *s, const char *name)
{
	for (size_t i = 0; i < s->nt; i++)
		if (!strcmp(s->t[i].name, name))
			return &s->t[i];
	return NULL;
}

/* Appends the read of tensor `name`, shaped [rows, cols] (cols 0: a vector of rows), as
 * weight (field, layer). The plan's files are the shards, in the same order. */
/* Plans tensor `name` [rows, cols] ([rows] when cols is 0) as weights [part, part + rows *
 * cols) of (field, layer), or with fu as its rows [row0, row0 + rows) of a fused matrix */
static int plan(struct st *s, const char *name, uint64_t rows, uint64_t cols, int field,
		uint32_t layer, struct rl_model_plan *p, const struct rl_wfused *fu, uint64_t part)
{
	const uint64_t total = fu ? fu->total : rows, row0 = fu ? fu->row0 : 0;
	const struct st_tensor *x = find(s, name);
	const char *fn = s->f[0].name;
	if (!x) {
		rl_model_err(s->err, s->errlen, fn, "missing tensor %s", name);
		return -EINVAL;
	}
	fn = s->f[x->shard].name;
	if (x->ndim != (cols ? 2u : 1u) || x->shape[0] != total || (cols && x->shape[1] != cols)) {
		rl_model_err(s->err, s->errlen, fn, "tensor %s has shape [%llu, %llu] (%llu dims), expected [%llu, %llu]",
			     name, (unsigned long long)x->shape[0], (unsigned long long)x->shape[1],
			     (unsigned long long)x->ndim, (unsigned long long)total, (unsigned long long)cols);
		return -EINVAL;
	}
	if (x->dtype < 0) {
		rl_model_err(s->err, s->errlen, fn, "tensor %s has an unsupported dtype (F32, F16, BF16 are)", name);
		return -ENOTSUP;
	}
	/* a fused matrix's rows [row0, row0 + rows): whole rows of its bytes */
	const uint64_t per_row = x->nbytes / total;
	return rl_model_plan_add_part(p, x->shard, x->off + row0 * per_row, fu ? rows * per_row : x->nbytes,
				      rows * (cols ? cols : 1), x->dtype, field, layer, part, s->err, s->errlen);
}

/* An integer config field in [lo, hi] (absent: dflt; required: error). Llama 3 lists several
 * eos_token_id values: the first one is used. */
static int cfg_u32(const json_t *c, const char *key, int required, double lo, double hi,
		   uint32_t dflt, uint32_t *out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(c, key);
	if (json_is_array(v) && json_array_size(v))
		v = json_array_get(v, 0);
	if (!v || json_is_null(v)) {
		if (required) {
			rl_model_err(err, errlen, "config.json", "missing %s", key);
			return -EINVAL;
		}
		*out = dflt;
		return 0;
	}
	double x = json_number_value(v);
	if (!json_is_number(v) || x != floor(x) || x < lo || x > hi) {
		rl_model_err(err, errlen, "config.json", "%s is not an integer in [%g, %g]", key, lo, hi);
		return -EINVAL;
	}
	*out = (uint32_t)x;
	return 0;
}

static int cfg_f32(const json_t *c, const char *key, float dflt, float *out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(c, key);
	if (!v || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	double x = json_number_value(v);
	if (!json_is_number(v) || !(x > 0) || x > 1e12) {
		rl_model_err(err, errlen, "config.json", "%s is not a positive number", key);
		return -EINVAL;
	}
	*out = (float)x;
	return 0;
}

/* Gemma 3's config.json fields beyond the common ones (model_type gemma3_text): the GELU it
 * states, no soft-caps, the query scale 1/sqrt(query_pre_attn_scalar), the sliding window and
 * which layers are global (sliding_window_pattern: every Nth; or layer_types, which must repeat
 * one period), the local RoPE base. */
static int gemma3_config(const json_t *j, struct rl_model_config *c, char *err, size_t errlen)
{
	int rc;
	rl_model_gemma3(c);
	const char *act = json_string_value(json_object_get(j, "hidden_activation"));
	if (!act)
		act = json_string_value(json_object_get(j, "hidden_act"));
	if (act && strcmp(act, "gelu_pytorch_tanh")) {
		rl_model_err(err, errlen, "config.json", "hidden_activation \"%.32s\" not supported (gelu_pytorch_tanh is)", act);
		return -ENOTSUP;
	}
	static const char *const caps[] = { "final_logit_softcapping", "attn_logit_softcapping" };
	for (int i = 0; i < 2; i++) {
		const json_t *v = json_object_get(j, caps[i]);
		if (v && !json_is_null(v)) {
			rl_model_err(err, errlen, "config.json", "%s: soft-capping is not supported", caps[i]);
			return -ENOTSUP;
		}
	}
	float qpas;
	if ((rc = cfg_f32(j, "query_pre_attn_scalar", (float)c->head_dim, &qpas, err, errlen)) ||
	    (rc = cfg_u32(j, "sliding_window", 0, 1, 1 << 24, 4096, &c->sliding_window, err, errlen)) ||
	    (rc = cfg_u32(j, "sliding_window_pattern", 0, 1, 4096, c->swa_period, &c->swa_period, err, errlen)) ||
	    (rc = cfg_f32(j, "rope_local_base_freq", c->rope_theta_local, &c->rope_theta_local, err, errlen)))
		return rc;
	if (qpas != (float)c->head_dim)
		c->attn_scale = 1.0f / sqrtf(qpas);
	const json_t *lt = json_object_get(j, "layer_types");
	if (json_is_array(lt)) {               /* newer configs: one entry per layer */
		if (json_array_size(lt) != c->n_layers) {
			rl_model_err(err, errlen, "config.json", "layer_types has %zu entries for %u layers",
				     json_array_size(lt), c->n_layers);
			return -EINVAL;
		}
		uint32_t p = 0;
		while (p < c->n_layers && !strcmp(json_string_value(json_array_get(lt, p)) ?: "", "sliding_attention"))
			p++;
		c->swa_period = p < c->n_layers ? p + 1 : 0;
		for (uint32_t l = 0; l < c->n_layers; l++) {
			const char *t = json_string_value(json_array_get(lt, l)) ?: "";
			if (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")) {
				rl_model_err(err, errlen, "config.json", "layer_types entry \"%.32s\" not supported "
					     "(sliding_attention and full_attention are)", t);
				return -ENOTSUP;
			}
			if (!strcmp(t, "full_attention") != (rl_layer_window(c, l) == 0)) {
				rl_model_err(err, errlen, "config.json", "layer_types: local and global layers that do not "
					     "repeat with one period are not supported");
				return -ENOTSUP;
			}
		}
	}
	return 0;
}

/* A mixture of experts' config.json fields (model_type mixtral or qwen3_moe): experts and
 * experts per token, each expert's width (Qwen3-MoE's moe_intermediate_size; Mixtral's is
 * intermediate_size), and what would make the model other than every layer's experts with
 * renormalised top-k routing, refused by name. */
static int moe_config(const json_t *j, struct rl_model_config *c, int qwen, char *err, size_t errlen)
{
	int rc;
	uint32_t step;
	if ((rc = cfg_u32(j, qwen ? "num_experts" : "num_local_experts", 1, 1, 1024, 0, &c->n_experts, err, errlen)) ||
	    (rc = cfg_u32(j, "num_experts_per_tok", 1, 1, RL_MAX_EXPERTS_USED, 0, &c->n_experts_used, err, errlen)) ||
	    (qwen && (rc = cfg_u32(j, "moe_intermediate_size", 1, 1, 1 << 22, 0, &c->hidden_dim, err, errlen))) ||
	    (rc = cfg_u32(j, "decoder_sparse_step", 0, 1, 4096, 1, &step, err, errlen)))
		return rc;
	if (c->n_experts_used > c->n_experts) {
		rl_model_err(err, errlen, "config.json", "num_experts_per_tok %u is more than the %u experts",
			     c->n_experts_used, c->n_experts);
		return -EINVAL;
	}
	const json_t *mlp_only = json_object_get(j, "mlp_only_layers");
	const json_t *norm = json_object_get(j, "norm_topk_prob");
	const char *why = step != 1 ? "decoder_sparse_step other than 1 (dense layers between expert layers)"
			: json_array_size(mlp_only) ? "mlp_only_layers (dense layers among expert layers)"
			: qwen && norm && !json_is_true(norm) ? "norm_topk_prob false (routing weights not renormalised)"
			: json_integer_value(json_object_get(j, "shared_expert_intermediate_size")) > 0 ? "a shared expert"
			: NULL;
	if (why) {
		rl_model_err(err, errlen, "config.json", "mixture of experts with %s: not supported", why);
		return -ENOTSUP;
	}
	return 0;
}

/* LongRoPE (Phi-3 128k: rope_scaling longrope or su): the short and long factor lists, the
 * original context they part at, and the attention factor as Phi-3 derives it */
static int longrope_config(const json_t *j, const json_t *rs, struct rl_model_config *c, char *err, size_t errlen)
{
	int rc;
	const uint32_t n = rl_rope_dims(c) / 2;
	if ((rc = cfg_u32(j, "original_max_position_embeddings", 1, 1, 1 << 24, 0, &c->rope_orig_ctx, err, errlen)))
		return rc;
	static const char *const keys[] = { "short_factor", "long_factor" };
	for (int k = 0; k < 2; k++) {
		const json_t *a = json_object_get(rs, keys[k]);
		if (!json_is_array(a) || json_array_size(a) != n || n > RL_ROPE_MAX_FREQS) {
			rl_model_err(err, errlen, "config.json", "rope_scaling %s is not a list of %u factors (rotated dims / 2, at most %u)",
				     keys[k], n, RL_ROPE_MAX_FREQS);
			return -EINVAL;
		}
		float *dst = k ? c->rope_freqs_long : c->rope_freqs;
		for (uint32_t i = 0; i < n; i++) {
			const double v = json_number_value(json_array_get(a, i));
			if (!(v > 0) || !isfinite(v)) {
				rl_model_err(err, errlen, "config.json", "rope_scaling %s[%u] is not a positive number", keys[k], i);
				return -EINVAL;
			}
			dst[i] = (float)v;
		}
	}
	c->n_rope_freqs = n;
	c->rope_attn_factor = (float)rl_longrope_attn_factor(c->max_ctx, c->rope_orig_ctx);
	return 0;
}

static int parse_config(const json_t *j, struct rl_model_config *c, char *err, size_t errlen)
{
	int rc;
	memset(c, 0, sizeof *c);
	/* the families this loader reads; any other model_type is refused by name rather than
	 * read as a Llama with the wrong arithmetic */
	const char *mt = json_string_value(json_object_get(j, "model_type"));
	if (mt && !strcmp(mt, "gemma3")) {
		rl_model_err(err, errlen, "config.json", "model_type \"gemma3\" is Gemma 3 with its vision tower "
			     "(Gemma3ForConditionalGeneration), not supported; its GGUF, or a text-only checkpoint "
			     "(model_type gemma3_text), is");
		return -ENOTSUP;
	}
	if (mt && strcmp(mt, "llama") && strcmp(mt, "mistral") && strcmp(mt, "qwen2") && strcmp(mt, "qwen3") &&
	    strcmp(mt, "phi3") && strcmp(mt, "gemma3_text") && strcmp(mt, "mixtral") && strcmp(mt, "qwen3_moe")) {
		rl_model_err(err, errlen, "config.json", "model_type \"%s\" not supported (llama, mistral, qwen2, qwen3, "
			     "phi3, gemma3_text, mixtral, qwen3_moe are)", mt);
		return -ENOTSUP;
	}
	const int gemma3 = mt && !strcmp(mt, "gemma3_text");
	if ((rc = cfg_u32(j, "hidden_size", 1, 1, 1 << 20, 0, &c->dim, err, errlen)) ||
	    (rc = cfg_u32(j, "intermediate_size", 1, 1, 1 << 22, 0, &c->hidden_dim, err, errlen)) ||
	    (rc = cfg_u32(j, "num_hidden_layers", 1, 1, 4096, 0, &c->n_layers, err, errlen)) ||
	    (rc = cfg_u32(j, "num_attention_heads", 1, 1, 4096, 0, &c->n_heads, err, errlen)) ||
	    (rc = cfg_u32(j, "num_key_value_heads", 0, 1, 4096, c->n_heads, &c->n_kv_heads, err, errlen)) ||
	    (rc = cfg_u32(j, "head_dim", 0, 2, 4096, c->dim / c->n_heads, &c->head_dim, err, errlen)) ||
	    (rc = cfg_u32(j, "vocab_size", 1, 1, 1 << 22, 0, &c->vocab_size, err, errlen)) ||
	    (rc = cfg_u32(j, "max_position_embeddings", 0, 1, 1 << 24, 2048, &c->max_ctx, err, errlen)) ||
	    (rc = cfg_u32(j, "bos_token_id", 0, 0, UINT32_MAX, UINT32_MAX, &c->bos_id, err, errlen)) ||
	    (rc = cfg_u32(j, "eos_token_id", 0, 0, UINT32_MAX, UINT32_MAX, &c->eos_id, err, errlen)) ||
	    (rc = cfg_f32(j, "rms_norm_eps", 1e-6f, &c->norm_eps, err, errlen)) ||
	    (rc = cfg_f32(j, "rope_theta", 10000.0f, &c->rope_theta, err, errlen)))
		return rc;
	if (c->bos_id >= c->vocab_size)
		c->bos_id = UINT32_MAX;
	if (c->eos_id >= c->vocab_size)
		c->eos_id = UINT32_MAX;
	c->tied_embeddings = json_is_true(json_object_get(j, "tie_word_embeddings"));
	c->fused_proj = mt && !strcmp(mt, "phi3");
	const json_t *ne = json_object_get(j, "num_local_experts");
	if (!ne)
		ne = json_object_get(j, "num_experts");
	const int mixtral = mt && !strcmp(mt, "mixtral"), qwen3moe = mt && !strcmp(mt, "qwen3_moe");
	if (json_integer_value(ne) > 0 && !mixtral && !qwen3moe) {
		rl_model_err(err, errlen, "config.json", "mixture of experts (%lld experts) with model_type %s: not supported "
			     "(mixtral and qwen3_moe are)", (long long)json_integer_value(ne), mt ? mt : "(none)");
		return -ENOTSUP;
	}
	if ((mixtral || qwen3moe) && (rc = moe_config(j, c, qwen3moe, err, errlen)))
		return rc;
	c->has_qkv_bias = (mt && !strcmp(mt, "qwen2")) || json_is_true(json_object_get(j, "attention_bias"));
	c->has_qk_norm = mt && (!strcmp(mt, "qwen3") || qwen3moe);
	c->rope_halves = 1;
	const json_t *prf = json_object_get(j, "partial_rotary_factor");   /* Phi-4-mini: 0.75 */
	if (prf && !json_is_null(prf)) {
		const double f = json_number_value(prf), d = f * c->head_dim;
		if (!json_is_number(prf) || !(f > 0 && f <= 1) || d != floor(d) || (uint32_t)d % 2) {
			rl_model_err(err, errlen, "config.json", "partial_rotary_factor %g: not an even share of %u head dims",
				     f, c->head_dim);
			return -EINVAL;
		}
		c->rope_dims = (uint32_t)d < c->head_dim ? (uint32_t)d : 0;
	}
	if (gemma3 && (rc = gemma3_config(j, c, err, errlen)))
		return rc;
	c->rope_scale = 1.0f;
	const json_t *rs = json_object_get(j, "rope_scaling");
	if (rs && !json_is_null(rs)) {
		const json_t *ty = json_object_get(rs, "rope_type");
		if (!ty)
			ty = json_object_get(rs, "type");
		const char *tys = json_string_value(ty);
		if (tys && !strcmp(tys, "llama3")) {
			float f, lo, hi, orig;
			if ((rc = cfg_f32(rs, "factor", 8.0f, &f, err, errlen)) ||
			    (rc = cfg_f32(rs, "low_freq_factor", 1.0f, &lo, err, errlen)) ||
			    (rc = cfg_f32(rs, "high_freq_factor", 4.0f, &hi, err, errlen)) ||
			    (rc = cfg_f32(rs, "original_max_position_embeddings", 8192.0f, &orig, err, errlen)))
				return rc;
			if ((rc = rl_rope_llama3_freqs(c, f, lo, hi, orig))) {
				rl_model_err(err, errlen, "config.json", "rope_scaling llama3 (factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %g, head_dim %u): %s",
					     f, lo, hi, orig, c->head_dim, rc == -ENOTSUP ? "head_dim too large" : "needs factor >= 1, 0 < low < high");
				return rc;
			}
		} else if (tys && (!strcmp(tys, "longrope") || !strcmp(tys, "su"))) {
			if ((rc = longrope_config(j, rs, c, err, errlen)))
				return rc;
		} else if (!tys || strcmp(tys, "linear")) {
			rl_model_err(err, errlen, "config.json", "rope_scaling type \"%.32s\" not supported (linear, llama3 and "
				     "longrope are)", tys ? tys : "?");
			return -ENOTSUP;
		} else if ((rc = cfg_f32(rs, "factor", 1.0f, &c->rope_scale, err, errlen))) {
			return rc;
		}
	}
	return 0;
}

struct st_walk {
	struct st *s;
	struct rl_model_plan *p;
};

/* rl_wnames_walk's step; a stacked expert field is read expert by expert, each its own
 * tensor (rl_wname_expert) */
static int st_plan_field(void *ctx, const char *name, int field, uint32_t layer, uint64_t rows, uint64_t cols,
			 const struct rl_wfused *fu)
{
	const struct st_walk *wk = ctx;
	const struct rl_model_config *c = &wk->p->cfg;
	if (field != RL_W_GATE_EXPS && field != RL_W_UP_EXPS && field != RL_W_DOWN_EXPS)
		return plan(wk->s, name, rows, cols, field, layer, wk->p, fu, 0);
	const uint64_t per = rows / c->n_experts;       /* one expert's rows */
	for (uint32_t e = 0; e < c->n_experts; e++) {
		char en[128];
		int rc = rl_wname_expert(c, field, layer, e, en, sizeof en);
		if (rc || (rc = plan(wk->s, en, per, cols, field, layer, wk->p, NULL, e * per * cols)))
			return rc;
	}
	return 0;
}

int rl_model_plan_safetensors(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			      char *err, size_t errlen)
{
	struct st s = { .err = err, .errlen = errlen };
	json_t *cfg = NULL, *index = NULL;
	int rc;
	memset(p, 0, sizeof *p);
	char dir[4096], fp[4200];
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		snprintf(dir, sizeof dir, "%s", path);
		snprintf(fp, sizeof fp, "%s/model.safetensors", dir);
		if (access(fp, F_OK) == 0) {
			rc = add_shard(&s, fp);
		} else {
			snprintf(fp, sizeof fp, "%s/model.safetensors.index.json", dir);
			if (access(fp, F_OK) != 0) {
				rl_model_err(err, errlen, path, "not a model folder: it holds neither model.safetensors nor "
					     "model.safetensors.index.json (a Hugging Face checkpoint folder has one of them; "
					     "for another format give the file itself)");
				rc = -ENOENT;
				goto out;
			}
			if (!(index = parse_json_file(fp, err, errlen, &rc)))
				goto out;
			json_t *wm = json_object_get(index, "weight_map");
			if (!json_is_object(wm) || !json_object_size(wm)) {
				rl_model_err(err, errlen, "model.safetensors.index.json", "no weight_map");
				rc = -EINVAL;
				goto out;
			}
			rc = 0;
			const char *tname;
			json_t *fn;
			json_object_foreach(wm, tname, fn) {
				const char *shard = json_string_value(fn);
				if (!shard || strchr(shard, '/')) {
					rl_model_err(err, errlen, "model.safetensors.index.json", "bad shard name for %.64s", tname);
					rc = -EINVAL;
					break;
				}
				int seen = 0;   /* each shard once, however many tensors it holds */
				for (int k = 0; k < s.nf && !seen; k++)
					seen = !strcmp(s.f[k].name, shard);
				if (!seen) {
					snprintf(fp, sizeof fp, "%s/%s", dir, shard);
					if ((rc = add_shard(&s, fp)))
						break;
				}
			}
		}
	} else {
		snprintf(dir, sizeof dir, "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = 0;
		else
			snprintf(dir, sizeof dir, ".");
		rc = add_shard(&s, path);
	}
	if (rc)
		goto out;
	snprintf(fp, sizeof fp, "%s/config.json", dir);
	if (!(cfg = parse_json_file(fp, err, errlen, &rc)))
		goto out;
	struct rl_model_config c;
	if ((rc = parse_config(cfg, &c, err, errlen)))
		goto out;
	if (c.n_heads % c.n_kv_heads) {
		rl_model_err(err, errlen, "config.json", "%u heads not a multiple of %u kv heads", c.n_heads, c.n_kv_heads);
		rc = -EINVAL;
		goto out;
	}
	if (!find(&s, rl_wnames[RL_W_WCLS].hf))
		c.tied_embeddings = 1;   /* no separate classifier stored: it is the embedding */
	else
		c.tied_embeddings = 0;
	uint64_t shard_bytes = 0;
	for (int f = 0; f < s.nf; f++)
		shard_bytes += s.f[f].size;
	if ((rc = rl_model_weights_fit(&c, shard_bytes, s.f[0].name, err, errlen)))
		goto out;
	if ((rc = rl_model_plan_init(p, &c, 3 + (16 + 3 * (size_t)c.n_experts) * c.n_layers, s.nf, "config.json", err, errlen)))
		goto out;
	p->norm_plus_one = c.post_norms;   /* Gemma: HF's norms scale by 1 + w */
	for (int f = 0; f < s.nf; f++)
		rl_model_plan_own_file(p, f, &s.f[f]);
	/* s.f[] are the plan's now; error messages name the shards through the plan */
	for (int f = 0; f < s.nf; f++)
		s.f[f] = p->files[f];
	snprintf(p->name, sizeof p->name, "%s", rl_model_basename(dir));
	/* every field the config has, named and shaped by the one table (rl_wnames_walk);
	 * safetensors shapes are [rows, cols], or [rows] for a vector (cols 0 here) */
	struct st_walk wk = { &s, p };
	if ((rc = rl_wnames_walk(&c, 1, st_plan_field, &wk)))
		goto out;
	if ((rc = rl_model_plan_check(p, err, errlen)))
		goto out;
	/* the chat template's family, from tokenizer_config.json (a string, or a list of named
	 * templates of which "default" is the one) */
	snprintf(fp, sizeof fp, "%s/tokenizer_config.json", dir);
	json_t *tc = access(fp, R_OK) == 0 ? json_load_file(fp, 0, NULL) : NULL;
	if (tc) {
		const json_t *ct = json_object_get(tc, "chat_template");
		const char *t = json_string_value(ct);
		size_t i;
		json_t *v;
		json_array_foreach(ct, i, v)
			if (!t || !strcmp(json_string_value(json_object_get(v, "name")) ?: "", "default"))
				t = json_string_value(json_object_get(v, "template"));
		snprintf(p->chat_template, sizeof p->chat_template, "%s", rl_chat_name(rl_chat_detect(t)));
		rl_chat_default_system(t, p->chat_system, sizeof p->chat_system);
		json_decref(tc);
	}
	if (tokenizer_path) {
		rc = rl_model_read_tokenizer(tokenizer_path, c.vocab_size, &p->vocab_blob,
					     &p->vocab_blob_size, err, errlen);
	} else {
		/* the folder's own tokenizer.json, when it is byte-level BPE; anything else
		 * (SentencePiece's tokenizer.model) leaves the model without a vocabulary */
		snprintf(fp, sizeof fp, "%s/tokenizer.json", dir);
		if (access(fp, R_OK) == 0) {
			char terr[256];
			int trc = rl_hf_tokenizer_blob(fp, c.vocab_size, c.bos_id, c.eos_id, &p->vocab_blob,
						       &p->vocab_blob_size, terr, sizeof terr);
			if (trc && trc != -ENOTSUP) {
				snprintf(err, errlen, "%s", terr);
				rc = trc;
			}
		}
	}
out:
	for (int f = 0; f < s.nf; f++) {
		if (p->n_files)        /* moved into the plan: closed with it */
			s.f[f] = (struct rl_mfile){ .fd = -1 };
		rl_mfile_close(&s.f[f]);
		json_decref(s.hdr[f]);
	}
	free(s.t);
	json_decref(cfg);
	json_decref(index);
	if (rc)
		rl_model_plan_close(p);
	return rc;
}

int rl_model_load_safetensors(const char *path, const char *tokenizer_path, struct rl_model **out,
			      char *err, size_t errlen)
{
	return rl_model_load_planned(rl_model_plan_safetensors, path, tokenizer_path, out, err, errlen);
}
