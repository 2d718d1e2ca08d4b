/* rl_rt.c — the runtime loop: clients in, steps through the backend, tokens out.
 *
 * One thread does everything. Per iteration:
 *   drain every client's request ring (copy each record, validate, copy the prompt out of the
 *   arena, validate the ids) → scheduler; if no step is running, compose one and launch it;
 *   while it runs, keep draining; when it is done, collect sampled ids, let the scheduler emit
 *   events (written straight into the clients' event rings), publish each ring once, and wake
 *   the clients that sleep. Control-plane completions (attach, hang-ups, signals, timers) are
 *   reaped from the io_uring completion queue without a syscall.
 * With no work for idle_spin_ns, it announces sleep (info->rt_sleeping = 1), re-checks every
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
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/sched/rl_budget.h"
#include "runtime/loop/rl_calib.h"
#include "ipc/rl_clock.h"
#include "ipc/rl_ipc.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/sched/rl_sched.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/loop/rl_validate.h"

#ifndef IORING_OP_FUTEX_WAIT_NR
#define IORING_OP_FUTEX_WAIT_NR 51     /* kernel 6.7; liburing 2.3 has no helper */
#endif
#define RL_FUTEX2_SIZE_U32 0x02
#define RL_FUTEX_BITSET_ANY 0xffffffffu

/* user_data: kind in the top byte, client slot and generation below */
enum { UD_ACCEPT = 1, UD_HS, UD_HUP, UD_BELL, UD_SIGNAL, UD_TIMER, UD_STOP, UD_WAKE, UD_CANCEL };
#define UD(kind, slot, gen) (((uint64_t)(kind) << 56) | ((uint64_t)(slot) << 32) | (uint32_t)(gen))
#define UD_KIND(u) ((unsigned)((u) >> 56))
#define UD_SLOT(u) ((uint32_t)(((u) >> 32) & 0xffffff))
#define UD_GEN(u)  ((uint32_t)(u))

/* Connections that have not sent their attach request yet. HS_MAX may wait at once; when a
 * new one arrives with all taken, the oldest connection of the uid holding the most (or of
 * the newcomer's own uid, on a tie) is cancelled, so a flood from one uid cannot starve
 * another, and a real client, which sends its request at once, is never the oldest for long.
 * Cancelled ones keep their entry until io_uring reports the cancel, hence 2x entries. */
#define HS_MAX   64
#define HS_SLOTS (2 * HS_MAX)
#define HS_TIMEOUT_NS (500 * 1000000ll)   /* an attach request must come within 0.5 s */

struct client {
	int      used;
	uint32_t gen;
	int      sock, seg_fd, rt_efd, cl_efd;
	pid_t    pid;
	uid_t    uid;
	uint8_t *seg;
	size_t   seg_size;
	struct rl_seg_ctl *ctl;
	struct rl_ring_cons req;
	struct rl_ring_prod evt;
	const uint32_t *arena;         /* client-writable: copy before use */
	uint32_t arena_mask;
	struct rl_seq **by_rid;        /* [max_inflight] live request per id */
	uint32_t reserved;             /* event slots promised to the scheduler this step */
	uint32_t unpub;                /* events written but not yet published */
	int      touched;              /* on the publish list */
	int      bell_armed;
	int      hostile;
	uint32_t active;               /* live requests */
};

struct handshake {
	int used;                      /* 0 free, 1 waiting for the request, 2 cancelled */
	int fd;
	uid_t uid;
	uint64_t t_ns;                 /* accepted at (CLOCK_MONOTONIC) */
	struct rl_attach_req req;
};

struct rl_rt {
	struct rl_rt_params p;
	char     sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)], sock_dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int      listen_fd, sig_fd, stop_fd;
	struct io_uring ring;
	int      futex_ok;             /* IORING_OP_FUTEX_WAIT supported and chosen */
	struct rl_backend *be;
	struct rl_model *model;
	struct rl_sched *sched;
	struct rl_budget budget;
	struct rl_calib_geom calib;    /* the budget calibration's limits (rl_rt_run runs it) */
	struct rl_info *info;
	int      info_fd;
	size_t   info_size;
	struct client *clients;        /* [max_clients] */
	uint32_t *touched;             /* clients with unpublished events */
	uint32_t n_touched;
	struct handshake hs[HS_SLOTS];
	int      accept_armed, timer_armed;
	int      stepping;
	const struct rl_batch *batch;
	int32_t *out;
	uint64_t step_t0;
	uint32_t max_prompt, max_new, vocab;
	_Atomic int stop_req;
	int      draining;
	uint64_t drain_deadline;
	uint64_t last_work;
	struct sockaddr_un acc_addr;
	socklen_t acc_len;
	struct __kernel_timespec timer_ts, hs_ts;
	uint64_t sigbuf[16], stopbuf, bellbuf;
};

