/* budget.c — online step-time model and budget choice (see rl_budget.h). */
#include <math.h>
#include <string.h>
#include "rl_budget.h"
#include "rl_wire.h"

void rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t min_chunk, uint32_t max_budget)
{
	memset(b, 0, sizeof *b);
	b->target_ns = target_ns;
	b->min_chunk = min_chunk ? min_chunk : 16;
	b->max_budget = max_budget > b->min_chunk ? max_budget : b->min_chunk;
	b->lambda = 0.995;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		b->P[i][i] = 1e6;      /* weak prior: coefficients start at 0, move fast */
	b->chosen = b->max_budget < 256 ? b->max_budget : 256;
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
	double y = 0;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		y += (b->theta[i] > 0 || i == 0 ? b->theta[i] : 0) * f[i];
	return y;
}

/* Standard RLS step: k = P f / (λ + fᵀ P f); θ += k (y − fᵀθ); P = (P − k fᵀ P) / λ. */
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
	for (int i = 0; i < RL_BUDGET_NF; i++)
		b->theta[i] += Pf[i] / denom * err;
	for (int i = 0; i < RL_BUDGET_NF; i++)
		for (int j = 0; j < RL_BUDGET_NF; j++)
			b->P[i][j] = (b->P[i][j] - Pf[i] * Pf[j] / denom) / b->lambda;
	b->n_obs++;
}

void rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns)
{
	double f[RL_BUDGET_NF];
	rl_budget_features(bt, f);
	rl_budget_update(b, f, (double)step_ns);
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

/* Largest budget (decodes + chunk, chunk a multiple of min_chunk) predicted under target. */
uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s)
{
	(void)s;
	if (b->n_obs < 8)              /* too little data to trust: keep the starting budget */
		return b->chosen;
	uint32_t d = b->last_decodes, lo = 1, hi = (b->max_budget - (d < b->max_budget ? d : 0)) / b->min_chunk;
	double f[RL_BUDGET_NF];
	if (hi < 1)
		hi = 1;
	/* binary search on the number of min_chunk units of prefill */
	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2, chunk = mid * b->min_chunk;
		f[0] = 1;
		f[1] = d + chunk;
		f[2] = d + 1;
		f[3] = (b->last_dec_att + (double)chunk * (b->last_prefix + chunk)) / 1024.0;
		if (rl_budget_predict(b, f) <= (double)b->target_ns)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint32_t budget = d + lo * b->min_chunk;
	b->chosen = budget > b->max_budget ? b->max_budget : budget;
	return b->chosen;
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
