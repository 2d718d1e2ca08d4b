/* rl_sched.c — the step scheduler: admission, chunked prefill, in-flight batching, preemption
 * by recompute, and the events each step produces (see rl_sched.h for the contract).
 *
 * Data structures, all intrusive and sized at create:
 *   queue    waiting requests in admission order: resumed (preempted) ones first, then higher
 *            priority, then earlier deadline, then FCFS. Inserting an ordinary request scans
 *            from the tail, so FCFS arrivals cost O(1).
 *   heap     queued requests that expire, earliest first (at their deadline, or at the queue's
 *            bound max_queue_ns after arrival, whichever is first), so expiry costs O(log n)
 *            per expired request and nothing otherwise.
 *   expired  requests past their expiry whose client had no room for the error event yet.
 *   running  admitted sequences (prefilling or decoding) in admission order. Decodes are taken
 *            in this order and the victim of a preemption is its tail, so a victim is never a
 *            sequence already placed in the step by the same pass.
 *   prefill  the running sequences still prefilling, also in admission order.
 *
 * One step, in two calls with the draft sources between them. rl_sched_plan: expire
 * deadlines; pass 1 gives each decoding sequence one row (growing its block table, preempting
 * the newest sequence when the KV pool is exhausted); with speculation on, pass 1b asks for
 * drafts from what is left and takes room for them (never preempting for a draft).
 * rl_sched_compose: the drafts filled become rows; then queued prompts short enough to end
 * their prefill in this step are admitted first, from at most half of what is left (a short
 * question then never waits behind a long prompt's chunks, and the long prompt still gets
 * half); pass 2 gives prefilling sequences chunks from what is left of the budget; then queued
 * requests are admitted (prefix cache lookup, KV for their first chunk) in queue order while
 * budget, sequence slots (max_seqs, and the running cap of rl_sched_set_max_running) and
 * blocks last. The rows
 * are packed decodes with drafts and prefill chunks first, then plain decodes (rl_batch.h).
 *
 * Speculation (rl_spec.h): a sequence's drafts sit in its token buffer after its accepted
 * tokens and are packed as rows after its last token; the step writes their KV at the
 * positions after it. Completing the step keeps the leading drafts its samples agree with:
 * n_computed stops after the last accepted one, so the rejected positions' KV is simply
 * written over by the next step (nothing is copied), and the blocks beyond it go back to
 * the pool. Those positions are always in the sequence's own blocks: only full blocks below
 * n_computed are ever shared or registered in the prefix cache.
 *
 * A prompt's KV is written by the step, so its newly full blocks are registered in the prefix
 * cache in rl_sched_complete, after the step ran; a request admitted in the next step can hit
 * blocks of a system prompt whose prefill is still under way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <assert.h>
#include "runtime/sched/rl_sched.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/sched/rl_spec.h"

#define NONE UINT32_MAX

struct link {
	struct link *prev, *next;
};

struct seqx {
	struct rl_seq q;
	struct link ln;                /* pool free list, queue, expired or running */
	struct link pl;                /* prefill list while prefilling */
	uint32_t *tok;                 /* [max_ctx] token buffer (q.tokens is the public copy) */
	uint32_t *blocks;              /* [bt_cap] block table */
	uint32_t n_blocks;
	uint32_t n_hashed;             /* leading blocks already in the prefix-cache chain */
	struct rl_kv_chain chain;      /* chain state after block n_hashed - 1 */
	uint64_t order;                /* enqueue sequence number: FCFS tie-break */
	uint32_t heap_i;               /* index in the expiry heap, NONE when not there */
	uint64_t expires;              /* when it leaves the queue unadmitted: the earlier of its
					* deadline and arrival + max_queue_ns; 0 never */
	int32_t  expire_code;          /* its error then: -ETIMEDOUT (its deadline) or -ETIME (the
					* queue's bound: the runtime is overloaded) */
	uint32_t inc;                  /* incarnation: bumped on release, checked by complete */
	uint32_t chunk;                /* rows scheduled in the step being built */
	uint32_t n_draft;              /* of them, drafts to verify (after its last token) */
	struct rl_spec_state spec;     /* its draft length (rl_spec.h) */
	uint8_t  resumed;              /* preempted, waits for recompute */
	uint8_t  expired;              /* on the expired list */
	uint8_t  in_step;              /* placed in the step being built */
	uint8_t  dropped;              /* preempted after being placed: leave out of the pack */
};

struct rl_sched {
	struct rl_sched_params p;
	struct rl_sched_hooks h;
	struct rl_kv *kv;
	uint64_t now;                  /* the current step's plan time (queue times) */
	struct seqx *pool;
	uint32_t *tokbuf, *blkbuf;
	uint32_t bt_cap;
	struct link freel, queue, expired, running, prefill;
	uint32_t n_queued, n_expired, n_running, n_prefill;
	struct seqx **heap;
	uint32_t n_heap;
	uint64_t order_next;
	uint32_t budget;
	uint32_t max_running;          /* rl_sched_set_max_running; <= p.max_seqs */
	/* the step being built / in flight */
	struct seqx **dec, **pre;      /* [max_seqs] */
	struct seqx **srpt;            /* [max_seqs] prefills in progress, shortest left first */
	uint32_t n_dec, n_pre;
	uint32_t *tok, *pos, *row_seq; /* [max_batch_tokens] */
	struct rl_batch_seq *bseq;     /* [max_seqs] */
	struct seqx **step_x;          /* [max_seqs] owner of each batch seq */
	uint32_t *step_inc;            /* [max_seqs] its incarnation when packed */
	uint64_t *step_hash;           /* [max_seqs] hash of the block it filled, if any */
	uint32_t *step_ctx;            /* [max_seqs] its KV length after the step: ctx_len less
					* the rejected drafts */
	int32_t  *draft_out;           /* [max_batch_tokens] the verification rows' samples
					* (seq i's at its q_start) */
	struct rl_draft_ask *asks;     /* [max_seqs] this step's asks for drafts */
	struct seqx **ask_x;           /* [max_seqs] whose */
	uint32_t n_asks;
	uint32_t left;                 /* rows of budget left after the decodes (plan -> compose) */
	int preempted;                 /* the step being built preempted a sequence */
	int planned;                   /* rl_sched_plan ran; rl_sched_compose is next */
	struct rl_batch batch;
	int in_flight;
	double spec_cost;              /* a draft's cost relative to a one-row step (rl_spec.h) */
	double spec_row_cost;          /* a verification row's alone (the draft model's not counted) */
	struct rl_sched_stats st;
};

