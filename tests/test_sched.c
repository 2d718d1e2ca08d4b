/* test_sched.c — the step scheduler driven against the real sim backend.
 *
 * The sim backend's tokens are a chained function of everything before them, read through the
 * block table (rl_backend_sim.h), so every TOKEN event is checked against that oracle as it is emitted:
 * wrong block tables, bad prefix-cache hits, lost KV or a preempted sequence that resumes
 * wrongly all show up as a wrong token. On top of that each step is audited: budget, batch
 * layout, decode progress, block refcounts against the block tables that hold them.
 * Thousands of random workloads (arrivals, priorities, deadlines, cancels, client hang-ups,
 * tight KV pools, refused event-ring reservations) run on a simulated clock.
 * Tests: runtime/sched (rl_sched, rl_kv), runtime/backend (sim).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "runtime/sched/rl_sched.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/backend/rl_backend_sim.h"
#include "runtime/spec/rl_draft.h"
#include "runtime/spec/rl_ngram.h"
#include "runtime/sched/rl_spec.h"

#define MAX_CLIENTS 4
#define MAX_REQ 64
#define MAX_CTX 2048

/* --- the test world: scheduler + sim backend + emulated client event rings ------------- */

struct treq {
	uint32_t prompt[MAX_CTX], n_prompt, max_new, client;
	uint32_t stop[RL_MAX_STOP_IDS], n_stop;
	int32_t priority;
	uint64_t deadline;
	uint32_t got[MAX_CTX], n_got;  /* TOKEN events received */
	uint64_t state;                /* oracle: sim state after prompt + got */
	int live, done, cancelled;
	int32_t fin;                   /* DONE code, or -errno of an ERROR event */
	uint64_t enq_step, enq_ns;
	struct rl_seq *q;
};

struct world {
	struct rl_sched_params p;
	struct rl_sched *s;
	struct rl_backend *be;
	uint32_t vocab;
	uint64_t rng, now, step;
	struct treq *req;
	uint32_t n_req;
	/* event rings: capacity, filled, reserved this step, refused this step */
	uint32_t cap[MAX_CLIENTS], used[MAX_CLIENTS], resv[MAX_CLIENTS], refused[MAX_CLIENTS];
	uint32_t refuse_pct;           /* random reserve refusals, percent */
	int32_t out[1024];
	uint32_t prefill_rows[MAX_REQ];  /* rows each request got in prefill chunks */
	uint32_t in_batch[1024];       /* step+1 when pool id was in the last batch */
	/* the draft source between plan and compose: prompt lookup unless set */
	int (*draft)(void *ctx, struct rl_draft_ask *asks, uint32_t n);
	void *draft_ctx;
};

static uint32_t rnd(struct world *w, uint32_t n)
{
	w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (uint32_t)((w->rng >> 33) % n) : 0;
}

static int w_reserve(void *ctx, uint32_t client, uint32_t n)
{
	struct world *w = ctx;
	if (client >= MAX_CLIENTS)
		return -EINVAL;
	if (rnd(w, 100) < w->refuse_pct || w->used[client] + w->resv[client] + n > w->cap[client]) {
		w->refused[client] = 1;
		return -EAGAIN;
	}
	w->resv[client] += n;
	return 0;
}

/* t ends a generation as EOS does: EOS or another end-of-generation id */
static int is_eog(const struct rl_sched_params *p, uint32_t t)
{
	for (uint32_t i = 0; i < p->n_eog; i++)
		if (p->eog[i] == t)
			return 1;
	return t == p->eos_id;
}

static int is_stop(const struct treq *r, uint32_t t, uint32_t eos)
{
	if (t == eos)
		return 1;
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->stop[i] == t)
			return 1;
	return 0;
}

static void w_emit(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t tok, int32_t code)
{
	struct world *w = ctx;
	CHECKF(q->rid < w->n_req, "rid %u", q->rid);
	if (q->rid >= w->n_req)
		return;
	struct treq *r = &w->req[q->rid];
	CHECKF(r->live && !r->done && !r->cancelled, "event for request %u not live", q->rid);
	CHECK(w->resv[r->client] > 0);
	w->resv[r->client]--;
	w->used[r->client]++;
	uint32_t exp = (uint32_t)(r->state % w->vocab);
	if (type == RL_EV_TOKEN) {
		CHECKF(tok == exp, "req %u token %u: got %u want %u", q->rid, r->n_got, tok, exp);
		CHECK(!is_stop(r, tok, w->p.eos_id) && !is_eog(&w->p, tok));
		CHECK(r->n_got < r->max_new && r->n_prompt + r->n_got < w->p.max_ctx);
		r->got[r->n_got++] = tok;
		r->state = rl_sim_mix(r->state, tok);
		return;
	}
	r->done = 1;
	r->live = 0;
	r->fin = code;
	if (type == RL_EV_ERROR) {
		CHECKF(r->n_got == 0 && ((code == -ETIMEDOUT && r->deadline && w->now > r->deadline) ||
					 (code == -ETIME && w->p.max_queue_ns && w->now > r->enq_ns + w->p.max_queue_ns &&
					  (!r->deadline || r->deadline >= r->enq_ns + w->p.max_queue_ns))),
		       "req %u error %d", q->rid, code);
		return;
	}
	CHECK(type == RL_EV_DONE);
	switch (code) {
	case RL_FIN_EOS:
		CHECK(tok == exp && is_eog(&w->p, exp));
		break;
	case RL_FIN_STOP:
		CHECK(tok == exp && is_stop(r, exp, UINT32_MAX));
		break;
	case RL_FIN_LENGTH:
		CHECK(r->n_got == r->max_new);
		break;
	case RL_FIN_CTX:
		CHECK(r->n_got < r->max_new && r->n_prompt + r->n_got == w->p.max_ctx);
		break;
	default:
		CHECKF(0, "req %u done code %d", q->rid, code);
	}
}

static int world_init(struct world *w, const struct rl_sched_params *p, uint32_t vocab,
		      struct treq *req)
{
	memset(w, 0, sizeof *w);
	w->p = *p;
	w->vocab = vocab;
	w->req = req;
	w->now = 1000000000ull;
	for (int c = 0; c < MAX_CLIENTS; c++)
		w->cap[c] = 64;
	struct rl_sched_hooks h = { .ctx = w, .reserve = w_reserve, .emit = w_emit };
	if (rl_sched_create(p, &h, &w->s))
		return -1;
	struct rl_backend_params bp = {
		.n_kv_blocks = p->n_kv_blocks, .block_size = p->block_size,
		.max_batch_tokens = p->max_batch_tokens, .max_seqs = p->max_seqs, .sim_vocab = vocab,
	};
	char err[128];
	if (rl_backend_sim_create(&bp, &w->be, err, sizeof err)) {
		rl_sched_destroy(w->s);
		return -1;
	}
	return 0;
}

