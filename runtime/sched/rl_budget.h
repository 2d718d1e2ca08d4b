/* rl_budget.h — the automatic token budget: ringlmd's default (and --max-batch-tokens auto),
 * with the inter-token target T of --itl-target-us or, when none is given, T derived from the
 * model and the machine (rl_budget_default_target below).
 *
 * A model of step time, linear in six features of the step
 *     step_ns ≈ c0 + c_samp·(sampled rows) + c_pf·(prefill tokens)
 *                  + c_datt·(Σ decode ctx_len)/1024 + c_patt·(Σ prefill attention pairs)/1024
 *                  + c_prompt·[the step has prompt rows]
 * where a prefill chunk of q rows after p cached tokens has q·p + q(q+1)/2 query-key pairs
 * (causal); the last term is a cost a step with prompt rows pays at once on a backend whose
 * prompt steps take other kernels (rl_backend_info.prompt_cost: the CPU decodes Q4_1/Q5_1
 * weights to bf16 tiles every such step), 0 for the others. Sampled rows (every decode row, and the last row of a prompt's final chunk) and
 * prefill tokens are separate because on real backends they cost differently (a decode row
 * rides along a pass that reads every weight anyway, and each sampled row adds an LM-head row
 * and the sampler; a prefill token of a long chunk is compute), and each has its own attention
 * term.
 *
 * The fit is non-negative least squares: every coefficient is >= 0 in the fit itself, so the
 * model that is fitted is the model that predicts (a coefficient fitted negative and clipped
 * only when predicting would make the two differ). It is solved on weighted normal equations:
 *   - a prior from the start-up calibration (a few timed steps of known shapes before serving,
 *     rl_budget_prior), never forgotten, so a direction that serving has not excited lately
 *     (prefill after a long decode-only phase) keeps its calibrated cost;
 *   - the steps actually run (rl_budget_observe), forgotten with λ (a memory of ~500 steps), so
 *     the fit follows load, context length and the machine.
 * Each observation is weighted by 1/step_ns², so small and large steps are fitted to the same
 * relative accuracy. Outliers (the runtime thread preempted, a page fault) beyond four typical
 * relative errors are clipped before they enter the fit (the typical error is an EWMA of the
 * clipped errors, so a lasting change of the machine widens it until the fit follows).
 *
 * The pick: before each step, the largest budget (the decodes the scheduler will run plus a
 * prefill chunk, searched token by token) whose prediction times (1 + margin) stays under T,
 * where the margin is the larger of the 95% quantile of the recent relative errors of steps
 * that carried prefill and were predicted at half of T or more (the steps the pick sizes: a
 * few milliseconds of interference from another process is a large share of a tiny step and
 * says little about one near T) and their 99% quantile less 10%: 95% of such steps under T and 99%
 * under 1.1 T, the tail, not the mean. The chunk is predicted as if it ended its prompt (one
 * more sampled row). A step that overshoots T shrinks
 * the next chunks at once (by T / its time), recovering over a few steps. The budget never
 * falls below the decodes plus one prefill token, so prefill always moves even when T cannot
 * be met, and grows at most to twice the largest step seen recently (the model is not
 * trusted far outside what it has seen). A pick costs about 14 predictions (binary search)
 * plus, after each step, one refit: at most 40 sweeps of coordinate descent on a 5x5 system,
 * fewer once the warm-started coefficients stop moving.
 */
#ifndef RL_BUDGET_H
#define RL_BUDGET_H
#include <stdint.h>
#include "kernels/rl_batch.h"

#define RL_BUDGET_NF 6                 /* features, in the order above */

/* The default target: RL_BUDGET_TARGET_STEPS short prompt steps (7 prompt tokens beside one
 * decode row, timed by the calibration: a step's fixed costs, a decode's and a prompt step's
 * own), within [RL_BUDGET_TARGET_MIN_NS, RL_BUDGET_TARGET_MAX_NS]. A step that long pays
 * those costs for at most 1/8 of its time, so prefill chunks beside the decodes keep ~7/8 of
 * their unchunked rate (eight one-row decode steps alone left SmolLM2-135M Q4_1, whose prompt
 * steps decode bf16 tiles, at 25 ms and half its prefill rate on two Zen 4 cores);
 * the ceiling is 25 tokens/s, faster than anyone reads, and leaves the margin's tail (99%
 * under 1.1 T) under 50 ms; below the floor a step's tail is the OS's scheduling tick, not
 * the step. */
