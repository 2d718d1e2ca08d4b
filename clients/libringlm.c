/* libringlm.c — the client side of the rings: attach, submit, poll, wait, cancel.
 *
 * After ringlm_connect nothing here allocates or makes a syscall on the fast path: submit
 * writes the prompt into the arena and one record into the request ring; poll reads the event
 * ring. A syscall happens only to wake a sleeping runtime (one FUTEX_WAKE or eventfd write) and
 * when ringlm_wait gives up spinning and sleeps.
 *
 * Prompt arena: a ring of token ids private to this client. Requests are consumed by the
 * runtime in ring order and it copies each prompt before releasing the record, so the arena
 * space of every request below the request ring's cons index is free again (arena_end[]
 * remembers where each request's prompt ended).
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "clients/libringlm_internal.h"
#include "tokenizer/rl_tok.h"
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/loop/rl_rt_args.h"

#define WAIT_YIELD_FACTOR 4            /* ringlm_wait: yielding phase, in spin_us units ... */
#define WAIT_YIELD_MAX_US 200          /* ... and at most this long (a small model's forward) */

/* The public numbers are the wire's (ipc/rl_wire.h owns them). */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(RINGLM_EV_TOKEN, RL_EV_TOKEN) && SAME(RINGLM_EV_DONE, RL_EV_DONE) && SAME(RINGLM_EV_PROMPT, RL_EV_PROMPT) &&
	       SAME(RINGLM_EV_ERROR, RL_EV_ERROR), "ringlm.h event types differ from the wire");
_Static_assert(SAME(RINGLM_FIN_LENGTH, RL_FIN_LENGTH) && SAME(RINGLM_FIN_STOP, RL_FIN_STOP) &&
	       SAME(RINGLM_FIN_EOS, RL_FIN_EOS) && SAME(RINGLM_FIN_CTX, RL_FIN_CTX) &&
	       SAME(RINGLM_FIN_CANCEL, RL_FIN_CANCEL), "ringlm.h finish codes differ from the wire");
_Static_assert(RINGLM_MAX_STOP == RL_MAX_STOP_IDS, "ringlm.h stop-id limit differs from the wire");


static __thread char last_error[256];

const char *ringlm_last_error(void) { return last_error; }

int rl_client_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
	return err;
}
#define fail rl_client_fail

struct ringlm_params ringlm_default_params(void)
{
	return (struct ringlm_params){ .socket = "default", .spin_us = 50 };
}

struct ringlm_request ringlm_default_request(void)
{
	return (struct ringlm_request){ .max_new = 16, .top_p = 1.0f };
}

const char *ringlm_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case -EAGAIN: return "rings or arena full: poll events, then retry";
	case -EINVAL: return "invalid argument or request (ringlm_last_error() names it)";
	case -E2BIG: return "prompt or max_new over the runtime's limits (--max-prompt, --max-new)";
	case -ERANGE: return "a token id is outside the vocabulary";
	case -EBUSY: return "request id already in use";
	case -ENOSPC: return "no room: the runtime's request pool is full (retry later), or the buffer given is too small (ringlm_last_error() says which)";
	case -ETIMEDOUT: return "the request's deadline passed before it was admitted";
	case -ETIME: return "the runtime is overloaded: the request waited its longest (ringlmd --max-queue-ms) "
			    "without being admitted; retry later";
	case -EOVERFLOW: return "the request's grammar (or schema, or regex) needs more automaton states than the "
				"runtime allows (ringlmd --cons-max-states, default 100000); simplify it";
	case -ESHUTDOWN: return "the runtime is shutting down";
	case -ECONNRESET: return "the runtime is gone (it exited or was killed): reconnect";
	case -ECONNREFUSED: return "no runtime is listening on that socket: start ringlmd";
	case -ENOENT: return "not found: no runtime socket at that path, or no vocabulary in the runtime's model (ringlm_last_error() says which)";
	case -EACCES: return "the runtime refused this user (see ringlmd --allow-uid/--allow-gid)";
	case -EPROTO: return "protocol error: client and runtime disagree (rebuild against this libringlm)";
	case -EUSERS: return "the runtime has no free client slot (--max-clients)";
	case -EPERM: return "not allowed on an observer connection (connect without observe to submit)";
	default: return strerror(-err);
	}
}

/* ---- connect / close ----------------------------------------------------------------- */