static void world_fini(struct world *w)
{
	rl_sched_destroy(w->s);
	rl_backend_destroy(w->be);
}

/* Queues request i (already filled in w->req[i]); returns what rl_sched_enqueue returned, or
 * -ENOSPC when the pool is exhausted. */
static int submit(struct world *w, uint32_t i)
{
	struct treq *r = &w->req[i];
	struct rl_seq *q = rl_sched_seq_alloc(w->s);
	if (!q)
		return -ENOSPC;
	q->client = r->client;
	q->rid = i;
	q->tag = 0x7a6000 + i;
	memcpy(q->tokens, r->prompt, r->n_prompt * sizeof *r->prompt);
	q->n_prompt = r->n_prompt;
	q->max_new = r->max_new;
	memcpy(q->stop, r->stop, sizeof r->stop);
	q->n_stop = r->n_stop;
	q->priority = r->priority;
	q->deadline_ns = r->deadline;
	r->state = RL_SIM_STATE0;
	for (uint32_t k = 0; k < r->n_prompt; k++)
		r->state = rl_sim_mix(r->state, r->prompt[k]);
	int rc = rl_sched_enqueue(w->s, q, w->now);
	if (rc == 0) {
		r->q = q;
		r->live = 1;
		r->enq_step = w->step;
		r->enq_ns = w->now;
	}
	return rc;
}

static void cancel(struct world *w, struct treq *r)
{
	rl_sched_cancel(w->s, r->q);
	r->live = 0;
	r->cancelled = 1;
}

/* --- per-step audits ---------------------------------------------------------------- */

/* The layout rl_batch.h promises, and what the scheduler promises about chunks. */
static void check_batch(struct world *w, const struct rl_batch *b, uint32_t budget)
{
	uint32_t bs = w->p.block_size, row = 0;
	CHECKF(b->n_tokens >= 1 && b->n_tokens <= budget, "%u rows, budget %u", b->n_tokens, budget);
	CHECK(b->n_seqs <= w->p.max_seqs && b->n_prefill <= b->n_seqs && b->block_size == bs);
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *bq = &b->seqs[i];
		struct rl_seq *q = rl_sched_seq_at(w->s, bq->seq_id);
		REQUIRE(q);
		CHECK(w->in_batch[bq->seq_id] != w->step + 1);      /* each sequence once */
		w->in_batch[bq->seq_id] = (uint32_t)w->step + 1;
		CHECK(bq->q_start == row && bq->q_len >= 1 && bq->ctx_len >= bq->q_len);
		CHECK(bq->n_blocks == (bq->ctx_len + bs - 1) / bs);
		uint32_t len = q->n_prompt + q->n_gen;
		CHECK(bq->ctx_len <= len + bq->n_draft && bq->sample == (bq->ctx_len == len + bq->n_draft));
		if (bq->n_draft) {             /* a decode verifying drafts: packed with the chunks */
			CHECK(i < b->n_prefill && q->state == RL_SEQ_DECODE && bq->q_len == 1 + bq->n_draft);
			CHECK(bq->n_draft <= w->p.spec_k && q->n_gen + bq->n_draft < q->max_new);
			CHECK(bq->draft_out);
		} else if (i < b->n_prefill) {
			CHECK(q->state == RL_SEQ_PREFILL);
			/* a chunk that does not end the prompt ends on a block boundary, unless it is
			 * shorter than a block or that boundary would have kept less than half of it */
			uint32_t start = bq->ctx_len - bq->q_len, aligned = bq->ctx_len / bs * bs;
			CHECK(bq->sample || bq->ctx_len % bs == 0 || bq->q_len < bs || aligned <= start ||
			      2 * (aligned - start) < bq->q_len);
		} else {
			CHECK(q->state == RL_SEQ_DECODE && bq->q_len == 1 && bq->sample);
		}
		for (uint32_t k = 0; k < bq->n_blocks; k++)
			CHECK(bq->block_table[k] < w->p.n_kv_blocks);
		for (uint32_t k = 0; k < bq->q_len; k++, row++) {
			uint32_t p = bq->ctx_len - bq->q_len + k;
			CHECK(b->row_seq[row] == i && b->pos[row] == p && b->tokens[row] == q->tokens[p]);
		}
		if (i < b->n_prefill && q->rid < MAX_REQ)
			w->prefill_rows[q->rid] += bq->q_len;
	}
	CHECK(row == b->n_tokens);
}

/* Every block's refcount equals the number of block tables holding it; a block shared by two
 * tables is a cached full block; the block a sequence still writes into is its alone. */
static void audit_blocks(struct world *w)
{
	static uint32_t cnt[1 << 14];
	const struct rl_kv *kv = rl_sched_kv(w->s);
	uint32_t nb = w->p.n_kv_blocks, bs = w->p.block_size, held = 0;
	memset(cnt, 0, nb * sizeof *cnt);
	for (uint32_t id = 0; id < w->p.pool_size; id++) {
		struct rl_seq *q = rl_sched_seq_at(w->s, id);
		if (!q)
			continue;
		const uint32_t *t;
		uint32_t n = rl_sched_seq_blocks(w->s, q, &t);
		if (q->state != RL_SEQ_PREFILL && q->state != RL_SEQ_DECODE)
			CHECK(n == 0);
		for (uint32_t k = 0; k < n; k++)
			cnt[t[k]]++;
	}
	for (uint32_t id = 0; id < w->p.pool_size; id++) {
		struct rl_seq *q = rl_sched_seq_at(w->s, id);
		if (!q)
			continue;
		const uint32_t *t;
		uint32_t n = rl_sched_seq_blocks(w->s, q, &t);
		for (uint32_t k = q->n_computed / bs; k < n; k++)
			CHECKF(cnt[t[k]] == 1, "writable block %u shared", t[k]);
	}
	for (uint32_t b = 0; b < nb; b++) {
		CHECKF(rl_kv_refcount(kv, b) == cnt[b], "block %u ref %u held by %u", b,
		       rl_kv_refcount(kv, b), cnt[b]);
		CHECK(cnt[b] <= 1 || rl_kv_is_cached(kv, b));
		held += cnt[b] > 0;
	}
	CHECK(rl_kv_available(kv) == nb - held);
}

