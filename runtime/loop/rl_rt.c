/* rl_rt.c — the runtime loop: clients in, steps through the backend, tokens out.
 *
 * One thread does everything. Per iteration:
 *   drain every client's request ring (copy each record, validate, copy the prompt out of the
 *   arena, validate the ids) → scheduler; if no step is running, compose one and launch it;
 *   while it runs, keep draining; when it is done, collect sampled ids, let the scheduler emit
 *   events (written straight into the clients' event rings), publish each ring once, and wake
 *   the clients that sleep. Control-plane completions (attach, hang-ups, signals, timers) are
 *   reaped from the io_uring completion queue without a syscall.
 * With no work for its idle window (rl_idle.h: --idle-spin-us, grown up to --idle-adapt-ms to
 * cover the idle periods it sees), it announces sleep (info->rt_sleeping = 1), re-checks every
 * ring, arms a wait per client (IORING_OP_FUTEX_WAIT on the client's rt_bell where the kernel
 * has it, else a poll on the client's eventfd) and blocks in io_uring_submit_and_wait.
 *
 * Trust: a client owns its segment and can write anything at any time. The runtime keeps the
 * geometry private, reads only the request ring's prod index (checked), copies each record and
 * prompt before validating, and never follows a client pointer. A client whose indices are
 * impossible is detached as hostile.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/futex.h>
#include <liburing.h>
#include <numa.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/loop/rl_rt_backend.h"
#include "runtime/spec/rl_draft.h"
#include "runtime/spec/rl_ngram.h"
#include "runtime/sched/rl_budget.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/loop/rl_calib.h"
#include "ipc/rl_clock.h"
#include "ipc/rl_ipc.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/sched/rl_sched.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/loop/rl_validate.h"
#include "runtime/loop/rl_rt_cons.h"
#include "runtime/loop/rl_rt_internal.h"
#include "tokenizer/rl_tok.h"

/* An idle spin polls with pause for this long after the last work (back-to-back traffic
 * lands within it), then yields the core between polls (see the loop). */
#define IDLE_YIELD_AFTER_NS 50000

/* ---- io_uring helpers ----------------------------------------------------------------- */

static const uint64_t one_u64 = 1;

void rt_cancel_ud(struct rl_rt *rt, uint64_t ud)
{
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_cancel64(s, ud, 0);
	io_uring_sqe_set_data64(s, UD(UD_CANCEL, 0, 0));
}


struct io_uring_sqe *rt_sqe_get(struct rl_rt *rt)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&rt->ring);
	if (!s) {
		io_uring_submit(&rt->ring);
		s = io_uring_get_sqe(&rt->ring);
	}
	return s;
}

/* IORING_OP_FUTEX_WAIT filled by hand (liburing 2.3 predates the helper): addr = the word,
 * addr2 (off) = expected value, addr3 = bitset mask, fd = FUTEX2 flags (a shared 32-bit word:
 * no FUTEX2_PRIVATE, since the word lives in a segment mapped by two processes). */
static void prep_futex_wait(struct io_uring_sqe *s, _Atomic uint32_t *word, uint32_t val)
{
	io_uring_prep_rw(IORING_OP_FUTEX_WAIT_NR, s, RL_FUTEX2_SIZE_U32, (void *)word, 0, val);
	s->addr3 = RL_FUTEX_BITSET_ANY;
}

/* Probe: is IORING_OP_FUTEX_WAIT supported? Registered probe first, then a real wait on a
 * mismatching value (must complete with -EAGAIN, not -EINVAL). */
static int probe_futex(struct rl_rt *rt)
{
	struct io_uring_probe *pr = io_uring_get_probe_ring(&rt->ring);
	int ok = pr && io_uring_opcode_supported(pr, IORING_OP_FUTEX_WAIT_NR);
	if (pr)
		io_uring_free_probe(pr);
	if (!ok)
		return 0;
	static _Atomic uint32_t word = 1;
	struct io_uring_sqe *s = rt_sqe_get(rt);
	prep_futex_wait(s, &word, 0);
	io_uring_sqe_set_data64(s, 0);
	io_uring_submit(&rt->ring);
	struct io_uring_cqe *c;
	if (io_uring_wait_cqe(&rt->ring, &c))
		return 0;
	ok = c->res == -EAGAIN;
	io_uring_cqe_seen(&rt->ring, c);
	return ok;
}

/* ---- stats ---------------------------------------------------------------------------- */

void rt_publish_sched_stats(struct rl_rt *rt)
{
	struct rl_sched_stats s;
	struct rl_rt_cons_stats cs;
	rl_sched_get_stats(rt->sched, &s);
	rl_rt_cons_get_stats(rt->cons, &cs);
	ST_SET(cons_compiles, cs.compiles);
	ST_SET(cons_compile_ns, cs.compile_ns);
	ST_SET(cons_prewarmed, cs.prewarmed);
	ST_SET(cons_waiting, cs.waiting);
	ST_SET(queued_requests, s.queued);
	ST_SET(running, s.running);
	ST_SET(prefilling, s.prefilling);
	ST_SET(paused, s.paused);
	ST_SET(active_requests, s.queued + s.running + cs.waiting);
	ST_SET(steps, s.steps);
	ST_SET(tokens_prefill, s.tokens_prefill);
	ST_SET(kv_blocks_total, s.kv_blocks_total);
	ST_SET(kv_blocks_free, s.kv_blocks_free);
	ST_SET(preemptions, s.preemptions);
	ST_SET(prefix_hit_tokens, s.prefix_hit_tokens);
	ST_SET(prefix_query_tokens, s.prefix_query_tokens);
	ST_SET(budget, s.budget);
	ST_SET(last_step_tokens, s.last_step_tokens);
	ST_SET(spec_drafted, s.spec_drafted);
	ST_SET(spec_accepted, s.spec_accepted);
	ST_SET(spec_rounds, s.spec_rounds);
	for (int i = 0; i <= RL_LAT_N; i++)
		ST_SET(queue_time[i], s.queue_time[i]);
	ST_SET(queue_time_sum_ns, s.queue_time_sum_ns);
	ST_SET(queue_time_count, s.queue_time_count);
	ST_SET(max_running, s.max_running);
	ST_SET(overloaded, s.overloaded);
	if (rt->kvev) {
		struct rl_kvev_stats k;
		rl_kvev_get_stats(rt->kvev, &k);
		ST_SET(kv_events_sent, k.sent);
		ST_SET(kv_events_msgs, k.msgs);
		ST_SET(kv_events_dropped, k.dropped);
		ST_SET(kv_events_resyncs, k.resyncs);
	}
}

/* The runtime thread's page faults (the hot path's, once --latency has locked memory) */
static void publish_faults(struct rl_rt *rt)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		ST_SET(rt_page_faults, (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt);
}

/* ---- events to clients ---------------------------------------------------------------- */

static void mark_touched(struct rl_rt *rt, uint32_t slot)
{
	struct client *c = &rt->clients[slot];
	if (!c->touched) {
		c->touched = 1;
		rt->touched[rt->n_touched++] = slot;
	}
}

/* Free event slots not yet promised or written; -1 marks the client hostile. */
static int64_t evt_room(struct client *c)
{
	int64_t sp = rl_ring_prod_space(&c->evt, c->evt.mask + 1);
	if (sp < 0) {
		c->hostile = 1;
		return 0;
	}
	int64_t r = sp - (int64_t)c->unpub - (int64_t)c->reserved;
	return r > 0 ? r : 0;
}

static void put_evt(struct rl_rt *rt, uint32_t slot, uint32_t rid, uint16_t type, uint32_t token,
		    int32_t code, uint32_t index)
{
	struct client *c = &rt->clients[slot];
	struct rl_evt *e = rl_ring_prod_slot(&c->evt, c->unpub++);
	e->rid = rid;
	e->token = token;
	e->type = type;
	e->code = (int16_t)code;
	e->index = index;
	mark_touched(rt, slot);
}