static const uint64_t one_u64 = 1;

#define LOG(rt, ...) do { if ((rt)->p.verbose) { fprintf(stderr, "ringlmd: " __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define SAY(...) do { fprintf(stderr, "ringlmd: " __VA_ARGS__); fputc('\n', stderr); } while (0)

/* ---- io_uring helpers ----------------------------------------------------------------- */

static struct io_uring_sqe *sqe_get(struct rl_rt *rt)
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
	struct io_uring_sqe *s = sqe_get(rt);
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

#define ST_SET(f, v) atomic_store_explicit(&rt->info->st.f, (uint64_t)(v), memory_order_relaxed)
#define ST_ADD(f, v) atomic_fetch_add_explicit(&rt->info->st.f, (uint64_t)(v), memory_order_relaxed)

static void publish_sched_stats(struct rl_rt *rt)
{
	struct rl_sched_stats s;
	rl_sched_get_stats(rt->sched, &s);
	ST_SET(queued_requests, s.queued);
	ST_SET(running, s.running);
	ST_SET(prefilling, s.prefilling);
	ST_SET(paused, s.paused);
	ST_SET(active_requests, s.queued + s.running);
	ST_SET(steps, s.steps);
	ST_SET(tokens_prefill, s.tokens_prefill);
	ST_SET(kv_blocks_total, s.kv_blocks_total);
	ST_SET(kv_blocks_free, s.kv_blocks_free);
	ST_SET(preemptions, s.preemptions);
	ST_SET(prefix_hit_tokens, s.prefix_hit_tokens);
	ST_SET(prefix_query_tokens, s.prefix_query_tokens);
	ST_SET(budget, s.budget);
	ST_SET(last_step_tokens, s.last_step_tokens);
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

static int hook_reserve(void *ctx, uint32_t slot, uint32_t n)
{
	struct rl_rt *rt = ctx;
	struct client *c = &rt->clients[slot];
	if (evt_room(c) < n)
		return -EAGAIN;
	c->reserved += n;
	return 0;
}

static void hook_emit(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t token, int32_t code)
{
	struct rl_rt *rt = ctx;
	struct client *c = &rt->clients[q->client];
	if (c->reserved)
		c->reserved--;
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
		struct io_uring_sqe *s = sqe_get(rt);
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

/* ---- clients: attach, detach ---------------------------------------------------------- */

static void arm_hup(struct rl_rt *rt, uint32_t slot)
{
	struct client *c = &rt->clients[slot];
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_poll_add(s, c->sock, POLLIN | POLLRDHUP | POLLHUP | POLLERR);
	io_uring_sqe_set_data64(s, UD(UD_HUP, slot, c->gen));
}

static void cancel_ud(struct rl_rt *rt, uint64_t ud)
{
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_cancel64(s, ud, 0);
	io_uring_sqe_set_data64(s, UD(UD_CANCEL, 0, 0));
}

static void detach(struct rl_rt *rt, uint32_t slot, const char *why)
{
	struct client *c = &rt->clients[slot];
	if (!c->used)
		return;
	LOG(rt, "client %u (pid %d) detached: %s", slot, (int)c->pid, why);
	for (uint32_t r = 0; r < rt->p.max_inflight; r++) {
		if (c->by_rid[r]) {
			rl_sched_cancel(rt->sched, c->by_rid[r]);
			c->by_rid[r] = NULL;
		}
	}
	cancel_ud(rt, UD(UD_HUP, slot, c->gen));
	if (c->bell_armed)
		cancel_ud(rt, UD(UD_BELL, slot, c->gen));
	io_uring_submit(&rt->ring);
	munmap(c->seg, c->seg_size);
	close(c->sock);
	close(c->seg_fd);
	close(c->rt_efd);
	close(c->cl_efd);
	c->used = 0;
	c->gen++;
	c->active = 0;
	c->unpub = c->reserved = 0;
	ST_ADD(detaches, 1);
	ST_ADD(clients, -1);
	if (c->hostile)
		ST_ADD(hostile_clients, 1);
	c->hostile = 0;
	publish_sched_stats(rt);
}

static void refuse(struct rl_rt *rt, int fd, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static struct rl_attach_policy attach_policy(const struct rl_rt *rt)
{
	uint32_t n_used = 0;
	for (uint32_t i = 0; i < rt->p.max_clients; i++)
		n_used += rt->clients[i].used != 0;
	return (struct rl_attach_policy){
		.self_uid = geteuid(), .allow_uid = rt->p.allow_uid, .n_allow_uid = rt->p.n_allow_uid,
		.allow_gid = rt->p.allow_gid, .n_allow_gid = rt->p.n_allow_gid,
		.draining = rt->draining, .n_clients = n_used, .max_clients = rt->p.max_clients,
	};
}

static void refuse(struct rl_rt *rt, int fd, int err, const char *fmt, ...)
{
	struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = err };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rep.msg, sizeof rep.msg, fmt, ap);
	va_end(ap);
	rl_send_fds(fd, &rep, sizeof rep, NULL, 0);
	LOG(rt, "refused attach: %s", rep.msg);
	ST_ADD(refused, 1);
	if (err == -EUSERS)
		ST_ADD(refused_full, 1);
	close(fd);
}

/* The attach request arrived on fd: check the peer, build its segment, hand it the fds. */
static void attach(struct rl_rt *rt, int fd, const struct rl_attach_req *rq)
{
	struct ucred cr;
	socklen_t cl = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
		return refuse(rt, fd, -EACCES, "cannot read the peer's credentials");
	uint32_t slot = rt->p.max_clients;
	for (uint32_t i = rt->p.max_clients; i-- > 0;)
		if (!rt->clients[i].used)
			slot = i;      /* the lowest free slot */
	struct rl_attach_policy pol = attach_policy(rt);
	char why[sizeof ((struct rl_attach_rep *)0)->msg];
	int err = rl_rt_attach_decide(rq, cr.uid, cr.gid, &pol, why, sizeof why);
	if (err)
		return refuse(rt, fd, err, "%s", why);
	if (rq->flags & RL_ATTACH_OBSERVE) {
		/* the read-only info segment and nothing else; the connection ends here */
		struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = 0,
					     .client_id = UINT32_MAX, .seg_size = 0, .info_size = rt->info_size };
		snprintf(rep.msg, sizeof rep.msg, "observer");
		if (rl_send_fds(fd, &rep, sizeof rep, &rt->info_fd, 1) == 0)
			ST_ADD(observers, 1);
		close(fd);
		return;
	}

	struct client *c = &rt->clients[slot];
	struct rl_seg_hdr h = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .client_id = slot };
	int64_t size = rl_seg_layout(&h, rt->p.req_cap, rt->p.evt_cap, rt->p.arena_ids);
	h.wake_mode = (rt->futex_ok && !(rq->flags & RL_ATTACH_FALLBACK)) ? RL_WAKE_FUTEX : RL_WAKE_EVENTFD;
	h.max_inflight = rt->p.max_inflight;
	h.max_prompt = rt->max_prompt;
	h.max_new = rt->max_new;
	void *seg;
	int seg_fd;
	err = rl_shm_create("ringlm-client", (size_t)size, 0, &seg_fd, &seg);
	if (err)
		return refuse(rt, fd, err, "cannot create the client segment: %s", strerror(-err));
	c->rt_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cl_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->rt_efd < 0 || c->cl_efd < 0) {
		err = -errno;
		if (c->rt_efd >= 0) close(c->rt_efd);
		if (c->cl_efd >= 0) close(c->cl_efd);
		munmap(seg, size);
		close(seg_fd);
		return refuse(rt, fd, err, "cannot create eventfds: %s", strerror(-err));
	}
	memcpy(seg, &h, sizeof h);
	c->seg = seg;
	c->seg_size = (size_t)size;
	c->seg_fd = seg_fd;
	c->sock = fd;
	c->pid = cr.pid;
	c->uid = cr.uid;
	c->ctl = (struct rl_seg_ctl *)(c->seg + h.ctl_off);
	/* a client segment is fresh zeroed memory: rings start at 0 */
	struct rl_ring_hdr *rq_h = (struct rl_ring_hdr *)(c->seg + h.req_off);
	struct rl_ring_hdr *ev_h = (struct rl_ring_hdr *)(c->seg + h.evt_off);
	rl_ring_cons_init(&c->req, rq_h, rq_h + 1, h.req_cap, sizeof(struct rl_req));
	rl_ring_prod_init(&c->evt, ev_h, ev_h + 1, h.evt_cap, sizeof(struct rl_evt));
	c->arena = (const uint32_t *)(c->seg + h.arena_off);
	c->arena_mask = h.arena_ids - 1;
	memset(c->by_rid, 0, rt->p.max_inflight * sizeof *c->by_rid);
	/* touched is left alone: the slot may still be on the publish list from its last owner */
	c->reserved = c->unpub = c->bell_armed = c->hostile = 0;
	c->active = 0;

	struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = 0,
				     .client_id = slot, .seg_size = (uint64_t)size, .info_size = rt->info_size };
	snprintf(rep.msg, sizeof rep.msg, "attached as client %u", slot);
	int fds[4] = { seg_fd, rt->info_fd, c->rt_efd, c->cl_efd };
	err = rl_send_fds(fd, &rep, sizeof rep, fds, 4);
	if (err) {
		munmap(seg, size);
		close(seg_fd);
		close(c->rt_efd);
		close(c->cl_efd);
		close(fd);
		LOG(rt, "attach reply failed: %s", strerror(-err));
		return;
	}
	c->used = 1;
	arm_hup(rt, slot);
	ST_ADD(attaches, 1);
	ST_ADD(clients, 1);
	LOG(rt, "client %u attached (pid %d uid %u, %s wake-ups)", slot, (int)cr.pid, (unsigned)cr.uid,
	    h.wake_mode == RL_WAKE_FUTEX ? "futex" : "eventfd");
}