/* One step: compose, check, run on the sim backend, complete. Returns rows run. */
static uint32_t step(struct world *w)
{
	struct rl_sched_stats st0;
	rl_sched_get_stats(w->s, &st0);
	memset(w->resv, 0, sizeof w->resv);
	memset(w->refused, 0, sizeof w->refused);
	/* decoding sequences before the step: each must be in it unless paused or preempted */
	uint32_t dec_ids[1024], n_dec = 0;
	for (uint32_t id = 0; id < w->p.pool_size; id++) {
		struct rl_seq *q = rl_sched_seq_at(w->s, id);
		if (q && q->state == RL_SEQ_DECODE)
			dec_ids[n_dec++] = id;
	}
	struct rl_draft_ask *asks;
	const uint32_t n_asks = rl_sched_plan(w->s, w->now, &asks);
	for (uint32_t i = 0; i < n_asks; i++)
		CHECK(asks[i].n_out == 0 && asks[i].k >= 1 && asks[i].k <= w->p.spec_k);
	if (n_asks && w->draft)
		w->draft(w->draft_ctx, asks, n_asks);
	else if (n_asks)
		rl_ngram_propose(asks, n_asks);
	const struct rl_batch *b = rl_sched_compose(w->s);
	uint32_t rows = 0;
	if (b) {
		check_batch(w, b, st0.budget);
		CHECK(rl_backend_launch(w->be, b) == 0);
		CHECK(rl_backend_finish(w->be, w->out) == 0);
		rows = b->n_tokens;
	}
	if (n_dec <= st0.budget) {
		for (uint32_t k = 0; k < n_dec; k++) {
			struct rl_seq *q = rl_sched_seq_at(w->s, dec_ids[k]);
			if (w->in_batch[dec_ids[k]] == w->step + 1 || q->state == RL_SEQ_QUEUED)
				continue;
			CHECKF(w->refused[q->client], "decode of seq %u skipped without reason", q->id);
		}
	}
	if (b)
		rl_sched_complete(w->s, w->out, w->now);
	w->step++;
	w->now += 1000000;
	return rows;
}

static void check_drained(struct world *w)
{
	struct rl_sched_stats st;
	rl_sched_get_stats(w->s, &st);
	CHECK(rl_sched_idle(w->s));
	CHECK(st.queued == 0 && st.running == 0 && st.prefilling == 0);
	CHECKF(st.kv_blocks_free == st.kv_blocks_total, "%u of %u blocks free", st.kv_blocks_free,
	       st.kv_blocks_total);
	audit_blocks(w);
	for (uint32_t i = 0; i < w->n_req; i++)
		CHECKF(!w->req[i].live, "request %u never finished", i);
}

/* --- deterministic tests ------------------------------------------------------------- */

static struct treq reqs[MAX_REQ];

static void fill_req(struct treq *r, uint32_t n_prompt, uint32_t seed, uint32_t vocab,
		     uint32_t max_new)
{
	memset(r, 0, sizeof *r);
	for (uint32_t i = 0; i < n_prompt; i++)
		r->prompt[i] = (seed * 7919 + i * 31 + (i * i) % 13) % vocab;
	r->n_prompt = n_prompt;
	r->max_new = max_new;
}

static void run_until_idle(struct world *w, uint32_t max_steps)
{
	while (!rl_sched_idle(w->s) && max_steps--) {
		memset(w->used, 0, sizeof w->used);
		step(w);
		audit_blocks(w);
	}
}

static void basic_generate(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 256;
	p.n_kv_blocks = 64;
	p.pool_size = 8;
	p.max_seqs = 8;
	REQUIRE(world_init(&w, &p, 32000, reqs) == 0);
	w.n_req = 3;
	fill_req(&reqs[0], 5, 1, 32000, 10);
	fill_req(&reqs[1], 40, 2, 32000, 3);
	fill_req(&reqs[2], 200, 3, 32000, 100);    /* ends at max_ctx */
	for (uint32_t i = 0; i < 3; i++)
		CHECK(submit(&w, i) == 0);
	run_until_idle(&w, 1000);
	CHECK(reqs[0].fin == RL_FIN_LENGTH && reqs[0].n_got == 10);
	CHECK(reqs[1].fin == RL_FIN_LENGTH && reqs[1].n_got == 3);
	CHECK(reqs[2].fin == RL_FIN_CTX && reqs[2].n_got == 56);
	check_drained(&w);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECK(st.finished == 3 && st.tokens_decode > 0 && st.tokens_prefill >= 245);
	world_fini(&w);
}

static void enqueue_validates(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 64;
	p.pool_size = 4;
	p.max_seqs = 4;
	REQUIRE(world_init(&w, &p, 100, reqs) == 0);
	w.n_req = 5;
	fill_req(&reqs[0], 64, 1, 100, 1);
	CHECK(submit(&w, 0) == -E2BIG);
	fill_req(&reqs[1], 0, 1, 100, 1);
	CHECK(submit(&w, 1) == -EINVAL);
	fill_req(&reqs[2], 3, 1, 100, 0);
	CHECK(submit(&w, 2) == -EINVAL);
	fill_req(&reqs[3], 3, 1, 100, 2);
	reqs[3].deadline = w.now - 1;
	CHECK(submit(&w, 3) == -ETIMEDOUT);
	fill_req(&reqs[4], 3, 1, 100, 2);
	reqs[4].n_stop = RL_MAX_STOP_IDS + 1;
	CHECK(submit(&w, 4) == -EINVAL);
	/* rejected entries went back to the pool */
	struct rl_seq *q[4];
	for (int i = 0; i < 4; i++)
		CHECK((q[i] = rl_sched_seq_alloc(w.s)) != NULL);
	CHECK(rl_sched_seq_alloc(w.s) == NULL);
	for (int i = 0; i < 4; i++)
		rl_sched_seq_release(w.s, q[i]);
	CHECK(rl_sched_idle(w.s));
	world_fini(&w);
}