static int attach(struct ringlm *c, const char *path, int fallback, int observe)
{
	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0)
		return fail(-errno, "socket: %s", strerror(errno));
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	if (connect(c->sock, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = -errno;
		if (e == -EACCES || e == -EPERM)
			return fail(e, "cannot connect to %s: permission denied for uid %u; the runtime's owner "
				    "can admit it with ringlmd --allow-uid %u (or --allow-gid)", path,
				    (unsigned)getuid(), (unsigned)getuid());
		return fail(e, "cannot connect to %s: %s (is ringlmd running with that --socket?)", path, strerror(-e));
	}
	struct rl_attach_req rq = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION,
				    .flags = (fallback ? RL_ATTACH_FALLBACK : 0) | (observe ? RL_ATTACH_OBSERVE : 0) };
	/* A runtime that refuses this uid answers and closes at accept, before it reads the
	 * request, so the send can fail (EPIPE) with the answer already queued here: read it
	 * either way, and say "closed" only when there is none. */
	int sent = send(c->sock, &rq, sizeof rq, MSG_NOSIGNAL) == sizeof rq;
	struct rl_attach_rep rep = { 0 };
	int fds[4], nfds, rc = rl_recv_fds(c->sock, &rep, sizeof rep, fds, 4, &nfds);
	if (!sent && !(rc == 0 && rep.status)) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return fail(-ECONNRESET, "the runtime at %s closed the connection", path);
	}
	rc = rl_attach_rep_check(&rep, rc, nfds, observe);
	if (rc) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (rep.status && rc == rep.status)
			return fail(rc, "ringlmd refused: %s", rep.msg);
		return fail(rc, "attach to %s failed: %s", path, strerror(-rc));
	}
	if (observe) {
		c->observer = 1;
		c->info_fd = fds[0];
		c->info_size = rep.info_size;
		void *info = mmap(NULL, c->info_size, PROT_READ, MAP_SHARED, c->info_fd, 0);
		if (info == MAP_FAILED)
			return fail(-errno, "cannot map the info segment: %s", strerror(errno));
		c->info = info;
		if (c->info->magic != RL_WIRE_MAGIC || c->info->size > c->info_size)
			return fail(-EPROTO, "the runtime sent a malformed info segment");
		return 0;
	}
	c->seg_fd = fds[0];
	c->info_fd = fds[1];
	c->rt_efd = fds[2];
	c->cl_efd = fds[3];
	c->seg_size = rep.seg_size;
	c->info_size = rep.info_size;
	c->seg = mmap(NULL, c->seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->seg_fd, 0);
	if (c->seg == MAP_FAILED) {
		c->seg = NULL;
		return fail(-errno, "cannot map the client segment: %s", strerror(errno));
	}
	void *info = mmap(NULL, c->info_size, PROT_READ, MAP_SHARED, c->info_fd, 0);
	if (info == MAP_FAILED)
		return fail(-errno, "cannot map the info segment: %s", strerror(errno));
	c->info = info;
	memcpy(&c->hdr, c->seg, sizeof c->hdr);
	if (rl_seg_check(&c->hdr, c->seg_size) || c->info->magic != RL_WIRE_MAGIC)
		return fail(-EPROTO, "the runtime sent a malformed segment");
	return 0;
}

static int setup(struct ringlm *c)
{
	const struct rl_seg_hdr *h = &c->hdr;
	c->ctl = (struct rl_seg_ctl *)(c->seg + h->ctl_off);
	struct rl_ring_hdr *rq = (struct rl_ring_hdr *)(c->seg + h->req_off);
	struct rl_ring_hdr *ev = (struct rl_ring_hdr *)(c->seg + h->evt_off);
	rl_ring_prod_init(&c->req, rq, rq + 1, h->req_cap, sizeof(struct rl_req));
	rl_ring_cons_init(&c->evt, ev, ev + 1, h->evt_cap, sizeof(struct rl_evt));
	c->arena = (uint32_t *)(c->seg + h->arena_off);
	c->arena_mask = h->arena_ids - 1;
	c->arena_end = calloc(h->req_cap, sizeof *c->arena_end);
	c->free_ids = malloc(h->max_inflight * sizeof *c->free_ids);
	c->id_tag = calloc(h->max_inflight, sizeof *c->id_tag);
	c->id_live = calloc(h->max_inflight, 1);
	c->id_lp = calloc(h->max_inflight, 1);
	c->id_plp = calloc(h->max_inflight, 1);
	c->lp = (const struct rl_lp *)(c->seg + h->lp_off);
	if (!c->arena_end || !c->free_ids || !c->id_tag || !c->id_live || !c->id_lp || !c->id_plp)
		return fail(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < h->max_inflight; i++)
		c->free_ids[i] = h->max_inflight - 1 - i;
	c->n_free = h->max_inflight;
	return 0;
}

static void *embedded_main(void *arg)
{
	rl_rt_run(arg);
	return NULL;
}

