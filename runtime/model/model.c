/* model.c — the canonical weight layout (rl_model_plan.h), allocation, destruction and random
 * filling of rl_model (loaders live in model_gguf.c, model_safetensors.c, model_llama2c.c;
 * rl_model_load dispatches by magic). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "runtime/model/model_internal.h"

uint64_t rl_model_weight_elems(const struct rl_model_config *c)
{
	/* the end of the canonical layout (rl_model_field_off owns which fields a shape has) */
	uint64_t v = c->vocab_size, d = c->dim;
	return rl_model_field_off(c, RL_W_OUT_NORM, 0) + d + (c->tied_embeddings ? 0 : v * d);
}

int rl_model_weights_fit(const struct rl_model_config *c, uint64_t file_bytes, const char *name,
			 char *err, size_t errlen)
{
	/* in double: an absurd header must not wrap around to a small count. The densest stored
	 * form (Q2_K, 84 bytes per 256 weights) bounds the bytes from below; 1% slack keeps
	 * rounding from rejecting a good file */
	double d = c->dim, h = c->hidden_dim, qd = (double)c->n_heads * c->head_dim,
	       kvd = (double)c->n_kv_heads * c->head_dim, v = c->vocab_size;
	double per_layer = d + qd * d + 2 * kvd * d + d * qd + d + 3 * h * d;
	double n = v * d + per_layer * c->n_layers + d + (c->tied_embeddings ? 0 : v * d);
	double need = n * rl_dt_min_bytes_per_weight() * 0.99;
	if (need <= (double)file_bytes)
		return 0;
	rl_model_err(err, errlen, name, "the shape in its header needs %.0f weights (at least %.0f bytes) but the file holds %llu bytes: truncated or corrupt",
		     n, need, (unsigned long long)file_bytes);
	return -EINVAL;
}

int rl_model_check_shape(const struct rl_model_config *c, char *err, size_t errlen)
{
	if (!c->dim || !c->hidden_dim || !c->n_layers || !c->n_heads || !c->n_kv_heads ||
	    !c->vocab_size || !c->head_dim || c->n_heads % c->n_kv_heads ||
	    c->n_layers > 4096 || c->dim > (1u << 20) || c->hidden_dim > (1u << 22) ||
	    c->vocab_size > (1u << 22) || c->n_heads > 4096 || c->head_dim > 4096 ||
	    (c->head_dim & 1)) {
		snprintf(err, errlen, "bad model shape (dim %u hidden %u layers %u heads %u/%u head_dim %u vocab %u)",
			 c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size);
		return -EINVAL;
	}
	if (c->n_experts > 1024 || (c->n_experts && (!c->n_experts_used || c->n_experts_used > c->n_experts ||
						     c->n_experts_used > RL_MAX_EXPERTS_USED))) {
		snprintf(err, errlen, "bad mixture of experts (%u experts, %u used per token; at most 1024 and %u)",
			 c->n_experts, c->n_experts_used, RL_MAX_EXPERTS_USED);
		return -EINVAL;
	}
	return 0;
}

int rl_rope_llama3_freqs(struct rl_model_config *c, float factor, float low, float high, float orig)
{
	uint32_t n = rl_rope_dims(c) / 2;
	if (!(factor >= 1) || !(low > 0) || !(high > low) || !(orig > 0) || !isfinite(factor) ||
	    !isfinite(high) || !isfinite(orig) || !(c->rope_theta > 0))
		return -EINVAL;
	if (n > RL_ROPE_MAX_FREQS)
		return -ENOTSUP;
	double low_wavelen = orig / low, high_wavelen = orig / high;
	for (uint32_t i = 0; i < n; i++) {
		/* the converter's float32 frequency, then its float64 arithmetic */
		float freq = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)rl_rope_dims(c));
		double wavelen = 2 * M_PI / freq, f;
		if (wavelen < high_wavelen)
			f = 1;
		else if (wavelen > low_wavelen)
			f = factor;
		else {
			double smooth = (orig / wavelen - low) / (high - low);
			f = 1 / ((1 - smooth) / factor + smooth);
		}
		c->rope_freqs[i] = (float)f;
	}
	c->n_rope_freqs = n;
	return 0;
}