#define X(qp) ((struct seqx *)((char *)(qp) - offsetof(struct seqx, q)))
#define LN(l) ((struct seqx *)((char *)(l) - offsetof(struct seqx, ln)))
#define PL(l) ((struct seqx *)((char *)(l) - offsetof(struct seqx, pl)))

/* --- lists ---------------------------------------------------------------------------- */

static void list_init(struct link *h) { h->prev = h->next = h; }
static int  list_empty(const struct link *h) { return h->next == h; }

static void list_insert_after(struct link *at, struct link *n)
{
	n->prev = at;
	n->next = at->next;
	at->next->prev = n;
	at->next = n;
}

static void list_del(struct link *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

/* --- deadline heap -------------------------------------------------------------------- */

static int heap_less(const struct seqx *a, const struct seqx *b)
{
	return a->expires < b->expires;
}

static void heap_set(struct rl_sched *s, uint32_t i, struct seqx *x)
{
	s->heap[i] = x;
	x->heap_i = i;
}

static void heap_up(struct rl_sched *s, uint32_t i)
{
	struct seqx *x = s->heap[i];
	while (i > 0 && heap_less(x, s->heap[(i - 1) / 2])) {
		heap_set(s, i, s->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(s, i, x);
}

static void heap_down(struct rl_sched *s, uint32_t i)
{
	struct seqx *x = s->heap[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= s->n_heap)
			break;
		if (c + 1 < s->n_heap && heap_less(s->heap[c + 1], s->heap[c]))
			c++;
		if (!heap_less(s->heap[c], x))
			break;
		heap_set(s, i, s->heap[c]);
		i = c;
	}
	heap_set(s, i, x);
}

static void heap_push(struct rl_sched *s, struct seqx *x)
{
	heap_set(s, s->n_heap++, x);
	heap_up(s, s->n_heap - 1);
}

static void heap_remove(struct rl_sched *s, struct seqx *x)
{
	uint32_t i = x->heap_i;
	struct seqx *last = s->heap[--s->n_heap];
	x->heap_i = NONE;
	if (i == s->n_heap)
		return;
	heap_set(s, i, last);
	heap_up(s, i);
	heap_down(s, last->heap_i);
}

/* --- pool ----------------------------------------------------------------------------- */

void rl_sched_default_params(struct rl_sched_params *p)
{
	*p = (struct rl_sched_params){
		.max_batch_tokens = RL_SCHED_DEFAULT_BUDGET, .max_seqs = 256, .n_kv_blocks = 4096, .block_size = 16,
		.max_ctx = 4096, .pool_size = 1024, .prefix_cache = 1, .eos_id = UINT32_MAX,
	};
}

void rl_sched_destroy(struct rl_sched *s)
{
	if (!s)
		return;
	rl_kv_destroy(s->kv);
	free(s->pool);
	free(s->tokbuf);
	free(s->blkbuf);
	free(s->heap);
	free(s->dec);
	free(s->pre);
	free(s->srpt);
	free(s->tok);
	free(s->pos);
	free(s->row_seq);
	free(s->bseq);
	free(s->step_x);
	free(s->step_inc);
	free(s->step_hash);
	free(s->step_ctx);
	free(s->draft_out);
	free(s->asks);
	free(s->ask_x);
	free(s);
}

static int check_params(const struct rl_sched_params *p, const struct rl_sched_hooks *h)
{
	if (!h || !h->reserve || !h->emit)
		return -EINVAL;
	if (!p->max_batch_tokens || !p->max_seqs || !p->block_size || !p->pool_size ||
	    p->max_ctx < 2 || p->pool_size >= NONE / 2 || p->spec_k > RL_SPEC_MAX_K)
		return -EINVAL;
	/* the oldest sequence must always be able to run to max_ctx, or preemption could
	 * leave nothing able to finish */
	if ((uint64_t)p->n_kv_blocks * p->block_size < p->max_ctx)
		return -EINVAL;
	return 0;
}

int rl_sched_create(const struct rl_sched_params *p, const struct rl_sched_hooks *h,
		    struct rl_sched **out)
{
	int r = check_params(p, h);
	if (r)
		return r;
	struct rl_sched *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->p = *p;
	s->h = *h;
	s->budget = p->max_batch_tokens;
	s->max_running = p->max_seqs;
	s->spec_cost = s->spec_row_cost = RL_SPEC_ROW_COST;
	s->bt_cap = (p->max_ctx + p->block_size - 1) / p->block_size;
	r = rl_kv_create(p->n_kv_blocks, p->block_size, p->prefix_cache, &s->kv);
	if (r) {
		free(s);
		return r;
	}
	s->pool = calloc(p->pool_size, sizeof *s->pool);
	s->tokbuf = malloc((size_t)p->pool_size * p->max_ctx * sizeof *s->tokbuf);
	s->blkbuf = malloc((size_t)p->pool_size * s->bt_cap * sizeof *s->blkbuf);
	s->heap = malloc(p->pool_size * sizeof *s->heap);
	s->dec = malloc(p->max_seqs * sizeof *s->dec);
	s->pre = malloc(p->max_seqs * sizeof *s->pre);
	s->srpt = malloc(p->max_seqs * sizeof *s->srpt);
	s->tok = malloc(p->max_batch_tokens * sizeof *s->tok);
	s->pos = malloc(p->max_batch_tokens * sizeof *s->pos);
	s->row_seq = malloc(p->max_batch_tokens * sizeof *s->row_seq);
	s->bseq = malloc(p->max_seqs * sizeof *s->bseq);
	s->step_x = malloc(p->max_seqs * sizeof *s->step_x);
	s->step_inc = malloc(p->max_seqs * sizeof *s->step_inc);
	s->step_hash = malloc(p->max_seqs * sizeof *s->step_hash);
	s->step_ctx = malloc(p->max_seqs * sizeof *s->step_ctx);
	s->draft_out = malloc(p->max_batch_tokens * sizeof *s->draft_out);
	s->asks = malloc(p->max_seqs * sizeof *s->asks);
	s->ask_x = malloc(p->max_seqs * sizeof *s->ask_x);
	if (!s->pool || !s->tokbuf || !s->blkbuf || !s->heap || !s->dec || !s->pre || !s->srpt || !s->tok ||
	    !s->pos || !s->row_seq || !s->bseq || !s->step_x || !s->step_inc || !s->step_hash ||
	    !s->step_ctx || !s->draft_out || !s->asks || !s->ask_x) {
		rl_sched_destroy(s);
		return -ENOMEM;
	}
	/* touch every pool buffer now: no page faults on the step path later */
	memset(s->tokbuf, 0, (size_t)p->pool_size * p->max_ctx * sizeof *s->tokbuf);
	memset(s->blkbuf, 0, (size_t)p->pool_size * s->bt_cap * sizeof *s->blkbuf);
	list_init(&s->freel);
	list_init(&s->queue);
	list_init(&s->expired);
	list_init(&s->running);
	list_init(&s->prefill);
	for (uint32_t i = p->pool_size; i-- > 0;) {
		struct seqx *x = &s->pool[i];
		x->tok = s->tokbuf + (size_t)i * p->max_ctx;
		x->blocks = s->blkbuf + (size_t)i * s->bt_cap;
		x->q.id = i;
		x->heap_i = NONE;
		list_init(&x->pl);
		list_insert_after(&s->freel, &x->ln);
	}
	s->batch.block_size = p->block_size;
	s->batch.tokens = s->tok;
	s->batch.pos = s->pos;
	s->batch.row_seq = s->row_seq;
	s->batch.seqs = s->bseq;
	*out = s;
	return 0;
}

struct rl_seq *rl_sched_seq_alloc(struct rl_sched *s)
{
	if (list_empty(&s->freel))
		return NULL;
	struct seqx *x = LN(s->freel.next);
	list_del(&x->ln);
	uint32_t id = x->q.id;
	memset(&x->q, 0, sizeof x->q);
	x->q.id = id;
	x->q.tokens = x->tok;
	x->q.cap = s->p.max_ctx;
	x->q.state = RL_SEQ_ALLOC;
	x->q.sched_priv = x;
	x->n_blocks = x->n_hashed = 0;
	x->resumed = x->expired = x->in_step = x->dropped = 0;
	return &x->q;
}

static void release(struct rl_sched *s, struct seqx *x)
{
	if (s->h.seq_gone && x->q.state != RL_SEQ_ALLOC)
		s->h.seq_gone(s->h.ctx, x->q.id);
	x->q.state = RL_SEQ_FREE;
	x->inc++;
	list_insert_after(&s->freel, &x->ln);
}

struct rl_seq *rl_sched_seq(struct rl_sched *s, uint32_t id) { return &s->pool[id].q; }

void rl_sched_seq_release(struct rl_sched *s, struct rl_seq *q)
{
	if (q && q->state == RL_SEQ_ALLOC)
		release(s, X(q));
}

/* --- queue ---------------------------------------------------------------------------- */

static uint64_t deadline_key(const struct seqx *x)
{
	return x->q.deadline_ns ? x->q.deadline_ns : UINT64_MAX;
}

/* 1 when a is to be admitted before b. */
static int admits_before(const struct seqx *a, const struct seqx *b)
{
	if (a->resumed != b->resumed)
		return a->resumed;
	if (a->q.priority != b->q.priority)
		return a->q.priority > b->q.priority;
	if (deadline_key(a) != deadline_key(b))
		return deadline_key(a) < deadline_key(b);
	return a->order < b->order;
}

static void queue_insert(struct rl_sched *s, struct seqx *x)
{
	struct link *at;
	if (x->resumed) {
		for (at = s->queue.next; at != &s->queue && !admits_before(x, LN(at)); at = at->next)
			;
		at = at->prev;
	} else {
		for (at = s->queue.prev; at != &s->queue && admits_before(x, LN(at)); at = at->prev)
			;
	}
	list_insert_after(at, &x->ln);
	x->q.state = RL_SEQ_QUEUED;
	s->n_queued++;
}

static void queue_remove(struct rl_sched *s, struct seqx *x)
{
	list_del(&x->ln);
	if (x->expired) {
		s->n_expired--;
		return;
	}
	s->n_queued--;
	if (x->heap_i != NONE)
		heap_remove(s, x);
}

int rl_sched_enqueue(struct rl_sched *s, struct rl_seq *q, uint64_t now_ns)
{
	if (!q || q->state != RL_SEQ_ALLOC)
		return -EINVAL;
	struct seqx *x = X(q);
	int r = 0;
	if (!q->n_prompt || (!q->max_new && !q->prompt_logprobs) || q->n_stop > RL_MAX_STOP_IDS)
		r = -EINVAL;
	else if (q->n_prompt >= s->p.max_ctx)      /* room for at least one generated token */
		r = -E2BIG;
	else if (q->deadline_ns && now_ns > q->deadline_ns)
		r = -ETIMEDOUT;
	if (r) {
		release(s, x);
		return r;
	}
	q->deterministic = q->deterministic || s->p.deterministic;
	q->tokens = x->tok;
	q->cap = s->p.max_ctx;
	q->arrival_ns = now_ns;
	q->n_gen = q->n_computed = 0;
	q->plp_next = 1;
	rl_spec_init(&x->spec);
	x->n_draft = 0;
	x->order = s->order_next++;
	x->expires = q->deadline_ns;
	x->expire_code = -ETIMEDOUT;
	if (s->p.max_queue_ns && (!x->expires || now_ns + s->p.max_queue_ns < x->expires)) {
		x->expires = now_ns + s->p.max_queue_ns;
		x->expire_code = -ETIME;
	}
	queue_insert(s, x);
	if (x->expires)
		heap_push(s, x);
	return 0;
}

/* --- KV of one sequence --------------------------------------------------------------- */

static void drop_blocks(struct rl_sched *s, struct seqx *x)
{
	while (x->n_blocks)
		rl_kv_unref(s->kv, x->blocks[--x->n_blocks]);
	x->n_hashed = 0;
	x->q.n_computed = 0;
}

/* Grows x's block table to cover n_tok positions; -ENOMEM when the pool has nothing left. */
static int grow(struct rl_sched *s, struct seqx *x, uint32_t n_tok)
{
	uint32_t need = (n_tok + s->p.block_size - 1) / s->p.block_size;
	while (x->n_blocks < need) {
		int64_t b = rl_kv_alloc(s->kv);
		if (b < 0)
			return (int)b;
		x->blocks[x->n_blocks++] = (uint32_t)b;
	}
	return 0;
}

/* Gives back the blocks past the first n_tok positions (a verification's rejected drafts).
 * They are x's own: a shared or cached block is always full and below n_computed. */
static void trim(struct rl_sched *s, struct seqx *x, uint32_t n_tok)
{
	uint32_t need = (n_tok + s->p.block_size - 1) / s->p.block_size;
	while (x->n_blocks > need)
		rl_kv_unref(s->kv, x->blocks[--x->n_blocks]);
}

/* Tokens of x's first block not yet in the prefix cache, when the step just run filled it. */
static const uint32_t *next_full(const struct rl_sched *s, const struct seqx *x,
				 uint32_t n_computed)
{
	uint32_t bs = s->p.block_size;
	return (x->n_hashed + 1) * bs <= n_computed ? x->tok + (size_t)x->n_hashed * bs : NULL;
}

/* Puts the newly full blocks of x (KV written by the step just completed) in the prefix
 * cache; h is the hash of the first of them, computed (and prefetched) earlier. */
static void register_full(struct rl_sched *s, struct seqx *x, uint64_t h)
{
	for (const uint32_t *t; (t = next_full(s, x, x->q.n_computed));) {
		rl_kv_register(s->kv, x->blocks[x->n_hashed], t, h, &x->chain);
		x->n_hashed++;
		if ((t = next_full(s, x, x->q.n_computed)))
			h = rl_kv_hash(s->kv, &x->chain, t);
	}
}

/* Hashes the first block each sequence of the finished step filled and starts loading the
 * cache lines its registration needs: with many sequences crossing a block boundary in one
 * step, the table misses overlap instead of queueing. */
static void prefetch_full(struct rl_sched *s)
{
	for (uint32_t i = 0; i < s->batch.n_seqs; i++) {
		struct seqx *x = s->step_x[i];
		const uint32_t *t = next_full(s, x, s->step_ctx[i]);
		if (x->inc != s->step_inc[i] || !t)
			continue;
		s->step_hash[i] = rl_kv_hash(s->kv, &x->chain, t);
		rl_kv_prefetch(s->kv, s->step_hash[i], x->blocks[x->n_hashed]);
	}
}

/* --- running set ---------------------------------------------------------------------- */

/* x leaves the queue for the first time: how long it waited */
static void count_queue_time(struct rl_sched *s, const struct seqx *x)
{
	static const uint64_t bound_us[RL_LAT_N] = RL_LAT_BOUNDS_US;
	const uint64_t ns = s->now > x->q.arrival_ns ? s->now - x->q.arrival_ns : 0;
	uint32_t i = 0;
	while (i < RL_LAT_N && ns > bound_us[i] * 1000)
		i++;
	s->st.queue_time[i]++;
	s->st.queue_time_sum_ns += ns;
	s->st.queue_time_count++;
}

static void admit(struct rl_sched *s, struct seqx *x)
{
	if (!x->resumed)               /* a preempted one was counted when first admitted */
		count_queue_time(s, x);
	queue_remove(s, x);
	x->q.state = RL_SEQ_PREFILL;
	x->resumed = 0;
	list_insert_after(s->running.prev, &x->ln);
	list_insert_after(s->prefill.prev, &x->pl);
	s->n_running++;
	s->n_prefill++;
}

static void leave_running(struct rl_sched *s, struct seqx *x)
{
	list_del(&x->ln);
	s->n_running--;
	if (x->q.state == RL_SEQ_PREFILL) {
		list_del(&x->pl);
		s->n_prefill--;
	}
	drop_blocks(s, x);
}

/* Preemption by recompute: x gives back its KV and goes to the front of the queue; it keeps
 * its generated tokens, recomputes prompt + generated on re-admission and then carries on
 * sampling after them, so no event is repeated. */
static void preempt(struct rl_sched *s, struct seqx *x)
{
	leave_running(s, x);
	if (x->in_step)
		x->dropped = 1;
	x->n_draft = 0;
	x->resumed = 1;
	queue_insert(s, x);
	s->st.preemptions++;
}

static void retire(struct rl_sched *s, struct seqx *x)
{
	leave_running(s, x);
	release(s, x);
	s->st.finished++;
}

void rl_sched_cancel(struct rl_sched *s, struct rl_seq *q)
{
	if (!q)
		return;
	struct seqx *x = X(q);
	switch (q->state) {
	case RL_SEQ_ALLOC:
		release(s, x);
		return;
	case RL_SEQ_QUEUED:
		queue_remove(s, x);
		break;
	case RL_SEQ_PREFILL:
	case RL_SEQ_DECODE:
		leave_running(s, x);
		break;
	default:
		return;
	}
	release(s, x);
	s->st.cancelled++;
}

uint32_t rl_sched_cancel_client(struct rl_sched *s, uint32_t client)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->p.pool_size; i++) {
		struct rl_seq *q = &s->pool[i].q;
		if (q->client == client && q->state >= RL_SEQ_QUEUED && q->state <= RL_SEQ_DECODE) {
			rl_sched_cancel(s, q);
			n++;
		}
	}
	return n;
}