static void stop_and_eos_end_without_token(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 128;
	p.pool_size = 4;
	p.max_seqs = 4;
	const uint32_t vocab = 50;
	/* find the 3rd generated token of a prompt, make it a stop id, then EOS */
	fill_req(&reqs[0], 9, 4, vocab, 20);
	uint32_t ctx[64];
	memcpy(ctx, reqs[0].prompt, 9 * sizeof *ctx);
	for (int i = 0; i < 3; i++)
		ctx[9 + i] = rl_sim_next(ctx, 9 + i, vocab);
	uint32_t third = ctx[11];
	if (ctx[9] == third || ctx[10] == third)
		SKIP("the prompt's first tokens repeat; pick another seed");
	/* mode 0: a stop id; 1: EOS; 2: another end-of-generation id (a chat model's end of turn) */
	for (int mode = 0; mode < 3; mode++) {
		p.eos_id = mode == 1 ? third : mode == 2 ? vocab + 1 : UINT32_MAX;
		p.n_eog = mode == 2 ? 2 : 0;
		p.eog[0] = vocab + 2;
		p.eog[1] = third;
		REQUIRE(world_init(&w, &p, vocab, reqs) == 0);
		w.n_req = 1;
		fill_req(&reqs[0], 9, 4, vocab, 20);
		if (!mode) {
			reqs[0].stop[0] = 7777;
			reqs[0].stop[1] = third;
			reqs[0].n_stop = 2;
		}
		CHECK(submit(&w, 0) == 0);
		run_until_idle(&w, 100);
		CHECK(reqs[0].done && reqs[0].n_got == 2);
		CHECK(reqs[0].fin == (mode ? RL_FIN_EOS : RL_FIN_STOP));
		check_drained(&w);
		world_fini(&w);
	}
}

/* A shared 1,000-token prefix is prefilled once: the second request computes only its
 * suffix, and its tokens are still right. */
static void prefix_cache_shares_prompt(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 2048;
	p.n_kv_blocks = 512;
	p.pool_size = 4;
	p.max_seqs = 4;
	p.max_batch_tokens = 256;
	REQUIRE(world_init(&w, &p, 32000, reqs) == 0);
	w.n_req = 2;
	fill_req(&reqs[0], 1010, 5, 32000, 4);
	fill_req(&reqs[1], 1024, 5, 32000, 4);
	for (uint32_t i = 1000; i < 1024; i++)
		reqs[1].prompt[i] = 31000 + i;
	CHECK(submit(&w, 0) == 0);
	run_until_idle(&w, 100);
	CHECK(w.prefill_rows[0] == 1010);
	CHECK(submit(&w, 1) == 0);
	run_until_idle(&w, 100);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECKF(w.prefill_rows[1] == 1024 - 992, "second request prefilled %u rows", w.prefill_rows[1]);
	CHECK(st.prefix_hit_tokens >= 992);
	CHECK(reqs[0].fin == RL_FIN_LENGTH && reqs[1].fin == RL_FIN_LENGTH && reqs[1].n_got == 4);
	check_drained(&w);
	world_fini(&w);
}

/* Blocks are registered as soon as a chunk fills them: a request arriving while the shared
 * prompt is still being prefilled already hits the part done so far. */
static void prefix_cache_shares_during_prefill(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 2048;
	p.n_kv_blocks = 512;
	p.pool_size = 4;
	p.max_seqs = 4;
	p.max_batch_tokens = 64;
	REQUIRE(world_init(&w, &p, 32000, reqs) == 0);
	w.n_req = 2;
	fill_req(&reqs[0], 1000, 6, 32000, 2);
	fill_req(&reqs[1], 1000, 6, 32000, 2);
	reqs[1].prompt[999] = 1;
	CHECK(submit(&w, 0) == 0 && submit(&w, 1) == 0);
	run_until_idle(&w, 200);
	/* B is admitted beside A's last chunk (40 rows): A's first 960 tokens are cached by then */
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECKF(st.prefix_hit_tokens == 960, "hits %lu", (unsigned long)st.prefix_hit_tokens);
	CHECK(w.prefill_rows[0] == 1000 && w.prefill_rows[1] == 40);
	CHECK(reqs[0].n_got == 2 && reqs[1].n_got == 2);
	check_drained(&w);
	world_fini(&w);
}

/* Same workload, budget 16 (chunked) and 4096 (whole prompts): identical token streams. */
static void run_fixed_workload(uint32_t budget, uint32_t got[][64], uint32_t *n_got)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 512;
	p.n_kv_blocks = 1024;
	p.pool_size = 16;
	p.max_seqs = 16;
	p.max_batch_tokens = budget;
	p.prefix_cache = 0;
	REQUIRE(world_init(&w, &p, 1000, reqs) == 0);
	w.n_req = 12;
	for (uint32_t i = 0; i < 12; i++)
		fill_req(&reqs[i], 1 + (i * 37) % 300, 10 + i, 1000, 5 + i * 3);
	uint32_t next = 0;
	while (next < w.n_req || !rl_sched_idle(w.s)) {
		if (next < w.n_req && w.step % 3 == 0)
			CHECK(submit(&w, next++) == 0);
		memset(w.used, 0, sizeof w.used);
		step(&w);
		REQUIRE(w.step < 5000);
	}
	for (uint32_t i = 0; i < 12; i++) {
		n_got[i] = reqs[i].n_got;
		memcpy(got[i], reqs[i].got, reqs[i].n_got * sizeof **got);
	}
	check_drained(&w);
	world_fini(&w);
}

static void chunked_equals_unchunked(void)
{
	static uint32_t a[12][64], b[12][64];
	uint32_t na[12], nb[12];
	run_fixed_workload(16, a, na);
	run_fixed_workload(4096, b, nb);
	for (int i = 0; i < 12; i++) {
		CHECK(na[i] == nb[i] && na[i] == 5 + (uint32_t)i * 3);
		CHECK(!memcmp(a[i], b[i], na[i] * sizeof **a));
	}
}

/* Speculation by prompt lookup over a 3-token vocabulary (drafts often right, often not):
 * every token is still the oracle's (rejected drafts' KV never read), the blocks audit clean
 * every step with drafts crossing block boundaries, fewer steps run, and a request that opts
 * out is never given drafts. */
static uint64_t spec_run(uint32_t spec_k, uint32_t no_spec, struct rl_sched_stats *st)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 300;
	p.block_size = 4;
	p.n_kv_blocks = 400;
	p.pool_size = 8;
	p.max_seqs = 8;
	p.spec_k = spec_k;
	if (world_init(&w, &p, 3, reqs)) {
		CHECK(0);
		return 0;
	}
	w.n_req = 4;
	for (uint32_t i = 0; i < 4; i++) {
		fill_req(&reqs[i], 3 + 7 * i, 40 + i, 3, 120 + 30 * i);
		reqs[i].client = i;
		w.cap[i] = 1024;
	}
	for (uint32_t i = 0; i < 4; i++) {
		CHECK(submit(&w, i) == 0);
		reqs[i].q->no_spec = no_spec;
	}
	run_until_idle(&w, 5000);
	for (uint32_t i = 0; i < 4; i++)
		CHECK(reqs[i].fin == RL_FIN_LENGTH || reqs[i].fin == RL_FIN_CTX);
	check_drained(&w);
	rl_sched_get_stats(w.s, st);
	world_fini(&w);
	return w.step;
}

