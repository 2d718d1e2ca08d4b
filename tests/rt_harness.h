/* rt_harness.h — start a real runtime in a child process for multi-process tests, and small
 * client helpers. The child runs the same code as ringlmd (rl_rt_*); tests talk to it only
 * through libringlm and the socket, like any client. */
#ifndef RL_RT_HARNESS_H
#define RL_RT_HARNESS_H
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/backend/rl_backend_sim.h"
#include "ipc/rl_ipc.h"
#include "runtime/loop/rl_rt_args.h"
#include "runtime/loop/rl_rt_fork.h"

struct rt_child { pid_t pid; char sock[108]; char name[64]; };

/* The folder the harness's runtimes listen in: made once per test process, 0711 like the
 * runtime's own per-user folder, so a test does not depend on what an earlier run (or an
 * older ringlmd) left in /tmp/ringlm-UID; removed at exit when empty. */
static char rt_dir_path[64];
static void rt_dir_rm(void) { rmdir(rt_dir_path); }
static inline const char *rt_dir(void)
{
	if (!rt_dir_path[0]) {
		snprintf(rt_dir_path, sizeof rt_dir_path, "/tmp/ringlm-t%u-%d", (unsigned)getuid(), (int)getpid());
		if (mkdir(rt_dir_path, 0711) == 0 || errno == EEXIST)
			chmod(rt_dir_path, 0711);      /* whatever the umask */
		atexit(rt_dir_rm);
	}
	return rt_dir_path;
}

/* Starts a runtime with ringlmd-style args (a space-separated string). Returns 0 when it
 * listens. */
static inline int rt_start(struct rt_child *rc, const char *args)
{
	static int counter;
	/* a full path, so clients of other uids resolve the same socket; with RINGLM_SOCKET_DIR
	 * set (tests of the runtime's own folder handling) the runtime gets the bare name */
	char *name = rc->name;         /* lives in rc, which the forked child has a copy of */
	snprintf(name, sizeof rc->name, "t%d-%d", (int)getpid(), counter++);
	const char *env_dir = getenv("RINGLM_SOCKET_DIR");
	if (env_dir ? rl_sock_path(name, rc->sock, sizeof rc->sock) < 0
		    : snprintf(rc->sock, sizeof rc->sock, "%s/%s", rt_dir(), name) >= (int)sizeof rc->sock)
		return -ENAMETOOLONG;
	struct rl_rt_params p;
	char err[512] = "", buf[1024], *argv[64] = { "ringlmd" };
	int argc = 1;
	rl_rt_default_params(&p);
	snprintf(buf, sizeof buf, "%s", args ? args : "");
	for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " "))
		argv[argc++] = t;
	if (rl_rt_parse_args(&p, argc, argv, err, sizeof err)) {
		fprintf(stderr, "rt_start: %s\n", err);
		return -EINVAL;
	}
	p.socket = env_dir ? rc->name : rc->sock;
	if (!p.model && !p.backend)
		p.backend = "sim";     /* meant: no "no --model given" warning in every test */
	p.verbose = getenv("RL_TEST_VERBOSE") != NULL;
	rc->pid = rl_rt_fork(&p, err, sizeof err);
	if (rc->pid < 0) {
		fprintf(stderr, "rt_start: %s\n", err);
		return rc->pid;
	}
	return 0;
}

