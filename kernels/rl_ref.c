/* rl_ref.c — the plain reference Llama forward (see rl_ref.h). Deliberately naive: scalar
 * loops, no blocking, no threads, so that it is obviously right by reading; activations, KV
 * and every sum in float64, so that its own rounding is far below any fast path's. */
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
	st->x = calloc(c->dim, sizeof(double));
	st->xb = calloc(c->dim, sizeof(double));
	st->xb2 = calloc(c->dim, sizeof(double));
	st->q = calloc(qd, sizeof(double));
	st->att_out = calloc(qd, sizeof(double));
	st->hb = calloc(c->hidden_dim, sizeof(double));
	st->hb2 = calloc(c->hidden_dim, sizeof(double));
	st->att = calloc(max_ctx, sizeof(double));
	st->logits = calloc(c->vocab_size, sizeof(double));
	st->k_cache = calloc((size_t)c->n_layers * max_ctx * kvd, sizeof(double));
	st->v_cache = calloc((size_t)c->n_layers * max_ctx * kvd, sizeof(double));
	if (!st->x || !st->xb || !st->xb2 || !st->q || !st->att_out || !st->hb || !st->hb2 ||
	    !st->att || !st->logits || !st->k_cache || !st->v_cache) {
		rl_ref_state_free(st);
		return -ENOMEM;
	}
	return 0;
}

void rl_ref_state_free(struct rl_ref_state *st)
{
	free(st->x); free(st->xb); free(st->xb2); free(st->q); free(st->att_out);
	free(st->hb); free(st->hb2); free(st->att); free(st->logits); free(st->k_cache);
	free(st->v_cache);
	memset(st, 0, sizeof *st);
}

/* o[n] = x[n] * w[n] / sqrt(mean(x^2) + eps) */
static void rmsnorm(double *o, const double *x, const float *w, uint32_t n, float eps)
{
	double ss = 0;
	for (uint32_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	double s = 1.0 / sqrt(ss / n + (double)eps);
	for (uint32_t i = 0; i < n; i++)
		o[i] = x[i] * s * w[i];
}

/* y[d] = W[d, n] x[n] (+ b[d] when b) */
static void matvec(double *y, const double *x, const float *W, const float *b, uint32_t n, uint32_t d)
{
	for (uint32_t i = 0; i < d; i++) {
		double s = 0;
		for (uint32_t j = 0; j < n; j++)
			s += (double)W[(size_t)i * n + j] * x[j];
		y[i] = b ? s + b[i] : s;
	}
}

/* Rotates one head v[hd] to position pos: its first rot = rl_rope_dims dims (all but for
 * partial RoPE). Pair i (i < rot/2) is (2i, 2i+1) for adjacent pairing, (i, i + rot/2) for
 * halves; both use frequency theta^(-2i/rot), divided by the pair's
 * factor when the model has them (fac: Llama 3 rope scaling, LongRoPE's set for the
 * context the state holds). A local (sliding-window) layer
 * rotates by its own base, positions unscaled and no factors (Gemma 3). */
static void rope(double *v, uint32_t pos, const struct rl_model_config *c, int local, const float *fac)
{
	const uint32_t rot = rl_rope_dims(c);                  /* the first rot dims turn */
	double p = local ? (double)pos : (double)pos / c->rope_scale;
	for (uint32_t i = 0; i < rot / 2; i++) {
		double freq = pow((double)(local ? c->rope_theta_local : c->rope_theta), -(double)(2 * i) / (double)rot);
		if (fac && !local)
			freq /= fac[i];
		/* LongRoPE's attention factor scales the rotated dims (only) */
		const double af = c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0;
		double a = p * freq, cs = cos(a) * af, sn = sin(a) * af;
		uint32_t i0 = c->rope_halves ? i : 2 * i, i1 = c->rope_halves ? i + rot / 2 : 2 * i + 1;
		double v0 = v[i0], v1 = v[i1];
		v[i0] = v0 * cs - v1 * sn;
		v[i1] = v0 * sn + v1 * cs;
	}
}

/* xb2[dim] = down(act(gate xb) * (up xb)): gate, up [hid, dim], down [dim, hid]; act is SiLU,
 * or (gelu) GELU's tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
static void ffn(struct rl_ref_state *st, const float *gate, const float *up, const float *down, uint32_t dim,
		uint32_t hid, int gelu)
{
	matvec(st->hb, st->xb, gate, NULL, dim, hid);            /* hb[hid] */
	matvec(st->hb2, st->xb, up, NULL, dim, hid);             /* hb2[hid] */
	for (uint32_t i = 0; i < hid; i++) {
		double g = st->hb[i];
		double a = gelu ? 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)))
				: g / (1.0 + exp(-g));
		st->hb[i] = a * st->hb2[i];
	}
	matvec(st->xb2, st->hb, down, NULL, hid, dim);           /* xb2[dim] */
}