/* Embedded mode: a runtime thread in this process, reached through a private socket. */
static int start_embedded(struct ringlm *c, const struct ringlm_params *p, char *path, size_t len)
{
	static _Atomic unsigned counter;
	struct rl_rt_params rp;
	rl_rt_default_params(&rp);
	rp.model = p->model;
	rp.tokenizer = p->tokenizer;
	rp.backend = p->backend;
	char sock[96], err[256] = "";
	snprintf(sock, sizeof sock, "embed-%d-%u", (int)getpid(), atomic_fetch_add(&counter, 1));
	rp.socket = sock;
	rp.wake = p->force_fallback ? RL_RT_WAKE_EVENTFD : RL_RT_WAKE_AUTO;
	/* extra ringlmd options, split on spaces */
	char buf[1024], *argv[64] = { "ringlm-embedded" };
	int argc = 1;
	if (p->runtime_args) {
		snprintf(buf, sizeof buf, "%s", p->runtime_args);
		for (char *t = strtok(buf, " \t"); t && argc < 63; t = strtok(NULL, " \t"))
			argv[argc++] = t;
	}
	int rc = rl_rt_parse_args(&rp, argc, argv, err, sizeof err);
	if (rc)
		return fail(rc < 0 ? rc : -EINVAL, "embedded runtime: %s", rc < 0 ? err : "--help is not an option here");
	if (!rp.model && !p->model && p->backend && strcmp(p->backend, "sim"))
		return fail(-EINVAL, "embedded runtime: --backend %s needs a model", p->backend);
	rc = rl_rt_create(&rp, &c->embedded, err, sizeof err);
	if (rc)
		return fail(rc, "%s", err);
	snprintf(path, len, "%s", rl_rt_socket_path(c->embedded));
	rc = pthread_create(&c->thread, NULL, embedded_main, c->embedded);
	if (rc) {
		rl_rt_destroy(c->embedded);
		c->embedded = NULL;
		return fail(-rc, "cannot start the runtime thread: %s", strerror(rc));
	}
	return 0;
}

int ringlm_connect(const struct ringlm_params *p, struct ringlm **out)
{
	struct ringlm_params def = ringlm_default_params();
	if (!p)
		p = &def;
	struct ringlm *c = calloc(1, sizeof *c);
	if (!c)
		return fail(-ENOMEM, "out of memory");
	c->sock = c->seg_fd = c->info_fd = c->rt_efd = c->cl_efd = -1;
	c->spin_us = p->spin_us >= 0 ? p->spin_us : 50;
	char path[108];
	int rc;
	last_error[0] = 0;
	if (p->observe && (p->model || (p->backend && !p->socket))) {
		rc = fail(-EINVAL, "ringlm_connect: observe needs a runtime's socket, not an embedded model");
	} else if (p->model || (p->backend && !p->socket)) {
		rc = start_embedded(c, p, path, sizeof path);
	} else if ((rc = rl_sock_path(p->socket, path, sizeof path))) {
		fail(rc, "socket name '%s' is too long", p->socket);
	}
	if (!rc)
		rc = attach(c, path, p->force_fallback, p->observe);
	if (!rc && !p->observe)
		rc = setup(c);
	if (rc) {
		ringlm_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void ringlm_close(struct ringlm *c)
{
	if (!c)
		return;
	if (c->seg)
		munmap(c->seg, c->seg_size);
	if (c->info)
		munmap((void *)c->info, c->info_size);
	int fds[] = { c->sock, c->seg_fd, c->info_fd, c->rt_efd, c->cl_efd };
	for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (c->embedded) {
		rl_rt_stop(c->embedded);
		pthread_join(c->thread, NULL);
		rl_rt_destroy(c->embedded);
	}
	rl_tok_destroy(c->tok);
	free(c->arena_end);
	free(c->free_ids);
	free(c->id_tag);
	free((void *)c->id_lp);
	free((void *)c->id_plp);
	free(c->id_live);
	free(c);
}

/* ---- liveness ----------------------------------------------------------------------- */

/* The runtime is gone when its info says stopped or the control socket hung up. */
static int check_alive(struct ringlm *c)
{
	if (c->dead)
		return -ECONNRESET;
	if (atomic_load_explicit(&((struct rl_info *)c->info)->state, memory_order_acquire) == RL_STATE_STOPPED) {
		c->dead = 1;
		return -ECONNRESET;
	}
	struct pollfd pf = { .fd = c->sock, .events = POLLRDHUP };
	if (!c->observer && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN))) {
		c->dead = 1;
		return -ECONNRESET;
	}
	return 0;
}