/* rl_spec's pieces: prompt lookup (the latest longest match, continued through a repeating
 * pattern), the draft length against acceptance and cost, the pause, the step-cost fit */
static void spec_helpers(void)
{
	uint32_t out[8];
	const uint32_t a[] = { 5, 6, 7, 8, 9, 5, 6, 7 }, want_a[] = { 8, 9, 5, 6, 7, 8, 9 };
	CHECK(rl_ngram_draft(a, 8, 7, out) == 7 && !memcmp(out, want_a, sizeof want_a));
	const uint32_t b[] = { 1, 2, 3, 3, 3, 3 };
	CHECK(rl_ngram_draft(b, 6, 5, out) == 5 && out[0] == 3 && out[4] == 3);
	const uint32_t c[] = { 1, 2, 3, 4 }, d[] = { 1, 2, 3, 1 }, e[] = { 4, 1, 2, 9, 9, 1, 2 };
	CHECK(rl_ngram_draft(c, 4, 4, out) == 0 && rl_ngram_draft(d, 4, 4, out) == 0);   /* one token is no match */
	CHECK(rl_ngram_draft(e, 7, 2, out) == 2 && out[0] == 9 && out[1] == 9);
	struct rl_spec_state st;
	rl_spec_init(&st);
	CHECK(rl_spec_len(&st, 8, 0.1) >= 1);                  /* the prior: worth a short draft */
	for (int i = 0; i < 20; i++)
		rl_spec_update(&st, 6, 6);
	CHECK(rl_spec_len(&st, 6, 0.05) == 6);                 /* all accepted: the longest */
	CHECK(rl_spec_len(&st, 6, 2.0) == 0);                  /* a draft dearer than a step never pays */
	rl_spec_init(&st);
	for (int i = 0; i < 20; i++)
		rl_spec_update(&st, 0, 2);
	CHECK(rl_spec_len(&st, 8, 0.1) == 0);                  /* nothing accepted: pause 1 */
	CHECK(rl_spec_len(&st, 8, 0.1) == 1);                  /* then a probe of one */
	CHECK(rl_spec_len(&st, 8, 0.1) == 0 && rl_spec_len(&st, 8, 0.1) == 0 && rl_spec_len(&st, 8, 0.1) == 1);
	/* probes that keep failing: the pause doubles up to RL_SPEC_MAX_PAUSE; and a draft dearer
	 * than a whole step (a draft model as slow as the target) is never even probed */
	rl_spec_init(&st);
	uint32_t probes = 0, last = 0, gap = 0;
	CHECK(rl_spec_len(&st, 8, 1.0) == 0 && rl_spec_len(&st, 8, 1.0) == 0 && st.wait == 0);
	for (uint32_t i = 1; i <= 400; i++)
		if (rl_spec_len(&st, 8, 0.3)) {
			rl_spec_update(&st, 0, 1);
			CHECK(i - last >= gap);
			gap = i - last;
			last = i;
			probes++;
		}
	CHECKF(probes < 14 && gap == RL_SPEC_MAX_PAUSE + 1, "%u probes, last gap %u", probes, gap);
	struct rl_spec_cost f = { 0 };
	CHECK(rl_spec_cost_row(&f, 0) == RL_SPEC_ROW_COST);
	for (int i = 0; i < 100; i++)                          /* 95 us + 5 us a row */
		rl_spec_cost_observe(&f, i % 2 ? 1 : 5, i % 2 ? 100000 : 120000);
	CHECKF(fabs(rl_spec_cost_row(&f, 0) - 0.05) < 1e-6, "c %f", rl_spec_cost_row(&f, 0));
	CHECK(fabs(rl_spec_cost_row(&f, 50000) - 0.55) < 1e-6);   /* a draft model's 50 us a draft */
}

/* A draft "model" that is the sim backend again (so its drafts are the target's tokens
 * exactly when its KV is right), behind rl_draft, with a share of its drafts corrupted after
 * the fact: every token is still the oracle's, and exactly the drafts before the first
 * corrupted one of each ask are accepted, which holds only if the drafter resumes its KV at
 * the right position after each verification. */
struct dworld {
	struct world w;
	struct rl_draft *d;
	struct rl_backend *be;
	uint32_t corrupt_pct;
	uint64_t expect_acc, expect_drafted;
};

static int dw_draft(void *ctx, struct rl_draft_ask *asks, uint32_t n)
{
	struct dworld *dw = ctx;
	int rc = rl_draft_propose(dw->d, asks, n);
	for (uint32_t i = 0; !rc && i < n; i++) {
		uint32_t a = asks[i].n_out;
		for (uint32_t j = 0; j < asks[i].n_out; j++)
			if (rnd(&dw->w, 100) < dw->corrupt_pct) {
				asks[i].out[j] = (asks[i].out[j] + 1) % dw->w.vocab;
				a = a < j ? a : j;
			}
		dw->expect_acc += a;
		dw->expect_drafted += asks[i].n_out;
	}
	return rc;
}

static void dw_gone(void *ctx, uint32_t id)
{
	struct dworld *dw = ctx;
	rl_draft_forget(dw->d, id);
}

/* the world's hooks see the struct world first in struct dworld */
static int dw_reserve(void *ctx, uint32_t client, uint32_t n) { return w_reserve(ctx, client, n); }
static void dw_emit(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t tok, int32_t code)
{
	w_emit(ctx, q, type, tok, code);
}