/* SIGTERM and reap; returns the exit status (0 = clean). */
static inline int rt_stop(struct rt_child *rc)
{
	int st = 0;
	kill(rc->pid, SIGTERM);
	if (waitpid(rc->pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int rt_connect(const struct rt_child *rc, struct ringlm **c, int fallback)
{
	struct ringlm_params p = ringlm_default_params();
	p.socket = rc->sock;
	p.force_fallback = fallback;
	int e = ringlm_connect(&p, c);
	if (e)
		fprintf(stderr, "rt_connect: %s\n", ringlm_last_error());
	return e;
}

/* A stat from the runtime's JSON. */
static inline long long rt_stat(struct ringlm *c, const char *key)
{
	char buf[4096], pat[64];
	if (ringlm_stats_json(c, buf, sizeof buf) < 0)
		return -1;
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(buf, pat);
	return p ? atoll(p + strlen(pat)) : -1;
}

/* Expected sim output for a prompt: n tokens by the rl_backend_sim.h chain. */
static inline void sim_expect(const uint32_t *prompt, uint32_t np, uint32_t n, uint32_t vocab, uint32_t *out)
{
	uint64_t s = RL_SIM_STATE0;
	for (uint32_t i = 0; i < np; i++)
		s = rl_sim_mix(s, prompt[i]);
	for (uint32_t i = 0; i < n; i++) {
		out[i] = (uint32_t)(s % vocab);
		s = rl_sim_mix(s, out[i]);
	}
}

/* Open fds of a process (entries of /proc/PID/fd), or -1. */
static inline int rt_nfds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Resident set of a process in KiB (VmRSS), or -1. */
static inline long rt_rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	fclose(f);
	return kb;
}

/* A client that attaches by hand (no libringlm), so a test can write anything into its own
 * segment: the hostile and limit tests. */
struct raw_client {
	int sock, fds[4];
	uint8_t *seg;
	size_t size;
	struct rl_seg_hdr h;
	struct rl_ring_hdr *rq, *ev;
	struct rl_req *slots;
	uint32_t *arena;
	struct rl_ring_cons evc;
	uint32_t head;                 /* requests published so far */
};

static inline int raw_client_attach(const char *sock, struct raw_client *r)
{
	memset(r, 0, sizeof *r);
	r->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
	if (connect(r->sock, (struct sockaddr *)&a, sizeof a) < 0) {
		close(r->sock);
		return -errno;
	}
	struct rl_attach_req rq = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION };
	(void)!send(r->sock, &rq, sizeof rq, MSG_NOSIGNAL);
	struct rl_attach_rep rep = { 0 };
	int n = 0, rc = rl_recv_fds(r->sock, &rep, sizeof rep, r->fds, 4, &n);
	rc = rl_attach_rep_check(&rep, rc, n, 0);
	if (rc) {
		for (int i = 0; i < n; i++)
			close(r->fds[i]);
		close(r->sock);
		return rc;
	}
	r->size = rep.seg_size;
	r->seg = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fds[0], 0);
	if (r->seg == MAP_FAILED)
		return -errno;
	memcpy(&r->h, r->seg, sizeof r->h);
	r->rq = (void *)(r->seg + r->h.req_off);
	r->ev = (void *)(r->seg + r->h.evt_off);
	r->slots = (void *)(r->rq + 1);
	r->arena = (void *)(r->seg + r->h.arena_off);
	rl_ring_cons_init(&r->evc, r->ev, r->ev + 1, r->h.evt_cap, sizeof(struct rl_evt));
	return 0;
}

static inline void raw_client_close(struct raw_client *r)
{
	munmap(r->seg, r->size);
	for (int k = 0; k < 4; k++)
		close(r->fds[k]);
	close(r->sock);
}

/* A valid SUBMIT for rid with prompt ids 1..n at arena position 0; tests then spoil a field. */
static inline struct rl_req raw_req(uint32_t rid, uint32_t n, uint32_t max_new)
{
	struct rl_req q = { .op = RL_OP_SUBMIT, .rid = rid, .n_prompt = n, .max_new = max_new, .top_p = 1.0f };
	return q;
}

/* Publishes one record (the prompt written at arena_pos first: ids, or 1, 2, ... when ids is
 * NULL) and rings the runtime's bell like libringlm does. */