/* Mixture of experts: router logits [n_experts] = router xb; the top n_experts_used by
 * logit (ties: the lower index), weighted by their softmax renormalised over those chosen
 * (Mixtral's softmax of the top logits, Qwen3-MoE's norm_topk_prob: the same numbers);
 * x += sum_e w_e ffn_e(xb). */
static void moe_ffn(const struct rl_model_config *c, const struct rl_layer *L, struct rl_ref_state *st, double *x)
{
	const uint32_t dim = c->dim, hid = c->hidden_dim, ne = c->n_experts, k = c->n_experts_used;
	double logit[1024] = { 0 };
	uint32_t pick[RL_MAX_EXPERTS_USED];
	int taken[1024] = { 0 };
	matvec(logit, st->xb, L->router, NULL, dim, ne);
	double mx = -INFINITY, sum = 0, w[RL_MAX_EXPERTS_USED];
	for (uint32_t j = 0; j < k; j++) {
		uint32_t best = UINT32_MAX;
		for (uint32_t e = 0; e < ne; e++)
			if (!taken[e] && (best == UINT32_MAX || logit[e] > logit[best]))
				best = e;
		taken[best] = 1;
		pick[j] = best;
		mx = logit[best] > mx ? logit[best] : mx;
	}
	double next = -INFINITY;               /* the best expert left out */
	for (uint32_t e = 0; e < ne; e++)
		if (!taken[e] && logit[e] > next)
			next = logit[e];
	if (logit[pick[k - 1]] - next < st->route_margin)
		st->route_margin = logit[pick[k - 1]] - next;
	for (uint32_t j = 0; j < k; j++)
		sum += w[j] = exp(logit[pick[j]] - mx);
	for (uint32_t j = 0; j < k; j++) {
		const size_t e = pick[j];
		ffn(st, L->gate_exps + e * hid * dim, L->up_exps + e * hid * dim, L->down_exps + e * dim * hid, dim, hid,
		    c->ffn_gelu);
		for (uint32_t i = 0; i < dim; i++)
			x[i] += w[j] / sum * st->xb2[i];
	}
}

