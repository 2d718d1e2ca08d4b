/* rl_budget.c — step-time model and budget choice (see rl_budget.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/sched/rl_budget.h"
#include "runtime/sched/rl_sched.h"
#include "ipc/rl_wire.h"

#define WARMUP      8       /* observations (calibration included) before the fit is trusted */
#define LAMBDA      0.998   /* forgetting per step: a memory of ~500 steps */
#define PRIOR_W     4.0     /* a calibration step weighs as much as this many served steps */
#define SWEEPS      40      /* coordinate-descent sweeps per refit at most (warm-started) */
#define CLIP        4.0     /* errors beyond this many typical relative errors are clipped */
#define TYP_ALPHA   0.05    /* EWMA weight of the typical relative error */
#define MARGIN_MIN  0.05    /* and never less than 5% (a fresh or very regular model) */
#define MARGIN_NEW  0.15    /* the margin before 8 prefill steps have been seen */
#define NEAR        0.5     /* errors count for the margin from steps predicted at this share of T */
#define RECOVER     1.1     /* the shrink after an overshoot recovers by this factor a step */
#define SEEN_DECAY  0.999   /* per step; a burst of big steps is remembered for ~1000 steps */
#define START       64      /* budget before the model is trusted (no calibration) */

uint64_t rl_budget_default_target(double step_ns)
{
	if (!(step_ns > 0))
		return RL_BUDGET_TARGET_MAX_NS;
	const double t = RL_BUDGET_TARGET_STEPS * step_ns;
	return t < RL_BUDGET_TARGET_MIN_NS ? RL_BUDGET_TARGET_MIN_NS
	     : t > RL_BUDGET_TARGET_MAX_NS ? RL_BUDGET_TARGET_MAX_NS : (uint64_t)t;
}

void rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t max_budget)
{
	memset(b, 0, sizeof *b);
	b->target_ns = target_ns;
	b->max_budget = max_budget ? max_budget : 1;
	b->lambda = LAMBDA;
	b->shrink = 1;
	b->margin = MARGIN_NEW;
	b->chosen = START < b->max_budget ? START : b->max_budget;
}

void rl_budget_step_features(uint32_t d, double dec_ctx, uint32_t prefix, uint32_t chunk,
			     double f[RL_BUDGET_NF])
{
	f[0] = 1;
	f[1] = d;
	f[2] = chunk;
	f[3] = dec_ctx / 1024.0;
	f[4] = ((double)chunk * prefix + (double)chunk * (chunk + 1) / 2) / 1024.0;
	f[5] = 0;
}

void rl_budget_route(const struct rl_budget *b, int prompt, double f[RL_BUDGET_NF])
{
	f[5] = b->prompt_cost && prompt;
}

void rl_budget_features(const struct rl_budget *b, const struct rl_batch *bt, double f[RL_BUDGET_NF])
{
	double pf = 0, pairs = 0, dec_ctx = 0;
	uint32_t d = 0;
	int prompt = 0;
	for (uint32_t i = 0; i < bt->n_seqs; i++) {
		const struct rl_batch_seq *q = &bt->seqs[i];
		if (q->n_draft) {                     /* a decode verifying drafts: decode rows */
			d += q->n_draft + 1;
			dec_ctx += (double)q->ctx_len * (q->n_draft + 1);
		} else if (i < bt->n_prefill) {       /* prefill chunks come first (rl_batch.h) */
			double p = (double)q->ctx_len - q->q_len;
			pf += q->q_len;
			prompt |= q->q_len > (q->sample ? 1u : 0u);   /* not only a last token */
			pairs += (double)q->q_len * p + (double)q->q_len * (q->q_len + 1) / 2;
			d += q->sample != 0;          /* a prompt's last chunk samples: an LM head row */
		} else {
			d++;
			dec_ctx += q->ctx_len;
		}
	}
	rl_budget_step_features(d, dec_ctx, 0, 0, f);
	f[2] = pf;
	f[4] = pairs / 1024.0;
	rl_budget_route(b, prompt, f);
}

double rl_budget_predict(const struct rl_budget *b, const double f[RL_BUDGET_NF])
{
	double y = 0;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		y += b->theta[i] * f[i];
	return y;
}

/* Non-negative least squares on the normal equations (A + A0) θ = v + v0 by projected
 * coordinate descent, warm-started from the current θ: each sweep minimises the weighted
 * squared error exactly along one coefficient at a time, clipped at 0. A coefficient whose
 * feature no observation has excited (zero diagonal) keeps its value. */
