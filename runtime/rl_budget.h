/* rl_budget.h — the automatic token budget (--max-batch-tokens auto --itl-target-us T).
 *
 * An online model of step time, fitted by recursive least squares with forgetting over the
 * steps the runtime has actually run:
 *     step_ns ≈ c0 + c_tok·tokens + c_seq·seqs + c_att·(Σ q_len·ctx_len / 1024)
 * (fixed cost; per-token projections and MLP; per-sequence overheads; attention work). Before
 * each step it picks the largest budget whose predicted step time stays under T for the step
 * it is about to compose (the decodes it knows of plus a prefill chunk), never less than the
 * decodes plus one block of prefill, so prefill always moves. Forgetting (λ) lets it follow
 * changes in load and context length.
 */
#ifndef RL_BUDGET_H
#define RL_BUDGET_H
#include <stdint.h>
#include "rl_batch.h"

#define RL_BUDGET_NF 4

struct rl_budget {
	uint64_t target_ns;
	uint32_t min_chunk, max_budget;
	double   theta[RL_BUDGET_NF];          /* coefficients, ns per feature unit */
	double   P[RL_BUDGET_NF][RL_BUDGET_NF];/* RLS inverse covariance */
	double   lambda;                       /* forgetting factor */
	uint64_t n_obs;
	/* what the last step looked like, to predict the next */
	uint32_t last_decodes, last_seqs, last_prefix;
	double   last_dec_att;
	uint32_t chosen;
};

struct rl_info_stats;
struct rl_sched;

void     rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t min_chunk, uint32_t max_budget);
/* Features of a step: [1, tokens, seqs, Σ q_len·ctx_len / 1024]. */
void     rl_budget_features(const struct rl_batch *bt, double f[RL_BUDGET_NF]);
void     rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns);
void     rl_budget_update(struct rl_budget *b, const double f[RL_BUDGET_NF], double step_ns);
double   rl_budget_predict(const struct rl_budget *b, const double f[RL_BUDGET_NF]);
uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s);
void     rl_budget_publish(const struct rl_budget *b, struct rl_info_stats *st);

#endif