int rl_rope_longrope_synth(struct rl_model_config *c, uint32_t orig_ctx)
{
	const uint32_t n = rl_rope_dims(c) / 2;
	if (n > RL_ROPE_MAX_FREQS)
		return -ENOTSUP;
	if (!orig_ctx || orig_ctx >= c->max_ctx)
		return -EINVAL;
	/* low-frequency pairs stretched most, as Phi-3-128k's factors are */
	for (uint32_t i = 0; i < n; i++) {
		const double x = (double)i / n;
		c->rope_freqs[i] = (float)(1.0 + 0.5 * x * x);
		c->rope_freqs_long[i] = (float)(1.0 + 7.0 * pow(x, 1.5));
	}
	c->n_rope_freqs = n;
	c->rope_orig_ctx = orig_ctx;
	c->rope_attn_factor = (float)rl_longrope_attn_factor(c->max_ctx, orig_ctx);
	return 0;
}

double rl_longrope_attn_factor(uint32_t max_ctx, uint32_t orig_ctx)
{
	const double scale = (double)max_ctx / orig_ctx;
	return scale > 1 ? sqrt(1 + log(scale) / log((double)orig_ctx)) : 1.0;
}

/* The fields of one layer, in canonical order. */
static const uint8_t layer_fields[] = {
	RL_W_ATTN_NORM, RL_W_WQ, RL_W_WK, RL_W_WV, RL_W_BQ, RL_W_BK, RL_W_BV, RL_W_QNORM, RL_W_KNORM,
	RL_W_WO, RL_W_ATTN_POST_NORM, RL_W_FFN_NORM, RL_W_GATE, RL_W_DOWN, RL_W_UP,
	RL_W_ROUTER, RL_W_GATE_EXPS, RL_W_UP_EXPS, RL_W_DOWN_EXPS, RL_W_FFN_POST_NORM,
};

static int has_field(const struct rl_model_config *c, int f)
{
	if (f == RL_W_BQ || f == RL_W_BK || f == RL_W_BV)
		return c->has_qkv_bias;
	if (f == RL_W_QNORM || f == RL_W_KNORM)
		return c->has_qk_norm;
	if (f == RL_W_ATTN_POST_NORM || f == RL_W_FFN_POST_NORM)
		return c->post_norms;
	if (f == RL_W_GATE || f == RL_W_UP || f == RL_W_DOWN)
		return !c->n_experts;
	if (f == RL_W_ROUTER || f == RL_W_GATE_EXPS || f == RL_W_UP_EXPS || f == RL_W_DOWN_EXPS)
		return c->n_experts != 0;
	return f != RL_W_WCLS || !c->tied_embeddings;
}

uint64_t rl_model_field_elems(const struct rl_model_config *c, int f)
{
	if (f < 0 || f >= RL_W_NFIELDS)
		return 0;
	return rl_wdim(c, rl_wnames[f].rows) * rl_wdim(c, rl_wnames[f].cols);
}

uint64_t rl_model_field_off(const struct rl_model_config *c, int f, uint32_t layer)
{
	if (f < 0 || f >= RL_W_NFIELDS || !has_field(c, f))
		return UINT64_MAX;
	uint64_t per_layer = 0, within = UINT64_MAX;
	for (size_t i = 0; i < sizeof layer_fields; i++) {
		if (layer_fields[i] == f)
			within = per_layer;
		if (has_field(c, layer_fields[i]))
			per_layer += rl_model_field_elems(c, layer_fields[i]);
	}
	uint64_t emb = rl_model_field_elems(c, RL_W_TOK_EMB), layers = per_layer * c->n_layers;
	switch (f) {
	case RL_W_TOK_EMB:  return 0;
	case RL_W_OUT_NORM: return emb + layers;
	case RL_W_WCLS:     return emb + layers + c->dim;
	}
	return layer < c->n_layers ? emb + per_layer * layer + within : UINT64_MAX;
}

size_t rl_model_layout(const struct rl_model_config *c, struct rl_wseg *segs)
{
	size_t k = 0;
	uint64_t off = 0;
#define SEG(f, l) do { uint64_t n_ = rl_model_field_elems(c, f); \
	if (segs) { segs[k] = (struct rl_wseg){ off, n_, (l), (uint8_t)(f) }; } \
	off += n_; k++; } while (0)
	SEG(RL_W_TOK_EMB, 0);
	for (uint32_t l = 0; l < c->n_layers; l++)
		for (size_t i = 0; i < sizeof layer_fields; i++)
			if (has_field(c, layer_fields[i]))
				SEG(layer_fields[i], l);
	SEG(RL_W_OUT_NORM, 0);
	if (!c->tied_embeddings)
		SEG(RL_W_WCLS, 0);
#undef SEG
	return k;
}