static void arm_accept(struct rl_rt *rt)
{
	/* still armed while draining: a late client is told -ESHUTDOWN at once instead of
	 * waiting in the listen backlog until the runtime exits */
	if (rt->accept_armed)
		return;
	struct io_uring_sqe *s = sqe_get(rt);
	rt->acc_len = sizeof rt->acc_addr;
	io_uring_prep_accept(s, rt->listen_fd, (struct sockaddr *)&rt->acc_addr, &rt->acc_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(s, UD(UD_ACCEPT, 0, 0));
	rt->accept_armed = 1;
}

/* All HS_MAX pre-attach entries wait: cancel the oldest connection of the uid holding the
 * most of them, or of uid's own when it holds as many (see HS_MAX). */
static void hs_evict_one(struct rl_rt *rt, uid_t uid)
{
	int n_new = 0, n_max = 0;
	uid_t victim = uid;
	for (int i = 0; i < HS_SLOTS; i++) {
		if (rt->hs[i].used != 1)
			continue;
		int n = 0;
		for (int j = 0; j < HS_SLOTS; j++)
			n += rt->hs[j].used == 1 && rt->hs[j].uid == rt->hs[i].uid;
		if (rt->hs[i].uid == uid)
			n_new = n;
		if (n > n_max) {
			n_max = n;
			victim = rt->hs[i].uid;
		}
	}
	if (n_new >= n_max)
		victim = uid;
	int old = -1;
	for (int i = 0; i < HS_SLOTS; i++)
		if (rt->hs[i].used == 1 && rt->hs[i].uid == victim &&
		    (old < 0 || rt->hs[i].t_ns < rt->hs[old].t_ns))
			old = i;
	if (old < 0)
		return;        /* uid holds none and no other uid holds more: nothing to take */
	rt->hs[old].used = 2;  /* the recv completes with -ECANCELED and closes it */
	cancel_ud(rt, UD(UD_HS, old, 0));
	ST_ADD(dropped_preattach, 1);
	LOG(rt, "pre-attach slots full: dropped a silent connection of uid %u", (unsigned)victim);
}

/* A new connection. Its peer's credentials are checked first, so a uid that may not attach
 * never takes a pre-attach slot; then its attach request is read through io_uring, bounded
 * by a linked timeout so a peer that connects and says nothing soon loses its slot. */
static void on_accept(struct rl_rt *rt, int fd)
{
	struct ucred cr;
	socklen_t cl = sizeof cr;
	char why[sizeof ((struct rl_attach_rep *)0)->msg];
	struct rl_attach_policy pol = attach_policy(rt);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
		ST_ADD(refused_uid, 1);
		return refuse(rt, fd, -EACCES, "cannot read the peer's credentials");
	}
	if (!rl_rt_peer_allowed(&pol, cr.uid, cr.gid, why, sizeof why)) {
		ST_ADD(refused_uid, 1);
		return refuse(rt, fd, -EACCES, "%s", why);
	}
	int waiting = 0, i = -1;
	for (int j = 0; j < HS_SLOTS; j++) {
		waiting += rt->hs[j].used == 1;
		if (!rt->hs[j].used && i < 0)
			i = j;
	}
	if (waiting >= HS_MAX)
		hs_evict_one(rt, cr.uid);
	if (i < 0) {       /* every entry waits for a cancel to complete: drop the newcomer */
		ST_ADD(dropped_preattach, 1);
		close(fd);
		return;
	}
	rt->hs[i].used = 1;
	rt->hs[i].fd = fd;
	rt->hs[i].uid = cr.uid;
	rt->hs[i].t_ns = rl_now_ns();
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_recv(s, fd, &rt->hs[i].req, sizeof rt->hs[i].req, MSG_WAITALL);
	io_uring_sqe_set_data64(s, UD(UD_HS, i, 0));
	s->flags |= IOSQE_IO_LINK;
	s = sqe_get(rt);
	io_uring_prep_link_timeout(s, &rt->hs_ts, 0);
	io_uring_sqe_set_data64(s, UD(UD_CANCEL, 0, 0));
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
			rl_sched_cancel(rt->sched, q);
			c->by_rid[rid] = NULL;
			c->active--;
			ST_ADD(requests_done, 1);
			publish_sched_stats(rt);     /* before the DONE is published, as in step_done */
			put_evt(rt, slot, rid, RL_EV_DONE, 0, RL_FIN_CANCEL, n_gen);
		}
		return;        /* cancelling a finished request is not an error */
	}
	if (r->op != RL_OP_SUBMIT || rid >= rt->p.max_inflight)
		return reject(rt, slot, rid, -EINVAL);
	if (c->by_rid[rid])
		return reject(rt, slot, rid, -EBUSY);
	if (rt->draining)
		return reject(rt, slot, rid, -ESHUTDOWN);
	struct rl_limits lim = { .max_inflight = rt->p.max_inflight, .max_prompt = rt->max_prompt,
				 .max_new = rt->max_new, .vocab = rt->vocab, .arena_ids = c->arena_mask + 1 };
	int err = rl_rt_validate_req(r, &lim, now);
	if (err)
		return reject(rt, slot, rid, err);
	struct rl_seq *q = rl_sched_seq_alloc(rt->sched);
	if (!q)
		return reject(rt, slot, rid, -ENOSPC);
	uint32_t n = r->n_prompt;
	if (rl_rt_copy_prompt(q->tokens, c->arena, c->arena_mask, r->arena_pos, n, rt->vocab)) {
		rl_sched_seq_release(rt->sched, q);
		return reject(rt, slot, rid, -ERANGE);
	}
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
	err = rl_sched_enqueue(rt->sched, q, now);
	if (err)
		return reject(rt, slot, rid, err);
	c->by_rid[rid] = q;
	c->active++;
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
	for (uint32_t s = 0; s < rt->p.max_clients; s++) {
		if (!rt->clients[s].used)
			continue;
		n += drain_client(rt, s, now);
		if (rt->clients[s].hostile)
			detach(rt, s, "impossible ring index (hostile or corrupted client)");
	}
	return n;
}

