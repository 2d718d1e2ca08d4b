/* rl_sched.h — the step scheduler and its request pool.
 *
 * Runs inside the runtime thread; costs microseconds per step and allocates nothing after
 * create (sequences, token storage, block tables, the batch arrays all come from pools).
 *
 * Life of a request:
 *   q = rl_sched_seq_alloc(s)          take a pool entry (NULL: pool exhausted)
 *   fill q->client, q->rid, q->tag, q->tokens[0..n_prompt), q->n_prompt, q->max_new, q->sp,
 *        q->stop[], q->n_stop, q->priority, q->deadline_ns
 *   rl_sched_enqueue(s, q, now)        validates lengths against limits, queues it
 *   loop: n = rl_sched_plan(s, now, &asks)  who decodes this step, and which of them want
 *                                      drafts: asks[0..n), each with room for k
 *         the draft sources fill asks[i].out / n_out (runtime/spec/: prompt lookup or a
 *                                      draft model; nothing filled = no drafts)
 *         b = rl_sched_compose(s)      places the drafts, then prefill chunks and admissions
 *                                      under what is left of the budget (NULL: nothing runnable)
 *         backend launch/finish(b, out)
 *         rl_sched_complete(s, out, now) appends tokens, emits events through hooks,
 *                                      retires finished sequences
 *   rl_sched_cancel(s, q)              takes it out before the next step, frees blocks
 *
 * The scheduler runs no model and calls no backend: the step's phases read top to bottom in
 * the loop (asks, drafts, composition, the step, completion).
 *
 * Events leave through hooks->emit; a sequence is only put in a step that will sample for it
 * when hooks->reserve(client, 2) succeeded for that step (room for a token and a done event),
 * so a full client event ring pauses that client's sequences and never loses a token.
 * Reservations add up within one step (several sequences of one client); the runtime starts
 * each step's count afresh before rl_sched_plan. An expired request's ERROR event takes
 * reserve(client, 1) and is emitted from rl_sched_plan.
 *
 * Policy (implemented in rl_sched.c): decodes first, one row each in admission order; then
 * draft tokens for them to verify (speculative decoding, spec_k > 0: rl_spec.h), each costing
 * a row of the same budget (at most half of what is left while prompts wait, and in a step
 * of several streams no more than lengthens their decodes by RL_SPEC_SHARED_STEP); then,
 * while prompts are in progress, queued prompts that end their prefill within half of what
 * is left (short questions do not wait behind a long prompt's chunks); then chunks of prompts
 * in progress (ending on block boundaries where the budget allows); then admission in queue
 * order while running < min(max_seqs, the running cap, budget). When a decode or the oldest prefill cannot
 * get a KV block, the newest running sequence is preempted and re-queued at the front to be
 * recomputed. Cancelling between rl_sched_compose and rl_sched_complete is allowed: the step's
 * result for that sequence is dropped, and its blocks are reused only by a later step
 * (between plan and compose nothing but the draft sources may run).
 */
#ifndef RL_SCHED_H
#define RL_SCHED_H
#include <stdint.h>
#include <stddef.h>
#include "ipc/rl_wire.h"         /* event types, finish codes, RL_MAX_STOP_IDS */
#include "kernels/rl_batch.h"   /* RL_BATCH_MAX_TOKENS */

#define RL_SCHED_DEFAULT_BUDGET 512   /* tokens per step when --max-batch-tokens is not given */

/* RL_SEQ_ALLOC: taken by rl_sched_seq_alloc, being filled, not yet enqueued. */
enum rl_seq_state { RL_SEQ_FREE = 0, RL_SEQ_QUEUED, RL_SEQ_PREFILL, RL_SEQ_DECODE, RL_SEQ_DONE,
		    RL_SEQ_ALLOC };