/* ---- submit / cancel ---------------------------------------------------------------- */

static void ring_runtime_bell(struct ringlm *c)
{
	/* pairs with the runtime's fence between setting rt_sleeping and re-checking rings */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&((struct rl_info *)c->info)->rt_sleeping, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&c->ctl->rt_bell, 1, memory_order_release);
	if (c->hdr.wake_mode == RL_WAKE_FUTEX) {
		rl_futex_wake(&c->ctl->rt_bell, 1);
	} else {
		uint64_t one = 1;
		(void)!write(c->rt_efd, &one, sizeof one);
	}
}

/* Free request slots; also frees the arena of every request the runtime has consumed. */
static int64_t req_space(struct ringlm *c)
{
	int64_t sp = rl_ring_prod_space(&c->req, c->req.mask + 1);
	if (sp < 0)
		return sp;
	uint32_t cons = c->req.head - (c->req.mask + 1 - (uint32_t)sp);
	if (cons == c->req.head)
		c->arena_tail = c->arena_head;
	else if (cons)
		c->arena_tail = c->arena_end[(cons - 1) & c->req.mask];
	return sp;
}

/* ids_lock: held for a few instructions; the other side never sleeps while holding it */
static void ids_lock(struct ringlm *c)
{
	while (atomic_flag_test_and_set_explicit(&c->ids_lock, memory_order_acquire))
		rl_cpu_relax();
}

static void ids_unlock(struct ringlm *c)
{
	atomic_flag_clear_explicit(&c->ids_lock, memory_order_release);
}

/* Whether c may send new work now (fn names the caller in the error): 0, -ECONNRESET, -EPERM
 * for an observer, -ESHUTDOWN from a draining runtime (said here rather than after a round trip) */
static int may_send(struct ringlm *c, const char *fn)
{
	if (c->dead)
		return -ECONNRESET;
	if (c->observer)
		return fail(-EPERM, "%s: this connection only observes (params.observe); connect without it to send requests", fn);
	if (atomic_load_explicit(&((struct rl_info *)c->info)->state, memory_order_relaxed) != RL_STATE_RUNNING) {
		int e = check_alive(c);
		return e ? e : fail(-ESHUTDOWN, "%s: the runtime is shutting down; requests already accepted still finish", fn);
	}
	return 0;
}

/* A free request id into *rid when the request ring has room (sp, req_space's) and ok holds
 * (the arena's room): 0, or -EAGAIN (-ECONNRESET once the runtime is gone) */
static int take_id(struct ringlm *c, int64_t sp, int ok, uint32_t *rid)
{
	ids_lock(c);
	if (sp == 0 || !ok || !c->n_free) {
		ids_unlock(c);
		int e = check_alive(c);
		return e ? e : -EAGAIN;
	}
	*rid = c->free_ids[--c->n_free];
	c->id_live[*rid] = 1;
	ids_unlock(c);
	return 0;
}

