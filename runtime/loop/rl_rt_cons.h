/* rl_rt_cons.h — the runtime's constraints (structured output, constrain/): the compiled
 * handles, shared by the requests that name the same text, and each constrained sequence's
 * automaton state and allowed-token mask (rl_seq.allow, which the scheduler hands the
 * backend as rl_batch_seq.allow).
 *
 * Nothing a request brings is compiled on the runtime thread. A request whose constraint has
 * a ready handle starts at once (its first mask comes from the handle's cache); any other
 * waits, taking no KV, while a helper thread ("ringlm-cons", at nice --cons-nice) compiles it,
 * computes the masks of the states nearest its start, and hands the handle back. Requests
 * naming a constraint already being compiled wait for that same compile. The vocabulary's
 * tries are built at create, before the runtime serves.
 *
 * The protocol between the runtime thread (R) and the helper (H), C11 atomics only; two
 * single-producer single-consumer rings of RL_RT_CONS_HANDLES records, indexed by free-running
 * uint32 counters:
 *   jobs  R fills jobs[job_tail % N], then job_tail (release) and bell += 1 (release), then
 *         wakes the futex on bell. H loads job_tail (acquire) against its private head, and
 *         sleeps on bell (futex, the bell value it read before looking) when they match.
 *   done  H fills done[done_tail % N], then done_tail (release), then writes 1 to the eventfd
 *         (rl_rt_cons_fd), which R keeps a poll on in its io_uring, so a sleeping runtime
 *         wakes. R polls done_tail (acquire) each pass of its loop: one load, no syscall.
 * A handle is either R's or, while compiling, H's alone: R posts a job only for a handle in
 * state COMPILING and touches nothing of it until the matching done record; H never touches a
 * handle after posting its done record. At most N handles compile at once, so neither ring
 * overruns (a slot is refilled only after its record was consumed). The vocabulary is
 * read-only once built and shared.
 *
 * A mask is computed when the sequence starts and after each of its tokens (cached per
 * automaton state by the engine): a state the helper did not reach costs the step one trie
 * walk, bounded by `ringlm bench grammar`'s cold_max.
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
#define RL_RT_CONS_NICE 5              /* the helper's default nice value (--cons-nice) */
/* the helper's CPU time for the masks of the states nearest a new handle's start
 * (rl_cons_prewarm): what the runtime thread is spared, against what the request waits */
#define RL_RT_CONS_PREWARM_NS (20 * 1000000ull)

struct rl_rt_cons;

/* Over the model's vocabulary (the backend's blob, rl_tok.h; its tries are built here, and a
 * model without one refuses constraints at start), for sequence ids below pool_size, with
 * room for max_draft drafts' masks a sequence (the runtime's spec_k; 0 without speculation);
 * each constraint's automaton holds at most max_states states (0: the engine's 100000). The
 * helper thread starts here, at nice (its creator's affinity). 0, -ENOMEM, -errno of the
 * thread or eventfd. */
int  rl_rt_cons_create(const void *vocab_blob, size_t vocab_bytes, uint32_t pool_size, uint32_t max_draft,
		       uint32_t max_states, int nice, struct rl_rt_cons **out);
/* Stops the helper (a compile under way finishes first) and frees everything. */
void rl_rt_cons_destroy(struct rl_rt_cons *k);
/* The eventfd the helper writes after each compile: poll it, then call rl_rt_cons_poll. */
int  rl_rt_cons_fd(const struct rl_rt_cons *k);
/* sequence seq_id's constraint's sticky failure (rl_cons_error: -E2BIG, -ENOMEM), 0 none */
int  rl_rt_cons_error(const struct rl_rt_cons *k, uint32_t seq_id);
/* the cap in force (max_states, or the engine's default) */
uint32_t rl_rt_cons_max_states(const struct rl_rt_cons *k);
/* Puts sequence seq_id under the constraint (kind: enum rl_cons_kind, text: len bytes).
 * 0: its handle is ready and *allow is its mask for the first token (the pool entry's buffer,
 * valid until rl_rt_cons_destroy: a step in flight may read it after a cancel). 1: it waits
 * for its compile; rl_rt_cons_poll reports it. -EINVAL with the reason in err (an unknown
 * kind); -ENOTSUP (a model without a vocabulary); -EBUSY (RL_RT_CONS_HANDLES other
 * constraints in use or being compiled); -ENOMEM; and for a cached handle, the first mask's
 * failures as rl_rt_cons_poll reports them. */
int  rl_rt_cons_start(struct rl_rt_cons *k, uint32_t seq_id, int kind, const char *text, size_t len,
		      const uint32_t **allow, char *err, size_t errlen);
/* Compiles the helper finished: for each sequence that waited on one, ready(ctx, seq_id, rc,
 * allow, err) with rc and allow as rl_rt_cons_start's 0, or its error: -EINVAL with the
 * compiler's one-line reason, -EOVERFLOW (the automaton needs more than the cap's states, at
 * compile or for the first mask), -ENOMEM. A sequence reported with an error is under no
 * constraint. Returns the count of compiles taken (one acquire load when there is none). */
typedef void rl_rt_cons_ready_fn(void *ctx, uint32_t seq_id, int rc, const uint32_t *allow, const char *err);
int  rl_rt_cons_poll(struct rl_rt_cons *k, rl_rt_cons_ready_fn *ready, void *ctx);
/* what the helper did, as the runtime thread has taken it (rl_rt_cons_poll) */
struct rl_rt_cons_stats {
	uint64_t compiles;             /* compiles finished, failed ones too */
	uint64_t compile_ns;           /* their wall time on the helper, prewarm included */
	uint64_t prewarmed;            /* masks the helper computed ahead */
	uint32_t waiting;              /* sequences waiting for a compile now */
};
void rl_rt_cons_get_stats(const struct rl_rt_cons *k, struct rl_rt_cons_stats *st);
/* sequences waiting for a compile */
uint32_t rl_rt_cons_waiting(const struct rl_rt_cons *k);
/* 1 when sequence seq_id waits for its compile */
int  rl_rt_cons_is_waiting(const struct rl_rt_cons *k, uint32_t seq_id);
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
/* The sequence is gone (or no longer waits): its state and mask are dropped (its handle stays
 * compiled, and a compile it waited for goes on for the next request that names it). */
void rl_rt_cons_forget(struct rl_rt_cons *k, uint32_t seq_id);

#endif