#define RL_BUDGET_TARGET_STEPS  8
#define RL_BUDGET_TARGET_MIN_NS 10000000ull
#define RL_BUDGET_TARGET_MAX_NS 40000000ull
#define RL_BUDGET_NR 128               /* relative errors kept for the margin */

struct rl_budget {
	uint64_t target_ns;
	uint32_t max_budget;
	int      prompt_cost;                  /* rl_backend_info.prompt_cost; set after init */
	double   theta[RL_BUDGET_NF];          /* coefficients, ns per feature unit, all >= 0 */
	double   A[RL_BUDGET_NF][RL_BUDGET_NF], v[RL_BUDGET_NF];   /* online normal equations */
	double   A0[RL_BUDGET_NF][RL_BUDGET_NF], v0[RL_BUDGET_NF]; /* calibration prior */
	double   lambda;                       /* forgetting factor of the online part */
	double   resid[RL_BUDGET_NR];          /* relative a-priori errors of prefill steps */
	uint32_t n_resid, resid_pos;
	double   margin;                       /* the 95% quantile of resid, >= 0 */
	double   typ_err;                      /* EWMA of |relative error|, for the outlier clip */
	double   shrink;                       /* <= 1 after an overshoot: scales the target */
	double   seen_tokens;                  /* slowly decaying max of observed step tokens */
	uint64_t n_obs, n_prior;
	uint64_t calib_ns;                     /* wall time the calibration took */
	/* what the last step looked like, to predict the next */
	uint32_t last_decodes, last_prefix;
	double   last_dec_ctx;
	uint32_t chosen;
};

struct rl_info_stats;
struct rl_sched;

/* The target for a short prompt step of step_ns (the rule above; the ceiling when the step is
 * unknown, step_ns <= 0). */
uint64_t rl_budget_default_target(double step_ns);
/* max_budget: the ceiling (the scheduler's max batch tokens); target_ns 0: set later
 * (b->target_ns, before the first pick; rl_calib_run derives it). */
void     rl_budget_init(struct rl_budget *b, uint64_t target_ns, uint32_t max_budget);
/* Features of a step (the units above). */
void     rl_budget_features(const struct rl_budget *b, const struct rl_batch *bt, double f[RL_BUDGET_NF]);
/* Feed one finished step and its measured time. */
void     rl_budget_observe(struct rl_budget *b, const struct rl_batch *bt, uint64_t step_ns);
/* One online update from raw features (observe calls it; tests drive it directly). */
void     rl_budget_update(struct rl_budget *b, const double f[RL_BUDGET_NF], double step_ns);
/* A calibration step: enters the prior (never forgotten), and refits. */
void     rl_budget_prior(struct rl_budget *b, const double f[RL_BUDGET_NF], double step_ns);
/* Predicted step time of features f. */
double   rl_budget_predict(const struct rl_budget *b, const double f[RL_BUDGET_NF]);
/* Features of a step of d decode rows whose contexts sum to dec_ctx tokens and a prefill
 * chunk of `chunk` rows after `prefix` cached tokens (the sixth 0: rl_budget_route sets it). */
void     rl_budget_step_features(uint32_t d, double dec_ctx, uint32_t prefix, uint32_t chunk,
				 double f[RL_BUDGET_NF]);
/* Sets f's sixth feature for a step with (prompt 1) or without prompt rows. */
void     rl_budget_route(const struct rl_budget *b, int prompt, double f[RL_BUDGET_NF]);
/* The budget for such a step, its chunk chosen as above. Always within
 * [min(d + 1, max_budget), max_budget]; stored in b->chosen. */
uint32_t rl_budget_choose(struct rl_budget *b, uint32_t d, double dec_ctx, uint32_t prefix);
/* The most sequences that may run at once (rl_sched_set_max_running): the largest count whose
 * decode-only step, at the last step's mean context, is predicted within RL_BUDGET_DECODE_SHARE
 * of the target, so the rest of a step still moves prompts along; at least 1, at most
 * max_budget; max_budget while the model is not yet trusted. The prediction is the mean, not
 * the margin's tail (that sizes chunks): under overload the streams admitted keep their gaps
 * within 2 T at the margin's cap of 100%, and the others wait in the queue. */
#define RL_BUDGET_DECODE_SHARE 0.75
uint32_t rl_budget_max_running(const struct rl_budget *b);
/* rl_budget_choose for the step the scheduler is about to compose. */
uint32_t rl_budget_pick(struct rl_budget *b, const struct rl_sched *s);
void     rl_budget_publish(const struct rl_budget *b, struct rl_info_stats *st);

#endif