int ringlm_submit(struct ringlm *c, const struct ringlm_request *r, uint32_t *id)
{
	int e = may_send(c, "ringlm_submit");
	if (e)
		return e;
	if (!r || !r->prompt || !r->n_prompt || (!r->max_new && !r->prompt_logprobs) || r->n_stop > RL_MAX_STOP_IDS ||
	    (r->n_stop && !r->stop) || r->top_logprobs > RINGLM_MAX_TOP_LOGPROBS ||
	    (r->top_logprobs && !r->logprobs && !r->prompt_logprobs))
		return fail(-EINVAL, "ringlm_submit: %s", !r ? "no request" : !r->prompt || !r->n_prompt ? "empty prompt" :
			    !r->max_new && !r->prompt_logprobs ? "max_new is 0 (allowed only with prompt_logprobs)" :
			    r->top_logprobs > RINGLM_MAX_TOP_LOGPROBS ? "top_logprobs over RINGLM_MAX_TOP_LOGPROBS (20)" :
			    r->top_logprobs && !r->logprobs && !r->prompt_logprobs ? "top_logprobs without logprobs" :
			    "n_stop over RINGLM_MAX_STOP or stop is NULL");
	if (r->n_prompt > c->hdr.max_prompt || r->n_prompt > c->arena_mask + 1)
		return fail(-E2BIG, "ringlm_submit: prompt of %u tokens over the runtime's limit of %u (ringlmd --max-prompt)",
			    r->n_prompt, c->hdr.max_prompt < c->arena_mask + 1 ? c->hdr.max_prompt : c->arena_mask + 1);
	if (r->max_new > c->hdr.max_new)
		return fail(-E2BIG, "ringlm_submit: max_new %u over the runtime's limit of %u (ringlmd --max-new)",
			    r->max_new, c->hdr.max_new);
	/* a constraint's text follows the prompt in the arena, 4 bytes a word */
	const struct ringlm_constraint *k = r->constraint;
	const uint32_t words = r->n_prompt + (k ? (k->len + 3) / 4 : 0);
	if (words > c->arena_mask + 1)
		return fail(-E2BIG, "ringlm_submit: prompt and constraint text need %u arena words of %u", words,
			    c->arena_mask + 1);
	int64_t sp = req_space(c);
	if (sp < 0)
		return -EPROTO;
	uint32_t arena_free = c->arena_mask + 1 - (c->arena_head - c->arena_tail), rid;
	if ((e = take_id(c, sp, arena_free >= words, &rid)))
		return e;
	uint32_t pos = c->arena_head & c->arena_mask, first = c->arena_mask + 1 - pos;
	if (first > r->n_prompt)
		first = r->n_prompt;
	memcpy(c->arena + pos, r->prompt, (size_t)first * 4);
	memcpy(c->arena, r->prompt + first, (size_t)(r->n_prompt - first) * 4);
	for (uint32_t i = 0; k && i < (k->len + 3) / 4; i++) {   /* little end first (rl_req.cons_kind) */
		uint32_t w = 0;
		for (uint32_t b = 0; b < 4 && 4 * i + b < k->len; b++)
			w |= (uint32_t)(uint8_t)k->text[4 * i + b] << (8 * b);
		c->arena[(pos + r->n_prompt + i) & c->arena_mask] = w;
	}
	struct rl_req *q = rl_ring_prod_slot(&c->req, 0);
	memset(q, 0, sizeof *q);
	q->op = RL_OP_SUBMIT;
	q->rid = rid;
	q->tag = r->tag;
	q->arena_pos = pos;
	q->n_prompt = r->n_prompt;
	q->max_new = r->max_new;
	q->top_k = r->top_k;
	q->temperature = r->temperature;
	q->top_p = r->top_p;
	q->seed = r->seed;
	q->priority = r->priority;
	q->n_stop = r->n_stop;
	q->deadline_ns = r->deadline_ns;
	q->logprobs = r->logprobs ? (uint8_t)(1 + r->top_logprobs) : 0;
	q->prompt_logprobs = r->prompt_logprobs ? (uint8_t)(1 + r->top_logprobs) : 0;
	q->no_spec = r->no_spec != 0;
	q->deterministic = r->deterministic != 0;
	q->cons_kind = k ? (uint8_t)k->kind : 0;
	q->cons_len = k ? k->len : 0;
	if (r->n_stop)
		memcpy(q->stop, r->stop, r->n_stop * sizeof *r->stop);
	c->arena_head += words;
	c->arena_end[c->req.head & c->req.mask] = c->arena_head;
	atomic_store_explicit(&c->id_tag[rid], r->tag, memory_order_relaxed);
	atomic_store_explicit(&c->id_lp[rid], q->logprobs, memory_order_relaxed);
	atomic_store_explicit(&c->id_plp[rid], q->prompt_logprobs, memory_order_relaxed);
	rl_ring_prod_publish(&c->req, 1);
	ring_runtime_bell(c);
	if (id)
		*id = rid;
	return 0;
}

int ringlm_reset_prefix_cache(struct ringlm *c, uint64_t tag, uint32_t *id)
{
	int e = may_send(c, "ringlm_reset_prefix_cache");
	if (e)
		return e;
	int64_t sp = req_space(c);
	uint32_t rid;
	if (sp < 0)
		return -EPROTO;
	if ((e = take_id(c, sp, 1, &rid)))
		return e;
	struct rl_req *q = rl_ring_prod_slot(&c->req, 0);
	memset(q, 0, sizeof *q);
	q->op = RL_OP_RESET_CACHE;
	q->rid = rid;
	q->tag = tag;
	c->arena_end[c->req.head & c->req.mask] = c->arena_head;
	atomic_store_explicit(&c->id_tag[rid], tag, memory_order_relaxed);
	atomic_store_explicit(&c->id_lp[rid], 0, memory_order_relaxed);
	atomic_store_explicit(&c->id_plp[rid], 0, memory_order_relaxed);
	rl_ring_prod_publish(&c->req, 1);
	ring_runtime_bell(c);
	if (id)
		*id = rid;
	return 0;
}