struct rl_seq {
	/* filled by the caller before enqueue */
	uint32_t client;               /* runtime's client slot */
	uint32_t rid;                  /* client's request slot id (echoed in events) */
	uint64_t tag;                  /* client's opaque tag (echoed in events) */
	uint32_t *tokens;              /* [cap] prompt then generated ids; owned by the pool */
	uint32_t cap;                  /* capacity of tokens (= max_ctx) */
	uint32_t n_prompt;
	uint32_t max_new;
	uint32_t stop[RL_MAX_STOP_IDS];
	uint32_t n_stop;
	int32_t  priority;             /* higher runs first; 0 default */
	uint64_t deadline_ns;          /* CLOCK_MONOTONIC; 0 = none. Past it before admission: error */
	uint64_t arrival_ns;
	struct rl_sampling sp;
	uint32_t logprobs;             /* rl_req.logprobs: 0, or 1 + top alternatives per token */
	uint32_t prompt_logprobs;      /* rl_req.prompt_logprobs: the same for the prompt's tokens */
	uint32_t no_spec;              /* 1: never draft for this request (rl_req.no_spec) */
	uint32_t deterministic;        /* 1: its logits are the same bits whatever shares its steps
					* (rl_req's flag, or the scheduler's deterministic param): each
					* step it is in is deterministic (rl_batch.deterministic), and its
					* prefix-cache blocks are shared only with such sequences */
	const uint32_t *allow;         /* structured output: the tokens its constraint allows next
					* (rl_batch_seq.allow; kept current by its owner); NULL: any.
					* A constrained sequence is never drafted for */
	/* scheduler-owned state (read-only for others) */
	enum rl_seq_state state;
	uint32_t id;                   /* pool index */
	uint32_t n_gen;                /* generated so far */
	uint32_t n_computed;           /* tokens whose KV is in the cache */
	uint32_t step_index;           /* its index among the seqs of the step being completed (the
					* backend's per-seq outputs, e.g. log-probabilities, by it) */
	uint32_t plp_next;             /* prompt_logprobs: the next prompt position owed (from 1); the
					* prefix cache is skipped until all are sent, and a chunk
					* computed again after a preemption sends none twice */
	void *sched_priv;
};

/* One sequence's ask for drafts (rl_sched_plan), filled by a draft source (runtime/spec/). */
struct rl_draft_ask {
	uint32_t seq_id;               /* pool index: what a drafter keeps per sequence (its KV)
					* lives under it until hooks->seq_gone(seq_id) */
	const uint32_t *tokens;        /* [len] the sequence's tokens, all accepted */
	uint32_t len;
	uint32_t k;                    /* drafts wanted at most */
	uint32_t *out;                 /* [k] the drafts, for positions len, len + 1, ... */
	uint32_t n_out;                /* set by the drafter: how many (0..k) */
};

struct rl_sched_hooks {
	void *ctx;
	/* Reserve n event slots for client this step; 0 on success, -EAGAIN when it has no room. */
	int  (*reserve)(void *ctx, uint32_t client, uint32_t n);
	/* Deliver an event (type RL_EV_*, token for TOKEN, code = rl_finish for DONE or -errno
	 * for ERROR). Never fails for reserved slots. */
	void (*emit)(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t token, int32_t code);
	/* Deliver an RL_EV_PROMPT event for prompt position pos (token its id): the k-th position
	 * the step scored for q (q->step_index). Never fails for reserved slots. */
	void (*emit_prompt)(void *ctx, const struct rl_seq *q, uint32_t k, uint32_t pos, uint32_t token);
	/* The pool entry seq_id was released: a draft model drops what it kept for it (optional). */
	void (*seq_gone)(void *ctx, uint32_t seq_id);
};

#define RL_SCHED_MAX_EOG 8        /* end-of-generation ids besides EOS */

struct rl_sched_params {
	uint32_t max_batch_tokens;     /* token budget per step (default RL_SCHED_DEFAULT_BUDGET) */
	uint32_t max_seqs;             /* most running sequences (default 256) */
	uint32_t n_kv_blocks;          /* KV pool (default 4096) */
	uint32_t block_size;           /* default 16 */
	uint32_t max_ctx;              /* longest sequence, prompt + generated (default 4096) */
	uint32_t pool_size;            /* most live requests, queued + running (default 1024) */
	int      prefix_cache;         /* 1 = on (default) */
	uint32_t spec_k;               /* speculative decoding: the longest draft (<= RL_SPEC_MAX_K);
					* 0 = off (default) */
	uint32_t spec_max_rows;        /* draft rows one step may carry in all (the backend's
					* rl_backend_info.max_draft_rows); 0 = no limit */
	uint32_t eos_id;               /* UINT32_MAX = none */
	/* the other ids that end a generation as EOS does (a chat model's end of turn:
	 * "<end_of_turn>", "<|eot_id|>" ..., rl_tok_eog_ids) */
	uint32_t eog[RL_SCHED_MAX_EOG], n_eog;
	int      deterministic;        /* 1: every step deterministic (ringlmd --deterministic); the
					* scheduler marks each enqueued sequence so (rl_seq.deterministic) */
	uint64_t max_queue_ns;         /* a request not admitted this long after arrival ends with
					* an ERROR event -ETIME (overloaded); 0 = waits as long as it
					* takes (default) */
};