/* The log-probability slab slot of the event put_evt writes next (rl_wire.h) */
static struct rl_lp *next_lp(struct client *c)
{
	return &c->lp[rl_ring_prod_index(&c->evt, c->unpub)];
}

/* A token's log-probabilities into its event's slab slot, at most n_top alternatives; zeros
 * where the step has none for it (not reached: requests are validated, but never stale data) */
static void put_lp(struct rl_lp *dst, const struct rl_lp *src, uint32_t n_top)
{
	if (!src) {
		memset(dst, 0, sizeof *dst);
		return;
	}
	*dst = *src;
	dst->n_top = dst->n_top < n_top ? dst->n_top : n_top;
}

static int hook_reserve(void *ctx, uint32_t slot, uint32_t n)
{
	struct rl_rt *rt = ctx;
	struct client *c = &rt->clients[slot];
	if (evt_room(c) < n)
		return -EAGAIN;
	if (!c->in_resv) {
		c->in_resv = 1;
		rt->resv[rt->n_resv++] = slot;
	}
	c->reserved += n;
	return 0;
}

/* q's grammar met its state cap (or memory) at this token: q is ended once the step is
 * complete (end_cons_failed), since the scheduler is inside its completion now. */
static void cons_failed(struct rl_rt *rt, const struct rl_seq *q)
{
	for (uint32_t i = 0; i < rt->n_cons_failed; i++)
		if (rt->cons_failed[i] == q)
			return;        /* a later token of the same step (drafts) */
	rt->cons_failed[rt->n_cons_failed++] = (struct rl_seq *)q;
}

static void hook_emit(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t token, int32_t code)
{
	struct rl_rt *rt = ctx;
	struct client *c = &rt->clients[q->client];
	if (c->reserved)
		c->reserved--;
	if (type == RL_EV_TOKEN && q->allow) {
		const int e = rl_rt_cons_advance(rt->cons, q->id, token);
		if (e == -E2BIG || e == -ENOMEM)
			cons_failed(rt, q);
		else if (e)
			LOG(rt, "request %u: token %u outside its constraint", q->rid, token);   /* not reached */
	}
	if (type == RL_EV_TOKEN && q->logprobs) {
		const struct rl_step_lp *o = &rt->step_lp;
		put_lp(next_lp(c), q->step_index < o->n_seqs ? &o->tok[q->step_index] : NULL, q->logprobs - 1);
	}
	put_evt(rt, q->client, q->rid, (uint16_t)type, token, code,
		type == RL_EV_TOKEN ? q->n_gen - 1 : q->n_gen);
	if (type == RL_EV_TOKEN)
		ST_ADD(tokens_out, 1);
	if (type != RL_EV_TOKEN) {     /* the request is over: its id is free again */
		c->by_rid[q->rid] = NULL;
		c->active--;
		if (type == RL_EV_DONE)
			ST_ADD(requests_done, 1);
		else
			ST_ADD(requests_error, 1);
	}
}

static void hook_seq_gone(void *ctx, uint32_t seq_id)
{
	struct rl_rt *rt = ctx;
	if (rt->draft)
		rl_draft_forget(rt->draft, seq_id);
	rl_rt_cons_forget(rt->cons, seq_id);
}

static void hook_emit_prompt(void *ctx, const struct rl_seq *q, uint32_t k, uint32_t pos, uint32_t token)
{
	struct rl_rt *rt = ctx;
	struct client *c = &rt->clients[q->client];
	if (c->reserved)
		c->reserved--;
	const struct rl_step_lp *o = &rt->step_lp;
	const uint32_t i = q->step_index;
	put_lp(next_lp(c), i < o->n_seqs && k < o->prompt_start[i + 1] - o->prompt_start[i] ?
		   &o->prompt[o->prompt_start[i] + k] : NULL, q->prompt_logprobs - 1);
	put_evt(rt, q->client, q->rid, RL_EV_PROMPT, token, 0, pos);
}

/* Publish every touched ring once and wake the clients that sleep. */
static void publish_events(struct rl_rt *rt)
{
	int need_fence = 1;
	for (uint32_t i = 0; i < rt->n_touched; i++) {
		struct client *c = &rt->clients[rt->touched[i]];
		c->touched = 0;
		if (!c->used || !c->unpub)
			continue;
		rl_ring_prod_publish(&c->evt, c->unpub);
		c->unpub = 0;
		if (need_fence) {      /* orders the publishes before the cl_sleeping loads */
			atomic_thread_fence(memory_order_seq_cst);
			need_fence = 0;
		}
		if (!atomic_load_explicit(&c->ctl->cl_sleeping, memory_order_relaxed))
			continue;
		atomic_fetch_add_explicit(&c->ctl->cl_bell, 1, memory_order_release);
		struct io_uring_sqe *s = rt_sqe_get(rt);
		if (rt->futex_ok) {    /* IORING_OP_FUTEX_WAKE (52): same layout as the wait */
			io_uring_prep_rw(IORING_OP_FUTEX_WAIT_NR + 1, s, RL_FUTEX2_SIZE_U32,
					 (void *)&c->ctl->cl_bell, 0, 1);
			s->addr3 = RL_FUTEX_BITSET_ANY;
		} else if (c->cl_efd >= 0 && rt->p.wake == RL_RT_WAKE_EVENTFD) {
			io_uring_prep_write(s, c->cl_efd, &one_u64, 8, 0);
		} else {
			/* kernel without io_uring futexes: the client may still sleep on its futex
			 * (futex mode) — wake it with the plain syscall, and its eventfd too */
			io_uring_prep_write(s, c->cl_efd, &one_u64, 8, 0);
			rl_futex_wake(&c->ctl->cl_bell, 1);
		}
		io_uring_sqe_set_data64(s, UD(UD_WAKE, 0, 0));
	}
	rt->n_touched = 0;
	if (io_uring_sq_ready(&rt->ring))
		io_uring_submit(&rt->ring);
}

/* ---- requests from clients ------------------------------------------------------------ */

static void reject(struct rl_rt *rt, uint32_t slot, uint32_t rid, int err)
{
	put_evt(rt, slot, rid, RL_EV_ERROR, 0, err, 0);
	if (err == -EBUSY)
		ST_ADD(rejected_busy, 1);
	else if (err == -E2BIG || err == -ENOSPC)
		ST_ADD(rejected_limit, 1);
	else
		ST_ADD(rejected_invalid, 1);
	ST_ADD(requests_error, 1);
}