static void refit(struct rl_budget *b)
{
	double M[RL_BUDGET_NF][RL_BUDGET_NF], r[RL_BUDGET_NF];
	for (int i = 0; i < RL_BUDGET_NF; i++) {
		r[i] = b->v[i] + b->v0[i];
		for (int j = 0; j < RL_BUDGET_NF; j++)
			M[i][j] = b->A[i][j] + b->A0[i][j];
	}
	for (int s = 0; s < SWEEPS; s++) {
		double moved = 0, size = 0;
		for (int i = 0; i < RL_BUDGET_NF; i++) {
			if (!(M[i][i] > 0))
				continue;
			double g = r[i];
			for (int j = 0; j < RL_BUDGET_NF; j++)
				if (j != i)
					g -= M[i][j] * b->theta[j];
			double t = g > 0 ? g / M[i][i] : 0;
			moved += fabs(t - b->theta[i]);
			size += t;
			b->theta[i] = t;
		}
		if (moved <= 1e-9 * size)      /* converged: the warm start was already there */
			break;
	}
}

/* Adds one observation with weight w to (A, v); relative weighting 1/y^2 (y in ms). */
static void accumulate(double A[RL_BUDGET_NF][RL_BUDGET_NF], double v[RL_BUDGET_NF],
		       const double f[RL_BUDGET_NF], double y, double w)
{
	double ms = y > 1e3 ? y / 1e6 : 1e-3;
	w /= ms * ms;
	for (int i = 0; i < RL_BUDGET_NF; i++) {
		v[i] += w * f[i] * y;
		for (int j = 0; j < RL_BUDGET_NF; j++)
			A[i][j] += w * f[i] * f[j];
	}
}

static void see(struct rl_budget *b, const double f[RL_BUDGET_NF])
{
	double tokens = f[1] + f[2];
	b->seen_tokens *= SEEN_DECAY;
	if (tokens > b->seen_tokens)
		b->seen_tokens = tokens;
}

void rl_budget_prior(struct rl_budget *b, const double f[RL_BUDGET_NF], double y)
{
	accumulate(b->A0, b->v0, f, y, PRIOR_W);
	see(b, f);
	b->n_prior++;
	refit(b);
}

void rl_budget_update(struct rl_budget *b, const double f[RL_BUDGET_NF], double y)
{
	/* Outliers are one-sided (a preempted runtime thread, a page fault) and can be ten times
	 * a step; least squares would chase them. Once the model is trusted, an error counts at
	 * most CLIP typical relative errors (Huber-style). */
	double pred = rl_budget_predict(b, f);
	if (b->n_obs + b->n_prior >= WARMUP && pred > 0) {
		double lim = CLIP * (b->typ_err > 0.005 ? b->typ_err : 0.005);
		if (y > pred * (1 + lim))
			y = pred * (1 + lim);
		else if (y < pred * (1 - lim))
			y = pred * (1 - lim) > 0 ? pred * (1 - lim) : y;
		/* the typical error follows the clipped errors: a lasting change of the machine
		 * (every step slower) widens it step by step until the fit can follow, while a rare
		 * stall moves it little */
		b->typ_err += TYP_ALPHA * (fabs(y - pred) / pred - b->typ_err);
	}
	for (int i = 0; i < RL_BUDGET_NF; i++) {
		b->v[i] *= b->lambda;
		for (int j = 0; j < RL_BUDGET_NF; j++)
			b->A[i][j] *= b->lambda;
	}
	accumulate(b->A, b->v, f, y, 1.0);
	see(b, f);
	b->n_obs++;
	refit(b);
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;
	return a < c ? -1 : a > c;
}

/* The margin: the 95% quantile of the recent relative errors of prefill steps. */
static void error_stats(struct rl_budget *b)
{
	double s[RL_BUDGET_NR];
	uint32_t n = b->n_resid < RL_BUDGET_NR ? b->n_resid : RL_BUDGET_NR;
	memcpy(s, b->resid, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp_d);
	if (n < 8) {
		b->margin = MARGIN_NEW > s[n - 1] ? MARGIN_NEW : s[n - 1];
	} else {
		/* 95% of prefill steps under T, and 99% under 1.1 T (the tail a p99 ITL reads) */
		double q95 = s[(uint32_t)(0.95 * (n - 1) + 0.5)], q99 = s[(uint32_t)(0.99 * (n - 1) + 0.5)] - 0.1;
		double q = q95 > q99 ? q95 : q99;
		b->margin = q < MARGIN_MIN ? MARGIN_MIN : q;
	}
	if (b->margin > 1)
		b->margin = 1;
}

void rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns)
{
	double f[RL_BUDGET_NF], y = (double)step_ns;
	rl_budget_features(b, bt, f);
	double pred = rl_budget_predict(b, f);
	if (f[2] > 0 && pred > 0 && b->n_obs + b->n_prior >= WARMUP) {
		/* the error the pick would have met: relative to the a-priori prediction */
		if (pred >= NEAR * (double)b->target_ns) {
			b->resid[b->resid_pos] = (y - pred) / pred;
			b->resid_pos = (b->resid_pos + 1) % RL_BUDGET_NR;
			b->n_resid++;
			error_stats(b);
		}
		/* an overshoot shrinks the next chunks at once; a step under the target lets the
		 * shrink recover */
		if (y > (double)b->target_ns)
			b->shrink = fmin(b->shrink, (double)b->target_ns / y);
		else
			b->shrink = fmin(1.0, b->shrink * RECOVER);
	}
	rl_budget_update(b, f, y);
	b->last_decodes = 0;
	b->last_dec_ctx = 0;
	b->last_prefix = 0;
	for (uint32_t i = 0; i < bt->n_seqs; i++) {
		const struct rl_batch_seq *q = &bt->seqs[i];
		if (i >= bt->n_prefill) {
			b->last_decodes++;
			b->last_dec_ctx += q->ctx_len;
		} else if (q->ctx_len > b->last_prefix) {
			b->last_prefix = q->ctx_len;   /* where that sequence's next chunk starts */
		}
	}
}

uint32_t rl_budget_choose(struct rl_budget *b, uint32_t d, double dec_ctx, uint32_t prefix)
{
	uint32_t floor_ = d < b->max_budget ? d + 1 : b->max_budget;
	if (b->n_obs + b->n_prior < WARMUP) {
		/* too little data to trust: keep the small starting budget, but let prefill in */
		if (b->chosen < floor_)
			b->chosen = floor_;
		return b->chosen;
	}
	double limit = (double)b->target_ns * b->shrink / (1 + b->margin);
	uint32_t cap = b->max_budget;
	if (2.0 * b->seen_tokens < cap)     /* trust the model only up to twice what it has seen */
		cap = (uint32_t)(2.0 * b->seen_tokens);
	if (cap <= floor_) {
		b->chosen = floor_;
		return b->chosen;
	}
	/* the largest chunk predicted under the limit; the prediction is non-decreasing in the
	 * chunk (non-negative coefficients over non-decreasing features) */
	uint32_t lo = 1, hi = cap - d;
	double f[RL_BUDGET_NF];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;
		/* the chunk may end its prompt and sample: count it as one more sampled row */
		rl_budget_step_features(d + 1, dec_ctx, prefix, mid, f);
		rl_budget_route(b, 1, f);
		if (rl_budget_predict(b, f) <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	b->chosen = d + lo;
	return b->chosen;
}

uint32_t rl_budget_max_running(const struct rl_budget *b)
{
	if (b->n_obs + b->n_prior < WARMUP || !b->target_ns)
		return b->max_budget;
	const double limit = RL_BUDGET_DECODE_SHARE * (double)b->target_ns;
	const double ctx = b->last_decodes ? b->last_dec_ctx / b->last_decodes + 1 : b->last_prefix;
	double f[RL_BUDGET_NF];
	uint32_t lo = 1, hi = b->max_budget;
	while (lo < hi) {                  /* the prediction is non-decreasing in the count */
		uint32_t mid = lo + (hi - lo + 1) / 2;
		rl_budget_step_features(mid, ctx * mid, 0, 0, f);
		rl_budget_route(b, 0, f);
		if (rl_budget_predict(b, f) <= limit)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s)
{
	struct rl_sched_stats st;
	rl_sched_get_stats(s, &st);
	/* sequences past prefill decode next step; the last step's mean context stands in for
	 * theirs (each has grown by one token since) */
	uint32_t d = st.running > st.prefilling ? st.running - st.prefilling : 0;
	double mean_ctx = b->last_decodes ? b->last_dec_ctx / b->last_decodes + 1 : b->last_prefix;
	return rl_budget_choose(b, d, mean_ctx * d, b->last_prefix);
}

void rl_budget_publish(const struct rl_budget *b, struct rl_info_stats *st)
{
	/* picoseconds, so sub-nanosecond per-unit costs survive the integer field */
#define PS(i) (uint64_t)(b->theta[i] * 1000.0)
	atomic_store_explicit(&st->coef_c0_ps, PS(0), memory_order_relaxed);
	atomic_store_explicit(&st->coef_samp_ps, PS(1), memory_order_relaxed);
	atomic_store_explicit(&st->coef_pf_ps, PS(2), memory_order_relaxed);
	atomic_store_explicit(&st->coef_datt_ps, PS(3), memory_order_relaxed);
	atomic_store_explicit(&st->coef_patt_ps, PS(4), memory_order_relaxed);
	atomic_store_explicit(&st->coef_prompt_ps, PS(5), memory_order_relaxed);
	atomic_store_explicit(&st->budget_margin_ppm, (uint64_t)(b->margin * 1e6), memory_order_relaxed);
	atomic_store_explicit(&st->budget_calib_ns, b->calib_ns, memory_order_relaxed);
	atomic_store_explicit(&st->budget, b->chosen, memory_order_relaxed);
#undef PS
}
