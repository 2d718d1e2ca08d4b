/* model_safetensors.c — Hugging Face Llama checkpoints: one model.safetensors, or shards
 * listed by model.safetensors.index.json, with config.json beside them. Each safetensors file
 * is an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets}}, then the data. HF rotates RoPE halves, so rope_halves = 1. The file has no
 * SentencePiece vocabulary: a tokenizer.bin can be given. Loading is planning (every check)
 * then reading the plan into fp32. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/model/model_internal.h"
#include "runtime/model/rl_json.h"

#define MAX_HEADER (100u << 20)
#define MAX_SHARDS 256

struct st_tensor { const char *name; int shard, dtype; uint64_t shape[4], ndim, off, nbytes; };

struct st {
	struct rl_mfile f[MAX_SHARDS];
	struct rl_json *hdr[MAX_SHARDS];
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

static struct rl_json *parse_json_file(const char *path, char *err, size_t errlen, int *rc)
{
	char *s;
	size_t n;
	if ((*rc = read_file(path, &s, &n, err, errlen)))
		return NULL;
	char why[256];
	struct rl_json *j = rl_json_parse(s, n, why, sizeof why);
	free(s);
	if (!j) {
		rl_model_err(err, errlen, rl_model_basename(path), "%s", why);
		*rc = -EINVAL;
	} else if (j->type != RL_JSON_OBJ) {
		rl_model_err(err, errlen, rl_model_basename(path), "not a JSON object");
		rl_json_free(j);
		*rc = -EINVAL;
		j = NULL;
	}
	return j;
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
	char why[256];
	struct rl_json *j = rl_json_parse(h, hl, why, sizeof why);
	free(h);
	if (!j || j->type != RL_JSON_OBJ) {
		rl_model_err(s->err, s->errlen, f->name, "header: %s", j ? "not a JSON object" : why);
		rl_json_free(j);
		return -EINVAL;
	}
	s->hdr[s->nf - 1] = j;
	struct st_tensor *nt = realloc(s->t, (s->nt + j->n) * sizeof *nt);
	if (!nt) {
		rl_model_err(s->err, s->errlen, f->name, "out of memory");
		return -ENOMEM;
	}
	s->t = nt;
	uint64_t data = 8 + hl, room = f->size - data;
	for (size_t i = 0; i < j->n; i++) {
		if (!strcmp(j->k[i], "__metadata__"))
			continue;
		const struct rl_json *e = &j->v[i], *dt = rl_json_get(e, "dtype"),
				     *sh = rl_json_get(e, "shape"), *of = rl_json_get(e, "data_offsets");
		struct st_tensor *t = &s->t[s->nt];
		memset(t, 0, sizeof *t);
		t->name = j->k[i];
		t->shard = s->nf - 1;
		if (!dt || dt->type != RL_JSON_STR || !sh || sh->type != RL_JSON_ARR || sh->n > 4 ||
		    !of || of->type != RL_JSON_ARR || of->n != 2) {
			rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad header entry", t->name);
			return -EINVAL;
		}
		t->dtype = !strcmp(dt->str, "F32") ? RL_DT_F32 : !strcmp(dt->str, "F16") ? RL_DT_F16 :
			   !strcmp(dt->str, "BF16") ? RL_DT_BF16 : -1;
		uint64_t nel = 1, o[2];
		for (size_t d = 0; d < sh->n; d++) {
			double v = sh->v[d].num;
			if (sh->v[d].type != RL_JSON_NUM || v < 0 || v > 9e15 || v != floor(v) ||
			    __builtin_mul_overflow(nel, (uint64_t)v, &nel)) {
				rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad shape", t->name);
				return -EINVAL;
			}
			t->shape[d] = (uint64_t)v;
		}
		t->ndim = sh->n;
		for (int k = 0; k < 2; k++) {
			double v = of->v[k].num;
			if (of->v[k].type != RL_JSON_NUM || v < 0 || v > 9e15 || v != floor(v)) {
				rl_model_err(s->err, s->errlen, f->name, "tensor %.64s: bad data_offsets", t->name);
				return -EINVAL;
			}
			o[k] = (uint64_t)v;
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
				     t->name, (unsigned long long)t->nbytes, (unsigned long long)nel, dt->str);
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
static int plan(struct st *s, const char *name, uint64_t rows, uint64_t cols, int field,
		uint32_t layer, struct rl_model_plan *p)
{
	const struct st_tensor *x = find(s, name);
	const char *fn = s->f[0].name;
	if (!x) {
		rl_model_err(s->err, s->errlen, fn, "missing tensor %s", name);
		return -EINVAL;
	}
	fn = s->f[x->shard].name;
	if (x->ndim != (cols ? 2u : 1u) || x->shape[0] != rows || (cols && x->shape[1] != cols)) {
		rl_model_err(s->err, s->errlen, fn, "tensor %s has shape [%llu, %llu] (%llu dims), expected [%llu, %llu]",
			     name, (unsigned long long)x->shape[0], (unsigned long long)x->shape[1],
			     (unsigned long long)x->ndim, (unsigned long long)rows, (unsigned long long)cols);
		return -EINVAL;
	}
	if (x->dtype < 0) {
		rl_model_err(s->err, s->errlen, fn, "tensor %s has an unsupported dtype (F32, F16, BF16 are)", name);
		return -ENOTSUP;
	}
	return rl_model_plan_add(p, x->shard, x->off, x->nbytes, rows * (cols ? cols : 1), x->dtype,
				 field, layer, s->err, s->errlen);
}

/* An integer config field in [lo, hi] (absent: dflt; required: error). Llama 3 lists several
 * eos_token_id values: the first one is used. */