/* One copied request record: queue it, or answer it with exactly one event. */
static void handle_req(struct rl_rt *rt, uint32_t slot, const struct rl_req *r, uint64_t now)
{
	struct client *c = &rt->clients[slot];
	uint32_t rid = r->rid;
	if (r->op == RL_OP_CANCEL) {
		if (rid < rt->p.max_inflight && c->by_rid[rid]) {
			struct rl_seq *q = c->by_rid[rid];
			uint32_t n_gen = q->n_gen;
			rt_cancel_req(rt, q);
			c->by_rid[rid] = NULL;
			c->active--;
			ST_ADD(requests_done, 1);
			rt_publish_sched_stats(rt);     /* before the DONE is published, as in step_done */
			put_evt(rt, slot, rid, RL_EV_DONE, 0, RL_FIN_CANCEL, n_gen);
		}
		return;        /* cancelling a finished request is not an error */
	}
	if ((r->op != RL_OP_SUBMIT && r->op != RL_OP_RESET_CACHE) || rid >= rt->p.max_inflight)
		return reject(rt, slot, rid, -EINVAL);
	if (c->by_rid[rid])
		return reject(rt, slot, rid, -EBUSY);
	if (r->op == RL_OP_RESET_CACHE) {
		int64_t n = rl_sched_reset_prefix_cache(rt->sched);
		if (n < 0) {
			LOG(rt, "client %u: prefix cache not reset: requests hold cached blocks", slot);
			return reject(rt, slot, rid, (int)n);
		}
		LOG(rt, "client %u: prefix cache reset (%lld blocks freed)", slot, (long long)n);
		ST_ADD(cache_resets, 1);
		rt_publish_sched_stats(rt);
		put_evt(rt, slot, rid, RL_EV_DONE, 0, 0, 0);
		return;
	}
	if (rt->draining)
		return reject(rt, slot, rid, -ESHUTDOWN);
	struct rl_limits lim = { .max_inflight = rt->p.max_inflight, .max_prompt = rt->max_prompt,
				 .max_new = rt->max_new, .vocab = rt->vocab, .arena_ids = c->arena_mask + 1,
				 .logprobs = rt->be->ops->logprobs != NULL,
				 .deterministic = rt->be->info.deterministic };
	int err = rl_rt_validate_req(r, &lim, now);
	if (err)
		return reject(rt, slot, rid, err);
	/* the prompt's ids are checked on a copy (the arena stays client-writable), before a
	 * sequence is taken for them */
	uint32_t n = r->n_prompt;
	if (rl_rt_copy_prompt(rt->prompt, c->arena, c->arena_mask, r->arena_pos, n, rt->vocab))
		return reject(rt, slot, rid, -ERANGE);
	struct rl_seq *q = rl_sched_seq_alloc(rt->sched);
	if (!q)
		return reject(rt, slot, rid, -ENOSPC);
	memcpy(q->tokens, rt->prompt, (size_t)n * sizeof *q->tokens);
	q->client = slot;
	q->rid = rid;
	q->tag = r->tag;
	q->n_prompt = n;
	q->max_new = r->max_new;
	q->n_stop = r->n_stop;
	_Static_assert(sizeof q->stop == sizeof r->stop, "rl_seq.stop and rl_req.stop hold RL_MAX_STOP_IDS each");
	memcpy(q->stop, r->stop, sizeof q->stop);
	q->priority = r->priority;
	q->deadline_ns = r->deadline_ns;
	q->arrival_ns = now;
	q->sp.temperature = r->temperature;
	q->sp.top_k = r->top_k;
	q->sp.top_p = r->top_p;
	q->sp.seed = r->seed;
	q->logprobs = r->logprobs;
	q->prompt_logprobs = r->prompt_logprobs;
	q->no_spec = r->no_spec;
	q->deterministic = r->deterministic;
	if (r->cons_kind) {            /* its text follows the prompt in the arena */
		char why[256];
		rl_rt_copy_text(rt->cons_text, c->arena, c->arena_mask, r->arena_pos + n, r->cons_len);
		err = rl_rt_cons_start(rt->cons, q->id, r->cons_kind, rt->cons_text, r->cons_len, &q->allow, why,
				       sizeof why);
		if (err < 0) {
			LOG(rt, "client %u request %u: constraint refused: %s", slot, rid, why);
			rl_sched_seq_release(rt->sched, q);
			return reject(rt, slot, rid, err);
		}
		if (err == 1) {        /* its compile is under way: it waits, taking no KV (cons_ready) */
			c->by_rid[rid] = q;
			c->active++;
			return;
		}
	}
	err = rl_sched_enqueue(rt->sched, q, now);
	if (err) {
		rl_rt_cons_forget(rt->cons, q->id);
		return reject(rt, slot, rid, err);
	}
	c->by_rid[rid] = q;
	c->active++;
}

/* A request that waited for its constraint's compile: queued now, or answered with its error. */
static void cons_ready(void *ctx, uint32_t seq_id, int rc, const uint32_t *allow, const char *why)
{
	struct rl_rt *rt = ctx;
	struct rl_seq *q = rl_sched_seq(rt->sched, seq_id);
	struct client *c = &rt->clients[q->client];
	const uint32_t slot = q->client, rid = q->rid;
	if (!rc) {
		q->allow = allow;
		/* it queues from now: the compile was its own wait, not the queue's */
		if (!(rc = rl_sched_enqueue(rt->sched, q, rl_now_ns())))
			return;
		rl_rt_cons_forget(rt->cons, seq_id);   /* the scheduler released it */
	} else {
		LOG(rt, "client %u request %u: constraint refused: %s", slot, rid, why);
		rl_sched_seq_release(rt->sched, q);
	}
	c->by_rid[rid] = NULL;
	c->active--;
	reject(rt, slot, rid, rc);
}

/* A request: cancelled, whether queued, running or waiting for its compile. */
void rt_cancel_req(struct rl_rt *rt, struct rl_seq *q)
{
	if (rl_rt_cons_is_waiting(rt->cons, q->id))
		rl_rt_cons_forget(rt->cons, q->id);
	rl_sched_cancel(rt->sched, q);
}

/* Drain one client's request ring. Each record may produce one event, so records are only
 * taken while the event ring has room: a client that does not read its events stops being
 * served requests (back-pressure), and nothing it sent is lost. */
static int drain_client(struct rl_rt *rt, uint32_t slot, uint64_t now)
{
	struct client *c = &rt->clients[slot];
	int64_t avail = rl_ring_cons_avail(&c->req);
	if (avail < 0) {
		c->hostile = 1;
		return 0;
	}
	if (!avail)
		return 0;
	int64_t room = evt_room(c);
	uint32_t n = (uint32_t)(avail < room ? avail : room);
	struct rl_req r;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(&r, rl_ring_cons_slot(&c->req, i), sizeof r);
		handle_req(rt, slot, &r, now);
	}
	if (n)
		rl_ring_cons_release(&c->req, n);
	return (int)n;
}

static int drain_all(struct rl_rt *rt, uint64_t now)
{
	int n = 0;
	for (uint32_t i = rt->n_live; i-- > 0;) {   /* backwards: a detach moves the last into i */
		const uint32_t s = rt->live[i];
		n += drain_client(rt, s, now);
		if (rt->clients[s].hostile)
			rt_conn_detach(rt, s, "impossible ring index (hostile or corrupted client)");
	}
	return n;
}

/* ---- steps ---------------------------------------------------------------------------- */

/* The sequences whose grammar ran out of states this step end with ERROR(-EOVERFLOW) (or
 * -ENOMEM when memory ran out instead), each in the event slot the step reserved for its
 * end; one that ended anyway in the same step (or was cancelled) is left as it is. Other
 * requests go on: a failed handle is never given to a new request (rl_rt_cons.c). */
static void end_cons_failed(struct rl_rt *rt)
{
	for (uint32_t i = 0; i < rt->n_cons_failed; i++) {
		struct rl_seq *q = rt->cons_failed[i];
		const uint32_t slot = q->client, rid = q->rid, n_gen = q->n_gen;
		struct client *c = &rt->clients[slot];
		if (!c->used || c->by_rid[rid] != q)
			continue;
		const int code = rl_rt_cons_error(rt->cons, q->id) == -ENOMEM ? -ENOMEM : -EOVERFLOW;
		if (code == -EOVERFLOW)
			LOG(rt, "client %u request %u: its grammar needs more than %u automaton states (ringlmd "
			    "--cons-max-states); ended after %u tokens", slot, rid, rl_rt_cons_max_states(rt->cons), n_gen);
		else
			LOG(rt, "client %u request %u: no memory for its grammar's states; ended after %u tokens", slot, rid,
			    n_gen);
		rl_sched_cancel(rt->sched, q);
		c->by_rid[rid] = NULL;
		c->active--;
		if (c->reserved)
			c->reserved--;
		put_evt(rt, slot, rid, RL_EV_ERROR, 0, code, n_gen);
		ST_ADD(requests_error, 1);
	}
	rt->n_cons_failed = 0;
}