static inline void raw_client_submit(struct raw_client *r, const struct rl_req *q, const uint32_t *ids)
{
	for (uint32_t i = 0; i < q->n_prompt && i < r->h.arena_ids; i++)
		r->arena[(q->arena_pos + i) & (r->h.arena_ids - 1)] = ids ? ids[i] : 1 + i % 7;
	memcpy(&r->slots[r->head & (r->h.req_cap - 1)], q, sizeof *q);
	atomic_store_explicit(&r->rq->prod, ++r->head, memory_order_release);
	struct rl_seg_ctl *ctl = (void *)(r->seg + r->h.ctl_off);
	atomic_fetch_add(&ctl->rt_bell, 1);
	rl_futex_wake(&ctl->rt_bell, 1);
	uint64_t one = 1;
	(void)!write(r->fds[2], &one, 8);
}

/* Next event for rid that ends its request (DONE or ERROR), skipping tokens; its code, or
 * INT32_MIN when none came within ~10 s (a hang guard, not a timing check). */
static inline int raw_client_result(struct raw_client *r, uint32_t rid, uint16_t *type)
{
	for (int spin = 0; spin < 100000; spin++) {
		int64_t av = rl_ring_cons_avail(&r->evc);
		if (av <= 0) {
			usleep(100);
			continue;
		}
		for (int64_t i = 0; i < av; i++) {
			const struct rl_evt *e = rl_ring_cons_slot(&r->evc, (uint32_t)i);
			if (e->rid == rid && e->type != RINGLM_EV_TOKEN) {
				int code = e->code;
				*type = e->type;
				rl_ring_cons_release(&r->evc, (uint32_t)i + 1);
				return code;
			}
		}
		rl_ring_cons_release(&r->evc, (uint32_t)av);
	}
	return INT32_MIN;
}

static inline uint64_t rt_xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct raw_racer { struct raw_client *r; _Atomic int stop; uint64_t seed; };

/* Rewrites ring indices, records, the arena and the doorbell words while the runtime reads. */
static inline void *raw_racer_main(void *arg)
{
	struct raw_racer *z = arg;
	struct raw_client *r = z->r;
	uint64_t s = z->seed | 1;
	struct rl_seg_ctl *ctl = (void *)(r->seg + r->h.ctl_off);
	while (!atomic_load_explicit(&z->stop, memory_order_relaxed)) {
		uint32_t what = rt_xs(&s) % 8, v = (uint32_t)rt_xs(&s);
		switch (what) {
		case 0: atomic_store(&r->rq->prod, atomic_load(&r->rq->cons) + v % (r->h.req_cap + 2)); break;
		case 1: atomic_store(&r->rq->cons, v); break;
		case 2: atomic_store(&r->ev->cons, atomic_load(&r->ev->prod) - v % (r->h.evt_cap + 2)); break;
		case 3: atomic_store(&r->ev->prod, v); break;
		case 4: {
			struct rl_req *q = &r->slots[v & (r->h.req_cap - 1)];
			uint8_t *b = (uint8_t *)q;
			for (size_t k = 0; k < sizeof *q; k += 8)
				memcpy(b + k, &(uint64_t){ rt_xs(&s) }, 8);
			if (v & 1)
				q->op = RL_OP_SUBMIT, q->rid = v % 300, q->n_prompt = 1 + v % 600,
				q->max_new = 1 + v % 50, q->temperature = 0, q->top_p = 1, q->n_stop = 0,
				q->deadline_ns = 0, q->top_k = 0;
			break;
		}
		case 5:
			for (int k = 0; k < 256; k++)
				r->arena[(v + k) & (r->h.arena_ids - 1)] = (uint32_t)rt_xs(&s) % (k & 1 ? 1000 : UINT32_MAX);
			break;
		case 6: atomic_store(&ctl->rt_bell, v); rl_futex_wake(&ctl->rt_bell, 1); break;
		default: atomic_store(&ctl->cl_sleeping, v & 1); break;
		}
	}
	return NULL;
}

/* Waits for a stat to reach a value (above = 0) or to pass it (above = 1), polling the shared
 * stats: a ~10 s hang guard, not a timing check. Passing is for events whose timing a loaded
 * or sanitized machine stretches, e.g. the runtime going to sleep. */