/* ---- steps ---------------------------------------------------------------------------- */

/* Hands the step's sampled ids to the scheduler (which emits the events). The step's event
 * reservations are spent then (emit consumed one per event; what is left belonged to
 * sequences cancelled mid-step), and they are cleared here and only here: events published
 * while a step runs must not take the slots it reserved. */
static void complete_step(struct rl_rt *rt, uint64_t now)
{
	rl_sched_complete(rt->sched, rt->out, now);
	for (uint32_t i = 0; i < rt->p.max_clients; i++)
		rt->clients[i].reserved = 0;
}

static void step_done(struct rl_rt *rt, uint64_t now)
{
	int err = rl_backend_finish(rt->be, rt->out);
	uint64_t dt = rl_now_ns() - rt->step_t0;
	if (err) {
		SAY("backend step failed: %s", strerror(-err));
		for (uint32_t i = 0; i < rt->batch->n_seqs; i++)
			rt->out[i] = -1;
	}
	if (rt->p.budget_auto)          /* a fixed budget needs no step model */
		rl_budget_observe(&rt->budget, rt->batch, dt);
	complete_step(rt, now);
	rt->stepping = 0;
	/* stats before events: a client that has read its DONE must not then read stats that
	 * still count its request as active */
	ST_SET(last_step_ns, dt);
	publish_sched_stats(rt);
	publish_events(rt);
	if (rt->p.budget_auto)
		rl_budget_publish(&rt->budget, &rt->info->st);
}