/* Hands the step's sampled ids to the scheduler (which emits the events), then ends the
 * requests whose grammar failed in them (end_cons_failed). The step's event
 * reservations are spent then (emit consumed one per event; what is left belonged to
 * sequences cancelled mid-step), and they are cleared here and only here: events published
 * while a step runs must not take the slots it reserved. */
static void complete_step(struct rl_rt *rt, uint64_t now)
{
	rl_sched_complete(rt->sched, rt->out, now);
	end_cons_failed(rt);
	for (uint32_t i = 0; i < rt->n_resv; i++) {
		struct client *c = &rt->clients[rt->resv[i]];
		c->reserved = 0;
		c->in_resv = 0;
	}
	rt->n_resv = 0;
}

/* Speculation's cost model (rl_spec.h): decode-only steps (no prompt rows) feed the fit of
 * step time against rows; the draft model's time per step is averaged; the scheduler gets
 * the cost of a draft relative to a one-row step. */
static void spec_observe(struct rl_rt *rt, const struct rl_batch *b, uint64_t dt)
{
	int decode_only = 1;
	for (uint32_t i = 0; i < b->n_prefill; i++)
		decode_only &= b->seqs[i].n_draft > 0;
	if (decode_only)
		rl_spec_cost_observe(&rt->spec_cost, b->n_tokens, dt);
	if (rt->draft) {
		struct rl_draft_stats ds;
		rl_draft_get_stats(rt->draft, &ds);
		if (ds.steps > rt->draft_seen_steps) {
			const double per = (double)(ds.ns - rt->draft_seen_ns) / (double)(ds.steps - rt->draft_seen_steps);
			rt->draft_ns = rt->draft_ns > 0 ? 0.9 * rt->draft_ns + 0.1 * per : per;
			rt->draft_seen_ns = ds.ns;
			rt->draft_seen_steps = ds.steps;
		}
	}
	rl_sched_set_spec_cost(rt->sched, rl_spec_cost_row(&rt->spec_cost, rt->draft_ns),
			       rl_spec_cost_row(&rt->spec_cost, 0));
}

/* Collects the launched step (computing it, for a backend whose finish() computes); returns
 * the time it ended, when the idle clock may start. */
static uint64_t step_done(struct rl_rt *rt)
{
	int err = rl_backend_finish(rt->be, rt->out);
	const uint64_t now = rl_now_ns(), dt = now - rt->step_t0;
	if (err) {
		SAY("backend step failed: %s", strerror(-err));
		for (uint32_t i = 0; i < rt->batch->n_seqs; i++)
			rt->out[i] = -1;
	}
	/* the step's log-probabilities travel with its ids, for the events complete_step emits */
	if (err || rl_backend_logprobs(rt->be, &rt->step_lp))
		rt->step_lp.n_seqs = 0;
	if (rt->p.budget_auto)          /* a fixed budget needs no step model */
		rl_budget_observe(&rt->budget, rt->batch, dt);
	if (rt->p.spec_k && !(rt->p.spec_cost > 0) && !err)   /* --spec-cost: set once, at create */
		spec_observe(rt, rt->batch, dt);
	complete_step(rt, now);
	rt->stepping = 0;
	if (rt->kvev)
		rl_kvev_service(rt->kvev, rl_sched_kv(rt->sched));
	/* stats before events: a client that has read its DONE must not then read stats that
	 * still count its request as active */
	ST_SET(last_step_ns, dt);
	rt_publish_sched_stats(rt);
	publish_events(rt);
	if (rt->p.budget_auto)
		rl_budget_publish(&rt->budget, &rt->info->st);
	return now;
}

static int try_launch(struct rl_rt *rt, uint64_t now)
{
	if (rt->p.budget_auto) {
		rl_sched_set_budget(rt->sched, rl_budget_pick(&rt->budget, rt->sched));
		rl_sched_set_max_running(rt->sched, rl_budget_max_running(&rt->budget));
	}
	/* the step in three phases: the scheduler's asks, the drafts, the composition */
	struct rl_draft_ask *asks;
	const uint32_t n_asks = rl_sched_plan(rt->sched, now, &asks);
	if (n_asks && rt->draft)
		rl_draft_propose(rt->draft, asks, n_asks);   /* on failure no drafts, the step goes on */
	else if (n_asks)
		rl_ngram_propose(asks, n_asks);
	for (uint32_t i = 0; i < n_asks; i++)   /* constrained: checked, extended by forced tokens */
		asks[i].n_out = rl_rt_cons_drafts(rt->cons, asks[i].seq_id, asks[i].out, asks[i].n_out, asks[i].k);
	const struct rl_batch *b = rl_sched_compose(rt->sched);
	publish_events(rt);             /* errors the scheduler emitted (expired deadlines) */
	if (!b || !b->n_seqs)
		return 0;
	rt->batch = b;
	rt->step_lp.n_seqs = 0;         /* the last step's are stale from here on */
	rt->step_t0 = rl_now_ns();
	int err = rl_backend_launch(rt->be, b);
	if (err) {
		SAY("backend launch failed: %s", strerror(-err));
		for (uint32_t i = 0; i < b->n_seqs; i++)
			rt->out[i] = -1;
		complete_step(rt, now);
		publish_events(rt);
		return 0;
	}
	rt->stepping = 1;
	return 1;
}

/* ---- control-plane completions ------------------------------------------------------- */

static void arm_timer(struct rl_rt *rt)
{
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_timeout(s, &rt->timer_ts, 0, 0);
	io_uring_sqe_set_data64(s, UD(UD_TIMER, 0, 0));
}

static void arm_read(struct rl_rt *rt, int fd, void *buf, unsigned len, unsigned kind)
{
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_read(s, fd, buf, len, 0);
	io_uring_sqe_set_data64(s, UD(kind, 0, 0));
}

static void arm_cons(struct rl_rt *rt)
{
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_poll_add(s, rl_rt_cons_fd(rt->cons), POLLIN);
	io_uring_sqe_set_data64(s, UD(UD_CONS, 0, 0));
}

static void begin_drain(struct rl_rt *rt, const char *why)
{
	if (rt->draining)
		return;
	rt->draining = 1;
	rt->drain_deadline = rl_now_ns() + rt->p.drain_timeout_ns;
	atomic_store_explicit(&rt->info->state, RL_STATE_DRAINING, memory_order_release);
	LOG(rt, "%s: finishing in-flight requests, accepting no new ones", why);
}

static void handle_cqe(struct rl_rt *rt, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	uint32_t slot = UD_SLOT(ud);
	switch (UD_KIND(ud)) {
	case UD_ACCEPT:
		rt->accept_armed = 0;
		if (res >= 0)
			rt_conn_accepted(rt, res);
		rt_conn_arm_accept(rt);
		break;
	case UD_HS: {
		struct handshake *h = &rt->hs[slot];
		rt->woke_bare = 0;         /* a client attaching: its first request is likely close */
		if (res == (int)sizeof h->req && h->used == 1) {
			rt_conn_attach(rt, h->fd, &h->req);
		} else {           /* short read, error, timed out or evicted (-ECANCELED) */
			if (res == -ECANCELED && h->used == 1)
				ST_ADD(dropped_preattach, 1);    /* the linked timeout fired */
			close(h->fd);
		}
		h->used = 0;
		break;
	}
	case UD_HUP: {
		struct client *c = &rt->clients[slot];
		if (!c->used || c->gen != UD_GEN(ud) || res == -ECANCELED)
			break;
		/* a client never sends after attaching: readable means EOF (it died or closed) */
		rt_conn_detach(rt, slot, res & (POLLHUP | POLLRDHUP | POLLERR) ? "hang-up" : "unexpected data on the control socket");
		break;
	}
	case UD_BELL: {
		struct client *c = &rt->clients[slot];
		rt->woke_bare = 0;
		if (c->used && c->gen == UD_GEN(ud)) {
			c->bell_armed = 0;
			if (!rt->futex_ok || rt->p.wake == RL_RT_WAKE_EVENTFD)
				(void)!read(c->rt_efd, &rt->bellbuf, 8);
		}
		break;
	}
	case UD_SIGNAL:
		if (res == (int)sizeof(struct signalfd_siginfo)) {
			begin_drain(rt, "signal");
			arm_read(rt, rt->sig_fd, rt->sigbuf, sizeof(struct signalfd_siginfo), UD_SIGNAL);
		}
		break;
	case UD_STOP:
		if (res >= 0)
			begin_drain(rt, "stop requested");
		break;
	case UD_CONS:          /* compiles done: taken in the loop's pass (rl_rt_cons_poll) */
		(void)!read(rl_rt_cons_fd(rt->cons), &rt->bellbuf, 8);
		arm_cons(rt);
		break;
	case UD_TIMER:
		atomic_store_explicit(&rt->info->heartbeat_ns, rl_now_ns(), memory_order_relaxed);
		if (rt->kvev)          /* an overflow while idle is resynced here */
			rl_kvev_service(rt->kvev, rl_sched_kv(rt->sched));
		rt_publish_sched_stats(rt);
		publish_faults(rt);
		arm_timer(rt);
		break;
	default:
		break;
	}
}

