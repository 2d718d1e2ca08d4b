/* rl_ngram.h — prompt lookup: speculative decoding's draft source without a second model
 * (ringlmd --spec ngram). A sequence's next tokens are guessed from what followed the latest
 * earlier occurrence of its last few tokens, in its own prompt and output: free to compute
 * (O(len) per ask, no model), and right often where text repeats (code edits, quotes,
 * extraction, structured answers).
 */
#ifndef RL_NGRAM_H
#define RL_NGRAM_H
#include <stdint.h>
#include "runtime/sched/rl_sched.h"   /* struct rl_draft_ask */

#define RL_NGRAM_MIN  2               /* shortest suffix matched on: one token repeats too often
				       * in any text to predict the next */
#define RL_NGRAM_MAX  4               /* longest suffix it tries to match */

/* Finds the most recent earlier occurrence of the longest suffix of tok[0..len) of
 * RL_NGRAM_MIN..RL_NGRAM_MAX tokens and copies the k tokens that followed it to out (which
 * must not overlap tok[0..len)); where they run past len, the copy continues from its own
 * start, as a repeating pattern would. Returns k, or 0 with no match. O(len). */
uint32_t rl_ngram_draft(const uint32_t *tok, uint32_t len, uint32_t k, uint32_t *out);
/* Fills asks[i].out / n_out for the n asks of a step (rl_sched_plan). */
void     rl_ngram_propose(struct rl_draft_ask *asks, uint32_t n);

#endif