static int cfg_u32(const struct rl_json *c, const char *key, int required, double lo, double hi,
		   uint32_t dflt, uint32_t *out, char *err, size_t errlen)
{
	const struct rl_json *v = rl_json_get(c, key);
	if (v && v->type == RL_JSON_ARR && v->n)
		v = &v->v[0];
	if (!v || v->type == RL_JSON_NULL) {
		if (required) {
			rl_model_err(err, errlen, "config.json", "missing %s", key);
			return -EINVAL;
		}
		*out = dflt;
		return 0;
	}
	if (v->type != RL_JSON_NUM || v->num != floor(v->num) || v->num < lo || v->num > hi) {
		rl_model_err(err, errlen, "config.json", "%s is not an integer in [%g, %g]", key, lo, hi);
		return -EINVAL;
	}
	*out = (uint32_t)v->num;
	return 0;
}

static int cfg_f32(const struct rl_json *c, const char *key, float dflt, float *out, char *err, size_t errlen)
{
	const struct rl_json *v = rl_json_get(c, key);
	if (!v || v->type == RL_JSON_NULL) {
		*out = dflt;
		return 0;
	}
	if (v->type != RL_JSON_NUM || !(v->num > 0) || v->num > 1e12) {
		rl_model_err(err, errlen, "config.json", "%s is not a positive number", key);
		return -EINVAL;
	}
	*out = (float)v->num;
	return 0;
}

static int parse_config(const struct rl_json *j, struct rl_model_config *c, char *err, size_t errlen)
{
	int rc;
	memset(c, 0, sizeof *c);
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
	const struct rl_json *v = rl_json_get(j, "tie_word_embeddings");
	c->tied_embeddings = v && v->type == RL_JSON_BOOL && v->num;
	v = rl_json_get(j, "model_type");
	const struct rl_json *ab = rl_json_get(j, "attention_bias");
	c->has_qkv_bias = (v && v->type == RL_JSON_STR && !strcmp(v->str, "qwen2")) ||
			  (ab && ab->type == RL_JSON_BOOL && ab->num);
	c->rope_halves = 1;
	c->rope_scale = 1.0f;
	const struct rl_json *rs = rl_json_get(j, "rope_scaling");
	if (rs && rs->type != RL_JSON_NULL) {
		const struct rl_json *ty = rl_json_get(rs, "rope_type");
		if (!ty)
			ty = rl_json_get(rs, "type");
		if (!ty || ty->type != RL_JSON_STR || strcmp(ty->str, "linear")) {
			rl_model_err(err, errlen, "config.json", "rope_scaling type \"%.32s\" not supported (linear is)",
				     ty && ty->type == RL_JSON_STR ? ty->str : "?");
			return -ENOTSUP;
		}
		if ((rc = cfg_f32(rs, "factor", 1.0f, &c->rope_scale, err, errlen)))
			return rc;
	}
	return 0;
}