/* --- composing a step ----------------------------------------------------------------- */

/* Expiry (a deadline, the queue's bound) is checked for queued requests only: once admitted a
 * request runs to the end. */
static void expire(struct rl_sched *s, uint64_t now)
{
	struct link *l, *nl;
	for (l = s->expired.next; l != &s->expired; l = nl) {
		nl = l->next;
		struct seqx *x = LN(l);
		if (s->h.reserve(s->h.ctx, x->q.client, 1))
			continue;
		s->h.emit(s->h.ctx, &x->q, RL_EV_ERROR, 0, x->expire_code);
		queue_remove(s, x);
		s->st.overloaded += x->expire_code == -ETIME;
		release(s, x);
		s->st.expired++;
	}
	while (s->n_heap && now > s->heap[0]->expires) {
		struct seqx *x = s->heap[0];
		queue_remove(s, x);
		if (s->h.reserve(s->h.ctx, x->q.client, 1) == 0) {
			s->h.emit(s->h.ctx, &x->q, RL_EV_ERROR, 0, x->expire_code);
			s->st.overloaded += x->expire_code == -ETIME;
			release(s, x);
			s->st.expired++;
		} else {
			x->expired = 1;
			list_insert_after(s->expired.prev, &x->ln);
			s->n_expired++;
		}
	}
}

