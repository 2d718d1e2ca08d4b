/* rl_budget.c — online step-time model and budget choice (see rl_budget.h). */
#include <math.h>
#include <string.h>
#include "runtime/sched/rl_budget.h"
#include "runtime/sched/rl_sched.h"
#include "ipc/rl_wire.h"

#define P0         1e6     /* weak prior: coefficients start at 0 and move fast */
#define WARMUP     8       /* observations before the fit is trusted */
#define ERR_ALPHA  0.05    /* EWMA weight of the typical prediction error */
#define MARGIN     2.0     /* the pick keeps this many typical errors below the target */
#define CLIP       4.0     /* errors beyond this many typical errors are clipped */
#define SEEN_DECAY 0.999   /* per step; a burst of big steps is remembered for ~1000 steps */

void rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t min_chunk, uint32_t max_budget)
{
	memset(b, 0, sizeof *b);
	b->target_ns = target_ns;
	b->min_chunk = min_chunk ? min_chunk : 16;
	b->max_budget = max_budget > b->min_chunk ? max_budget : b->min_chunk;
	b->lambda = 0.998;      /* memory of ~500 steps: seconds at GPU step times */
	for (int i = 0; i < RL_BUDGET_NF; i++)
		b->P[i][i] = P0;
	b->p_trace_max = RL_BUDGET_NF * P0;
	/* start small: until the model has seen steps, a big first step could blow the target */
	b->chosen = 4 * b->min_chunk < b->max_budget ? 4 * b->min_chunk : b->max_budget;
}

void rl_budget_features(const struct rl_batch *bt, double f[RL_BUDGET_NF])
{
	double att = 0;
	for (uint32_t i = 0; i < bt->n_seqs; i++)
		att += (double)bt->seqs[i].q_len * bt->seqs[i].ctx_len;
	f[0] = 1;
	f[1] = bt->n_tokens;
	f[2] = bt->n_seqs;
	f[3] = att / 1024.0;
}

double rl_budget_predict(const struct rl_budget *b, const double f[RL_BUDGET_NF])
{
	double y = b->theta[0];
	for (int i = 1; i < RL_BUDGET_NF; i++)
		y += (b->theta[i] > 0 ? b->theta[i] : 0) * f[i];
	return y;
}

/* RLS step: k = P f / (λ + fᵀ P f); θ += k (y − fᵀθ); P = (P − k fᵀ P) / λ.
 * The division by λ (forgetting) is skipped when it would push trace(P) past its bound:
 * otherwise directions no step excites grow as λ^-n until the numbers overflow. */
void rl_budget_update(struct rl_budget *b, const double f[RL_BUDGET_NF], double y)
{
	double Pf[RL_BUDGET_NF], denom = b->lambda, err = y;
	for (int i = 0; i < RL_BUDGET_NF; i++) {
		Pf[i] = 0;
		for (int j = 0; j < RL_BUDGET_NF; j++)
			Pf[i] += b->P[i][j] * f[j];
		denom += f[i] * Pf[i];
		err -= b->theta[i] * f[i];
	}
	/* Outliers (the runtime thread preempted on a busy machine, a page fault) are one-sided
	 * and can be ten times a step; least squares would chase them. Once the model is trusted,
	 * an error counts at most CLIP typical errors (Huber-style robust RLS). The typical error
	 * is a mean absolute error, not a variance, so rare stalls (which no budget can prevent)
	 * do not widen the safety margin and starve prefill. */
	if (b->n_obs >= WARMUP) {
		double lim = CLIP * b->err_abs + 0.01 * fabs(y);
		if (b->n_obs > WARMUP && fabs(err) > lim)
			err = err > 0 ? lim : -lim;
		b->err_abs += ERR_ALPHA * (fabs(err) - b->err_abs);
	}
	for (int i = 0; i < RL_BUDGET_NF; i++)
		b->theta[i] += Pf[i] / denom * err;
	double tr = 0;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		for (int j = 0; j < RL_BUDGET_NF; j++) {
			b->P[i][j] -= Pf[i] * Pf[j] / denom;
			if (i == j)
				tr += b->P[i][i];
		}
	/* and no single coefficient may become less certain than its prior */
	for (int i = 0; i < RL_BUDGET_NF; i++)
		if (b->P[i][i] / b->lambda > P0)
			tr = INFINITY;
	if (tr / b->lambda <= b->p_trace_max)
		for (int i = 0; i < RL_BUDGET_NF; i++)
			for (int j = 0; j < RL_BUDGET_NF; j++)
				b->P[i][j] /= b->lambda;
	b->n_obs++;
}

void rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns)
{
	double f[RL_BUDGET_NF];
	rl_budget_features(bt, f);
	rl_budget_update(b, f, (double)step_ns);
	b->seen_tokens *= SEEN_DECAY;
	if (bt->n_tokens > b->seen_tokens)
		b->seen_tokens = bt->n_tokens;
	b->last_seqs = bt->n_seqs;
	b->last_decodes = bt->n_seqs - bt->n_prefill;
	b->last_dec_att = 0;
	b->last_prefix = 0;
	for (uint32_t i = 0; i < bt->n_seqs; i++) {
		const struct rl_batch_seq *q = &bt->seqs[i];
		if (i >= bt->n_prefill)
			b->last_dec_att += q->ctx_len;
		else if (q->ctx_len - q->q_len > b->last_prefix)
			b->last_prefix = q->ctx_len - q->q_len;
	}
}

static double predict_step(const struct rl_budget *b, uint32_t d, double dec_ctx, uint32_t prefix,
			   uint32_t chunk)
{
	double f[RL_BUDGET_NF] = {
		1, (double)d + chunk, (double)d + 1,
		(dec_ctx + (double)chunk * ((double)prefix + chunk)) / 1024.0,
	};
	return rl_budget_predict(b, f);
}

/* Largest budget (decodes + chunk, chunk a multiple of min_chunk) predicted under target. */
uint32_t rl_budget_choose(struct rl_budget *b, uint32_t d, double dec_ctx, uint32_t prefix)
{
	uint32_t floor_ = d < b->max_budget - b->min_chunk ? d + b->min_chunk : b->max_budget;
	if (b->n_obs < WARMUP) {
		/* too little data to trust: keep the small starting budget, but still let prefill in */
		if (b->chosen < floor_)
			b->chosen = floor_;
		return b->chosen;
	}
	double target = (double)b->target_ns - MARGIN * b->err_abs;
	uint32_t cap = b->max_budget;
	/* trust the model only up to twice the largest step it has seen */
	if (2.0 * b->seen_tokens < cap)
		cap = (uint32_t)(2.0 * b->seen_tokens);
	uint32_t lo = 1, hi = cap > d ? (cap - d) / b->min_chunk : 1;
	if (hi < 1)
		hi = 1;
	/* binary search on the number of min_chunk units of prefill; the prediction is
	 * non-decreasing in the chunk (rl_budget_predict) */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;
		if (predict_step(b, d, dec_ctx, prefix, mid * b->min_chunk) <= target)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint64_t budget = (uint64_t)d + (uint64_t)lo * b->min_chunk;
	b->chosen = budget > b->max_budget ? b->max_budget : (uint32_t)budget;
	if (b->chosen < floor_)
		b->chosen = floor_;
	return b->chosen;
}

uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s)
{
	struct rl_sched_stats st;
	rl_sched_get_stats(s, &st);
	/* sequences past prefill decode next step; the last step's mean context stands in for
	 * theirs (each has grown by one token since) */
	uint32_t d = st.running > st.prefilling ? st.running - st.prefilling : 0;
	double mean_ctx = b->last_decodes ? b->last_dec_att / b->last_decodes + 1 : b->last_prefix;
	return rl_budget_choose(b, d, mean_ctx * d, b->last_prefix);
}

void rl_budget_publish(const struct rl_budget *b, struct rl_info_stats *st)
{
	/* picoseconds, so sub-nanosecond per-unit costs survive the integer field */
#define PS(i) (uint64_t)(b->theta[i] > 0 ? b->theta[i] * 1000.0 : 0)
	atomic_store_explicit(&st->coef_c0_ps, PS(0), memory_order_relaxed);
	atomic_store_explicit(&st->coef_tok_ps, PS(1), memory_order_relaxed);
	atomic_store_explicit(&st->coef_seq_ps, PS(2), memory_order_relaxed);
	atomic_store_explicit(&st->coef_ctx_ps, PS(3), memory_order_relaxed);
	atomic_store_explicit(&st->budget, b->chosen, memory_order_relaxed);
#undef PS
}