struct rl_sched_stats {
	uint64_t steps, tokens_prefill, tokens_decode, preemptions;
	uint64_t prefix_hit_tokens, prefix_query_tokens;
	uint32_t queued, running, prefilling, paused;
	uint32_t kv_blocks_total, kv_blocks_free;
	uint32_t last_step_tokens, budget;
	uint64_t finished, cancelled, expired;
	uint64_t overloaded;           /* of the expired, those past max_queue_ns (-ETIME) */
	uint32_t max_running;          /* the running cap in force (rl_sched_set_max_running) */
	uint32_t kv_blocks_cached;     /* registered in the prefix cache (held or evictable) */
	uint32_t _pad;
	uint64_t kv_evictions;         /* cached blocks reused for new content */
	uint64_t spec_drafted, spec_accepted;   /* draft tokens verified, and accepted */
	uint64_t spec_rounds;          /* verifications (decodes that carried drafts) */
	/* arrival to first admission, by RL_LAT_BOUNDS_US (rl_wire.h; not cumulative) */
	uint64_t queue_time[RL_LAT_N + 1];
	uint64_t queue_time_sum_ns, queue_time_count;
};

struct rl_sched;
struct rl_kv;

void rl_sched_default_params(struct rl_sched_params *p);
int  rl_sched_create(const struct rl_sched_params *p, const struct rl_sched_hooks *h,
		     struct rl_sched **out);
void rl_sched_destroy(struct rl_sched *s);

struct rl_seq *rl_sched_seq_alloc(struct rl_sched *s);
void rl_sched_seq_release(struct rl_sched *s, struct rl_seq *q);   /* never enqueued */
/* the pool entry of sequence id (id < pool_size), in whatever state */
struct rl_seq *rl_sched_seq(struct rl_sched *s, uint32_t id);
/* 0, or -EINVAL/-E2BIG/-ETIMEDOUT (deadline passed): then q is released, no event emitted. */
int  rl_sched_enqueue(struct rl_sched *s, struct rl_seq *q, uint64_t now_ns);
/* Takes q out of the queue or the running set (also mid-prefill), frees its blocks and
 * releases it; emits nothing (the caller tells the client). */
void rl_sched_cancel(struct rl_sched *s, struct rl_seq *q);

/* Phase 1 of a step: returns how many asks for drafts *asks holds (0 with speculation off),
 * each with n_out = 0. Phase 2 is the caller's (fill what it can); phase 3 composes. */
uint32_t rl_sched_plan(struct rl_sched *s, uint64_t now_ns, struct rl_draft_ask **asks);
const struct rl_batch *rl_sched_compose(struct rl_sched *s);
void rl_sched_complete(struct rl_sched *s, const int32_t *out, uint64_t now_ns);

void rl_sched_set_budget(struct rl_sched *s, uint32_t max_batch_tokens);
/* Sequences running at once (prefilling or decoding) at most, within [1, max_seqs]: admission
 * stops there and queued requests wait (the automatic budget's decode cap; running ones are
 * never preempted for it). Default max_seqs. */
void rl_sched_set_max_running(struct rl_sched *s, uint32_t n);
/* A draft's cost relative to a one-row decode step (rl_spec_cost_row), for the draft lengths,
 * and a verification row's alone (the same without a draft model's time), for the share of a
 * step several streams wait on that drafts may take */
void rl_sched_set_spec_cost(struct rl_sched *s, double c, double c_row);
void rl_sched_get_stats(const struct rl_sched *s, struct rl_sched_stats *st);
int  rl_sched_idle(const struct rl_sched *s);   /* 1 when nothing is queued or running */

/* Cancels (as rl_sched_cancel) every queued or running request of client, e.g. on hang-up;
 * entries still being filled (RL_SEQ_ALLOC) stay with the caller. Returns how many. */
uint32_t rl_sched_cancel_client(struct rl_sched *s, uint32_t client);
/* The live pool entry with this id (rl_seq.id, rl_batch_seq.seq_id), or NULL when free. */
struct rl_seq *rl_sched_seq_at(struct rl_sched *s, uint32_t id);
/* q's block table: sets *table and returns how many blocks it holds (0 while queued). */
uint32_t rl_sched_seq_blocks(const struct rl_sched *s, const struct rl_seq *q,
			     const uint32_t **table);
/* The KV manager (read-only: stats, refcounts, snapshots). */
const struct rl_kv *rl_sched_kv(const struct rl_sched *s);
/* The prefix cache's changes to an observer (rl_kv_set_observer); its reset (rl_kv_reset). */
struct rl_kv_observer;
void    rl_sched_kv_observe(struct rl_sched *s, const struct rl_kv_observer *o);
int64_t rl_sched_reset_prefix_cache(struct rl_sched *s);

#endif