static uint32_t seq_len(const struct seqx *x)
{
	return x->q.n_prompt + x->q.n_gen;
}

/* Rows for the next prefill chunk of a sequence with rem tokens left, starting at position
 * start, given left rows of budget: end the chunk on a block boundary (its full blocks enter
 * the prefix cache, and the next chunk starts aligned) unless it ends the prompt, the budget
 * left is less than a block, or the boundary would give up more than half of the rows. A
 * budget below a block (the automatic budget under a tight target) would otherwise alternate
 * a chunk with a sliver of one or two tokens, each a whole step. */
static uint32_t chunk_len(uint32_t rem, uint32_t left, uint32_t start, uint32_t bs)
{
	if (rem <= left)
		return rem;
	uint32_t end = start + left;
	uint32_t aligned = end - end % bs;
	return left >= bs && aligned > start && 2 * (aligned - start) >= left ? aligned - start : left;
}

/* The prompt positions a chunk of c rows from start scores for x (prompt log-probabilities
 * still owed: row r predicts position start + r + 1), as [*lo, *hi); their count */
static uint32_t plp_span(const struct seqx *x, uint32_t start, uint32_t c, uint32_t *lo, uint32_t *hi)
{
	uint32_t a = start + 1 > x->q.plp_next ? start + 1 : x->q.plp_next;
	uint32_t b = start + c + 1 < x->q.n_prompt ? start + c + 1 : x->q.n_prompt;
	if (!x->q.prompt_logprobs || a >= b)
		a = b = 0;
	if (lo) {
		*lo = a;
		*hi = b;
	}
	return b - a;
}