static inline int rt_settle_to(struct ringlm *c, const char *key, long long want, int above)
{
	for (int i = 0; i < 10000; i++) {
		long long v = rt_stat(c, key);
		if (above ? v > want : v == want)
			return 1;
		usleep(1000);
	}
	fprintf(stderr, "  %s stayed at %lld, want %s%lld\n", key, rt_stat(c, key), above ? "above " : "", want);
	return 0;
}
static inline int rt_settle(struct ringlm *c, const char *key, long long want) { return rt_settle_to(c, key, want, 0); }
static inline int rt_settle_above(struct ringlm *c, const char *key, long long floor) { return rt_settle_to(c, key, floor, 1); }
/* The runtime at rest: no request active and every KV block back in the pool (the check after
 * any run that must lose nothing). 1 when both settle. */
static inline int rt_expect_idle(struct ringlm *c)
{
	int a = rt_settle(c, "active_requests", 0);
	return rt_settle(c, "kv_blocks_free", rt_stat(c, "kv_blocks_total")) && a;
}

/* A client of the sim backend: n_req requests (prompts of 1..max_prompt ids, 1..max_new
 * tokens, at most depth in flight), every token checked against the sim oracle for order
 * and value, every request ending DONE(length). Returns 0 when all is well (an exit code). */
static inline int rt_run_client(const struct rt_child *rt, uint64_t seed, long n_req, int depth,
				int fallback, uint32_t max_prompt, uint32_t max_new)
{
	struct ringlm *c;
	struct ringlm_info info;
	if (max_prompt > 8 || max_new > 16 || rt_connect(rt, &c, fallback))
		return 10;
	ringlm_get_info(c, &info);
	struct tr { uint32_t want[16], got, n; int live; } *tr = calloc(256, sizeof *tr);
	uint64_t s = seed | 1;
	long sub = 0, fin = 0, bad = 0;
	int inflight = 0;
	struct ringlm_event ev[256];
	while (fin < n_req && !bad) {
		while (sub < n_req && inflight < depth) {
			uint32_t p[8], np = 1 + rt_xs(&s) % max_prompt, mn = 1 + rt_xs(&s) % max_new, id;
			for (uint32_t i = 0; i < np; i++)
				p[i] = (uint32_t)(rt_xs(&s) % info.vocab_size);
			struct ringlm_request r = ringlm_default_request();
			r.prompt = p;
			r.n_prompt = np;
			r.max_new = mn;
			int e = ringlm_submit(c, &r, &id);
			if (e == -EAGAIN)
				break;
			if (e || id >= 256 || tr[id].live) {
				fprintf(stderr, "  submit: %s\n", e ? ringlm_strerror(e) : "request id reused while live");
				bad++;
				break;
			}
			sim_expect(p, np, mn, info.vocab_size, tr[id].want);
			tr[id].n = mn;
			tr[id].got = 0;
			tr[id].live = 1;
			sub++;
			inflight++;
		}
		int k = ringlm_wait(c, ev, 256, 10000);
		if (k <= 0) {
			fprintf(stderr, "  client wait: %s\n", k ? ringlm_strerror(k) : "nothing for 10 s");
			bad++;
			break;
		}
		for (int i = 0; i < k; i++) {
			struct tr *t = &tr[ev[i].id];
			if (ev[i].id >= 256 || !t->live) {
				fprintf(stderr, "  event for unknown id %u\n", ev[i].id);
				bad++;
			} else if (ev[i].type == RINGLM_EV_TOKEN) {
				bad += ev[i].index != t->got || ev[i].token != t->want[t->got];
				t->got++;
			} else {
				bad += ev[i].type != RINGLM_EV_DONE || ev[i].code != RINGLM_FIN_LENGTH || t->got != t->n;
				t->live = 0;
				inflight--;
				fin++;
			}
		}
	}
	free(tr);
	ringlm_close(c);
	return bad ? 1 : 0;
}

static inline int rl_slow(void) { return getenv("RL_SLOW") ? atoi(getenv("RL_SLOW")) : 1; }
#endif