int ringlm_cancel(struct ringlm *c, uint32_t id)
{
	if (c->dead)
		return -ECONNRESET;
	if (c->observer)
		return fail(-EPERM, "ringlm_cancel: this connection only observes");
	int live = 0;
	if (id < c->hdr.max_inflight) {
		ids_lock(c);
		live = c->id_live[id];
		ids_unlock(c);
	}
	if (!live)
		return fail(-EINVAL, "ringlm_cancel: request %u is not live (finished, or never submitted here)", id);
	int64_t sp = req_space(c);
	if (sp < 0)
		return -EPROTO;
	if (sp == 0) {
		int e = check_alive(c);
		return e ? e : -EAGAIN;
	}
	struct rl_req *q = rl_ring_prod_slot(&c->req, 0);
	memset(q, 0, sizeof *q);
	q->op = RL_OP_CANCEL;
	q->rid = id;
	c->arena_end[c->req.head & c->req.mask] = c->arena_head;
	rl_ring_prod_publish(&c->req, 1);
	ring_runtime_bell(c);
	return 0;
}

/* ---- events --------------------------------------------------------------------------- */

int ringlm_poll(struct ringlm *c, struct ringlm_event *ev, int max)
{
	return ringlm_poll_ex(c, ev, NULL, max);
}

/* The slab slot of the consumer's event i, for request rid that asked for n_top + 1: copied
 * before the event is released (rl_wire.h), n_top clamped (the runtime is not trusted) */
static void copy_lp(const struct ringlm *c, uint32_t i, uint32_t asked, struct ringlm_logprobs *out)
{
	const struct rl_lp *s = &c->lp[rl_ring_cons_index(&c->evt, i)];
	_Static_assert(sizeof *out == sizeof *s && RINGLM_MAX_TOP_LOGPROBS == RL_MAX_TOP_LOGPROBS,
		       "ringlm_logprobs is the slab's rl_lp");
	memcpy(out, s, sizeof *out);
	const uint32_t n = asked - 1;
	out->n_top = out->n_top < n ? out->n_top : n;
}

int ringlm_poll_ex(struct ringlm *c, struct ringlm_event *ev, struct ringlm_logprobs *lp, int max)
{
	if (c->observer)
		return fail(-EPERM, "ringlm_poll: this connection only observes");
	int64_t avail = rl_ring_cons_avail(&c->evt);
	if (avail < 0)
		return -EPROTO;
	if (avail == 0)
		return c->dead ? -ECONNRESET : 0;
	uint32_t n = (uint32_t)(avail < max ? avail : max);
	for (uint32_t i = 0; i < n; i++) {
		const struct rl_evt *e = rl_ring_cons_slot(&c->evt, i);
		uint32_t rid = e->rid;
		ev[i].id = rid;
		ev[i].token = e->token;
		ev[i].type = e->type;
		ev[i].code = e->code;
		ev[i].index = e->index;
		ev[i].tag = 0;
		if (lp) {
			lp[i].logprob = 0;
			lp[i].n_top = 0;
		}
		if (rid < c->hdr.max_inflight) {
			ev[i].tag = atomic_load_explicit(&c->id_tag[rid], memory_order_relaxed);
			const uint32_t asked = atomic_load_explicit(&c->id_lp[rid], memory_order_relaxed);
			const uint32_t asked_p = atomic_load_explicit(&c->id_plp[rid], memory_order_relaxed);
			if (lp && asked && e->type == RINGLM_EV_TOKEN)
				copy_lp(c, i, asked, &lp[i]);
			if (lp && asked_p && e->type == RINGLM_EV_PROMPT)
				copy_lp(c, i, asked_p, &lp[i]);
			if (e->type == RINGLM_EV_DONE || e->type == RINGLM_EV_ERROR) {   /* the request's end */
				ids_lock(c);
				if (c->id_live[rid]) {
					c->id_live[rid] = 0;
					c->free_ids[c->n_free++] = rid;
				}
				ids_unlock(c);
			}
		}
	}
	rl_ring_cons_release(&c->evt, n);
	return (int)n;
}

/* Sleep until the runtime rings our bell, for at most slice_ns. */
static void sleep_once(struct ringlm *c, uint64_t slice_ns)
{
	uint32_t bell = atomic_load_explicit(&c->ctl->cl_bell, memory_order_acquire);
	atomic_store_explicit(&c->ctl->cl_sleeping, 1, memory_order_relaxed);
	/* pairs with the runtime's fence between publishing events and reading cl_sleeping */
	atomic_thread_fence(memory_order_seq_cst);
	if (rl_ring_cons_avail(&c->evt) == 0) {
		if (c->hdr.wake_mode == RL_WAKE_FUTEX) {
			rl_futex_wait(&c->ctl->cl_bell, bell, slice_ns);
		} else {
			struct pollfd pf[2] = { { .fd = c->cl_efd, .events = POLLIN },
						{ .fd = c->sock, .events = POLLRDHUP } };
			if (poll(pf, 2, (int)(slice_ns / 1000000)) > 0 && (pf[0].revents & POLLIN)) {
				uint64_t v;
				(void)!read(c->cl_efd, &v, sizeof v);
			}
		}
	}
	atomic_store_explicit(&c->ctl->cl_sleeping, 0, memory_order_relaxed);
}

