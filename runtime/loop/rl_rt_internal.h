/* rl_rt_internal.h — private to the runtime loop (runtime/loop/rl_rt*.c): the loop's state,
 * the io_uring user_data encoding, and what the data plane (rl_rt.c: requests, steps,
 * events, sleep) and the connection plane (rl_rt_conn.c: socket, attach, hand-shakes,
 * detach) call of each other. Not a public header.
 */
#ifndef RL_RT_INTERNAL_H
#define RL_RT_INTERNAL_H
#include <liburing.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include "ipc/rl_ipc.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/loop/rl_calib.h"
#include "runtime/loop/rl_idle.h"
#include "runtime/loop/rl_kvev.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/sched/rl_spec.h"
#include "runtime/sched/rl_budget.h"
#include "runtime/sched/rl_sched.h"

#ifndef IORING_OP_FUTEX_WAIT_NR
#define IORING_OP_FUTEX_WAIT_NR 51     /* kernel 6.7; liburing 2.3 has no helper */
#endif
#define RL_FUTEX2_SIZE_U32 0x02
#define RL_FUTEX_BITSET_ANY 0xffffffffu

/* user_data: kind in the top byte, client slot and generation below */
enum { UD_ACCEPT = 1, UD_HS, UD_HUP, UD_BELL, UD_SIGNAL, UD_TIMER, UD_STOP, UD_WAKE, UD_CANCEL, UD_CONS };
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
	struct rl_lp *lp;              /* [evt_cap] log-probability slab, slot for slot with evt */
	const uint32_t *arena;         /* client-writable: copy before use */
	uint32_t arena_mask;
	struct rl_seq **by_rid;        /* [max_inflight] live request per id */
	uint32_t reserved;             /* event slots promised to the scheduler this step */
	uint32_t unpub;                /* events written but not yet published */
	int      touched;              /* on the publish list */
	int      bell_armed;
	int      hostile;
	uint32_t active;               /* live requests */
	uint32_t live_i;               /* its index in rl_rt.live while used */
	int      in_resv;              /* on rl_rt.resv (until the step completes) */
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
	struct rl_backend *draft_be;   /* --spec FILE: the draft model's backend, model, drafter */
	struct rl_model *draft_model;
	struct rl_draft *draft;
	struct rl_kvev *kvev;          /* --kv-events: the prefix cache's changes to routers, or NULL */
	struct rl_rt_cons *cons;       /* structured output: constraints and their sequences' states */
	char    *cons_text;            /* [RL_MAX_CONS_BYTES + 1] a request's constraint text, copied */
	struct rl_seq **cons_failed;   /* [pool_size] sequences whose grammar met its state cap in
					* this step: ended with an error once the step is complete */
	uint32_t n_cons_failed;
	uint32_t *prompt;              /* [max_prompt + 1] a request's prompt, copied and checked */
	struct rl_step_lp step_lp;     /* the finished step's log-probabilities (its output, beside out) */
	struct rl_spec_cost spec_cost; /* decode step time against rows, for the draft lengths */
	double draft_ns;               /* EWMA of the draft model's time per draft step */
	uint64_t draft_seen_ns, draft_seen_steps;
	struct rl_sched *sched;
	struct rl_budget budget;
	struct rl_calib_geom calib;    /* the budget calibration's limits (rl_rt_run runs it) */
	struct rl_info *info;
	int      info_fd;
	size_t   info_size;
	struct client *clients;        /* [max_clients] */
	uint32_t *touched;             /* clients with unpublished events */
	uint32_t n_touched;
	/* The per-pass and per-step walks visit these, not every slot: a pass costs what the
	 * attached clients cost, whatever --max-clients is. */
	uint32_t *live;                /* attached clients' slots (any order) */
	uint32_t n_live;
	uint32_t *resv;                /* clients holding event reservations this step */
	uint32_t n_resv;
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
	uint64_t last_work;            /* the last work, or the last wake-up from a sleep */
	uint64_t idle_start;           /* the last work: where the idle period began */
	struct rl_idle idle;           /* the idle window (rl_idle.h) */
	int      woke_bare;            /* woken from sleep by nothing a client did (the timer) */
	struct sockaddr_un acc_addr;
	socklen_t acc_len;
	struct __kernel_timespec timer_ts, hs_ts;
	uint64_t sigbuf[16], stopbuf, bellbuf;
};

#define LOG(rt, ...) do { if ((rt)->p.verbose) { fprintf(stderr, "ringlmd: " __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define SAY(...) do { fprintf(stderr, "ringlmd: " __VA_ARGS__); fputc('\n', stderr); } while (0)

#define ST_SET(f, v) atomic_store_explicit(&rt->info->st.f, (uint64_t)(v), memory_order_relaxed)
#define ST_ADD(f, v) atomic_fetch_add_explicit(&rt->info->st.f, (uint64_t)(v), memory_order_relaxed)


/* rl_rt.c */
struct io_uring_sqe *rt_sqe_get(struct rl_rt *rt);   /* an SQE, submitting to make room if needed */
void rt_publish_sched_stats(struct rl_rt *rt);
void rt_cancel_ud(struct rl_rt *rt, uint64_t ud);     /* cancel the operation tagged ud */

/* rl_rt_conn.c */
/* the socket (its folder checked or made, a stale one replaced) into rt->listen_fd;
 * -errno with the reason in err */
int rt_conn_listen(struct rl_rt *rt, char *err, size_t errlen);
void rt_conn_arm_accept(struct rl_rt *rt);
/* a new connection fd: its credentials checked, then its attach request read (bounded) */
void rt_conn_accepted(struct rl_rt *rt, int fd);
/* the attach request arrived on fd: the peer checked, its segment built, the fds handed over */
void rt_conn_attach(struct rl_rt *rt, int fd, const struct rl_attach_req *rq);
/* client slot gone (hang-up, hostile, shutdown): its requests cancelled, its resources freed */
void rt_conn_detach(struct rl_rt *rt, uint32_t slot, const char *why);
/* cancels a request, whether queued, running or waiting for its constraint's compile */
void rt_cancel_req(struct rl_rt *rt, struct rl_seq *q);
/* all HS_MAX pre-attach entries wait: one evicted (see HS_MAX) */
void rt_conn_evict_one(struct rl_rt *rt, uid_t uid);

#endif