/* The events a chunk of c rows from start may emit: its prompt positions, and when it ends
 * the prompt, a token and an end */
static uint32_t chunk_events(const struct seqx *x, uint32_t start, uint32_t c)
{
	return plp_span(x, start, c, NULL, NULL) + (start + c == seq_len(x) ? 2 : 0);
}

static int reserve(struct rl_sched *s, struct seqx *x, uint32_t n)
{
	if (s->h.reserve(s->h.ctx, x->q.client, n) == 0)
		return 0;
	s->st.paused++;
	return -EAGAIN;
}

/* Pass 1: one row per decoding sequence, in admission order. */
static uint32_t schedule_decodes(struct rl_sched *s, uint32_t left, int *preempted)
{
	struct link *l = s->running.next;
	while (l != &s->running && left) {
		struct seqx *x = LN(l);
		if (x->q.state != RL_SEQ_DECODE || reserve(s, x, 2)) {
			l = l->next;
			continue;
		}
		while (grow(s, x, x->q.n_computed + 1)) {
			struct seqx *v = LN(s->running.prev);
			preempt(s, v);
			*preempted = 1;
			if (v == x)
				return left;    /* x was the newest: nothing after it to schedule */
		}
		x->chunk = 1;
		x->n_draft = 0;
		x->in_step = 1;
		s->dec[s->n_dec++] = x;
		left--;
		l = l->next;
	}
	return left;
}

/* Pass 1b (plan): asks for drafts for the decodes of pass 1 (speculation on), from left rows
 * of budget, at most half of them while prompts wait, so prefill keeps moving. A draft never
 * preempts: it gets the KV blocks and event slots that are to be had, or is shorter. Room is
 * taken for the longest draft each sequence may have; the draft sources (runtime/spec/) fill
 * what they can, and place_drafts gives back the rest. Returns the number of asks. */
static uint32_t ask_drafts(struct rl_sched *s, uint32_t left)
{
	if (!s->p.spec_k)
		return 0;
	uint32_t rows = s->n_prefill || s->n_queued ? left / 2 : left, n = 0;
	if (s->p.spec_max_rows && s->p.spec_max_rows < rows)
		rows = s->p.spec_max_rows;
	/* a step that several streams share: drafts may lengthen it by RL_SPEC_SHARED_STEP of its
	 * decodes' time at most (a row is c_row of a one-row step, so the decodes are
	 * 1/c_row - 1 + n_dec rows' worth), or every stream's gaps would grow for some */
	if (s->n_dec > 1 && s->spec_row_cost > 0) {
		const double cap = RL_SPEC_SHARED_STEP * (1 / s->spec_row_cost - 1 + s->n_dec);
		rows = cap < rows ? (uint32_t)cap : rows;
	}
	for (uint32_t i = 0; i < s->n_dec && rows; i++) {
		struct seqx *x = s->dec[i];
		if (x->dropped || x->q.no_spec || x->q.logprobs)
			continue;
		const uint32_t len = seq_len(x);
		/* room: the rows, the context (drafts up to position len + k - 1, and the token
		 * after them), the tokens still wanted (k drafts emit up to k + 1) */
		uint32_t k = s->p.spec_k < rows ? s->p.spec_k : rows;
		if (len + k + 1 > s->p.max_ctx)
			k = s->p.max_ctx > len + 1 ? s->p.max_ctx - len - 1 : 0;
		if (x->q.n_gen + k + 1 > x->q.max_new)
			k = x->q.max_new > x->q.n_gen + 1 ? x->q.max_new - x->q.n_gen - 1 : 0;
		if (!k || !(k = rl_spec_len(&x->spec, k, s->spec_cost)))
			continue;
		if (s->h.reserve(s->h.ctx, x->q.client, k))   /* a token event per draft */
			continue;
		if (grow(s, x, x->q.n_computed + 1 + k)) {
			const uint32_t room = x->n_blocks * s->p.block_size - x->q.n_computed - 1;
			k = room < k ? room : k;
			if (!k) {
				trim(s, x, x->q.n_computed + 1);
				continue;
			}
		}
		s->asks[n] = (struct rl_draft_ask){ .seq_id = x->q.id, .tokens = x->tok, .len = len, .k = k,
						    .out = x->tok + len, .n_out = 0 };
		s->ask_x[n++] = x;
		rows -= k;
	}
	return n;
}

/* Pass 1b (compose): the drafts the sources filled become rows; the room taken for the ones
 * they did not fill goes back. */