static int reap(struct rl_rt *rt)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	io_uring_for_each_cqe(&rt->ring, head, cqe) {
		handle_cqe(rt, cqe);
		n++;
	}
	if (n)
		io_uring_cq_advance(&rt->ring, n);
	if (io_uring_sq_ready(&rt->ring))
		io_uring_submit(&rt->ring);
	return (int)n;
}

/* ---- sleeping ------------------------------------------------------------------------- */

static int rings_pending(struct rl_rt *rt)
{
	for (uint32_t s = 0; s < rt->p.max_clients; s++) {
		struct client *c = &rt->clients[s];
		if (c->used && rl_ring_cons_avail(&c->req) != 0)
			return 1;
	}
	return 0;
}

static void sleep_until_work(struct rl_rt *rt)
{
	uint32_t bell[rt->p.max_clients];
	for (uint32_t s = 0; s < rt->p.max_clients; s++)
		if (rt->clients[s].used)
			bell[s] = atomic_load_explicit(&rt->clients[s].ctl->rt_bell, memory_order_acquire);
	atomic_store_explicit(&rt->info->rt_sleeping, 1, memory_order_relaxed);
	ST_ADD(sleeps, 1);
	/* pairs with the clients' fence between publishing a request and reading rt_sleeping */
	atomic_thread_fence(memory_order_seq_cst);
	if (!rings_pending(rt) && !atomic_load(&rt->stop_req)) {
		for (uint32_t s = 0; s < rt->p.max_clients; s++) {
			struct client *c = &rt->clients[s];
			if (!c->used || c->bell_armed)
				continue;
			struct io_uring_sqe *q = rt_sqe_get(rt);
			if (rt->futex_ok && rt->p.wake != RL_RT_WAKE_EVENTFD)
				prep_futex_wait(q, &c->ctl->rt_bell, bell[s]);
			else
				io_uring_prep_poll_add(q, c->rt_efd, POLLIN);
			io_uring_sqe_set_data64(q, UD(UD_BELL, s, c->gen));
			c->bell_armed = 1;
		}
		io_uring_submit_and_wait(&rt->ring, 1);
	}
	atomic_store_explicit(&rt->info->rt_sleeping, 0, memory_order_relaxed);
}

/* ---- create / run / destroy ----------------------------------------------------------- */

static int make_info(struct rl_rt *rt, char *err, size_t errlen)
{
	const struct rl_backend_info *bi = &rt->be->info;
	size_t vocab = bi->vocab_blob ? bi->vocab_blob_size : 0;
	rt->info_size = (sizeof(struct rl_info) + vocab + 4095) & ~(size_t)4095;
	void *m;
	int rc = rl_shm_create("ringlm-info", rt->info_size, 1, &rt->info_fd, &m);
	if (rc) {
		snprintf(err, errlen, "cannot create the info segment: %s", strerror(-rc));
		return rc;
	}
	struct rl_info *in = m;
	in->magic = RL_WIRE_MAGIC;
	in->version = RL_WIRE_VERSION;
	in->size = rt->info_size;
	snprintf(in->backend, sizeof in->backend, "%s", bi->name);
	snprintf(in->model, sizeof in->model, "%s", bi->model_name);
	snprintf(in->chat_template, sizeof in->chat_template, "%s", bi->chat_template);
	snprintf(in->chat_system, sizeof in->chat_system, "%s", bi->chat_system);
	in->vocab_size = bi->vocab_size;
	in->max_ctx = bi->max_ctx;
	in->bos_id = bi->bos_id;
	in->eos_id = bi->eos_id;
	in->max_prompt = rt->max_prompt;
	in->max_new = rt->max_new;
	in->max_inflight = rt->p.max_inflight;
	in->max_clients = rt->p.max_clients;
	in->block_size = rt->p.block_size;
	in->deterministic = rt->p.deterministic ? 2 : bi->deterministic ? 1 : 0;
	in->wake_mode = rt->futex_ok ? RL_WAKE_FUTEX : RL_WAKE_EVENTFD;
	in->pid = getpid();
	if (vocab) {
		in->vocab_off = sizeof(struct rl_info);
		in->vocab_size_bytes = (uint32_t)vocab;
		memcpy((uint8_t *)m + in->vocab_off, bi->vocab_blob, vocab);
	}
	atomic_store(&in->state, RL_STATE_RUNNING);
	atomic_store(&in->heartbeat_ns, rl_now_ns());
	atomic_store(&in->st.itl_target_ns, rt->p.itl_target_ns);
	atomic_store(&in->st.spec_k, rt->p.spec_k);
	atomic_store(&in->st.max_queue_ns, rt->p.max_queue_ns);
	rt->info = in;
	return 0;
}

void rl_rt_default_params(struct rl_rt_params *p)
{
	memset(p, 0, sizeof *p);
	p->socket = "default";
	p->backend = NULL;              /* sim without a model, cpu with one */
	p->cpu = -1;
	p->max_batch_tokens = RL_SCHED_DEFAULT_BUDGET;   /* taken only when budget_auto is off */
	p->budget_auto = 1;
	p->max_seqs = 256;
	p->kv_blocks = 0;               /* 0: sized by the backend (sim: 16384) */
	p->block_size = 16;
	p->prefix_cache = 1;
	p->kv_f16 = 1;                  /* half the cache's memory and its reads; ~1e-3 off fp32 */
	p->max_clients = 64;
	p->max_inflight = 256;
	p->max_prompt = 0;              /* 0: the model's context */
	p->max_new = 0;
	p->cons_nice = RL_RT_CONS_NICE;
	p->req_cap = 256;
	p->evt_cap = 4096;
	p->arena_ids = 1u << 18;
	p->sim_vocab = 32000;
	p->idle_spin_ns = 2000000;      /* 2 ms */
	p->idle_adapt_ns = RL_IDLE_ADAPT_DEFAULT_NS;
	p->drain_timeout_ns = 10000000000ull;   /* 10 s */
	p->max_queue_ns = 10000000000ull;       /* 10 s */
}
/* The ids besides EOS that end a generation: the vocabulary's end-of-turn tokens (a chat
 * model's "<end_of_turn>", "<|eot_id|>" ...), so a request stops where llama.cpp stops. */
static void rl_rt_eog_ids(const struct rl_backend_info *bi, struct rl_sched_params *sp)
{
	struct rl_tok *t;
	char err[160];
	uint32_t ids[RL_SCHED_MAX_EOG + 1];
	sp->n_eog = 0;
	if (!bi->vocab_blob || rl_tok_create(bi->vocab_blob, bi->vocab_blob_size, &t, err, sizeof err))
		return;
	size_t n = rl_tok_eog_ids(t, ids, RL_SCHED_MAX_EOG + 1);
	for (size_t i = 0; i < n && i < RL_SCHED_MAX_EOG + 1; i++)
		if (ids[i] != sp->eos_id && sp->n_eog < RL_SCHED_MAX_EOG)
			sp->eog[sp->n_eog++] = ids[i];
	rl_tok_destroy(t);
}


