/* rl_rt_cons.h — the runtime's constraints (structured output, constrain/): the compiled
 * handles, shared by the requests that name the same text, and each constrained sequence's
 * automaton state and allowed-token mask (rl_seq.allow, which the scheduler hands the
 * backend as rl_batch_seq.allow).
 *
 * On the runtime thread: a request's constraint is compiled when it arrives, unless a handle
 * of the same kind and text is cached (the first request of a schema pays its compile); a
 * mask is computed when the sequence starts and after each of its tokens (cached per
 * automaton state by the engine). The vocabulary's trie is built at the first constrained
 * request.
 *
 * With speculative decoding a constrained sequence's drafts are checked against its
 * constraint, and extended by the tokens the constraint forces (rl_rt_cons_drafts); the
 * masks for the positions after each draft follow its own in the same buffer, so the step
 * verifies each draft row under the constraint. Nothing rolls back: the state moves only
 * with the tokens the step emits (rl_rt_cons_advance).
 */
#ifndef RL_RT_CONS_H
#define RL_RT_CONS_H
#include <stddef.h>
#include <stdint.h>

#define RL_RT_CONS_HANDLES 32          /* distinct constraints kept compiled */

struct rl_rt_cons;

/* Over the model's vocabulary (the backend's blob, rl_tok.h; kept by reference until the
 * trie is built), for sequence ids below pool_size, with room for max_draft drafts' masks a
 * sequence (the runtime's spec_k; 0 without speculation); each constraint's automaton holds
 * at most max_states states (0: the engine's 100000). 0, -ENOMEM. */
int  rl_rt_cons_create(const void *vocab_blob, size_t vocab_bytes, uint32_t pool_size, uint32_t max_draft,
		       uint32_t max_states, struct rl_rt_cons **out);
/* sequence seq_id's constraint's sticky failure (rl_cons_error: -E2BIG, -ENOMEM), 0 none */
int  rl_rt_cons_error(const struct rl_rt_cons *k, uint32_t seq_id);
/* the cap in force (max_states, or the engine's default) */
uint32_t rl_rt_cons_max_states(const struct rl_rt_cons *k);
void rl_rt_cons_destroy(struct rl_rt_cons *k);
/* Puts sequence seq_id under the constraint (kind: enum rl_cons_kind, text: len bytes) and
 * sets *allow to its mask for the first token (the pool entry's buffer, valid until
 * rl_rt_cons_destroy: a step in flight may read it after a cancel). 0; -EINVAL
 * with the compiler's one-line reason in err; -EOVERFLOW (its automaton needs more than the
 * cap's states, at compile or for the first mask; err says); -ENOTSUP (a model without a
 * vocabulary); -EBUSY (RL_RT_CONS_HANDLES other constraints in use); -ENOMEM. */
int  rl_rt_cons_start(struct rl_rt_cons *k, uint32_t seq_id, int kind, const char *text, size_t len,
		      const uint32_t **allow, char *err, size_t errlen);
/* After sequence seq_id's token: its next state and, in place, its mask. 0; -E2BIG when its
 * grammar met the state cap (the handle's sticky failure, rl_cons_error: every sequence under
 * it gets it at its next token, and no later request is given that handle): the sequence
 * must end, its mask no longer says what the grammar allows; -ENOMEM the same for memory;
 * -EINVAL when the constraint did not allow the token (not reached: the mask came first). */
int  rl_rt_cons_advance(struct rl_rt_cons *k, uint32_t seq_id, uint32_t token);
/* A step's drafts draft[0..n) for sequence seq_id (a draft source's, for the positions after
 * its tokens): a constrained sequence keeps the longest run its constraint allows, then takes
 * the tokens the constraint forces after them, up to cap (and max_draft) in all, and its
 * mask buffer (*allow from rl_rt_cons_start) gets the mask after each kept draft: n + 1 masks
 * for the step's n + 1 sampling rows. Returns the count kept; an unconstrained sequence's n. */
uint32_t rl_rt_cons_drafts(struct rl_rt_cons *k, uint32_t seq_id, uint32_t *draft, uint32_t n, uint32_t cap);
/* The sequence is gone: its state and mask are dropped (its handle stays compiled). */
void rl_rt_cons_forget(struct rl_rt_cons *k, uint32_t seq_id);

#endif