static void draft_model_run(uint32_t corrupt_pct)
{
	static struct dworld dw;
	struct world *w = &dw.w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 400;
	p.block_size = 4;
	p.n_kv_blocks = 1200;
	p.pool_size = 8;
	p.max_seqs = 8;
	p.max_batch_tokens = 64;
	p.spec_k = 5;
	const uint32_t vocab = 50;
	memset(&dw, 0, sizeof dw);
	REQUIRE(world_init(w, &p, vocab, reqs) == 0);
	rl_sched_destroy(w->s);        /* again, with the drafter's hooks */
	struct rl_sched_hooks h = { .ctx = &dw, .reserve = dw_reserve, .emit = dw_emit, .seq_gone = dw_gone };
	w->draft = dw_draft;
	w->draft_ctx = &dw;
	REQUIRE(rl_sched_create(&p, &h, &w->s) == 0);
	struct rl_backend_params bp = { .n_kv_blocks = 600, .block_size = 4, .max_batch_tokens = 64, .max_seqs = 8,
					.sim_vocab = vocab };
	char err[128];
	REQUIRE(rl_backend_sim_create(&bp, &dw.be, err, sizeof err) == 0);
	REQUIRE(rl_draft_create(dw.be, 600, 4, 8, 64, p.pool_size, p.max_ctx, &dw.d) == 0);
	dw.corrupt_pct = corrupt_pct;
	w->rng = 99 + corrupt_pct;
	w->n_req = 6;
	for (uint32_t i = 0; i < 6; i++) {
		fill_req(&reqs[i], 1 + 23 * i, 70 + i, vocab, 60 + 20 * i);   /* prompts up to 116: several catch-up chunks */
		reqs[i].client = i % MAX_CLIENTS;
	}
	for (int c = 0; c < MAX_CLIENTS; c++)
		w->cap[c] = 4096;
	uint32_t next = 0;
	while (next < w->n_req || !rl_sched_idle(w->s)) {
		if (next < w->n_req && w->step % 4 == 0)
			CHECK(submit(w, next++) == 0);
		memset(w->used, 0, sizeof w->used);
		step(w);
		audit_blocks(w);
		REQUIRE(w->step < 5000);
	}
	for (uint32_t i = 0; i < 6; i++)
		CHECK(reqs[i].fin == RL_FIN_LENGTH && reqs[i].n_got == reqs[i].max_new);
	check_drained(w);
	struct rl_sched_stats st;
	rl_sched_get_stats(w->s, &st);
	struct rl_draft_stats ds;
	rl_draft_get_stats(dw.d, &ds);
	printf("  %u%% corrupted: %lu of %lu drafts accepted (expected %lu), %lu steps; drafter %lu steps, %lu rows\n",
	       corrupt_pct, (unsigned long)st.spec_accepted, (unsigned long)st.spec_drafted,
	       (unsigned long)dw.expect_acc, (unsigned long)w->step, (unsigned long)ds.steps, (unsigned long)ds.rows);
	CHECK(st.spec_drafted == dw.expect_drafted && st.spec_accepted == dw.expect_acc && st.spec_drafted > 100);
	CHECK(corrupt_pct || st.spec_accepted == st.spec_drafted);
	rl_draft_destroy(dw.d);
	rl_backend_destroy(dw.be);
	world_fini(w);
}

static void draft_model_drafts_resume_right(void)
{
	draft_model_run(0);
	draft_model_run(15);
	draft_model_run(60);
}

static void speculation_keeps_tokens(void)
{
	struct rl_sched_stats plain, spec, off;
	uint64_t n_plain = spec_run(0, 0, &plain), n_spec = spec_run(6, 0, &spec), n_off = spec_run(6, 1, &off);
	printf("  steps %lu plain, %lu with drafts (%lu of %lu accepted)\n", (unsigned long)n_plain,
	       (unsigned long)n_spec, (unsigned long)spec.spec_accepted, (unsigned long)spec.spec_drafted);
	CHECK(plain.spec_drafted == 0 && off.spec_drafted == 0 && n_off == n_plain);
	CHECK(spec.spec_accepted > 0 && spec.spec_accepted < spec.spec_drafted);
	CHECK(n_spec < n_plain);
}

/* A KV pool that fits one full-length sequence: decodes preempt the newest sequence, which
 * later recomputes and still yields the oracle tokens with no duplicates. */
static void preemption_recomputes(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 64;
	p.block_size = 4;
	p.n_kv_blocks = 20;
	p.pool_size = 8;
	p.max_seqs = 8;
	p.max_batch_tokens = 64;
	REQUIRE(world_init(&w, &p, 500, reqs) == 0);
	w.n_req = 6;
	for (uint32_t i = 0; i < 6; i++) {
		fill_req(&reqs[i], 6 + i, 20 + i, 500, 60);
		CHECK(submit(&w, i) == 0);
	}
	run_until_idle(&w, 2000);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECK(st.preemptions > 0);
	for (uint32_t i = 0; i < 6; i++)
		CHECK(reqs[i].done && reqs[i].n_got + reqs[i].n_prompt == 64);
	check_drained(&w);
	world_fini(&w);
}

static void priority_and_deadline_order(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 64;
	p.pool_size = 8;
	p.max_seqs = 1;                      /* one at a time: admission order is visible */
	REQUIRE(world_init(&w, &p, 1000, reqs) == 0);
	w.n_req = 5;
	for (uint32_t i = 0; i < 5; i++)
		fill_req(&reqs[i], 4, 30 + i, 1000, 3);
	reqs[0].max_new = 10;
	CHECK(submit(&w, 0) == 0);
	step(&w);                            /* request 0 runs from now on */
	reqs[1].priority = -1;
	reqs[2].deadline = w.now + 100000000;
	reqs[3].priority = 2;
	reqs[4].deadline = w.now + 500000;   /* expires while request 0 runs */
	for (uint32_t i = 1; i < 5; i++)
		CHECK(submit(&w, i) == 0);
	uint64_t done_at[5] = { 0 };
	while (!rl_sched_idle(w.s) && w.step < 100) {
		memset(w.used, 0, sizeof w.used);
		step(&w);
		for (uint32_t i = 0; i < 5; i++)
			if (reqs[i].done && !done_at[i])
				done_at[i] = w.step;
	}
	CHECK(reqs[4].fin == -ETIMEDOUT && reqs[0].fin == RL_FIN_LENGTH);
	CHECK(done_at[4] < done_at[0] && done_at[0] < done_at[3] && done_at[3] < done_at[2] &&
	      done_at[2] < done_at[1]);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECK(st.expired == 1 && st.finished == 4);
	check_drained(&w);
	world_fini(&w);
}

/* While a long prompt is in progress, a short one that arrives later is admitted whole in the
 * next step (from half the budget), and the long one keeps the other half; the running cap
 * holds admissions back; the queue's bound ends a request that waits past it with -ETIME. */