static int try_launch(struct rl_rt *rt, uint64_t now)
{
	if (rt->p.budget_auto)
		rl_sched_set_budget(rt->sched, rl_budget_pick(&rt->budget, rt->sched));
	const struct rl_batch *b = rl_sched_next(rt->sched, now);
	publish_events(rt);             /* errors the scheduler emitted (expired deadlines) */
	if (!b || !b->n_seqs)
		return 0;
	rt->batch = b;
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
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_timeout(s, &rt->timer_ts, 0, 0);
	io_uring_sqe_set_data64(s, UD(UD_TIMER, 0, 0));
}

static void arm_read(struct rl_rt *rt, int fd, void *buf, unsigned len, unsigned kind)
{
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_read(s, fd, buf, len, 0);
	io_uring_sqe_set_data64(s, UD(kind, 0, 0));
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
			on_accept(rt, res);
		arm_accept(rt);
		break;
	case UD_HS: {
		struct handshake *h = &rt->hs[slot];
		if (res == (int)sizeof h->req && h->used == 1) {
			attach(rt, h->fd, &h->req);
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
		detach(rt, slot, res & (POLLHUP | POLLRDHUP | POLLERR) ? "hang-up" : "unexpected data on the control socket");
		break;
	}
	case UD_BELL: {
		struct client *c = &rt->clients[slot];
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
	case UD_TIMER:
		atomic_store_explicit(&rt->info->heartbeat_ns, rl_now_ns(), memory_order_relaxed);
		publish_sched_stats(rt);
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
			struct io_uring_sqe *q = sqe_get(rt);
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

/* The socket's folder. The runtime never changes the mode of a folder that exists: several
 * daemons (and other programs) may share it. It creates only a missing folder, 0711 (others
 * may pass through to a socket whose own mode and SO_PEERCRED admit them, but not list it).
 * It refuses a folder where another user could replace the socket: writable by others
 * without the sticky bit, or (our own per-user folder) owned by someone else. */
static int check_sock_dir(struct rl_rt *rt, char *err, size_t errlen)
{
	const char *d = rt->sock_dir;
	int own_default = !strchr(rt->p.socket ? rt->p.socket : "", '/');   /* /tmp/ringlm-UID or $RINGLM_SOCKET_DIR */
	struct stat st;
	if (stat(d, &st) < 0) {
		if (errno != ENOENT || !own_default) {
			int e = errno;
			snprintf(err, errlen, "socket folder %s: %s; create it or choose another --socket", d, strerror(e));
			return -e;
		}
		mode_t um = umask(0);  /* the mode exactly (umask is restored at once) */
		int r = mkdir(d, 0711);
		umask(um);
		if ((r < 0 && errno != EEXIST) || stat(d, &st) < 0) {
			int e = errno;
			snprintf(err, errlen, "cannot create socket folder %s: %s; choose another --socket", d, strerror(e));
			return -e;
		}
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "socket folder %s is not a folder; choose another --socket", d);
		return -ENOTDIR;
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen, "socket folder %s is writable by every user without the sticky bit, so anyone "
			 "could replace the socket; use a folder only you can write (or chmod +t it)", d);
		return -EPERM;
	}
	if (own_default && st.st_uid != geteuid()) {
		snprintf(err, errlen, "socket folder %s belongs to uid %u, not to us (uid %u); remove it or set "
			 "RINGLM_SOCKET_DIR", d, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (rt->p.n_allow_uid && !(st.st_mode & S_IXOTH))
		LOG(rt, "warning: socket folder %s is mode %03o, so --allow-uid users cannot reach the socket; "
		    "chmod o+x it or choose another --socket", d, (unsigned)(st.st_mode & 0777));
	else if (rt->p.n_allow_gid && !(st.st_mode & (S_IXOTH | S_IXGRP)))
		LOG(rt, "warning: socket folder %s is mode %03o, so --allow-gid users cannot reach the socket; "
		    "chmod g+x it or choose another --socket", d, (unsigned)(st.st_mode & 0777));
	return 0;
}

static int make_listener(struct rl_rt *rt, char *err, size_t errlen)
{
	int rc = rl_sock_path(rt->p.socket, rt->sock_path, sizeof rt->sock_path);
	if (rc) {
		snprintf(err, errlen, "socket name '%s' is too long for a Unix socket path", rt->p.socket);
		return rc;
	}
	rl_sock_dir(rt->sock_path, rt->sock_dir, sizeof rt->sock_dir);
	if ((rc = check_sock_dir(rt, err, errlen)))
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path, rt->sock_path, sizeof a.sun_path);   /* same size, NUL-terminated */
	/* a stale socket from a dead runtime is replaced; a live one is not */
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		close(fd);
		snprintf(err, errlen, "a runtime is already serving %s; stop it or choose another --socket", rt->sock_path);
		return -EADDRINUSE;
	}
	unlink(rt->sock_path);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 512) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", rt->sock_path, strerror(errno));
		close(fd);
		return -errno;
	}
	/* access is per daemon, on its own socket file (connect needs write permission on it);
	 * SO_PEERCRED at accept is the check that counts, the mode keeps strangers out early */
	mode_t mode = rt->p.n_allow_uid ? 0666 : rt->p.n_allow_gid ? 0660 : 0600;
	if (chmod(rt->sock_path, mode) < 0 ||
	    (rt->p.n_allow_gid && !rt->p.n_allow_uid && chown(rt->sock_path, (uid_t)-1, rt->p.allow_gid[0]) < 0)) {
		snprintf(err, errlen, "cannot set the mode or group of %s: %s", rt->sock_path, strerror(errno));
		close(fd);
		unlink(rt->sock_path);
		return -errno;
	}
	rt->listen_fd = fd;
	return 0;
}

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
	in->vocab_size = bi->vocab_size;
	in->max_ctx = bi->max_ctx;
	in->bos_id = bi->bos_id;
	in->eos_id = bi->eos_id;
	in->max_prompt = rt->max_prompt;
	in->max_new = rt->max_new;
	in->max_inflight = rt->p.max_inflight;
	in->max_clients = rt->p.max_clients;
	in->block_size = rt->p.block_size;
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
	rt->info = in;
	return 0;
}