void rl_ref_forward(const struct rl_model *m, struct rl_ref_state *st, uint32_t token,
		    uint32_t pos, float *logits)
{
	const struct rl_model_config *c = &m->cfg;
	uint32_t dim = c->dim, hd = c->head_dim, hid = c->hidden_dim;
	uint32_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
	uint32_t group = c->n_heads / c->n_kv_heads;
	double *x = st->x;                                         /* [dim] */
	st->route_margin = INFINITY;

	for (uint32_t i = 0; i < dim; i++)
		x[i] = m->tok_emb[(size_t)token * dim + i] * (c->emb_scale > 0 ? (double)c->emb_scale : 1.0);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		const struct rl_layer *L = &m->layers[l];
		const uint32_t window = rl_layer_window(c, l);            /* 0: sees every position */
		const uint32_t t0 = window && pos + 1 > window ? pos + 1 - window : 0;
		double *kc = st->k_cache + (size_t)l * st->max_ctx * kvd; /* [max_ctx, kvd] */
		double *vc = st->v_cache + (size_t)l * st->max_ctx * kvd; /* [max_ctx, kvd] */
		double *k = kc + (size_t)pos * kvd;                      /* [kvd] */
		double *v = vc + (size_t)pos * kvd;                      /* [kvd] */

		rmsnorm(st->xb, x, L->attn_norm, dim, c->norm_eps);
		matvec(st->q, st->xb, L->wq, L->bq, dim, qd);            /* q[qd] */
		matvec(k, st->xb, L->wk, L->bk, dim, kvd);
		matvec(v, st->xb, L->wv, L->bv, dim, kvd);
		for (uint32_t h = 0; h < c->n_heads && L->q_norm; h++)     /* Qwen3: each head normed */
			rmsnorm(st->q + h * hd, st->q + h * hd, L->q_norm, hd, c->norm_eps);
		for (uint32_t h = 0; h < c->n_kv_heads && L->k_norm; h++)
			rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, c->norm_eps);
		const float *fac = rl_rope_factors(c, st->max_ctx);
		for (uint32_t h = 0; h < c->n_heads; h++)
			rope(st->q + h * hd, pos, c, window != 0, fac);
		for (uint32_t h = 0; h < c->n_kv_heads; h++)
			rope(k + h * hd, pos, c, window != 0, fac);
		const double scale = c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt((double)hd);

		for (uint32_t h = 0; h < c->n_heads; h++) {
			const double *qh = st->q + h * hd;               /* [hd] */
			uint32_t kh = h / group;
			double *att = st->att;                           /* [pos + 1], from t0 */
			double mx = -INFINITY;
			for (uint32_t t = t0; t <= pos; t++) {
				const double *kt = kc + (size_t)t * kvd + kh * hd;
				double s = 0;
				for (uint32_t i = 0; i < hd; i++)
					s += qh[i] * kt[i];
				att[t] = s * scale;
				if (att[t] > mx)
					mx = att[t];
			}
			double sum = 0;
			for (uint32_t t = t0; t <= pos; t++) {
				att[t] = exp(att[t] - mx);
				sum += att[t];
			}
			double *o = st->att_out + h * hd;                /* [hd] */
			for (uint32_t i = 0; i < hd; i++)
				o[i] = 0;
			for (uint32_t t = t0; t <= pos; t++) {
				const double *vt = vc + (size_t)t * kvd + kh * hd;
				double a = att[t] / sum;
				for (uint32_t i = 0; i < hd; i++)
					o[i] += a * vt[i];
			}
		}
		matvec(st->xb2, st->att_out, L->wo, NULL, qd, dim);      /* xb2[dim] */
		if (L->attn_post_norm)                                  /* Gemma 3: the output normed */
			rmsnorm(st->xb2, st->xb2, L->attn_post_norm, dim, c->norm_eps);
		for (uint32_t i = 0; i < dim; i++)
			x[i] += st->xb2[i];

		rmsnorm(st->xb, x, L->ffn_norm, dim, c->norm_eps);
		if (c->n_experts) {
			moe_ffn(c, L, st, x);
			continue;
		}
		ffn(st, L->w_gate, L->w_up, L->w_down, dim, hid, c->ffn_gelu);   /* xb2[dim] */
		if (L->ffn_post_norm)
			rmsnorm(st->xb2, st->xb2, L->ffn_post_norm, dim, c->norm_eps);
		for (uint32_t i = 0; i < dim; i++)
			x[i] += st->xb2[i];
	}
	rmsnorm(x, x, m->out_norm, dim, c->norm_eps);
	matvec(st->logits, x, m->wcls, NULL, dim, c->vocab_size);        /* logits[vocab] */
	for (uint32_t i = 0; i < c->vocab_size; i++)
		logits[i] = (float)st->logits[i];
}