static void short_first_cap_and_queue_bound(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 512;
	p.n_kv_blocks = 256;
	p.pool_size = 8;
	p.max_seqs = 8;
	p.max_batch_tokens = 64;
	p.max_queue_ns = 20000000;           /* 20 steps of the world's clock */
	REQUIRE(world_init(&w, &p, 1000, reqs) == 0);
	w.n_req = 4;
	fill_req(&reqs[0], 400, 50, 1000, 60);
	fill_req(&reqs[1], 20, 51, 1000, 60);
	fill_req(&reqs[2], 20, 52, 1000, 4);
	fill_req(&reqs[3], 20, 53, 1000, 4);
	CHECK(submit(&w, 0) == 0);
	CHECK(step(&w) == 64);                /* the long prompt's first chunk */
	CHECK(submit(&w, 1) == 0);
	step(&w);                             /* the short one whole; the long one 44 rows, to a block */
	CHECK(w.prefill_rows[1] == 20 && w.prefill_rows[0] == 64 + 32);
	/* the running cap: two run, the third waits past the queue's bound */
	rl_sched_set_max_running(w.s, 2);
	CHECK(submit(&w, 2) == 0);
	for (int i = 0; i < 30 && !reqs[2].done; i++) {
		memset(w.used, 0, sizeof w.used);
		step(&w);
	}
	CHECK(reqs[2].done && reqs[2].fin == -ETIME && reqs[2].n_got == 0);
	rl_sched_set_max_running(w.s, 8);
	CHECK(submit(&w, 3) == 0);
	run_until_idle(&w, 200);
	CHECK(reqs[0].fin == RL_FIN_LENGTH && reqs[1].fin == RL_FIN_LENGTH && reqs[3].fin == RL_FIN_LENGTH);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECK(st.expired == 1 && st.overloaded == 1 && st.finished == 3);
	check_drained(&w);
	world_fini(&w);
}

/* A client whose event ring is full is left out of steps; its tokens all arrive later. */
static void full_ring_pauses(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 64;
	p.pool_size = 4;
	p.max_seqs = 4;
	REQUIRE(world_init(&w, &p, 1000, reqs) == 0);
	w.n_req = 2;
	fill_req(&reqs[0], 4, 40, 1000, 20);
	fill_req(&reqs[1], 4, 41, 1000, 20);
	reqs[1].client = 1;
	w.cap[1] = 4;
	CHECK(submit(&w, 0) == 0 && submit(&w, 1) == 0);
	for (int i = 0; i < 10; i++) {
		w.used[0] = 0;                   /* client 1 never drains here */
		step(&w);
	}
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	CHECK(st.paused == 1 && reqs[1].n_got <= 3 && reqs[0].n_got == 10);
	run_until_idle(&w, 100);
	CHECK(reqs[0].n_got == 20 && reqs[1].n_got == 20);
	check_drained(&w);
	world_fini(&w);
}

/* Cancelling a sequence while its step runs: complete skips it, its pool entry may be reused. */
static void cancel_during_step(void)
{
	struct world w;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_ctx = 64;
	p.pool_size = 2;
	p.max_seqs = 2;
	REQUIRE(world_init(&w, &p, 1000, reqs) == 0);
	w.n_req = 3;
	fill_req(&reqs[0], 30, 50, 1000, 5);
	fill_req(&reqs[1], 4, 51, 1000, 5);
	fill_req(&reqs[2], 4, 52, 1000, 5);
	CHECK(submit(&w, 0) == 0 && submit(&w, 1) == 0);
	struct rl_draft_ask *asks;
	CHECK(rl_sched_plan(w.s, w.now, &asks) == 0);   /* speculation off: no asks */
	const struct rl_batch *b = rl_sched_compose(w.s);
	REQUIRE(b && b->n_seqs == 2);
	CHECK(rl_backend_launch(w.be, b) == 0);
	cancel(&w, &reqs[0]);
	CHECK(submit(&w, 2) == 0);           /* takes request 0's pool entry */
	CHECK(reqs[2].q == reqs[0].q);
	CHECK(rl_backend_finish(w.be, w.out) == 0);
	rl_sched_complete(w.s, w.out, w.now);
	run_until_idle(&w, 100);
	CHECK(reqs[1].n_got == 5 && reqs[2].n_got == 5 && reqs[0].n_got == 0);
	check_drained(&w);
	world_fini(&w);
}

/* --- randomised workloads --------------------------------------------------------------- */

static void random_params(struct world *w, struct rl_sched_params *p, uint32_t *vocab)
{
	static const uint32_t bss[] = { 1, 2, 4, 8, 16 };
	rl_sched_default_params(p);
	p->block_size = bss[rnd(w, 5)];
	p->max_ctx = 8 + rnd(w, 120);
	uint32_t min_blocks = (p->max_ctx + p->block_size - 1) / p->block_size;
	p->n_kv_blocks = rnd(w, 2) ? min_blocks + rnd(w, min_blocks * 2)
				   : min_blocks * (4 + rnd(w, 8));
	p->max_seqs = 1 + rnd(w, 12);
	p->pool_size = 1 + rnd(w, 24);
	p->max_batch_tokens = 1 + rnd(w, 96);
	p->prefix_cache = rnd(w, 4) != 0;
	p->spec_k = rnd(w, 2) ? 1 + rnd(w, 8) : 0;
	*vocab = rnd(w, 4) ? 6 + rnd(w, 200) : 2 + rnd(w, 4);   /* tiny: drafts often right */
	p->eos_id = rnd(w, 3) ? UINT32_MAX : rnd(w, *vocab);
	p->n_eog = rnd(w, 4) ? 0 : 1;
	p->eog[0] = rnd(w, *vocab);
	p->max_queue_ns = rnd(w, 4) ? 0 : (1 + rnd(w, 60)) * 1000000ull;
}

static void random_request(struct world *w, struct treq *r, const uint32_t sys[3][128])
{
	uint32_t max_ctx = w->p.max_ctx;
	memset(r, 0, sizeof *r);
	r->n_prompt = 1 + rnd(w, max_ctx - 1);
	if (rnd(w, 50) == 0)
		r->n_prompt = rnd(w, 2) ? max_ctx : 0;          /* invalid: rejected */
	/* most prompts start with one of three "system prompts" so prefixes are shared */
	uint32_t shared = rnd(w, 4) ? rnd(w, r->n_prompt + 1) : 0;
	const uint32_t *sp = sys[rnd(w, 3)];
	for (uint32_t i = 0; i < r->n_prompt; i++)
		r->prompt[i] = i < shared ? sp[i] : rnd(w, w->vocab);
	r->max_new = 1 + rnd(w, rnd(w, 4) ? 16 : max_ctx);
	r->n_stop = rnd(w, 3);
	for (uint32_t i = 0; i < r->n_stop; i++)
		r->stop[i] = rnd(w, w->vocab * 4);
	r->client = rnd(w, MAX_CLIENTS);
	r->priority = rnd(w, 4) ? 0 : (int32_t)rnd(w, 3) - 1;
	if (rnd(w, 5) == 0)
		r->deadline = w->now + rnd(w, 40) * 1000000ull;
}