static uint32_t place_drafts(struct rl_sched *s, uint32_t left)
{
	for (uint32_t j = 0; j < s->n_asks; j++) {
		struct seqx *x = s->ask_x[j];
		const uint32_t k = s->asks[j].n_out < s->asks[j].k ? s->asks[j].n_out : s->asks[j].k;
		trim(s, x, x->q.n_computed + 1 + k);
		x->n_draft = k;
		x->chunk = 1 + k;
		left -= k;
	}
	s->n_asks = 0;
	return left;
}

static int try_admit(struct rl_sched *s, struct seqx *x, uint32_t left);
static uint32_t running_cap(const struct rl_sched *s);

/* A chunk of at most left rows for x, prefilling: its rows, 0 when it gets none (its client
 * has no room, or no block is to be had). When the pool is dry it preempts the newest running
 * sequence, unless that one is already placed in this step as a prefill (it then takes the
 * room its blocks leave). */
static uint32_t serve_prefill(struct rl_sched *s, struct seqx *x, uint32_t left, int *preempted)
{
	const uint32_t bs = s->p.block_size, start = x->q.n_computed;
	uint32_t c = chunk_len(seq_len(x) - start, left, start, bs);
	const uint32_t ev = chunk_events(x, start, c);
	if (ev && reserve(s, x, ev))
		return 0;
	while (grow(s, x, start + c)) {
		struct seqx *v = LN(s->running.prev);
		if (v == x || (v->in_step && v->q.state == RL_SEQ_PREFILL)) {
			c = x->n_blocks * bs - start;
			break;
		}
		preempt(s, v);
		*preempted = 1;
	}
	if (!c)
		return 0;
	x->chunk = c;
	x->in_step = 1;
	s->pre[s->n_pre++] = x;
	return c;
}

static uint32_t prefill_left(const struct seqx *x)
{
	return seq_len(x) - x->q.n_computed;
}

#define SHORT_SCAN 32                  /* queued requests the short-prompt passes look at */

/* Pass 2a: the oldest prompt in progress goes first, so it always moves (and may preempt
 * newer sequences for blocks); while shorter prompts wait, in progress or queued, it takes at
 * most half of what is left. */
static uint32_t serve_oldest(struct rl_sched *s, uint32_t left, int *preempted)
{
	if (list_empty(&s->prefill) || !left)
		return left;
	struct seqx *x = PL(s->prefill.next);
	const uint32_t rem = prefill_left(x);
	int shorter = 0;
	for (struct link *l = x->pl.next; l != &s->prefill && !shorter; l = l->next)
		shorter = prefill_left(PL(l)) < rem;
	if (!shorter && !list_empty(&s->queue) && !LN(s->queue.next)->resumed) {
		const int32_t prio = LN(s->queue.next)->q.priority;
		const struct link *l = s->queue.next;
		for (uint32_t k = 0; k < SHORT_SCAN && l != &s->queue && !shorter; k++, l = l->next)
			shorter = LN(l)->q.priority == prio && seq_len(LN(l)) < rem;
	}
	const uint32_t cap = shorter && left > 1 ? left - left / 2 : left;
	return left - serve_prefill(s, x, cap, preempted);
}

/* Pass 2b: queued prompts of the queue's first priority shorter than what the oldest prompt in
 * progress has left are admitted before the other prompts in progress get their chunks, in
 * queue order (none while a preempted sequence waits: it goes first as always): a question
 * never waits behind a long document's chunks. */
static uint32_t admit_short(struct rl_sched *s, uint32_t left)
{
	if (list_empty(&s->prefill) || list_empty(&s->queue) || LN(s->queue.next)->resumed)
		return left;
	const uint32_t rem = prefill_left(PL(s->prefill.next)), cap = running_cap(s);
	const int32_t prio = LN(s->queue.next)->q.priority;
	struct link *l = s->queue.next;
	for (uint32_t k = 0; k < SHORT_SCAN && l != &s->queue && left && s->n_running < cap; k++) {
		struct seqx *x = LN(l);
		l = l->next;
		if (x->q.priority != prio)
			break;
		if (seq_len(x) >= rem)
			continue;
		int r = try_admit(s, x, left);
		if (r == -ENOMEM)
			break;
		if (r > 0)
			left -= (uint32_t)r;
	}
	return left;
}

/* Pass 2c: the other prompts in progress, the one with the fewest tokens left first (ties: the
 * older), so the first token of a short prompt is never behind a long one's chunks. */
static uint32_t schedule_prefills(struct rl_sched *s, uint32_t left, int *preempted)
{
	uint32_t n = 0;
	for (struct link *l = s->prefill.next; l != &s->prefill; l = l->next)
		if (!PL(l)->in_step)
			s->srpt[n++] = PL(l);
	for (uint32_t i = 1; i < n; i++) {           /* insertion sort: a few at a time, stable */
		struct seqx *x = s->srpt[i];
		uint32_t j = i;
		for (; j > 0 && prefill_left(s->srpt[j - 1]) > prefill_left(x); j--)
			s->srpt[j] = s->srpt[j - 1];
		s->srpt[j] = x;
	}
	for (uint32_t i = 0; i < n && left; i++)
		if (s->srpt[i]->q.state == RL_SEQ_PREFILL)   /* not preempted meanwhile */
			left -= serve_prefill(s, s->srpt[i], left, preempted);
	return left;
}

/* Admission of x with left rows: prefix-cache lookup, KV for the first chunk, event room when
 * that chunk samples. Returns the chunk's rows, -ENOMEM (stop admitting: FCFS) or -EAGAIN
 * (its client has no room: try the next request). */
static int try_admit(struct rl_sched *s, struct seqx *x, uint32_t left)
{
	uint32_t bs = s->p.block_size, len = seq_len(x);
	/* deterministic blocks were computed by other kernels: they are reused among themselves */
	rl_kv_chain_root_in(&x->chain, x->q.deterministic ? RL_KV_SPACE_DETERMINISTIC : 0);
	/* a fully cached prompt still computes its last token, which yields the logits; a prompt
	 * whose log-probabilities are owed computes them all */
	const int scoring = x->q.prompt_logprobs && x->q.plp_next < x->q.n_prompt;
	uint32_t hit = rl_kv_lookup(s->kv, x->tok, scoring ? 0 : len - 1, x->blocks, &x->chain);
	x->n_blocks = x->n_hashed = hit;
	x->q.n_computed = hit * bs;
	uint32_t c = chunk_len(len - x->q.n_computed, left, x->q.n_computed, bs);
	int r = grow(s, x, x->q.n_computed + c);
	const uint32_t ev = chunk_events(x, x->q.n_computed, c);
	if (!r && ev)
		r = reserve(s, x, ev);
	if (r) {
		drop_blocks(s, x);
		return r;
	}
	s->st.prefix_hit_tokens += hit * bs;
	s->st.prefix_query_tokens += len;
	admit(s, x);
	x->chunk = c;
	x->in_step = 1;
	s->pre[s->n_pre++] = x;
	return (int)c;
}

