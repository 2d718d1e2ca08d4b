/* rl_spec.h — speculative decoding's policy in the scheduler: each request's draft length,
 * and the step-cost fit it reads. The drafts themselves come from runtime/spec/ (prompt
 * lookup, rl_ngram.h; a draft model, rl_draft.h), run by the loop between the scheduler's two
 * phases (rl_sched.h: rl_sched_plan asks, rl_sched_compose places what was drafted).
 *
 * The scheduler appends a sequence's drafts as extra rows of its decode (rl_batch.h:
 * n_draft), and after the step keeps the leading drafts the target's own samples agree with.
 * Verification is by coupling: the backend samples
 * every row with the randomness plain decoding would use for that position (rl_sample keys
 * draws by (seed, position)), and a draft is accepted when the sample equals it. For a draft
 * that is one token with certainty (a point-mass q, as both prompt lookup and a greedy draft
 * give), this is exactly the standard rule: accept with min(1, p(d)/q(d)) = p(d), and on
 * rejection the sample is distributed as p with d removed, normalised, i.e. max(0, p - q)
 * normalised. So the output is the target's distribution, and, more, the very tokens the
 * request gives without speculation for the same seed (greedy or sampled), up to the
 * multi-row kernels' rounding at a near-tie.
 *
 * Draft length: each request keeps a decayed count of drafts accepted and drafts tested (up
 * to and including the first rejection), whose ratio α estimates the chance that a draft
 * token is accepted. With each draft costing c of a one-row step, k drafts yield
 * (1 - α^(k+1)) / (1 - α) tokens for 1 + c·k steps; the length chosen maximises that ratio.
 * When no length beats plain decoding (α <= c), the request stops drafting for a while, and
 * probes with one draft after it; the pause doubles (up to RL_SPEC_MAX_PAUSE steps) each time
 * drafting still does not pay, and starts short again once it does. When a draft costs so much
 * that even drafts all accepted would not pay (a draft model as slow as the target), nothing
 * is drafted or probed until the measured cost falls.
 *
 * c is measured (struct rl_spec_cost): the runtime fits step time = a + b·rows over the
 * decode steps it runs (speculation itself makes their row counts differ), so a verification
 * row costs b / (a + b) of a one-row step, and a draft model's time per draft adds its share.
 * A small model, whose step is mostly fixed cost per row, finds drafting rarely pays; a large
 * one, whose step is reading the weights, finds rows nearly free.
 */
#ifndef RL_SPEC_H
#define RL_SPEC_H
#include <stdint.h>

#define RL_SPEC_MAX_K      16          /* longest draft (--spec-k's ceiling) */
#define RL_SPEC_DEFAULT_K  8           /* --spec-k when not given: the adaptive length
					* rarely wants more at the acceptance rates seen */
#define RL_SPEC_ROW_COST   0.1         /* c until measured: the cpu backend's 1B Q8_0 decodes 8
					* rows for 1.28 of one (c = 0.04); small models pay more */
#define RL_SPEC_COST_DECAY 0.995       /* the step-time fit's memory (~200 steps) */
#define RL_SPEC_DECAY      0.85        /* per-round decay of the acceptance counts (~7 rounds) */
#define RL_SPEC_MAX_PAUSE  64          /* decode steps without drafts after repeated failure */
#define RL_SPEC_CUDA_ROWS  64          /* draft rows a cuda step verifies at most: its LM head
					* and sampler keep that many more rows of vocabulary-wide
					* logits (64 x 128k x 8 bytes = 64 MiB) */
#define RL_SPEC_SHARED_STEP 0.1        /* drafts may lengthen the decodes of a step that several
					* streams wait on by this share at most: its rows are paid
					* by every stream's gaps, the tokens only by the drafters */

/* A request's draft-length state (scheduler-owned). */
struct rl_spec_state {
	float    acc, tried;           /* decayed drafts accepted / tested */
	uint16_t wait;                 /* steps left without drafting */
	uint16_t pause;                /* the next pause after a failed round */
};

void     rl_spec_init(struct rl_spec_state *st);
/* Drafts to propose now, at most k_max, each costing c of a one-row step: 0 while paused
 * (counting the pause down) or when drafting does not pay at the current rate. */
uint32_t rl_spec_len(struct rl_spec_state *st, uint32_t k_max, double c);

/* Decode step time = a + b·rows, fitted online (least squares, forgetting old steps). */
struct rl_spec_cost {
	double sw, sr, srr, st, srt;
};
void   rl_spec_cost_observe(struct rl_spec_cost *f, uint32_t rows, uint64_t ns);
/* c for rl_spec_len: b / (a + b), plus draft_ns (a draft model's time per draft) / (a + b);
 * RL_SPEC_ROW_COST (plus the same share) until the steps seen differ enough in rows. */
double rl_spec_cost_row(const struct rl_spec_cost *f, double draft_ns);
/* After a verification: a of n drafts accepted. */
void     rl_spec_update(struct rl_spec_state *st, uint32_t a, uint32_t n);
#endif