static struct rl_sched_stats tot;    /* summed over the random workloads */

/* One random workload, every step audited. */
static void random_workload(uint64_t seed)
{
	static struct treq rq[MAX_REQ];
	struct world w0 = { .rng = seed * 0x9E3779B97F4A7C15ull + 1 };
	struct rl_sched_params p;
	uint32_t vocab;
	random_params(&w0, &p, &vocab);
	struct world w;
	if (world_init(&w, &p, vocab, rq)) {
		CHECKF(0, "seed %lu: create failed", (unsigned long)seed);
		return;
	}
	w.rng = w0.rng;
	w.refuse_pct = rnd(&w, 3) ? rnd(&w, 25) : 0;
	for (int c = 0; c < MAX_CLIENTS; c++)
		w.cap[c] = 2 + rnd(&w, 16);
	uint32_t sys[3][128];
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 128; i++)
			sys[k][i] = rnd(&w, vocab);
	uint32_t n_total = 5 + rnd(&w, MAX_REQ - 5), next = 0, fails0 = rl_t_failed_now;
	w.n_req = n_total;
	uint32_t arrive_pct = 10 + rnd(&w, 80), cancel_pct = rnd(&w, 3) ? rnd(&w, 4) : 0;
	for (int draining = 0; !draining || !rl_sched_idle(w.s);) {
		/* arrivals */
		while (next < n_total && rnd(&w, 100) < arrive_pct) {
			random_request(&w, &rq[next], sys);
			int rc = submit(&w, next);
			if (rc == -ENOSPC)
				break;
			CHECK(rc == 0 || rq[next].n_prompt == 0 || rq[next].n_prompt >= p.max_ctx);
			next++;
		}
		draining = next == n_total;
		/* cancels and client hang-ups */
		if (rnd(&w, 100) < cancel_pct) {
			struct treq *r = &rq[rnd(&w, next ? next : 1)];
			if (r->live)
				cancel(&w, r);
		}
		if (cancel_pct && rnd(&w, 400) == 0) {
			uint32_t c = rnd(&w, MAX_CLIENTS), n_live = 0;
			for (uint32_t i = 0; i < next; i++)
				if (rq[i].live && rq[i].client == c) {
					rq[i].live = 0;
					rq[i].cancelled = 1;
					n_live++;
				}
			CHECK(rl_sched_cancel_client(w.s, c) == n_live);
		}
		if (rnd(&w, 20) == 0)
			rl_sched_set_budget(w.s, 1 + rnd(&w, p.max_batch_tokens + 8));
		if (rnd(&w, 30) == 0)          /* the automatic budget's running cap */
			rl_sched_set_max_running(w.s, rnd(&w, 3) ? 1 + rnd(&w, p.max_seqs + 2) : p.max_seqs);
		/* clients drain their event rings at their own pace */
		for (int c = 0; c < MAX_CLIENTS; c++)
			if (rnd(&w, 2))
				w.used[c] -= rnd(&w, w.used[c] + 1);
		if (draining && w.step > 2000)
			w.refuse_pct = 0;
		step(&w);
		audit_blocks(&w);
		for (uint32_t i = 0; i < next; i++)
			CHECKF(!rq[i].live || w.step - rq[i].enq_step < 4000,
			       "seed %lu: request %u waits for ever", (unsigned long)seed, i);
		if (w.step > 25000 || rl_t_failed_now > fails0) {
			CHECKF(0, "seed %lu: stopped at step %lu", (unsigned long)seed,
			       (unsigned long)w.step);
			break;
		}
	}
	check_drained(&w);
	struct rl_sched_stats st;
	rl_sched_get_stats(w.s, &st);
	tot.steps += w.step;
	tot.preemptions += st.preemptions;
	tot.prefix_hit_tokens += st.prefix_hit_tokens;
	tot.finished += st.finished;
	tot.cancelled += st.cancelled;
	tot.expired += st.expired;
	tot.spec_drafted += st.spec_drafted;
	tot.spec_accepted += st.spec_accepted;
	world_fini(&w);
}

static void random_workloads(void)
{
	const char *slow = getenv("RL_SLOW");
	uint32_t div = slow && atoi(slow) > 0 ? (uint32_t)atoi(slow) : 1;
	const char *seed_env = getenv("RL_SEED");
	uint64_t n = 10000 / div;
	if (seed_env) {
		random_workload(strtoull(seed_env, NULL, 0));
		return;
	}
	for (uint64_t seed = 1; seed <= n && !rl_t_failed_now; seed++)
		random_workload(seed);
	printf("  %lu workloads, %lu steps: %lu finished, %lu cancelled, %lu expired, "
	       "%lu preemptions, %lu prefix-hit tokens, %lu of %lu drafts accepted\n", (unsigned long)n,
	       (unsigned long)tot.steps, (unsigned long)tot.finished, (unsigned long)tot.cancelled,
	       (unsigned long)tot.expired, (unsigned long)tot.preemptions,
	       (unsigned long)tot.prefix_hit_tokens, (unsigned long)tot.spec_accepted,
	       (unsigned long)tot.spec_drafted);
	CHECK(n < 100 || (tot.spec_accepted > 0 && tot.spec_accepted < tot.spec_drafted));
}

int main(void)
{
	RUN(basic_generate);
	RUN(enqueue_validates);
	RUN(stop_and_eos_end_without_token);
	RUN(prefix_cache_shares_prompt);
	RUN(prefix_cache_shares_during_prefill);
	RUN(chunked_equals_unchunked);
	RUN(spec_helpers);
	RUN(speculation_keeps_tokens);
	RUN(draft_model_drafts_resume_right);
	RUN(preemption_recomputes);
	RUN(priority_and_deadline_order);
	RUN(short_first_cap_and_queue_bound);
	RUN(full_ring_pauses);
	RUN(cancel_during_step);
	RUN(random_workloads);
	TEST_MAIN_END();
}