/* Sequences that may run at once: max_seqs, the running cap, and no more than the budget's
 * rows (each will decode a row a step) */
static uint32_t running_cap(const struct rl_sched *s)
{
	uint32_t cap = s->max_running < s->budget ? s->max_running : s->budget;
	return cap ? cap : 1;
}

static uint32_t admit_queued(struct rl_sched *s, uint32_t left)
{
	const uint32_t cap = running_cap(s);
	struct link *l = s->queue.next;
	while (l != &s->queue && left && s->n_running < cap) {
		struct seqx *x = LN(l);
		l = l->next;
		int r = try_admit(s, x, left);
		if (r == -ENOMEM)
			break;
		if (r > 0)
			left -= (uint32_t)r;
	}
	return left;
}

static void pack_one(struct rl_sched *s, struct seqx *x, uint32_t *t)
{
	uint32_t i = s->batch.n_seqs++, start = x->q.n_computed, len = seq_len(x);
	struct rl_batch_seq *b = &s->bseq[i];
	for (uint32_t r = 0; r < x->chunk; r++, (*t)++) {
		s->tok[*t] = x->tok[start + r];
		s->pos[*t] = start + r;
		s->row_seq[*t] = i;
	}
	b->q_start = *t - x->chunk;
	b->q_len = x->chunk;
	b->ctx_len = start + x->chunk;
	b->n_blocks = x->n_blocks;
	b->block_table = x->blocks;
	b->sample = b->ctx_len == len + x->n_draft;
	b->seq_id = x->q.id;
	b->sp = x->q.sp;
	b->logprobs = x->q.logprobs;
	b->prompt_logprobs = plp_span(x, start, x->chunk, &b->plp_lo, &b->plp_hi) ? x->q.prompt_logprobs : 0;
	b->next_token = start + x->chunk < len ? x->tok[start + x->chunk] : UINT32_MAX;
	b->n_draft = x->n_draft;
	b->draft_out = s->draft_out + b->q_start;
	b->allow = b->sample ? x->q.allow : NULL;   /* n_draft + 1 masks (rl_rt_cons_drafts) */
	assert(x->n_blocks == (b->ctx_len + s->p.block_size - 1) / s->p.block_size);
	s->step_x[i] = x;
	s->step_inc[i] = x->inc;
	s->batch.deterministic |= x->q.deterministic;
}

/* Multi-row sequences first: decodes with drafts, then prefill chunks; then plain decodes. */
static void pack(struct rl_sched *s)
{
	uint32_t t = 0;
	s->batch.n_seqs = 0;
	s->batch.deterministic = s->p.deterministic;   /* or any sequence that asks (pack_one) */
	for (uint32_t i = 0; i < s->n_dec; i++) {
		struct seqx *x = s->dec[i];
		if (x->dropped)
			x->dropped = x->in_step = 0;
		else if (x->n_draft)
			pack_one(s, x, &t);
	}
	const uint32_t t_spec = t, n_spec = s->batch.n_seqs;
	for (uint32_t i = 0; i < s->n_pre; i++)
		pack_one(s, s->pre[i], &t);
	s->batch.n_prefill = s->batch.n_seqs;
	s->st.tokens_prefill += t - t_spec;
	for (uint32_t i = 0; i < s->n_dec; i++) {
		struct seqx *x = s->dec[i];
		if (x->in_step && !x->n_draft)
			pack_one(s, x, &t);
	}
	s->st.tokens_decode += n_spec + s->batch.n_seqs - s->batch.n_prefill;
	s->batch.n_tokens = t;
}

uint32_t rl_sched_plan(struct rl_sched *s, uint64_t now_ns, struct rl_draft_ask **asks)
{
	assert(!s->in_flight && !s->planned);
	s->now = now_ns;
	s->preempted = 0;
	s->st.paused = 0;
	s->n_dec = s->n_pre = 0;
	expire(s, now_ns);
	s->left = schedule_decodes(s, s->budget, &s->preempted);
	s->n_asks = ask_drafts(s, s->left);
	s->planned = 1;
	*asks = s->asks;
	return s->n_asks;
}

const struct rl_batch *rl_sched_compose(struct rl_sched *s)
{
	assert(s->planned);
	s->planned = 0;
	uint32_t left = place_drafts(s, s->left);
	left = serve_oldest(s, left, &s->preempted);
	if (!s->preempted)
		left = admit_short(s, left);
	left = schedule_prefills(s, left, &s->preempted);
	/* admitting right after a preemption would hand the freed blocks straight back */
	if (!s->preempted)
		left = admit_queued(s, left);
	pack(s);
	s->st.last_step_tokens = s->batch.n_tokens;
	if (!s->batch.n_tokens)
		return NULL;
	s->st.steps++;
	s->in_flight = 1;
	return &s->batch;
}

/* --- completing a step ---------------------------------------------------------------- */

static int is_eog(const struct rl_sched *s, uint32_t t)
{
	if (t == s->p.eos_id)
		return 1;
	for (uint32_t i = 0; i < s->p.n_eog; i++)
		if (s->p.eog[i] == t)
			return 1;
	return 0;
}

static int is_stop(const struct rl_seq *q, uint32_t t)
{
	for (uint32_t i = 0; i < q->n_stop; i++)
		if (q->stop[i] == t)
			return 1;
	return 0;
}

static void finish(struct rl_sched *s, struct seqx *x, uint32_t type, uint32_t tok, int32_t code)
{
	s->h.emit(s->h.ctx, &x->q, type, tok, code);
	retire(s, x);
}

