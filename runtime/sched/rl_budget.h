/* rl_budget.h — the automatic token budget (--max-batch-tokens auto --itl-target-us T).
 *
 * An online model of step time, fitted by recursive least squares with forgetting over the
 * steps the runtime has actually run:
 *     step_ns ≈ c0 + c_tok·tokens + c_seq·seqs + c_att·(Σ q_len·ctx_len / 1024)
 * (fixed cost; per-token projections and MLP; per-sequence overheads; attention work). Before
 * each step it picks the largest budget whose predicted step time, plus a margin of twice the
 * model's recent mean absolute prediction error, stays under T for the step it is
 * about to compose (the decodes it knows of plus one prefill chunk). It never goes below the
 * decodes plus one minimum chunk (a KV block), so prefill always moves even when T cannot be
 * met. Forgetting (λ) lets it follow changes in load and context length; the covariance is kept
 * bounded so that forgetting in directions no step excites (e.g. long decode-only phases)
 * cannot wind it up. The budget grows at most to twice the largest step seen recently, so a
 * model fitted on small steps is not trusted far outside what it has seen.
 */
#ifndef RL_BUDGET_H
#define RL_BUDGET_H
#include <stdint.h>
#include "kernels/rl_batch.h"

#define RL_BUDGET_NF 4

struct rl_budget {
	uint64_t target_ns;
	uint32_t min_chunk, max_budget;
	double   theta[RL_BUDGET_NF];          /* coefficients, ns per feature unit */
	double   P[RL_BUDGET_NF][RL_BUDGET_NF];/* RLS inverse covariance */
	double   p_trace_max;                  /* forgetting stops while trace(P) is above this */
	double   lambda;                       /* forgetting factor */
	double   err_abs;                      /* EWMA of |a-priori prediction error|, ns */
	double   seen_tokens;                  /* slowly decaying max of observed step tokens */
	uint64_t n_obs;
	/* what the last step looked like, to predict the next */
	uint32_t last_decodes, last_seqs, last_prefix;
	double   last_dec_att;
	uint32_t chosen;
};

struct rl_info_stats;
struct rl_sched;

/* min_chunk: smallest prefill chunk (the KV block size); max_budget: the ceiling. */
void     rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t min_chunk, uint32_t max_budget);
/* Features of a step: [1, tokens, seqs, Σ q_len·ctx_len / 1024]. */
void     rl_budget_features(const struct rl_batch *bt, double f[RL_BUDGET_NF]);
/* Feed one finished step and its measured time. */
void     rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns);
/* One RLS update from raw features (observe calls it; tests drive it directly). */
void     rl_budget_update(struct rl_budget *b, const double f[RL_BUDGET_NF], double step_ns);
/* Predicted step time. Negative per-unit coefficients (possible while features are collinear)
 * count as 0, so the prediction never falls as a step grows and the budget search is sound. */
double   rl_budget_predict(const struct rl_budget *b, const double f[RL_BUDGET_NF]);
/* The budget for a step with `decodes` decode rows whose contexts sum to dec_ctx tokens and
 * a prefill chunk that starts after `prefix` cached tokens. Always within
 * [min(decodes + min_chunk, max_budget), max_budget]; stored in b->chosen. */
uint32_t rl_budget_choose(struct rl_budget *b, uint32_t decodes, double dec_ctx, uint32_t prefix);
/* rl_budget_choose for the step the scheduler is about to compose. */
uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s);
void     rl_budget_publish(const struct rl_budget *b, struct rl_info_stats *st);

#endif