void rl_rt_default_params(struct rl_rt_params *p)
{
	memset(p, 0, sizeof *p);
	p->socket = "default";
	p->backend = NULL;              /* sim without a model, cpu with one */
	p->cpu = -1;
	p->max_batch_tokens = RL_SCHED_DEFAULT_BUDGET;
	p->max_seqs = 256;
	p->kv_blocks = 0;               /* 0: sized by the backend (sim: 16384) */
	p->block_size = 16;
	p->prefix_cache = 1;
	p->kv_f16 = 1;                  /* half the cache's memory and its reads; ~1e-3 off fp32 */
	p->max_clients = 64;
	p->max_inflight = 256;
	p->max_prompt = 0;              /* 0: the model's context */
	p->max_new = 0;
	p->req_cap = 256;
	p->evt_cap = 4096;
	p->arena_ids = 1u << 18;
	p->sim_vocab = 32000;
	p->idle_spin_ns = 2000000;      /* 2 ms */
	p->drain_timeout_ns = 10000000000ull;   /* 10 s */
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
	rc = rl_backend_open(&rt->p, &rt->be, &rt->model, &n_blocks, err, errlen);
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
	struct rl_sched_hooks hooks = { .ctx = rt, .reserve = hook_reserve, .emit = hook_emit };
	rc = rl_sched_create(&sp, &hooks, &rt->sched);
	if (rc) {
		snprintf(err, errlen, "cannot create the scheduler: %s", strerror(-rc));
		goto fail;
	}
	rl_budget_init(&rt->budget, p->itl_target_ns, sp.max_batch_tokens);
	rt->calib = (struct rl_calib_geom){ .n_blocks = n_blocks, .block_size = p->block_size,
		.max_seqs = p->max_seqs, .max_tokens = sp.max_batch_tokens, .max_ctx = bi->max_ctx,
		.target_ns = p->itl_target_ns, .max_ns = 1000000000ull };
	rt->clients = calloc(p->max_clients, sizeof *rt->clients);
	rt->touched = calloc(p->max_clients, sizeof *rt->touched);
	rt->out = calloc(p->max_seqs, sizeof *rt->out);
	if (!rt->clients || !rt->touched || !rt->out) {
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
	if ((rc = make_info(rt, err, errlen)) || (rc = make_listener(rt, err, errlen)))
		goto fail;
	rt->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->handle_signals)
		rt->sig_fd = signalfd(-1, &ss, SFD_CLOEXEC);
	rt->timer_ts.tv_nsec = 100 * 1000000;    /* heartbeat and stats: 10 Hz */
	rt->hs_ts.tv_sec = HS_TIMEOUT_NS / 1000000000;
	rt->hs_ts.tv_nsec = HS_TIMEOUT_NS % 1000000000;
	publish_sched_stats(rt);
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
			rl_sched_cancel(rt->sched, c->by_rid[r]);
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
	pin(rt);
	if (rt->p.budget_auto) {
		/* on the thread, cpu and backend that will serve; clients that attach meanwhile wait
		 * in their rings */
		struct rl_calib_report rep;
		int rc = rl_calib_run(&rt->budget, rt->be, &rt->calib, &rep);
		if (rc)
			SAY("warning: budget calibration stopped after %u steps: %s (the step model learns from "
			    "served steps)", rep.steps, strerror(-rc));
		const double *th = rt->budget.theta;
		LOG(rt, "budget auto, ITL target %.1f ms: calibrated in %.0f ms over %u step shapes: step %.0f us "
		    "+ %.1f us/sampled row + %.1f us/prefill token + %.2f us/1k decode ctx + %.2f us/1k prefill pairs",
		    rt->p.itl_target_ns / 1e6, rep.ns / 1e6, rep.steps, th[0] / 1e3, th[1] / 1e3, th[2] / 1e3,
		    th[3] / 1e3, th[4] / 1e3);
		rl_budget_publish(&rt->budget, &rt->info->st);
	}
	LOG(rt, "serving %s on %s (backend %s, vocab %u, %s wake-ups)", rt->be->info.model_name,
	    rt->sock_path, rt->be->info.name, rt->vocab,
	    rt->futex_ok ? "io_uring futex" : "eventfd fallback");
	arm_accept(rt);
	arm_timer(rt);
	if (rt->sig_fd >= 0)
		arm_read(rt, rt->sig_fd, rt->sigbuf, sizeof(struct signalfd_siginfo), UD_SIGNAL);
	struct io_uring_sqe *s = sqe_get(rt);
	io_uring_prep_poll_add(s, rt->stop_fd, POLLIN);
	io_uring_sqe_set_data64(s, UD(UD_STOP, 0, 0));
	io_uring_submit(&rt->ring);
	rt->last_work = rl_now_ns();
	for (;;) {
		uint64_t now = rl_now_ns();
		int work = drain_all(rt, now);
		if (rt->stepping) {
			/* a backend whose finish() computes is finished now, after one drain; others
			 * run on while we poll the rings */
			if (rt->be->info.finish_works || rl_backend_poll(rt->be)) {
				step_done(rt, rl_now_ns());
				work = 1;
			}
		} else if (!rl_sched_idle(rt->sched)) {
			work |= try_launch(rt, now);
		}
		if (rt->n_touched)
			publish_events(rt);
		reap(rt);
		if (rt->draining && !rt->stepping) {
			if (rl_sched_idle(rt->sched) || now > rt->drain_deadline) {
				fail_all(rt, -ESHUTDOWN);
				break;
			}
		}
		if (work || rt->stepping || !rl_sched_idle(rt->sched)) {
			rt->last_work = now;
			continue;
		}
		if (now - rt->last_work >= rt->p.idle_spin_ns) {
			sleep_until_work(rt);
			rt->last_work = rl_now_ns();
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
	if (rt->sched)
		rl_sched_destroy(rt->sched);
	rl_backend_destroy(rt->be);
	rl_model_destroy(rt->model);
	free(rt->clients);
	free(rt->touched);
	free(rt->out);
	free(rt);
}