int ringlm_wait(struct ringlm *c, struct ringlm_event *ev, int max, int timeout_ms)
{
	return ringlm_wait_ex(c, ev, NULL, max, timeout_ms);
}

int ringlm_wait_ex(struct ringlm *c, struct ringlm_event *ev, struct ringlm_logprobs *lp, int max, int timeout_ms)
{
	if (c->observer)
		return fail(-EPERM, "ringlm_wait: this connection only observes");
	/* spin spin_us; then, up to WAIT_YIELD_FACTOR times longer (at most WAIT_YIELD_MAX_US),
	 * poll between sched_yield()s: a thread that needs this core (a backend worker computing
	 * the very step awaited) gets it at once, and an event arriving within a short forward
	 * costs no wake-up of a sleeping client (tens to hundreds of us on a VM) */
	uint64_t t0 = rl_now_ns(), spin_end = t0 + (uint64_t)c->spin_us * 1000;
	uint64_t yield_us = (uint64_t)c->spin_us * WAIT_YIELD_FACTOR;
	uint64_t yield_end = spin_end + (yield_us < WAIT_YIELD_MAX_US ? yield_us : WAIT_YIELD_MAX_US) * 1000;
	uint64_t end = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * 1000000;
	for (;;) {
		int n = ringlm_poll_ex(c, ev, lp, max);
		if (n)
			return n;
		uint64_t now = rl_now_ns();
		if (now >= end)
			return 0;
		if (now < spin_end) {
			rl_cpu_relax();
			continue;
		}
		if (now < yield_end) {
			sched_yield();
			continue;
		}
		int e = check_alive(c);
		if (e)
			return ringlm_poll_ex(c, ev, lp, max) ?: e;
		/* sleep in slices so a runtime killed without a goodbye is noticed within ~20 ms */
		uint64_t slice = 20 * 1000000ull;
		if (end - now < slice)
			slice = end - now;
		sleep_once(c, slice);
	}
}

/* ---- info and stats ------------------------------------------------------------------- */

int ringlm_get_info(struct ringlm *c, struct ringlm_info *out)
{
	const struct rl_info *in = c->info;
	memset(out, 0, sizeof *out);
	memcpy(out->model, in->model, sizeof out->model - 1);
	memcpy(out->backend, in->backend, sizeof out->backend - 1);
	memcpy(out->chat_template, in->chat_template, sizeof out->chat_template - 1);
	out->vocab_size = in->vocab_size;
	out->max_ctx = in->max_ctx;
	out->bos_id = in->bos_id;
	out->eos_id = in->eos_id;
	out->max_prompt = in->max_prompt;
	out->max_new = in->max_new;
	out->max_inflight = in->max_inflight;
	out->deterministic = (int)in->deterministic;
	out->block_size = in->block_size;
	out->futex_wake = c->observer ? in->wake_mode == RL_WAKE_FUTEX : c->hdr.wake_mode == RL_WAKE_FUTEX;
	return 0;
}