int rl_rt_create(const struct rl_rt_params *p, struct rl_rt **out, char *err, size_t errlen)
{
	struct rl_rt *rt = calloc(1, sizeof *rt);
	if (!rt)
		return -ENOMEM;
	err[0] = 0;
	rt->p = *p;
	rt->listen_fd = rt->sig_fd = rt->stop_fd = rt->info_fd = -1;
	if (p->cpu >= 0) {
		/* refuse a cpu we cannot run on now, rather than start unpinned */
		cpu_set_t allowed;
		if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
		    (p->cpu >= CPU_SETSIZE || !CPU_ISSET(p->cpu, &allowed))) {
			char list[256] = "";
			size_t n = 0;
			for (int c = 0; c < CPU_SETSIZE && n < sizeof list - 8; c++)
				if (CPU_ISSET(c, &allowed))
					n += snprintf(list + n, sizeof list - n, "%s%d", n ? "," : "", c);
			snprintf(err, errlen, "--cpu %d: this process may run on cpus %s only; choose one of them, or omit --cpu",
				 p->cpu, list);
			free(rt);
			return -EINVAL;
		}
	}
	int rc = io_uring_queue_init(256, &rt->ring, 0);
	if (rc < 0) {
		snprintf(err, errlen, "io_uring_queue_init failed: %s (kernel too old, or io_uring disabled by sysctl kernel.io_uring_disabled)", strerror(-rc));
		free(rt);
		return rc;
	}
	/* SIGINT/SIGTERM arrive through a signalfd; block them before any backend thread is
	 * started, since threads inherit the mask and would otherwise take the default action */
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGTERM);
	if (p->handle_signals)
		pthread_sigmask(SIG_BLOCK, &ss, NULL);
	rt->futex_ok = p->wake != RL_RT_WAKE_EVENTFD && probe_futex(rt);
	if (p->wake == RL_RT_WAKE_FUTEX && !rt->futex_ok) {
		snprintf(err, errlen, "--wake futex: this kernel's io_uring has no IORING_OP_FUTEX_WAIT (needs Linux 6.7); use --wake auto");
		rc = -ENOSYS;
		goto fail;
	}
	uint32_t n_blocks = 0;
	rc = rl_rt_backend_open(&rt->p, &rt->be, &rt->model, &n_blocks, err, errlen);
	if (rc)
		goto fail;
	const struct rl_backend_info *bi = &rt->be->info;
	rt->vocab = bi->vocab_size;
	/* say what a user may not have meant (these start anyway: tests and benchmarks want
	 * both); ringlmd is verbose unless RINGLM_QUIET, an embedded runtime is not */
	if (!p->model && !p->backend && p->verbose)
		SAY("warning: no --model given: serving the sim backend (deterministic test tokens, not a language "
		    "model); give --model FILE to serve a model, or --backend sim to silence this");
	else if (p->model && !bi->vocab_blob && p->verbose)
		SAY("warning: %s has no vocabulary: clients can only send token ids (ringlm generate --prompt-ids); "
		    "give --tokenizer FILE (llama2.c tokenizer.bin) for text prompts", p->model);
	rt->max_prompt = p->max_prompt && p->max_prompt < bi->max_ctx ? p->max_prompt : bi->max_ctx - 1;
	rt->max_new = p->max_new && p->max_new < bi->max_ctx ? p->max_new : bi->max_ctx;

	LOG(rt, "context %u tokens; KV pool %u blocks of %u tokens (%llu tokens, %.1f contexts)%s",
	    bi->max_ctx, n_blocks, p->block_size, (unsigned long long)n_blocks * p->block_size,
	    (double)n_blocks * p->block_size / bi->max_ctx,
	    p->kv_blocks ? " from --kv-blocks" : ", sized for --max-seqs full contexts (capped at 1/4 of memory; --kv-blocks to choose)");
	struct rl_sched_params sp;
	rl_sched_default_params(&sp);
	sp.max_batch_tokens = rl_rt_max_budget(p);
	sp.max_seqs = p->max_seqs;
	sp.n_kv_blocks = n_blocks;
	sp.block_size = p->block_size;
	sp.max_ctx = bi->max_ctx;
	sp.pool_size = p->max_clients * p->max_inflight < 65536 ? p->max_clients * p->max_inflight : 65536;
	sp.prefix_cache = p->prefix_cache;
	sp.eos_id = bi->eos_id;
	rl_rt_eog_ids(bi, &sp);
	sp.spec_k = p->spec_k;
	sp.spec_max_rows = bi->max_draft_rows == UINT32_MAX ? 0 : bi->max_draft_rows;
	sp.deterministic = p->deterministic;
	sp.max_queue_ns = p->max_queue_ns;
	if (p->deterministic && !bi->deterministic) {
		snprintf(err, errlen, "--deterministic: the %s backend has no deterministic mode; omit --deterministic or use --backend cpu",
			 bi->name);
		rc = -ENOTSUP;
		goto fail;
	}
	if (p->spec_k && !bi->max_draft_rows) {
		snprintf(err, errlen, "--spec: the %s backend cannot verify drafts; omit --spec", bi->name);
		rc = -ENOTSUP;
		goto fail;
	}
	struct rl_sched_hooks hooks = { .ctx = rt, .reserve = hook_reserve, .emit = hook_emit,
					.emit_prompt = hook_emit_prompt, .seq_gone = hook_seq_gone };
	/* structured output: the constraints' handles and per-sequence states, the vocabulary's
	 * tries, and the helper thread that compiles (before the runtime pins itself: it keeps
	 * the process's cpus) */
	if ((rc = rl_rt_cons_create(bi->vocab_blob, bi->vocab_blob_size, sp.pool_size, sp.spec_k, p->cons_max_states,
				    p->cons_nice, &rt->cons)) ||
	    !(rt->cons_text = malloc(RL_MAX_CONS_BYTES + 1)) ||
	    !(rt->cons_failed = calloc(sp.pool_size, sizeof *rt->cons_failed)) ||
	    !(rt->prompt = malloc(((size_t)rt->max_prompt + 1) * sizeof *rt->prompt))) {
		rc = rc ? rc : -ENOMEM;
		snprintf(err, errlen, "cannot allocate the constraint states: %s", strerror(-rc));
		goto fail;
	}
	if (p->spec_model) {           /* the draft model: its own backend, KV pool and drafter */
		if ((rc = rl_rt_draft_open(&rt->p, bi, n_blocks, &rt->draft_be, &rt->draft_model, err, errlen)))
			goto fail;
		if ((rc = rl_draft_create(rt->draft_be, n_blocks, p->block_size, p->max_seqs, sp.max_batch_tokens,
					  sp.pool_size, bi->max_ctx, &rt->draft))) {
			snprintf(err, errlen, "--spec %s: cannot create the drafter: %s", p->spec_model, strerror(-rc));
			goto fail;
		}
		LOG(rt, "speculative decoding: drafts of up to %u tokens from %s (%s)", p->spec_k, p->spec_model,
		    rt->draft_model->name);
	} else if (p->spec_k)
		LOG(rt, "speculative decoding: drafts of up to %u tokens by prompt lookup", p->spec_k);
	rc = rl_sched_create(&sp, &hooks, &rt->sched);
	if (rc) {
		snprintf(err, errlen, "cannot create the scheduler: %s", strerror(-rc));
		goto fail;
	}
	if (p->spec_cost > 0)
		rl_sched_set_spec_cost(rt->sched, p->spec_cost, p->spec_cost);
	rl_budget_init(&rt->budget, p->itl_target_ns, sp.max_batch_tokens);
	rt->budget.prompt_cost = bi->prompt_cost;
	rt->calib = (struct rl_calib_geom){ .n_blocks = n_blocks, .block_size = p->block_size,
		.max_seqs = p->max_seqs, .max_tokens = sp.max_batch_tokens, .max_ctx = bi->max_ctx,
		.target_ns = p->itl_target_ns, .max_ns = 1000000000ull };
	rt->clients = calloc(p->max_clients, sizeof *rt->clients);
	rt->touched = calloc(p->max_clients, sizeof *rt->touched);
	rt->live = calloc(p->max_clients, sizeof *rt->live);
	rt->resv = calloc(p->max_clients, sizeof *rt->resv);
	rt->out = calloc(p->max_seqs, sizeof *rt->out);
	if (!rt->clients || !rt->touched || !rt->live || !rt->resv || !rt->out) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < p->max_clients; i++) {
		rt->clients[i].by_rid = calloc(p->max_inflight, sizeof(struct rl_seq *));
		if (!rt->clients[i].by_rid) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if ((rc = make_info(rt, err, errlen)))
		goto fail;
	if (p->kv_events) {            /* bound before the socket: a client never meets a runtime
					* whose events could not start */
		char host[64] = "localhost", topic[192];
		gethostname(host, sizeof host - 1);
		snprintf(topic, sizeof topic, "kv@%s@%s", host, rt->info->model);
		const struct rl_kvev_params kp = { .endpoint = p->kv_events,
			.topic = p->kv_events_topic ? p->kv_events_topic : topic,
			.block_size = p->block_size, .n_blocks = n_blocks };
		if ((rc = rl_kvev_create(&kp, &rt->kvev, err, errlen)))
			goto fail;
		struct rl_kv_observer o;
		rl_kvev_observer(rt->kvev, &o);
		rl_sched_kv_observe(rt->sched, &o);
		ST_SET(kv_events_on, 1);
		SAY("KV events on %s, topic %s", rl_kvev_endpoint(rt->kvev), kp.topic);
	}
	if ((rc = rt_conn_listen(rt, err, errlen)))
		goto fail;
	rt->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->handle_signals)
		rt->sig_fd = signalfd(-1, &ss, SFD_CLOEXEC);
	rt->timer_ts.tv_nsec = 100 * 1000000;    /* heartbeat and stats: 10 Hz */
	rt->hs_ts.tv_sec = HS_TIMEOUT_NS / 1000000000;
	rt->hs_ts.tv_nsec = HS_TIMEOUT_NS % 1000000000;
	rt_publish_sched_stats(rt);
	*out = rt;
	return 0;
