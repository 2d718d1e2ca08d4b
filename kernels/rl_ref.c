/* rl_ref.c — the plain reference Llama forward (see rl_ref.h). Deliberately naive: scalar
 * loops, no blocking, no threads, so that it is obviously right by reading. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/rl_ref.h"

int rl_ref_state_init(struct rl_ref_state *st, const struct rl_model *m, uint32_t max_ctx)
{
	const struct rl_model_config *c = &m->cfg;
	size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
	memset(st, 0, sizeof *st);
	st->max_ctx = max_ctx;
	st->x = calloc(c->dim, sizeof(float));
	st->xb = calloc(c->dim, sizeof(float));
	st->xb2 = calloc(c->dim, sizeof(float));
	st->q = calloc(qd, sizeof(float));
	st->att_out = calloc(qd, sizeof(float));
	st->hb = calloc(c->hidden_dim, sizeof(float));
	st->hb2 = calloc(c->hidden_dim, sizeof(float));
	st->att = calloc(max_ctx, sizeof(float));
	st->k_cache = calloc((size_t)c->n_layers * max_ctx * kvd, sizeof(float));
	st->v_cache = calloc((size_t)c->n_layers * max_ctx * kvd, sizeof(float));
	if (!st->x || !st->xb || !st->xb2 || !st->q || !st->att_out || !st->hb || !st->hb2 ||
	    !st->att || !st->k_cache || !st->v_cache) {
		rl_ref_state_free(st);
		return -ENOMEM;
	}
	return 0;
}

void rl_ref_state_free(struct rl_ref_state *st)
{
	free(st->x); free(st->xb); free(st->xb2); free(st->q); free(st->att_out);
	free(st->hb); free(st->hb2); free(st->att); free(st->k_cache); free(st->v_cache);
	memset(st, 0, sizeof *st);
}

/* o[n] = x[n] * w[n] / sqrt(mean(x^2) + eps) */
static void rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps)
{
	float ss = 0;
	for (uint32_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	float s = 1.0f / sqrtf(ss / n + eps);
	for (uint32_t i = 0; i < n; i++)
		o[i] = x[i] * s * w[i];
}

/* y[d] = W[d, n] x[n] (+ b[d] when b) */
static void matvec(float *y, const float *x, const float *W, const float *b, uint32_t n, uint32_t d)
{
	for (uint32_t i = 0; i < d; i++) {
		float s = 0;
		for (uint32_t j = 0; j < n; j++)
			s += W[(size_t)i * n + j] * x[j];
		y[i] = b ? s + b[i] : s;
	}
}

/* Rotates one head v[hd] to position pos. Pair i (i < hd/2) is (2i, 2i+1) for adjacent
 * pairing, (i, i + hd/2) for halves; both use frequency theta^(-2i/hd). */
static void rope(float *v, uint32_t hd, uint32_t pos, const struct rl_model_config *c)
{
	float p = (float)pos / c->rope_scale;
	for (uint32_t i = 0; i < hd / 2; i++) {
		float freq = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hd);
		float a = p * freq, cs = cosf(a), sn = sinf(a);
		uint32_t i0 = c->rope_halves ? i : 2 * i, i1 = c->rope_halves ? i + hd / 2 : 2 * i + 1;
		float v0 = v[i0], v1 = v[i1];
		v[i0] = v0 * cs - v1 * sn;
		v[i1] = v0 * sn + v1 * cs;
	}
}

void rl_ref_forward(const struct rl_model *m, struct rl_ref_state *st, uint32_t token,
		    uint32_t pos, float *logits)
{
	const struct rl_model_config *c = &m->cfg;
	uint32_t dim = c->dim, hd = c->head_dim, hid = c->hidden_dim;
	uint32_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	uint32_t group = c->n_heads / c->n_kv_heads;
	float *x = st->x;                                          /* [dim] */

	memcpy(x, m->tok_emb + (size_t)token * dim, dim * sizeof(float));
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		float *kc = st->k_cache + (size_t)l * st->max_ctx * kvd; /* [max_ctx, kvd] */
		float *vc = st->v_cache + (size_t)l * st->max_ctx * kvd; /* [max_ctx, kvd] */
		float *k = kc + (size_t)pos * kvd;                       /* [kvd] */
		float *v = vc + (size_t)pos * kvd;                       /* [kvd] */

		rmsnorm(st->xb, x, L->attn_norm, dim, c->norm_eps);
		matvec(st->q, st->xb, L->wq, L->bq, dim, qd);            /* q[qd] */
		matvec(k, st->xb, L->wk, L->bk, dim, kvd);
		matvec(v, st->xb, L->wv, L->bv, dim, kvd);
		for (uint32_t h = 0; h < c->n_heads; h++)
			rope(st->q + h * hd, hd, pos, c);
		for (uint32_t h = 0; h < c->n_kv_heads; h++)
			rope(k + h * hd, hd, pos, c);

		for (uint32_t h = 0; h < c->n_heads; h++) {
			const float *qh = st->q + h * hd;                /* [hd] */
			uint32_t kh = h / group;
			float *att = st->att;                            /* [pos + 1] */
			float mx = -INFINITY;
			for (uint32_t t = 0; t <= pos; t++) {
				const float *kt = kc + (size_t)t * kvd + kh * hd;
				float s = 0;
				for (uint32_t i = 0; i < hd; i++)
					s += qh[i] * kt[i];
				att[t] = s / sqrtf((float)hd);
				if (att[t] > mx)
					mx = att[t];
			}
			float sum = 0;
			for (uint32_t t = 0; t <= pos; t++) {
				att[t] = expf(att[t] - mx);
				sum += att[t];
			}
			float *o = st->att_out + h * hd;                 /* [hd] */
			memset(o, 0, hd * sizeof(float));
			for (uint32_t t = 0; t <= pos; t++) {
				const float *vt = vc + (size_t)t * kvd + kh * hd;
				float a = att[t] / sum;
				for (uint32_t i = 0; i < hd; i++)
					o[i] += a * vt[i];
			}
		}
		matvec(st->xb2, st->att_out, L->wo, NULL, qd, dim);      /* xb2[dim] */
		for (uint32_t i = 0; i < dim; i++)
			x[i] += st->xb2[i];

		rmsnorm(st->xb, x, L->ffn_norm, dim, c->norm_eps);
		matvec(st->hb, st->xb, L->w_gate, NULL, dim, hid);       /* hb[hid] */
		matvec(st->hb2, st->xb, L->w_up, NULL, dim, hid);        /* hb2[hid] */
		for (uint32_t i = 0; i < hid; i++) {
			float g = st->hb[i];
			st->hb[i] = g / (1.0f + expf(-g)) * st->hb2[i];
		}
		matvec(st->xb2, st->hb, L->w_down, NULL, hid, dim);      /* xb2[dim] */
		for (uint32_t i = 0; i < dim; i++)
			x[i] += st->xb2[i];
	}
	rmsnorm(x, x, m->out_norm, dim, c->norm_eps);
	matvec(logits, x, m->wcls, NULL, dim, c->vocab_size);            /* logits[vocab] */
}
