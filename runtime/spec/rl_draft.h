/* rl_draft.h — the draft-model drafter of speculative decoding (ringlmd --spec FILE.gguf):
 * a second, smaller model with the target's vocabulary, run by its own backend instance over
 * its own KV pool, proposing greedy drafts for the scheduler's asks (rl_sched_plan).
 *
 * It runs in steps of its own, on the runtime thread, between the scheduler's two phases of
 * the target's step (the loop calls it after rl_sched_plan, before rl_sched_compose): first one step that brings every asking sequence's draft KV up to date (the
 * tokens accepted since its last drafts, the whole prompt the first time; chunked by the
 * backend's row budget, a sequence that does not fit drafts nothing this time) and samples
 * each one's first draft, then one single-row step per further draft position. Its own steps,
 * not rows of the target's: the two models have different weights, so one backend pass cannot
 * carry both, and the target's step needs the drafts as its input anyway.
 *
 * Drafts are greedy (the draft's argmax): a point-mass q, for which the scheduler's coupled
 * verification is the exact rejection rule (rl_spec.h). Its KV for a sequence stays valid
 * across steps for every position whose token it fed that the sequence kept: the drafter
 * remembers the drafts it fed and, at the next ask, resumes from the first one the sequence
 * did not accept (nothing is copied; the positions after it are written over).
 */
#ifndef RL_DRAFT_H
#define RL_DRAFT_H
#include <stdint.h>
#include "runtime/sched/rl_sched.h"

struct rl_backend;
struct rl_draft;

/* be: the draft model's backend (not owned), its KV pool n_blocks blocks of block_size, at
 * most max_seqs sequences and max_tokens rows a step (its params); seq ids are below
 * pool_size (the scheduler's pool); contexts up to max_ctx. */
int  rl_draft_create(struct rl_backend *be, uint32_t n_blocks, uint32_t block_size, uint32_t max_seqs,
		     uint32_t max_tokens, uint32_t pool_size, uint32_t max_ctx, struct rl_draft **out);
void rl_draft_destroy(struct rl_draft *d);
/* Fills asks[i].out and n_out. 0, or -errno from the backend (then every n_out is 0). */
int  rl_draft_propose(struct rl_draft *d, struct rl_draft_ask *asks, uint32_t n);
/* Forgets sequence seq_id (its KV blocks go back to the draft's pool). */
void rl_draft_forget(struct rl_draft *d, uint32_t seq_id);

struct rl_draft_stats {
	uint64_t steps, rows;          /* draft-model steps run, rows they carried */
	uint64_t ns;                   /* time in them */
};
void rl_draft_get_stats(const struct rl_draft *d, struct rl_draft_stats *st);

#endif