fail:
	if (!err[0])
		snprintf(err, errlen, "runtime start failed: %s", strerror(-rc));
	rl_rt_destroy(rt);
	return rc;
}

const char *rl_rt_socket_path(const struct rl_rt *rt) { return rt->sock_path; }

void rl_rt_stop(struct rl_rt *rt)
{
	atomic_store(&rt->stop_req, 1);
	if (rt->stop_fd >= 0)
		(void)!write(rt->stop_fd, &one_u64, 8);
}

static void pin(struct rl_rt *rt)
{
	if (rt->p.cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(rt->p.cpu, &set);
	int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	if (rc) {
		SAY("warning: cannot pin to cpu %d: %s (continuing unpinned)", rt->p.cpu, strerror(rc));
		return;
	}
	if (numa_available() >= 0) {
		int node = numa_node_of_cpu(rt->p.cpu);
		if (node >= 0)
			numa_set_preferred(node);   /* pools and segments first-touched here */
		LOG(rt, "runtime thread on cpu %d, memory on numa node %d", rt->p.cpu, node);
	}
}

/* One line of a small sysfs/procfs file into buf ("" when absent) */
static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (f) {
		if (!fgets(buf, (int)len, f))
			buf[0] = 0;
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
}

/* 1 when cpu is in a kernel cpu list such as "1-3,6" */
static int in_cpu_list(const char *list, int cpu)
{
	for (const char *p = list; *p;) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p)
			return 0;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		if (cpu >= a && cpu <= b)
			return 1;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return 0;
	}
	return 0;
}

/* --latency: the profile for a dedicated core. The runtime thread is pinned (to --cpu, else
 * to the last cpu it may use), never sleeps, and every page the process has and will map is
 * locked and faulted in now (mlockall: weights, KV pool, scratch, the rings of clients yet to
 * attach), so the hot path takes no page fault after start (rt_page_faults counts them).
 * Memory prefers the pinned cpu's NUMA node (pin()). Then one line for each thing on this
 * machine that would still hurt. */