size_t rl_model_layout_find(const struct rl_wseg *segs, size_t n, uint64_t e)
{
	size_t lo = 0, hi = n;             /* the last segment starting at or before e */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (segs[mid].off <= e)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

void rl_model_norms_add_one(struct rl_model *m)
{
	const struct rl_model_config *c = &m->cfg;
	static const uint8_t norms[] = { RL_W_ATTN_NORM, RL_W_QNORM, RL_W_KNORM, RL_W_ATTN_POST_NORM, RL_W_FFN_NORM,
					 RL_W_FFN_POST_NORM };
	for (uint32_t l = 0; l < c->n_layers; l++)
		for (size_t i = 0; i < sizeof norms; i++) {
			float *w = *rl_model_field_slot(m, norms[i], l);
			for (uint64_t j = 0; w && j < rl_model_field_elems(c, norms[i]); j++)
				w[j] += 1.0f;
		}
	for (uint32_t j = 0; j < c->dim; j++)
		m->out_norm[j] += 1.0f;
}

float **rl_model_field_slot(struct rl_model *m, int f, uint32_t l)
{
	struct rl_layer *L = &m->layers[l];
	switch (f) {
	case RL_W_TOK_EMB:   return &m->tok_emb;
	case RL_W_OUT_NORM:  return &m->out_norm;
	case RL_W_WCLS:      return &m->wcls;
	case RL_W_ATTN_NORM: return &L->attn_norm;
	case RL_W_WQ:        return &L->wq;
	case RL_W_WK:        return &L->wk;
	case RL_W_WV:        return &L->wv;
	case RL_W_BQ:        return &L->bq;
	case RL_W_BK:        return &L->bk;
	case RL_W_BV:        return &L->bv;
	case RL_W_QNORM:     return &L->q_norm;
	case RL_W_KNORM:     return &L->k_norm;
	case RL_W_ROUTER:    return &L->router;
	case RL_W_GATE_EXPS: return &L->gate_exps;
	case RL_W_UP_EXPS:   return &L->up_exps;
	case RL_W_DOWN_EXPS: return &L->down_exps;
	case RL_W_WO:        return &L->wo;
	case RL_W_FFN_NORM:  return &L->ffn_norm;
	case RL_W_ATTN_POST_NORM: return &L->attn_post_norm;
	case RL_W_FFN_POST_NORM:  return &L->ffn_post_norm;
	case RL_W_GATE:      return &L->w_gate;
	case RL_W_DOWN:      return &L->w_down;
	case RL_W_UP:        return &L->w_up;
	}
	return NULL;
}

struct rl_wmat *rl_model_field_wmat(struct rl_model *m, int f, uint32_t l)
{
	struct rl_layer *L = &m->layers[l];
	switch (f) {
	case RL_W_TOK_EMB: return &m->mtok_emb;
	case RL_W_WCLS:    return &m->mwcls;
	case RL_W_WQ:      return &L->mq;
	case RL_W_WK:      return &L->mk;
	case RL_W_WV:      return &L->mv;
	case RL_W_WO:      return &L->mo;
	case RL_W_GATE:    return &L->mgate;
	case RL_W_DOWN:    return &L->mdown;
	case RL_W_UP:      return &L->mup;
	case RL_W_ROUTER:    return &L->mrouter;
	case RL_W_GATE_EXPS: return &L->mgate_exps;
	case RL_W_UP_EXPS:   return &L->mup_exps;
	case RL_W_DOWN_EXPS: return &L->mdown_exps;
	}
	return NULL;
}

int rl_model_alloc(const struct rl_model_config *c, struct rl_model **out, char *err, size_t errlen)
{
	int rc = rl_model_check_shape(c, err, errlen);
	if (rc)
		return rc;
	size_t n = rl_model_weight_elems(c), nseg = rl_model_layout(c, NULL);
	struct rl_model *m = calloc(1, sizeof *m);
	struct rl_layer *L = calloc(c->n_layers, sizeof *L);
	struct rl_wseg *segs = calloc(nseg, sizeof *segs);
	/* Weights are streamed once per step: map them on their own and ask for transparent huge
	 * pages, so a decode step does not spend its time on TLB misses (THP is often "madvise"). */
	float *w = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED)
		w = NULL;
	else
		madvise(w, n * sizeof(float), MADV_HUGEPAGE);
	if (!m || !L || !w || !segs) {
		free(m); free(L); free(segs);
		if (w)
			munmap(w, n * sizeof(float));
		snprintf(err, errlen, "cannot allocate %.1f GiB for the model weights", n * 4.0 / (1 << 30));
		return -ENOMEM;
	}
	m->cfg = *c;
	m->layers = L;
	m->mem = w;
	m->mem_size = n * sizeof(float);
	/* one layout for every consumer: the loaders' plans address weights by these offsets */
	rl_model_layout(c, segs);
	for (size_t i = 0; i < nseg; i++) {
		const struct rl_wseg *g = &segs[i];
		*rl_model_field_slot(m, g->field, g->layer) = w + g->off;
		struct rl_wmat *wm = rl_model_field_wmat(m, g->field, g->layer);
		if (wm)                /* the fp32 array as a stored matrix too */
			rl_wmat_init(wm, w + g->off, RL_DT_F32, (uint32_t)rl_wdim(c, rl_wnames[g->field].rows),
				     (uint32_t)rl_wdim(c, rl_wnames[g->field].cols));
	}
	if (c->tied_embeddings) {
		m->wcls = m->tok_emb;
		m->mwcls = m->mtok_emb;
	}
	free(segs);
	*out = m;
	return 0;
}