int rl_model_plan_safetensors(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
			      char *err, size_t errlen)
{
	struct st s = { .err = err, .errlen = errlen };
	struct rl_json *cfg = NULL, *index = NULL;
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
			if (!(index = parse_json_file(fp, err, errlen, &rc)))
				goto out;
			const struct rl_json *wm = rl_json_get(index, "weight_map");
			if (!wm || wm->type != RL_JSON_OBJ || !wm->n) {
				rl_model_err(err, errlen, "model.safetensors.index.json", "no weight_map");
				rc = -EINVAL;
				goto out;
			}
			rc = 0;
			for (size_t i = 0; i < wm->n && !rc; i++) {
				const struct rl_json *fn = &wm->v[i];
				if (fn->type != RL_JSON_STR || strchr(fn->str, '/') || strlen(fn->str) != fn->slen) {
					rl_model_err(err, errlen, "model.safetensors.index.json", "bad shard name for %.64s", wm->k[i]);
					rc = -EINVAL;
					break;
				}
				int seen = 0;   /* each shard once, however many tensors it holds */
				for (size_t k = 0; k < i && !seen; k++)
					seen = !strcmp(wm->v[k].str, fn->str);
				if (!seen) {
					snprintf(fp, sizeof fp, "%s/%s", dir, fn->str);
					rc = add_shard(&s, fp);
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
	if ((rc = rl_model_plan_init(p, &c, 3 + 12 * (size_t)c.n_layers, s.nf, "config.json", err, errlen)))
		goto out;
	for (int f = 0; f < s.nf; f++)
		rl_model_plan_own_file(p, f, &s.f[f]);
	/* s.f[] are the plan's now; error messages name the shards through the plan */
	for (int f = 0; f < s.nf; f++)
		s.f[f] = p->files[f];
	snprintf(p->name, sizeof p->name, "%s", rl_model_basename(dir));
	/* every field the config has (biases only with them), named and shaped by the one
	 * table; safetensors shapes are [rows, cols], or [rows] for a vector (cols 0 here) */
	for (int64_t pass = -1; pass < (int64_t)c.n_layers; pass++)  /* globals, then layer by layer */
	for (int f = 0; f < RL_W_NFIELDS; f++) {
		const struct rl_wname *w = &rl_wnames[f];
		uint32_t l = pass < 0 ? 0 : (uint32_t)pass;
		if (w->per_layer != (pass >= 0))
			continue;
		uint64_t rows = rl_wdim(&c, w->rows), cols = w->cols == RL_WD_NONE ? 0 : rl_wdim(&c, w->cols);
		char name[96];
		if (rl_model_field_off(&c, f, l) == UINT64_MAX)
			continue;
		rl_wname_format(f, l, 1, name, sizeof name);
		if ((rc = plan(&s, name, rows, cols, f, l, p)))
			goto out;
	}
	if ((rc = rl_model_plan_check(p, err, errlen)))
		goto out;
	if (tokenizer_path)
		rc = rl_model_read_tokenizer(tokenizer_path, c.vocab_size, &p->vocab_blob,
					     &p->vocab_blob_size, err, errlen);
out:
	for (int f = 0; f < s.nf; f++) {
		if (p->n_files)        /* moved into the plan: closed with it */
			s.f[f] = (struct rl_mfile){ .fd = -1 };
		rl_mfile_close(&s.f[f]);
		rl_json_free(s.hdr[f]);
	}
	free(s.t);
	rl_json_free(cfg);
	rl_json_free(index);
	if (rc)
		rl_model_plan_close(p);
	return rc;
}

int rl_model_load_safetensors(const char *path, const char *tokenizer_path, struct rl_model **out,
			      char *err, size_t errlen)
{
	return rl_model_load_planned(rl_model_plan_safetensors, path, tokenizer_path, out, err, errlen);
}