/* The token sampled for x: two event slots were reserved when x was put in the step. */
static void take_token(struct rl_sched *s, struct seqx *x, int32_t out)
{
	struct rl_seq *q = &x->q;
	uint32_t t = (uint32_t)out;
	if (out < 0) {
		finish(s, x, RL_EV_ERROR, 0, -EIO);
		return;
	}
	if (!q->max_new) {             /* scoring the prompt only */
		finish(s, x, RL_EV_DONE, 0, RL_FIN_LENGTH);
		return;
	}
	const int eog = is_eog(s, t);
	if (eog || is_stop(q, t)) {
		finish(s, x, RL_EV_DONE, t, eog ? RL_FIN_EOS : RL_FIN_STOP);
		return;
	}
	uint32_t len = seq_len(x);
	x->tok[len] = t;
	q->n_gen++;
	s->h.emit(s->h.ctx, q, RL_EV_TOKEN, t, 0);
	if (q->n_gen >= q->max_new)
		finish(s, x, RL_EV_DONE, 0, RL_FIN_LENGTH);
	else if (len + 1 >= s->p.max_ctx)
		finish(s, x, RL_EV_DONE, 0, RL_FIN_CTX);
}

/* Drafts of batch seq i its samples confirmed: the leading ones equal to the token sampled
 * for their position (draft j is row 1 + j; draft_out[j] was sampled from the row before) */
static uint32_t accepted(const struct rl_sched *s, uint32_t i)
{
	const struct rl_batch_seq *b = &s->bseq[i];
	uint32_t a = 0;
	while (a < b->n_draft && b->draft_out[a] == (int32_t)s->tok[b->q_start + 1 + a])
		a++;
	return a;
}

/* A verifying x's tokens: the accepted drafts, then the sample after them (the correction
 * of the first rejected draft, or the token after the last). Stops when x ends. */
static void take_tokens(struct rl_sched *s, struct seqx *x, uint32_t i, uint32_t a, int32_t last)
{
	const struct rl_batch_seq *b = &s->bseq[i];
	s->st.spec_drafted += b->n_draft;
	s->st.spec_accepted += a;
	s->st.spec_rounds++;
	rl_spec_update(&x->spec, a, b->n_draft);
	x->n_draft = 0;
	for (uint32_t j = 0; j <= a; j++) {
		take_token(s, x, j < b->n_draft ? b->draft_out[j] : last);
		if (x->inc != s->step_inc[i])
			return;                 /* ended (its blocks went with it) */
	}
	trim(s, x, x->q.n_computed);
}

void rl_sched_complete(struct rl_sched *s, const int32_t *out, uint64_t now_ns)
{
	assert(s->in_flight);
	s->in_flight = 0;
	for (uint32_t i = 0; i < s->batch.n_seqs; i++)
		s->step_ctx[i] = s->bseq[i].ctx_len - s->bseq[i].n_draft + accepted(s, i);
	if (s->p.prefix_cache)
		prefetch_full(s);
	for (uint32_t i = 0; i < s->batch.n_seqs; i++) {
		struct seqx *x = s->step_x[i];
		const struct rl_batch_seq *b = &s->bseq[i];
		if (x->inc != s->step_inc[i])
			continue;           /* cancelled while the step ran */
		x->in_step = 0;
		x->q.n_computed = s->step_ctx[i];
		x->q.step_index = i;
		if (b->prompt_logprobs) {      /* the chunk's prompt positions, before any token */
			for (uint32_t p = b->plp_lo; p < b->plp_hi; p++)
				if (s->h.emit_prompt)
					s->h.emit_prompt(s->h.ctx, &x->q, p - b->plp_lo, p, x->tok[p]);
			x->q.plp_next = b->plp_hi;
		}
		if (s->p.prefix_cache)
			register_full(s, x, s->step_hash[i]);
		if (!b->sample)
			continue;
		if (x->q.state == RL_SEQ_PREFILL) {
			x->q.state = RL_SEQ_DECODE;
			list_del(&x->pl);
			s->n_prefill--;
		}
		if (b->n_draft)
			take_tokens(s, x, i, s->step_ctx[i] - (b->ctx_len - b->n_draft), out[i]);
		else
			take_token(s, x, out[i]);
	}
}

/* --- control and introspection -------------------------------------------------------- */

void rl_sched_set_spec_cost(struct rl_sched *s, double c, double c_row)
{
	s->spec_cost = c > 0 ? c : 0;
	s->spec_row_cost = c_row > 0 ? c_row : 0;
}

void rl_sched_set_max_running(struct rl_sched *s, uint32_t n)
{
	s->max_running = n < 1 ? 1 : n > s->p.max_seqs ? s->p.max_seqs : n;
}

void rl_sched_set_budget(struct rl_sched *s, uint32_t n)
{
	uint32_t hi = s->p.max_batch_tokens;
	s->budget = n < 1 ? 1 : n > hi ? hi : n;
}

void rl_sched_get_stats(const struct rl_sched *s, struct rl_sched_stats *st)
{
	struct rl_kv_stats k;
	rl_kv_get_stats(s->kv, &k);
	*st = s->st;
	st->queued = s->n_queued + s->n_expired;
	st->running = s->n_running;
	st->prefilling = s->n_prefill;
	st->kv_blocks_total = k.n_blocks;
	st->kv_blocks_free = k.free + k.cached_free;
	st->kv_blocks_cached = k.cached;
	st->kv_evictions = k.evictions;
	st->budget = s->budget;
	st->max_running = s->max_running;
}

int rl_sched_idle(const struct rl_sched *s)
{
	return !s->n_queued && !s->n_expired && !s->n_running;
}

struct rl_seq *rl_sched_seq_at(struct rl_sched *s, uint32_t id)
{
	if (id >= s->p.pool_size || s->pool[id].q.state == RL_SEQ_FREE)
		return NULL;
	return &s->pool[id].q;
}

uint32_t rl_sched_seq_blocks(const struct rl_sched *s, const struct rl_seq *q,
			     const uint32_t **table)
{
	const struct seqx *x = X(q);
	*table = x->blocks;
	return x->n_blocks;
}

const struct rl_kv *rl_sched_kv(const struct rl_sched *s)
{
	return s->kv;
}

void rl_sched_kv_observe(struct rl_sched *s, const struct rl_kv_observer *o)
{
	rl_kv_set_observer(s->kv, o);
}

int64_t rl_sched_reset_prefix_cache(struct rl_sched *s)
{
	return rl_kv_reset(s->kv);
}