void rl_model_destroy(struct rl_model *m)
{
	if (!m)
		return;
	if (m->mem)
		munmap(m->mem, m->mem_size);
	free(m->layers);
	free(m->vocab_blob);
	free(m);
}

/* splitmix64 → uniform in [-1, 1) */
static inline float rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (float)((z >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

static void fill(float *w, size_t n, float scale, float offset, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		w[i] = offset + scale * rnd(s);
}

void rl_model_fill_random(struct rl_model *m, uint64_t seed)
{
	const struct rl_model_config *c = &m->cfg;
	size_t d = c->dim, h = c->hidden_dim, qd = (size_t)c->n_heads * c->head_dim,
	       kvd = (size_t)c->n_kv_heads * c->head_dim, v = c->vocab_size;
	uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
	/* uniform(-a, a) has std a/sqrt(3): a = sqrt(3/fan_in) keeps activations O(1) */
	float sd = sqrtf(3.0f / d), sq = sqrtf(3.0f / qd), sh = sqrtf(3.0f / h);
	/* a scaled embedding (Gemma's sqrt(dim)) filled as large as the others would be the whole
	 * residual stream of a random model, and with tied weights every greedy token would repeat
	 * the one before: scaled, it enters at 3x the others' size */
	fill(m->tok_emb, v * d, c->emb_scale > 0 ? 1.0f / c->emb_scale : 1.0f, 0.0f, &s);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		struct rl_layer *L = &m->layers[l];
		fill(L->attn_norm, d, 0.1f, 1.0f, &s);
		fill(L->wq, qd * d, sd, 0, &s);
		fill(L->wk, kvd * d, sd, 0, &s);
		fill(L->wv, kvd * d, sd, 0, &s);
		if (L->bq) {
			fill(L->bq, qd, 0.1f, 0, &s);
			fill(L->bk, kvd, 0.1f, 0, &s);
			fill(L->bv, kvd, 0.1f, 0, &s);
		}
		if (L->q_norm) {       /* after the biases: the llama-shaped streams stay as they were */
			fill(L->q_norm, c->head_dim, 0.3f, 1.0f, &s);
			fill(L->k_norm, c->head_dim, 0.3f, 1.0f, &s);
		}
		fill(L->wo, d * qd, sq, 0, &s);
		if (L->attn_post_norm)
			fill(L->attn_post_norm, d, 0.1f, 1.0f, &s);
		fill(L->ffn_norm, d, 0.1f, 1.0f, &s);
		if (L->ffn_post_norm)   /* drawn here, its layout place is after the FFN */
			fill(L->ffn_post_norm, d, 0.1f, 1.0f, &s);
		if (c->n_experts) {
			const size_t e = c->n_experts;
			fill(L->router, e * d, sd, 0, &s);
			fill(L->gate_exps, e * h * d, sd, 0, &s);
			fill(L->down_exps, e * d * h, sh, 0, &s);
			fill(L->up_exps, e * h * d, sd, 0, &s);
			continue;
		}
		fill(L->w_gate, h * d, sd, 0, &s);
		fill(L->w_down, d * h, sh, 0, &s);
		fill(L->w_up, h * d, sd, 0, &s);
	}
	fill(m->out_norm, d, 0.1f, 1.0f, &s);
	if (!c->tied_embeddings)
		fill(m->wcls, v * d, sd, 0, &s);
}