int ringlm_stats_json(struct ringlm *c, char *buf, size_t len)
{
	const struct rl_info_stats *s = &c->info->st;
#define G(f) (unsigned long long)atomic_load_explicit(&((struct rl_info_stats *)s)->f, memory_order_relaxed)
	uint64_t now = rl_now_ns(), hb = atomic_load(&((struct rl_info *)c->info)->heartbeat_ns);
	int n = snprintf(buf, len,
		"{\"backend\":\"%.15s\",\"model\":\"%.63s\",\"pid\":%d,\"heartbeat_age_ms\":%llu,"
		"\"clients\":%llu,\"active_requests\":%llu,\"queued_requests\":%llu,\"running\":%llu,"
		"\"prefilling\":%llu,\"paused\":%llu,\"steps\":%llu,\"tokens_out\":%llu,\"tokens_prefill\":%llu,"
		"\"requests_done\":%llu,\"requests_error\":%llu,\"kv_blocks_total\":%llu,\"kv_blocks_free\":%llu,"
		"\"preemptions\":%llu,\"prefix_hit_tokens\":%llu,\"prefix_query_tokens\":%llu,"
		"\"budget\":%llu,\"last_step_tokens\":%llu,\"last_step_us\":%.1f,"
		"\"rejected_invalid\":%llu,\"rejected_limit\":%llu,\"rejected_busy\":%llu,\"hostile_clients\":%llu,"
		"\"attaches\":%llu,\"detaches\":%llu,\"refused\":%llu,\"refused_uid\":%llu,\"refused_full\":%llu,"
		"\"dropped_preattach\":%llu,\"observers\":%llu,\"sleeps\":%llu,"
		"\"spec_k\":%llu,\"spec_drafted\":%llu,\"spec_accepted\":%llu,\"spec_rounds\":%llu,"
		"\"latency_profile\":%llu,\"rt_page_faults\":%llu,\"idle_window_us\":%.1f,\"idle_awake_ms\":%.1f,"
		"\"itl_target_us\":%.1f,\"step_model\":{\"c0_ns\":%.1f,\"per_sampled_row_ns\":%.3f,\"per_prefill_token_ns\":%.3f,"
		"\"per_kctx_decode_ns\":%.3f,\"per_kpairs_prefill_ns\":%.3f,\"prompt_step_ns\":%.1f,\"margin_pct\":%.1f,\"calibration_ms\":%.1f},"
		"\"kv_events\":{\"on\":%llu,\"sent\":%llu,\"messages\":%llu,\"dropped\":%llu,\"resyncs\":%llu},"
		"\"cache_resets\":%llu,\"block_size\":%u,\"queue_time_sum_s\":%.6f,\"queue_time_count\":%llu,"
		"\"max_running\":%llu,\"overloaded\":%llu,\"max_queue_ms\":%.0f,\"wake\":\"%s\","
		"\"constraints\":{\"compiles\":%llu,\"compile_ms\":%.1f,\"prewarmed_masks\":%llu,\"waiting\":%llu}",
		c->info->backend, c->info->model, c->info->pid,
		(unsigned long long)(now > hb ? (now - hb) / 1000000 : 0),
		G(clients), G(active_requests), G(queued_requests), G(running), G(prefilling), G(paused),
		G(steps), G(tokens_out), G(tokens_prefill), G(requests_done), G(requests_error),
		G(kv_blocks_total), G(kv_blocks_free), G(preemptions), G(prefix_hit_tokens),
		G(prefix_query_tokens), G(budget), G(last_step_tokens), G(last_step_ns) / 1000.0,
		G(rejected_invalid), G(rejected_limit), G(rejected_busy), G(hostile_clients),
		G(attaches), G(detaches), G(refused), G(refused_uid), G(refused_full),
		G(dropped_preattach), G(observers), G(sleeps), G(spec_k), G(spec_drafted), G(spec_accepted), G(spec_rounds),
		G(latency_profile), G(rt_page_faults), G(idle_window_ns) / 1000.0, G(idle_awake_ns) / 1e6,
		G(itl_target_ns) / 1000.0, G(coef_c0_ps) / 1000.0, G(coef_samp_ps) / 1000.0,
		G(coef_pf_ps) / 1000.0, G(coef_datt_ps) / 1000.0, G(coef_patt_ps) / 1000.0, G(coef_prompt_ps) / 1000.0,
		G(budget_margin_ppm) / 1e4, G(budget_calib_ns) / 1e6,
		G(kv_events_on), G(kv_events_sent), G(kv_events_msgs), G(kv_events_dropped), G(kv_events_resyncs),
		G(cache_resets), c->info->block_size, G(queue_time_sum_ns) / 1e9, G(queue_time_count),
		G(max_running), G(overloaded), G(max_queue_ns) / 1e6, c->info->wake_mode == RL_WAKE_FUTEX ? "futex" : "eventfd",
		G(cons_compiles), G(cons_compile_ns) / 1e6, G(cons_prewarmed), G(cons_waiting));
	/* the queue-time histogram: its bounds (RL_LAT_BOUNDS_US) and each bucket's count, the last
	 * one past the last bound (not cumulative) */
	static const uint64_t bound_us[RL_LAT_N] = RL_LAT_BOUNDS_US;
	const char *sep = ",\"queue_time_le_s\":[";
	for (int i = 0; i < RL_LAT_N && n >= 0 && (size_t)n < len; i++, sep = ",")
		n += snprintf(buf + n, len - (size_t)n, "%s%g", sep, bound_us[i] / 1e6);
	sep = "],\"queue_time_counts\":[";
	for (int i = 0; i <= RL_LAT_N && n >= 0 && (size_t)n < len; i++, sep = ",")
		n += snprintf(buf + n, len - (size_t)n, "%s%llu", sep, G(queue_time[i]));
	if (n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "]}");
#undef G
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

/* Internal accessors for the tokenizer glue and tests (not exported). */