static void latency_profile(struct rl_rt *rt)
{
	rt->p.idle_spin_ns = UINT64_MAX / 2;
	if (mlockall(MCL_CURRENT | MCL_FUTURE))
		SAY("latency: cannot lock memory (%s): page faults can reach the hot path; raise the limit "
		    "(ulimit -l unlimited, or LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK", strerror(errno));
	char buf[256], path[128];
	read_line("/sys/devices/system/cpu/isolated", buf, sizeof buf);
	if (!in_cpu_list(buf, rt->p.cpu))
		SAY("latency: cpu %d is not isolated (isolcpus= or a cpuset): other tasks may be scheduled on it",
		    rt->p.cpu);
	snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor", rt->p.cpu);
	read_line(path, buf, sizeof buf);
	if (buf[0] && strcmp(buf, "performance"))
		SAY("latency: cpu %d's frequency governor is '%s': its clock drops when idle; set 'performance'",
		    rt->p.cpu, buf);
	else if (!buf[0])
		LOG(rt, "latency: no cpufreq control here (a VM's clock is its host's)");
	read_line("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf);
	if (strstr(buf, "[always]"))
		SAY("latency: transparent huge pages are 'always': compaction and khugepaged can stall the "
		    "process; 'madvise' or 'never' avoids it");
	read_line("/proc/loadavg", buf, sizeof buf);     /* "0.1 0.2 0.3 R/T last-pid" */
	int running = 0, total = 0;
	if (sscanf(buf, "%*s %*s %*s %d/%d", &running, &total) == 2 && running > (int)sysconf(_SC_NPROCESSORS_ONLN))
		SAY("latency: %d tasks are runnable on %ld cpus: the runtime's core is likely shared",
		    running, sysconf(_SC_NPROCESSORS_ONLN));
	LOG(rt, "latency profile: runtime on cpu %d, polling without sleeping, memory locked", rt->p.cpu);
	atomic_store(&rt->info->st.latency_profile, 1);
}

/* Requests still running when the drain time is over get a shutdown error. */
static void fail_all(struct rl_rt *rt, int err)
{
	for (uint32_t s = 0; s < rt->p.max_clients; s++) {
		struct client *c = &rt->clients[s];
		if (!c->used)
			continue;
		for (uint32_t r = 0; r < rt->p.max_inflight; r++) {
			if (!c->by_rid[r])
				continue;
			rt_cancel_req(rt, c->by_rid[r]);
			c->by_rid[r] = NULL;
			c->active--;
			if (evt_room(c) > 0)
				put_evt(rt, s, r, RL_EV_ERROR, 0, err, 0);
		}
	}
	publish_events(rt);
}

int rl_rt_run(struct rl_rt *rt)
{
	if (rt->p.latency && rt->p.cpu < 0) {    /* the profile pins: the last cpu we may use */
		cpu_set_t set;
		if (sched_getaffinity(0, sizeof set, &set) == 0)
			for (int c = 0; c < CPU_SETSIZE; c++)
				if (CPU_ISSET(c, &set))
					rt->p.cpu = c;
	}
	pin(rt);
	if (rt->p.latency)
		latency_profile(rt);
	if (rt->p.budget_auto) {
		/* on the thread, cpu and backend that will serve; clients that attach meanwhile wait
		 * in their rings */
		struct rl_calib_report rep;
		int rc = rl_calib_run(&rt->budget, rt->be, &rt->calib, &rep);
		if (rc)
			SAY("warning: budget calibration stopped after %u steps: %s (the step model learns from "
			    "served steps)", rep.steps, strerror(-rc));
		rt->p.itl_target_ns = rep.target_ns;
		atomic_store(&rt->info->st.itl_target_ns, rep.target_ns);
		const double *th = rt->budget.theta;
		LOG(rt, "budget auto, ITL target %.1f ms%s: calibrated in %.0f ms over %u step shapes: step %.0f us "
		    "+ %.1f us/sampled row + %.1f us/prefill token + %.2f us/1k decode ctx + %.2f us/1k prefill pairs "
		    "+ %.0f us a prompt step",
		    rt->p.itl_target_ns / 1e6, rt->calib.target_ns ? "" : " (derived)", rep.ns / 1e6, rep.steps, th[0] / 1e3, th[1] / 1e3, th[2] / 1e3,
		    th[3] / 1e3, th[4] / 1e3, th[5] / 1e3);
		rl_budget_publish(&rt->budget, &rt->info->st);
	} else {
		int rc = rl_calib_warm(rt->be, &rt->calib);
		if (rc)
			SAY("warning: the warm-up step failed: %s", strerror(-rc));
	}
	LOG(rt, "serving %s on %s (backend %s, vocab %u, %s wake-ups)", rt->be->info.model_name,
	    rt->sock_path, rt->be->info.name, rt->vocab,
	    rt->futex_ok ? "io_uring futex" : "eventfd fallback");
	rt_conn_arm_accept(rt);
	arm_timer(rt);
	if (rt->sig_fd >= 0)
		arm_read(rt, rt->sig_fd, rt->sigbuf, sizeof(struct signalfd_siginfo), UD_SIGNAL);
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_poll_add(s, rt->stop_fd, POLLIN);
	io_uring_sqe_set_data64(s, UD(UD_STOP, 0, 0));
	arm_cons(rt);
	io_uring_submit(&rt->ring);
	rl_idle_init(&rt->idle, rt->p.idle_spin_ns, rt->p.idle_adapt_ns);   /* --latency: base past any cap */
	ST_SET(idle_window_ns, rt->idle.window_ns);
	rt->last_work = rt->idle_start = rl_now_ns();
	for (;;) {
		uint64_t now = rl_now_ns();
		const uint64_t t0 = now;        /* an idle period that ends in this pass ended by here */
		int work = drain_all(rt, now);
		if (rl_rt_cons_poll(rt->cons, cons_ready, rt) > 0) {    /* one load when none is done */
			rt_publish_sched_stats(rt);
			work = 1;
		}
		if (rt->stepping) {
			/* a backend whose finish() computes is finished now, after one drain; others
			 * run on while we poll the rings */
			if (rt->be->info.finish_works || rl_backend_poll(rt->be)) {
				now = step_done(rt);   /* a computing finish() is no idle time */
				work = 1;
			}
		} else if (!rl_sched_idle(rt->sched)) {
			work |= try_launch(rt, now);
		}
		if (rt->n_touched)
			publish_events(rt);
		reap(rt);
		if (rt->draining && !rt->stepping) {
			if ((rl_sched_idle(rt->sched) && !rl_rt_cons_waiting(rt->cons)) || now > rt->drain_deadline) {
				fail_all(rt, -ESHUTDOWN);
				break;
			}
		}
		if (work || rt->stepping || !rl_sched_idle(rt->sched)) {
			if (t0 - rt->last_work > IDLE_YIELD_AFTER_NS)      /* awake and idle till t0 */
				ST_ADD(idle_awake_ns, t0 - rt->last_work);
			if (t0 - rt->idle_start > rt->idle.base_ns)        /* an idle period the base missed */
				ST_SET(idle_window_ns, rl_idle_gap(&rt->idle, t0 - rt->idle_start));
			rt->last_work = rt->idle_start = now;              /* after this pass's step */
			rt->woke_bare = 0;
			/* a step that runs on its own (the sim backend's, a GPU's): this thread only
			 * polls, and after a pass that found nothing it lets a task the kernel woke
			 * onto its core run. The client woken for the last token is one: CFS puts a
			 * wakee on the waker's core, where a spinning thread keeps it queued until
			 * the next tick (4 ms at HZ=250). Not under --latency: the core is ours. */
			if (rt->stepping && !work && !rt->p.latency)
				sched_yield();
			continue;
		}
		/* the window runs from the last work; a wake-up without work earns the base when a
		 * client rang or attached, and nothing when only the 10 Hz timer fired (or an idle
		 * runtime would spend 2% of a core on its own heartbeat) */
		if (now - rt->last_work >= (rt->woke_bare ? 0 : rt->idle.base_ns) &&
		    now - rt->idle_start >= rt->idle.window_ns) {
			ST_ADD(idle_awake_ns, now - rt->last_work);
			sleep_until_work(rt);
			rt->last_work = rl_now_ns();
			rt->woke_bare = 1;     /* until reap() sees a client's doing */
		} else if (now - rt->last_work >= IDLE_YIELD_AFTER_NS) {
			/* the rest of the idle spin yields: a task the kernel put on this core (a client
			 * not pinned apart) runs at once instead of after the spin; with none runnable
			 * it returns at once */
			sched_yield();
		} else {
			rl_cpu_relax();
		}
	}
	atomic_store_explicit(&rt->info->state, RL_STATE_STOPPED, memory_order_release);
	/* wake every client so blocked waits see the state change */
	for (uint32_t c = 0; c < rt->p.max_clients; c++) {
		if (!rt->clients[c].used)
			continue;
		atomic_fetch_add(&rt->clients[c].ctl->cl_bell, 1);
		rl_futex_wake(&rt->clients[c].ctl->cl_bell, 1);
		(void)!write(rt->clients[c].cl_efd, &one_u64, 8);
	}
	LOG(rt, "stopped");
	return 0;
}

void rl_rt_destroy(struct rl_rt *rt)
{
	if (!rt)
		return;
	if (rt->clients) {
		for (uint32_t i = 0; i < rt->p.max_clients; i++) {
			struct client *c = &rt->clients[i];
			if (c->used) {
				munmap(c->seg, c->seg_size);
				close(c->sock);
				close(c->seg_fd);
				close(c->rt_efd);
				close(c->cl_efd);
			}
			free(c->by_rid);
		}
	}
	for (int i = 0; i < HS_SLOTS; i++)
		if (rt->hs[i].used)
			close(rt->hs[i].fd);
	if (rt->listen_fd >= 0) {
		close(rt->listen_fd);
		unlink(rt->sock_path);
	}
	if (rt->ring.ring_fd > 0)
		io_uring_queue_exit(&rt->ring);
	if (rt->sig_fd >= 0)
		close(rt->sig_fd);
	if (rt->stop_fd >= 0)
		close(rt->stop_fd);
	if (rt->info) {
		munmap(rt->info, rt->info_size);
		close(rt->info_fd);
	}
	rl_kvev_destroy(rt->kvev);      /* sends what the last steps queued */
	if (rt->sched)
		rl_sched_destroy(rt->sched);
	rl_rt_cons_destroy(rt->cons);
	free(rt->cons_text);
	free(rt->cons_failed);
	free(rt->prompt);
	rl_draft_destroy(rt->draft);
	rl_backend_destroy(rt->draft_be);
	rl_model_destroy(rt->draft_model);
	rl_backend_destroy(rt->be);
	rl_model_destroy(rt->model);
	free(rt->clients);
	free(rt->touched);
	free(rt->live);
	free(rt->resv);
	free(rt->out);
	free(rt);
}
