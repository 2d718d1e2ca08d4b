/* bench_serve.c — `ringlm bench serve`: a multi-process serving load generator.
 *
 * Real client processes (fork, one libringlm connection each) drive a runtime — a running
 * ringlmd (--socket) or one this command starts per run in a forked child with the runtime
 * options given after `--`. Arrivals are Poisson at --rate, or closed-loop with --users.
 * Every client writes per-request records (submit time, TTFT, end-to-end time, tokens, every
 * inter-token gap) into shared anonymous memory; the parent aggregates them after the run.
 * Timestamps are CLOCK_MONOTONIC (rl_now_ns).
 *
 * Outputs under --out (default bench/out): NAME.csv (one row per request of one run),
 * NAME.json (the summary; for a sweep, one entry per point), and with --sweep the data files
 * and PNG plots drawn by gnuplot (trade-off, latency CDFs, throughput against ITL p99).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include "clients/cli/cli.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt.h"
#include "bench/bench_serve.h"
#include "bench/bench_util.h"
#include "runtime/loop/rl_rt_args.h"
#include "runtime/loop/rl_rt_fork.h"

#define MAX_REC   (1u << 18)       /* requests per run */
#define MAX_GAPS  (1u << 23)       /* inter-token gaps per run (64 MiB, touched on use) */
#define MAX_TRACE 65536
#define MAX_SWEEP 32
#define MAX_CLIENTS 64

/* ---- options ------------------------------------------------------------------------- */

struct len_spec { uint32_t lo, hi; };      /* uniform in [lo, hi]; lo == hi: fixed */

struct opts {
	const char *socket;                /* NULL: start a runtime per run */
	const char *http;                  /* --http URL: the same load through ringlm-http too */
	char http_host[64]; int http_port; int use_http;   /* use_http: this run goes over HTTP */
	char **rt_argv; int rt_argc;       /* runtime options after `--` */
	double rate;                       /* Poisson req/s; 0: closed loop */
	uint32_t users, clients, max_requests;
	double duration, drain;
	struct len_spec prompt, output;
	const char *trace;
	uint32_t (*trace_len)[2]; uint32_t n_trace;
	double system_frac;
	uint64_t seed;
	/* structured output: clients below n_constrained put every request under this constraint
	 * (--schema FILE or --regex RE), so constrained and free streams share the steps */
	char *cons_text; size_t cons_len; int cons_kind; uint32_t n_constrained;
	uint64_t itl_target_us;
	const char *budget;                /* --max-batch-tokens for the started runtime */
	const char *sweep[MAX_SWEEP]; int n_sweep;
	const char *out_dir, *name;
	int json, progress;
	int rt_cpu;                        /* the started runtime's --cpu, -1 when not pinned */
	/* --stall SCHEMA.json: the stall test instead (bench_serve_stall.h) */
	const char *stall; uint32_t stall_requests; int stall_rounds;
};

/* ---- shared memory: what clients write, the parent reads ----------------------------- */

struct rec {
	_Atomic uint32_t state;            /* 0 empty, 1 submitted, 2 done, 3 error/cancelled */
	uint32_t client, prompt_len, max_new, n_out, n_gaps, constrained;
	uint64_t gap_off;
	uint64_t t_submit, ttft, e2e;      /* ns; t_submit relative to the run's start */
};

struct shm {
	_Atomic uint64_t next_req, gap_used, n_done, n_err, tokens;
	_Atomic uint32_t ready, go;
	uint64_t t0;                       /* CLOCK_MONOTONIC ns of the start */
	struct rec rec[MAX_REC];
};

/* ---- deterministic request shapes: a function of (seed, request index) --------------- */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t pick_len(const struct len_spec *l, uint64_t h)
{
	return l->lo + (uint32_t)(h % (uint64_t)(l->hi - l->lo + 1));
}

static void req_shape(const struct opts *o, uint64_t i, uint32_t *plen, uint32_t *olen)
{
	if (o->n_trace) {
		*plen = o->trace_len[i % o->n_trace][0];
		*olen = o->trace_len[i % o->n_trace][1];
		return;
	}
	*plen = pick_len(&o->prompt, mix64(o->seed ^ (i * 2 + 1)));
	*olen = pick_len(&o->output, mix64(o->seed ^ (i * 2 + 2)));
}

/* The shared system prompt is the same ids for every request (so the prefix cache can hold
 * it); the rest of a prompt is unique to its request. Ids stay clear of 0..2 (unk/bos/eos). */
static void fill_prompt(const struct opts *o, uint64_t i, uint32_t *ids, uint32_t n, uint32_t vocab)
{
	uint32_t sys = (uint32_t)(o->system_frac * n), span = vocab > 8 ? vocab - 3 : 1;
	for (uint32_t j = 0; j < n; j++)
		ids[j] = 3 + (uint32_t)(mix64(j < sys ? 0x5eed00000000ull + j : (i << 20) ^ j ^ o->seed)
					% span);
}

static double exp_draw(uint64_t *st)
{
	*st = mix64(*st);
	double u = ((*st >> 11) + 0.5) / 9007199254740992.0;
	return -log(u);
}

/* ---- one client process ------------------------------------------------------------- */

struct slot { uint32_t id, req; uint64_t t_last; int used; };

/* ---- one client process over HTTP (--http): threads, one per user, each a loop of
 * streaming requests to ringlm-http on a fresh connection (what a simple client does). The
 * response is chunked (the length is unknown) and carries server-sent events; each event with
 * text is a token's arrival, timed as the rings' TOKEN events are. */

struct http_user { const struct opts *o; struct shm *sh; uint64_t *gaps; int c; uint32_t vocab, max_prompt, max_new, max_ctx; int rc; };

static int http_connect(const struct opts *o)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->http_port) };
	inet_pton(AF_INET, o->http_host, &sa.sin_addr);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* One request: returns 0 and fills r (times relative to t0), or -1. */
static int http_one(struct http_user *u, uint64_t i, uint32_t *prompt, char *body, size_t body_cap)
{
	const struct opts *o = u->o;
	struct shm *sh = u->sh;
	struct rec *r = &sh->rec[i];
	uint32_t plen, olen;
	req_shape(o, i, &plen, &olen);
	plen = plen < 1 ? 1 : plen > u->max_prompt ? u->max_prompt : plen;
	olen = olen < 1 ? 1 : olen > u->max_new ? u->max_new : olen;
	if (plen + olen > u->max_ctx)
		olen = u->max_ctx > plen ? u->max_ctx - plen : 1;
	fill_prompt(o, i, prompt, plen, u->vocab);
	size_t n = (size_t)snprintf(body, body_cap, "{\"prompt\":[");
	for (uint32_t k = 0; k < plen && n + 16 < body_cap; k++)
		n += (size_t)snprintf(body + n, body_cap - n, k ? ",%u" : "%u", prompt[k]);
	n += (size_t)snprintf(body + n, body_cap - n, "],\"max_tokens\":%u,\"temperature\":0,\"stream\":true}", olen);
	char hdr[256];
	int hn = snprintf(hdr, sizeof hdr, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n", o->http_host, n);
	uint64_t t_sub = rl_now_ns();
	int fd = http_connect(o);
	if (fd < 0)
		return -1;
	if (write(fd, hdr, (size_t)hn) != hn || write(fd, body, n) != (ssize_t)n) {
		close(fd);
		return -1;
	}
	uint64_t off = atomic_fetch_add(&sh->gap_used, olen);
	r->client = (uint32_t)u->c;
	r->prompt_len = plen;
	r->max_new = olen;
	r->gap_off = off + olen <= MAX_GAPS ? off : UINT64_MAX;
	r->t_submit = t_sub - sh->t0;
	atomic_store(&r->state, 1);
	/* read: headers, then chunked data holding "data: ...\n\n" events */
	static __thread char buf[1 << 16];
	size_t have = 0, pos = 0;
	int in_body = 0, ok = 0;
	uint64_t t_last = 0;
	for (;;) {
		ssize_t k = read(fd, buf + have, sizeof buf - have - 1);
		if (k <= 0)
			break;
		have += (size_t)k;
		buf[have] = 0;
		uint64_t t = rl_now_ns();
		if (!in_body) {
			char *e = strstr(buf, "\r\n\r\n");
			if (!e)
				continue;
			if (strncmp(buf, "HTTP/1.1 200", 12))
				break;
			pos = (size_t)(e + 4 - buf);
			in_body = 1;
		}
		/* events are found by their "data: " lines; chunk-size lines between them are skipped */
		char *p;
		while ((p = strstr(buf + pos, "data: ")) && strstr(p, "\n\n")) {
			char *end = strstr(p, "\n\n");
			if (!strncmp(p, "data: [DONE]", 12)) {
				ok = 1;
				pos = (size_t)(end + 2 - buf);
				break;
			}
			char *fin = strstr(p, "\"finish_reason\":");
			int final = fin && fin < end && strncmp(fin + 16, "null", 4);
			if (!final) {
				if (!r->n_out)
					r->ttft = t - sh->t0 - r->t_submit;
				else if (r->gap_off != UINT64_MAX && r->n_gaps < r->max_new)
					u->gaps[r->gap_off + r->n_gaps++] = t - t_last;
				t_last = t;
				r->n_out++;
				atomic_fetch_add(&sh->tokens, 1);
			}
			pos = (size_t)(end + 2 - buf);
		}
		if (ok)
			break;
		if (pos > sizeof buf / 2) {          /* keep the unread tail */
			memmove(buf, buf + pos, have - pos);
			have -= pos;
			pos = 0;
		}
	}
	close(fd);
	r->e2e = rl_now_ns() - sh->t0 - r->t_submit;
	atomic_store(&r->state, ok ? 2 : 3);
	atomic_fetch_add(ok ? &sh->n_done : &sh->n_err, 1);
	return ok ? 0 : -1;
}

static void *http_user_main(void *arg)
{
	struct http_user *u = arg;
	const struct opts *o = u->o;
	uint32_t *prompt = malloc(sizeof *prompt * (u->max_prompt + 1));
	size_t cap = 16 * (size_t)u->max_prompt + 256;
	char *body = malloc(cap);
	uint64_t t_end = u->sh->t0 + (uint64_t)(o->duration * 1e9);
	while (prompt && body && rl_now_ns() < t_end) {
		uint64_t i = atomic_fetch_add(&u->sh->next_req, 1);
		if (i >= MAX_REC || (o->max_requests && i >= o->max_requests))
			break;
		if (http_one(u, i, prompt, body, cap))
			u->rc = 1;
	}
	free(prompt);
	free(body);
	return NULL;
}

static int http_client_main(const struct opts *o, struct shm *sh, uint64_t *gaps, int c, const struct ringlm_info *info)
{
	uint32_t n_users = o->users / o->clients + (c < (int)(o->users % o->clients));
	struct http_user *u = calloc(n_users ? n_users : 1, sizeof *u);
	pthread_t *th = calloc(n_users ? n_users : 1, sizeof *th);
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go))
		usleep(200);
	for (uint32_t k = 0; k < n_users; k++) {
		u[k] = (struct http_user){ o, sh, gaps, c, info->vocab_size, info->max_prompt, info->max_new, info->max_ctx, 0 };
		pthread_create(&th[k], NULL, http_user_main, &u[k]);
	}
	int rc = 0;
	for (uint32_t k = 0; k < n_users; k++) {
		pthread_join(th[k], NULL);
		rc |= u[k].rc;
	}
	if (rc)
		fprintf(stderr, "bench serve: client %d: some HTTP requests failed (is ringlm-http at %s in front of this runtime?)\n",
			c, o->http);
	free(u);
	free(th);
	return rc;
}

static int client_main(const struct opts *o, struct shm *sh, uint64_t *gaps, int c)
{
	/* keep off the runtime's pinned core: a client preempting it shows up as ITL spikes */
	cpu_set_t cs;
	if (o->rt_cpu >= 0 && !sched_getaffinity(0, sizeof cs, &cs) && CPU_COUNT(&cs) > 1) {
		CPU_CLR(o->rt_cpu, &cs);
		sched_setaffinity(0, sizeof cs, &cs);
	}
	struct ringlm_params p = ringlm_default_params();
	p.socket = o->socket;
	struct ringlm *rl;
	if (ringlm_connect(&p, &rl)) {
		fprintf(stderr, "bench serve: client %d: %s\n", c, ringlm_last_error());
		return 1;
	}
	struct ringlm_info info;
	ringlm_get_info(rl, &info);
	if (o->use_http) {             /* the vocabulary and limits came from the rings */
		ringlm_close(rl);
		return http_client_main(o, sh, gaps, c, &info);
	}
	uint32_t n_users = o->rate > 0 ? 0 : o->users / o->clients + (c < (int)(o->users % o->clients));
	uint32_t cap = o->rate > 0 ? info.max_inflight : n_users;
	if (cap > info.max_inflight)
		cap = info.max_inflight;
	struct slot *slots = calloc(cap ? cap : 1, sizeof *slots);
	uint32_t *prompt = malloc(sizeof *prompt * (info.max_prompt + 1));
	if (!slots || !prompt) {
		fprintf(stderr, "bench serve: client %d: out of memory\n", c);
		return 1;
	}
	struct ringlm_constraint *cons = NULL;
	if ((uint32_t)c < o->n_constrained && ringlm_constraint_create(o->cons_kind, o->cons_text, o->cons_len, &cons)) {
		fprintf(stderr, "bench serve: client %d: %s\n", c, ringlm_last_error());
		free(slots);
		free(prompt);
		ringlm_close(rl);
		return 1;
	}
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go))
		usleep(200);
	uint64_t t0 = sh->t0, t_end = t0 + (uint64_t)(o->duration * 1e9);
	uint64_t t_stop = t_end + (uint64_t)(o->drain * 1e9);
	uint64_t arr_state = mix64(o->seed ^ (0xa11ull << 32) ^ (uint64_t)c);
	double per_client_rate = o->rate / o->clients;
	uint64_t next_arrival = t0 + (o->rate > 0 ? (uint64_t)(exp_draw(&arr_state) / per_client_rate * 1e9) : 0);
	uint32_t active = 0;
	int pending = 0;                   /* a request drawn but not yet accepted (-EAGAIN) */
	uint32_t pend_req = 0;
	uint64_t pend_t = 0;
	struct ringlm_event ev[256];
	int rc = 0;
	for (;;) {
		uint64_t now = rl_now_ns();
		int submitting = now < t_end;
		/* draw new requests: closed loop keeps each user busy; Poisson follows the clock */
		while (submitting && active < cap) {
			if (!pending) {
				if (o->rate > 0 && now < next_arrival)
					break;
				uint64_t i = atomic_fetch_add(&sh->next_req, 1);
				if (i >= MAX_REC || (o->max_requests && i >= o->max_requests)) {
					submitting = 0;
					break;
				}
				pend_req = (uint32_t)i;
				/* Poisson: the request's clock starts at its arrival, even if it waits here */
				pend_t = o->rate > 0 ? next_arrival : now;
				if (o->rate > 0)
					next_arrival += (uint64_t)(exp_draw(&arr_state) / per_client_rate * 1e9);
				pending = 1;
			}
			struct rec *r = &sh->rec[pend_req];
			uint32_t plen, olen;
			req_shape(o, pend_req, &plen, &olen);
			plen = plen < 1 ? 1 : plen > info.max_prompt ? info.max_prompt : plen;
			olen = olen < 1 ? 1 : olen > info.max_new ? info.max_new : olen;
			if (plen + olen > info.max_ctx)
				olen = info.max_ctx > plen ? info.max_ctx - plen : 1;
			fill_prompt(o, pend_req, prompt, plen, info.vocab_size);
			struct ringlm_request q = ringlm_default_request();
			q.prompt = prompt;
			q.n_prompt = plen;
			q.max_new = olen;
			q.tag = pend_req;
			q.constraint = cons;
			uint32_t id;
			int s = ringlm_submit(rl, &q, &id);
			if (s == -EAGAIN)
				break;
			if (s) {
				fprintf(stderr, "bench serve: client %d: submit: %s\n", c, ringlm_strerror(s));
				rc = 1;
				goto out;
			}
			uint64_t off = atomic_fetch_add(&sh->gap_used, olen);
			r->client = (uint32_t)c;
			r->constrained = cons != NULL;
			r->prompt_len = plen;
			r->max_new = olen;
			r->gap_off = off + olen <= MAX_GAPS ? off : UINT64_MAX;
			r->t_submit = pend_t - t0;
			atomic_store(&r->state, 1);
			uint32_t k = 0;
			while (slots[k].used)
				k++;
			slots[k] = (struct slot){ .id = id, .req = pend_req, .t_last = 0, .used = 1 };
			active++;
			pending = 0;
		}
		if (!submitting && !active)
			break;
		if (now >= t_stop) {       /* drain time is up: cancel what is left */
			for (uint32_t k = 0; k < cap; k++)
				if (slots[k].used) {
					ringlm_cancel(rl, slots[k].id);
					atomic_store(&sh->rec[slots[k].req].state, 3);
					slots[k].used = 0;
				}
			break;
		}
		/* sleep until an event or the next arrival (ms granularity: the arrival time, not
		 * the wake-up, is what TTFT counts from) */
		int tmo = 100;
		if (submitting && o->rate > 0 && !pending) {
			uint64_t w = next_arrival > now ? (next_arrival - now + 999999) / 1000000 : 0;
			tmo = w < 100 ? (int)w : 100;
		}
		int n = tmo ? ringlm_wait(rl, ev, 256, tmo) : ringlm_poll(rl, ev, 256);
		if (n < 0) {
			fprintf(stderr, "bench serve: client %d: %s (the runtime went away?)\n", c, ringlm_strerror(n));
			rc = 1;
			goto out;
		}
		uint64_t t = rl_now_ns();
		for (int e = 0; e < n; e++) {
			uint32_t req = (uint32_t)ev[e].tag, k = 0;
			while (k < cap && !(slots[k].used && slots[k].req == req))
				k++;
			if (k == cap)
				continue;
			struct slot *sl = &slots[k];
			struct rec *r = &sh->rec[req];
			if (ev[e].type == RINGLM_EV_TOKEN) {
				if (!r->n_out)
					r->ttft = t - t0 - r->t_submit;
				else if (r->gap_off != UINT64_MAX && r->n_gaps < r->max_new)
					gaps[r->gap_off + r->n_gaps++] = t - sl->t_last;
				sl->t_last = t;
				r->n_out++;
				atomic_fetch_add(&sh->tokens, 1);
				continue;
			}
			r->e2e = t - t0 - r->t_submit;
			atomic_store(&r->state, ev[e].type == RINGLM_EV_DONE ? 2 : 3);
			atomic_fetch_add(ev[e].type == RINGLM_EV_DONE ? &sh->n_done : &sh->n_err, 1);
			if (ev[e].type == RINGLM_EV_ERROR)
				fprintf(stderr, "bench serve: request %u failed: %s\n", req, ringlm_strerror(ev[e].code));
			sl->used = 0;
			active--;
		}
	}
out:
	ringlm_close(rl);
	ringlm_constraint_destroy(cons);
	free(slots);
	free(prompt);
	return rc;
}

/* ---- the runtime this command starts ------------------------------------------------ */

pid_t rl_bench_serve_runtime(char **rt_argv, int rt_argc, const char *sock, const char *budget, uint64_t itl_us)
{
	char *argv[128], tgt[32], err[512];
	int n = 0;
	argv[n++] = "ringlmd";
	for (int i = 0; i < rt_argc && n < 120; i++)
		argv[n++] = rt_argv[i];
	argv[n++] = "--socket";
	argv[n++] = (char *)sock;
	if (budget) {
		argv[n++] = "--max-batch-tokens";
		argv[n++] = (char *)budget;
	}
	if (itl_us) {
		snprintf(tgt, sizeof tgt, "%llu", (unsigned long long)itl_us);
		argv[n++] = "--itl-target-us";
		argv[n++] = tgt;
	}
	argv[n] = NULL;
	struct rl_rt_params p;
	rl_rt_default_params(&p);
	int rc = rl_rt_parse_args(&p, n, argv, err, sizeof err);
	if (rc) {
		fprintf(stderr, "bench serve: runtime options: %s\n", rc == 1 ? "--help is not a run" : err);
		return -EINVAL;
	}
	p.verbose = 0;
	pid_t pid = rl_rt_fork(&p, err, sizeof err);
	if (pid < 0)
		fprintf(stderr, "bench serve: runtime: %s\n", err);
	return pid;
}

/* ---- aggregation -------------------------------------------------------------------- */

struct pct { uint64_t p50, p90, p99, max; };

struct result {
	char budget[16];
	uint32_t requests, errors, incomplete, good;
	uint64_t tokens;
	double wall_s, tokens_per_s, goodput_rps;
	struct pct ttft, itl, e2e;
	uint64_t *ttft_v, *itl_v; size_t n_ttft, n_itl;   /* sorted, for CDFs */
	uint64_t itl_p99_worst;            /* the largest of the clients' own ITL p99 (a client: one
					    * stream of requests, one at a time in a closed loop) */
	uint32_t itl_p99_worst_client;
	struct pct itl_cons, itl_free;     /* with --constrained: the two kinds of stream apart */
	size_t n_itl_cons, n_itl_free;
	char stats[8192];                  /* the runtime's stats JSON at the end */
};

static struct pct pcts(uint64_t *v, size_t n)
{
	struct pct p = { 0 };
	if (!n)
		return p;
	qsort(v, n, sizeof *v, rl_bench_cmp_u64);
	p.p50 = rl_bench_pct(v, n, 0.50, 1);
	p.p90 = rl_bench_pct(v, n, 0.90, 1);
	p.p99 = rl_bench_pct(v, n, 0.99, 1);
	p.max = v[n - 1];
	return p;
}

static int write_csv(const char *path, const struct shm *sh, const uint64_t *gaps, uint64_t n_req)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f, "req,client,prompt_len,max_new,output_tokens,status,submit_us,ttft_us,e2e_us,itl_mean_us,itl_max_us\n");
	for (uint64_t i = 0; i < n_req; i++) {
		const struct rec *r = &sh->rec[i];
		uint32_t st = atomic_load(&r->state);
		if (!st)
			continue;
		double sum = 0, mx = 0;
		for (uint32_t g = 0; r->gap_off != UINT64_MAX && g < r->n_gaps; g++) {
			sum += gaps[r->gap_off + g];
			mx = gaps[r->gap_off + g] > mx ? gaps[r->gap_off + g] : mx;
		}
		fprintf(f, "%llu,%u,%u,%u,%u,%s,%.1f,%.1f,%.1f,%.1f,%.1f\n", (unsigned long long)i,
			r->client, r->prompt_len, r->max_new, r->n_out,
			st == 2 ? "done" : st == 3 ? "error" : "incomplete", r->t_submit / 1e3,
			r->n_out ? r->ttft / 1e3 : 0.0, st == 2 ? r->e2e / 1e3 : 0.0,
			r->n_gaps ? sum / r->n_gaps / 1e3 : 0.0, mx / 1e3);
	}
	return fclose(f) ? -errno : 0;
}

static void aggregate(const struct opts *o, struct shm *sh, const uint64_t *gaps, struct result *R)
{
	uint64_t n_req = atomic_load(&sh->next_req);
	if (n_req > MAX_REC)
		n_req = MAX_REC;
	R->ttft_v = malloc(sizeof(uint64_t) * (n_req + 1));
	uint64_t *e2e = malloc(sizeof(uint64_t) * (n_req + 1));
	uint64_t used = atomic_load(&sh->gap_used);
	R->itl_v = malloc(sizeof(uint64_t) * ((used < MAX_GAPS ? used : MAX_GAPS) + 1));
	size_t ne = 0;
	for (uint64_t i = 0; i < n_req; i++) {
		const struct rec *r = &sh->rec[i];
		uint32_t st = atomic_load(&r->state);
		if (st == 3)
			R->errors++;
		if (st == 1)
			R->incomplete++;
		if (st != 2)
			continue;
		R->requests++;
		R->tokens += r->n_out;
		R->ttft_v[R->n_ttft++] = r->ttft;
		e2e[ne++] = r->e2e;
		double sum = 0;
		for (uint32_t g = 0; r->gap_off != UINT64_MAX && g < r->n_gaps; g++) {
			R->itl_v[R->n_itl++] = gaps[r->gap_off + g];
			sum += gaps[r->gap_off + g];
		}
		/* goodput: finished requests whose mean inter-token gap (TPOT) meets the target */
		if (!o->itl_target_us || !r->n_gaps || sum / r->n_gaps <= o->itl_target_us * 1e3)
			R->good++;
	}
	/* constrained and free streams' gaps apart (the mask's cost shows as their difference) */
	if (o->n_constrained) {
		uint64_t *gc = malloc(sizeof(uint64_t) * (R->n_itl + 1)), *gf = malloc(sizeof(uint64_t) * (R->n_itl + 1));
		for (uint64_t i = 0; gc && gf && i < n_req; i++) {
			const struct rec *r = &sh->rec[i];
			if (atomic_load(&r->state) != 2)
				continue;
			for (uint32_t g = 0; r->gap_off != UINT64_MAX && g < r->n_gaps; g++) {
				if (r->constrained)
					gc[R->n_itl_cons++] = gaps[r->gap_off + g];
				else
					gf[R->n_itl_free++] = gaps[r->gap_off + g];
			}
		}
		if (gc && gf) {
			R->itl_cons = pcts(gc, R->n_itl_cons);
			R->itl_free = pcts(gf, R->n_itl_free);
		}
		free(gc);
		free(gf);
	}
	/* each client's own gaps, for the worst stream's p99 */
	uint64_t *mine = malloc(sizeof(uint64_t) * ((used < MAX_GAPS ? used : MAX_GAPS) + 1));
	for (uint32_t c = 0; mine && c < MAX_CLIENTS; c++) {
		size_t k = 0;
		for (uint64_t i = 0; i < n_req; i++) {
			const struct rec *r = &sh->rec[i];
			if (r->client != c || atomic_load(&r->state) != 2)
				continue;
			for (uint32_t g = 0; r->gap_off != UINT64_MAX && g < r->n_gaps; g++)
				mine[k++] = gaps[r->gap_off + g];
		}
		const struct pct p = pcts(mine, k);
		if (k && p.p99 > R->itl_p99_worst) {
			R->itl_p99_worst = p.p99;
			R->itl_p99_worst_client = c;
		}
	}
	free(mine);
	R->ttft = pcts(R->ttft_v, R->n_ttft);
	R->itl = pcts(R->itl_v, R->n_itl);
	R->e2e = pcts(e2e, ne);
	free(e2e);
	R->tokens_per_s = R->wall_s > 0 ? R->tokens / R->wall_s : 0;
	R->goodput_rps = R->wall_s > 0 ? R->good / R->wall_s : 0;
}

static void json_pct(FILE *f, const char *k, const struct pct *p)
{
	fprintf(f, "\"%s\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}", k,
		p->p50 / 1e3, p->p90 / 1e3, p->p99 / 1e3, p->max / 1e3);
}

static void json_result(FILE *f, const struct opts *o, const struct result *R)
{
	int num = R->budget[0] && strspn(R->budget, "0123456789") == strlen(R->budget);
	fprintf(f, "{\"max_batch_tokens\":%s%s%s,\"itl_target_us\":%llu,\"requests\":%u,\"errors\":%u,"
		"\"incomplete\":%u,\"output_tokens\":%llu,\"wall_s\":%.3f,",
		num ? "" : "\"", R->budget, num ? "" : "\"", (unsigned long long)o->itl_target_us,
		R->requests, R->errors, R->incomplete, (unsigned long long)R->tokens, R->wall_s);
	json_pct(f, "ttft_us", &R->ttft);
	fputc(',', f);
	json_pct(f, "itl_us", &R->itl);
	fputc(',', f);
	json_pct(f, "e2e_us", &R->e2e);
	fprintf(f, ",\"itl_p99_worst_client_us\":%.1f,\"worst_client\":%u", R->itl_p99_worst / 1e3, R->itl_p99_worst_client);
	if (o->n_constrained) {
		fprintf(f, ",\"constrained_clients\":%u,", o->n_constrained);
		json_pct(f, "itl_constrained_us", &R->itl_cons);
		fputc(',', f);
		json_pct(f, "itl_free_us", &R->itl_free);
	}
	fprintf(f, ",\"tokens_per_s\":%.1f,\"goodput_rps\":%.3f,\"runtime_stats\":%s}",
		R->tokens_per_s, R->goodput_rps, R->stats[0] ? R->stats : "null");
}

/* ---- one run ------------------------------------------------------------------------ */

static void progress(const struct opts *o, const struct shm *sh, double el, int final)
{
	uint64_t done = atomic_load(&sh->n_done), tok = atomic_load(&sh->tokens);
	if (o->progress) {
		int w = 30, k = (int)(w * (el < o->duration ? el / o->duration : 1));
		fprintf(stderr, "\r  [%.*s%*s] %5.1f/%.0fs  %6llu done  %8.0f tok/s%s", k,
			"##############################", w - k, "", el, o->duration,
			(unsigned long long)done, el > 0 ? tok / el : 0.0, final ? "\n" : "");
	} else
		fprintf(stderr, "  %.1f s: %llu requests done, %llu tokens\n", el,
			(unsigned long long)done, (unsigned long long)tok);
}

static int run_once(struct opts *o, const char *budget, const char *tag, struct result *R)
{
	char sock[96];
	pid_t rt = 0;
	memset(R, 0, sizeof *R);
	snprintf(R->budget, sizeof R->budget, "%s", budget ? budget : "?");
	if (!o->socket) {
		snprintf(sock, sizeof sock, "bench-serve-%d", (int)getpid());
		rt = rl_bench_serve_runtime(o->rt_argv, o->rt_argc, sock, budget, o->itl_target_us);
		if (rt < 0) {
			fprintf(stderr, "bench serve: could not start the runtime (see the line above); check the options after --\n");
			return -ECHILD;
		}
		o->socket = sock;
	}
	struct shm *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint64_t *gaps = mmap(NULL, sizeof(uint64_t) * MAX_GAPS, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	int rc = 0;
	uint32_t n_kids = 0;
	if (sh == MAP_FAILED || gaps == MAP_FAILED) {
		fprintf(stderr, "bench serve: cannot map the shared record area (%s)\n", strerror(errno));
		rc = -ENOMEM;
		goto out;
	}
	for (; n_kids < o->clients; n_kids++) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(client_main(o, sh, gaps, (int)n_kids));
		if (pid < 0) {
			rc = -errno;
			break;
		}
	}
	/* all clients connected, then one common start */
	while (!rc && atomic_load(&sh->ready) < n_kids) {
		int st;
		pid_t dead = waitpid(-1, &st, WNOHANG);
		if (dead > 0 && dead != rt) {
			fprintf(stderr, "bench serve: a client exited before the start (see above)\n");
			rc = -ECHILD;
		}
		usleep(1000);
	}
	sh->t0 = rl_now_ns();
	atomic_store(&sh->go, 1);
	uint32_t alive = n_kids;
	uint64_t last_print = 0;
	while (alive) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0 && p != rt) {
			alive--;
			if (!WIFEXITED(st) || WEXITSTATUS(st))
				rc = -EIO;
			continue;
		}
		usleep(100000);
		uint64_t now = rl_now_ns();
		if (now - last_print >= (o->progress ? 200000000ull : 5000000000ull)) {
			progress(o, sh, (now - sh->t0) / 1e9, 0);
			last_print = now;
		}
	}
	R->wall_s = (rl_now_ns() - sh->t0) / 1e9;
	progress(o, sh, R->wall_s, 1);
	/* the runtime's view at the end: budget, step-time model, prefix-cache hits */
	struct ringlm_params p = ringlm_default_params();
	p.socket = o->socket;
	struct ringlm *c;
	if (!ringlm_connect(&p, &c)) {
		if (ringlm_stats_json(c, R->stats, sizeof R->stats) < 0)
			R->stats[0] = 0;
		ringlm_close(c);
	}
	aggregate(o, sh, gaps, R);
	char path[512];
	snprintf(path, sizeof path, "%s/%s.csv", o->out_dir, tag);
	int w = write_csv(path, sh, gaps, atomic_load(&sh->next_req) < MAX_REC ? atomic_load(&sh->next_req) : MAX_REC);
	if (w)
		fprintf(stderr, "bench serve: cannot write %s: %s\n", path, strerror(-w));
	if (rc)
		fprintf(stderr, "bench serve: a client failed (see above); the numbers cover what finished\n");
out:
	if (sh != MAP_FAILED)
		munmap(sh, sizeof *sh);
	if (gaps != MAP_FAILED)
		munmap(gaps, sizeof(uint64_t) * MAX_GAPS);
	if (rt > 0) {
		kill(rt, SIGTERM);
		waitpid(rt, NULL, 0);
		o->socket = NULL;
	}
	return rc == -EIO ? 0 : rc;
}

/* ---- tables and plots --------------------------------------------------------------- */

static void print_table(FILE *f, const struct opts *o, struct result *R, int n, int md)
{
	if (md)
		fprintf(f, "| budget | requests | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | worst client ITL p99 ms | ITL max ms | E2E p50 ms | tokens/s | goodput req/s |\n"
			"| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n");
	else
		fprintf(f, "%-8s %8s %11s %11s %10s %10s %10s %10s %10s %9s %9s\n", "budget", "requests",
			"TTFT p50ms", "TTFT p99ms", "ITL p50ms", "ITL p99ms", "worst p99", "ITL maxms", "E2E p50ms",
			"tok/s", "goodput");
	for (int i = 0; i < n; i++) {
		struct result *r = &R[i];
		if (md)
			fprintf(f, "| %s | %u | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | %.0f | %.2f |\n",
				r->budget, r->requests, r->ttft.p50 / 1e6, r->ttft.p99 / 1e6,
				r->itl.p50 / 1e6, r->itl.p99 / 1e6, r->itl_p99_worst / 1e6, r->itl.max / 1e6,
				r->e2e.p50 / 1e6, r->tokens_per_s, r->goodput_rps);
		else
			fprintf(f, "%-8s %8u %11.1f %11.1f %10.2f %10.2f %10.2f %10.2f %10.1f %9.0f %9.2f\n",
				r->budget, r->requests, r->ttft.p50 / 1e6, r->ttft.p99 / 1e6,
				r->itl.p50 / 1e6, r->itl.p99 / 1e6, r->itl_p99_worst / 1e6, r->itl.max / 1e6,
				r->e2e.p50 / 1e6, r->tokens_per_s, r->goodput_rps);
	}
	for (int i = 0; i < n; i++) {
		struct result *r = &R[i];
		if (o->n_constrained)
			fprintf(f, "%sbudget %s: ITL p50/p99 ms, %u constrained clients %.2f / %.2f (%zu gaps), the others %.2f / %.2f (%zu gaps): p99 ratio %.2f\n",
				md ? "\n" : "", r->budget, o->n_constrained, r->itl_cons.p50 / 1e6, r->itl_cons.p99 / 1e6, r->n_itl_cons,
				r->itl_free.p50 / 1e6, r->itl_free.p99 / 1e6, r->n_itl_free,
				r->itl_free.p99 ? (double)r->itl_cons.p99 / (double)r->itl_free.p99 : 0.0);
	}
}

/* CDF points: at most ~400 per curve, so the data files stay small enough to commit */
static void write_cdf(FILE *f, const uint64_t *v, size_t n)
{
	size_t step = n > 400 ? n / 400 : 1;
	for (size_t i = 0; i < n; i += step)
		fprintf(f, "%.3f %.4f\n", v[i] / 1e6, (double)(i + 1) / n);
	if (n)
		fprintf(f, "%.3f 1\n", v[n - 1] / 1e6);
	fprintf(f, "\n\n");
}

static int plot_sweep(const struct opts *o, struct result *R, int n)
{
	char path[512], dat[512], cdf[512];
	snprintf(dat, sizeof dat, "%s/%s-sweep.dat", o->out_dir, o->name);
	snprintf(cdf, sizeof cdf, "%s/%s-cdf.dat", o->out_dir, o->name);
	FILE *f = fopen(dat, "w"), *g = fopen(cdf, "w");
	if (!f || !g) {
		fprintf(stderr, "bench serve: cannot write %s: %s\n", dat, strerror(errno));
		if (f) fclose(f);
		if (g) fclose(g);
		return -errno;
	}
	fprintf(f, "# budget ttft_p50_ms ttft_p99_ms itl_p50_ms itl_p99_ms tokens_per_s\n");
	for (int i = 0; i < n; i++) {
		fprintf(f, "%s %.3f %.3f %.3f %.3f %.1f\n", R[i].budget, R[i].ttft.p50 / 1e6,
			R[i].ttft.p99 / 1e6, R[i].itl.p50 / 1e6, R[i].itl.p99 / 1e6, R[i].tokens_per_s);
		fprintf(g, "# ttft %s\n", R[i].budget);
		write_cdf(g, R[i].ttft_v, R[i].n_ttft);
	}
	for (int i = 0; i < n; i++) {
		fprintf(g, "# itl %s\n", R[i].budget);
		write_cdf(g, R[i].itl_v, R[i].n_itl);
	}
	fclose(f);
	fclose(g);
	FILE *gp = popen("gnuplot 2>&1", "w");
	if (!gp) {
		fprintf(stderr, "bench serve: cannot run gnuplot; install gnuplot-nox (apt-get install gnuplot-nox) for the plots\n");
		return -ENOENT;
	}
	double t = o->itl_target_us / 1e3;
	char labels[MAX_SWEEP * 16] = "";
	for (int i = 0; i < n; i++)
		snprintf(labels + strlen(labels), sizeof labels - strlen(labels), "%s%s", i ? " " : "", R[i].budget);
	fprintf(gp, "labels = '%s'\n", labels);
	fprintf(gp, "set terminal pngcairo size 1000,700 font ',11'\nset grid\nset key top left\n");
	snprintf(path, sizeof path, "%s/%s-tradeoff.png", o->out_dir, o->name);
	fprintf(gp, "set output '%s'\nset multiplot layout 1,2 title 'budget trade-off: %s'\n"
		"set xlabel 'max-batch-tokens'\nset ylabel 'TTFT (ms)'\nset logscale y\n"
		"plot '%s' using 0:2:xtic(1) with linespoints lw 2 title 'TTFT p50', "
		"'' using 0:3:xtic(1) with linespoints lw 2 title 'TTFT p99'\n"
		"unset logscale y\nset ylabel 'inter-token latency (ms)'\nset yrange [0:*]\n"
		"plot '%s' using 0:4:xtic(1) with linespoints lw 2 title 'ITL p50', "
		"'' using 0:5:xtic(1) with linespoints lw 2 title 'ITL p99'%s",
		path, o->name, dat, dat, t > 0 ? ", " : "\n");
	if (t > 0)
		fprintf(gp, "%.3f with lines dt 2 lc rgb 'black' title 'target T', %.3f with lines dt 3 lc rgb 'red' title '1.1 T'\n",
			t, 1.1 * t);
	fprintf(gp, "unset multiplot\nset yrange [*:*]\n");
	snprintf(path, sizeof path, "%s/%s-cdf.png", o->out_dir, o->name);
	fprintf(gp, "set output '%s'\nset multiplot layout 1,2 title 'latency CDFs: %s'\n"
		"set key bottom right\nset ylabel 'fraction of requests'\nset xlabel 'TTFT (ms)'\nset logscale x\n"
		"plot for [i=0:%d] '%s' index i using 1:2 with lines lw 2 title word(labels, i + 1)\n",
		path, o->name, n - 1, cdf);
	fprintf(gp, "set ylabel 'fraction of gaps'\nset xlabel 'inter-token gap (ms)'\n"
		"plot for [i=%d:%d] '%s' index i using 1:2 with lines lw 2 title word(labels, i - %d)\n"
		"unset multiplot\nunset logscale x\n", n, 2 * n - 1, cdf, n - 1);
	snprintf(path, sizeof path, "%s/%s-throughput.png", o->out_dir, o->name);
	fprintf(gp, "set output '%s'\nset key top left\nset title 'throughput against ITL p99: %s'\n"
		"set xlabel 'ITL p99 (ms)'\nset ylabel 'output tokens/s'\nset yrange [0:*]\n"
		"plot '%s' using 5:6 with linespoints lw 2 pt 7 notitle, '' using 5:6:1 with labels offset 0,1 notitle",
		path, o->name, dat);
	if (t > 0)
		fprintf(gp, ", '+' using (%.3f):(column(0)) with lines dt 2 lc rgb 'black' notitle", t);
	fprintf(gp, "\n");
	int st = pclose(gp);
	if (st) {
		fprintf(stderr, "bench serve: gnuplot failed (status %d); install gnuplot-nox, the data is in %s\n", st, dat);
		return -EIO;
	}
	return 0;
}

/* ---- options ------------------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
"usage: ringlm bench serve [--socket NAME] [--rate R | --users N] [--clients N]\n"
"                          [--duration S] [--drain S] [--requests N] [--seed S]\n"
"                          [--prompt N|A-B] [--output N|A-B] [--trace FILE.csv] [--system-frac F]\n"
"                          [--max-batch-tokens N|auto] [--itl-target-us T]\n"
"                          [--sweep max-batch-tokens=64,128,...,auto] [--out DIR] [--name NAME]\n"
"                          [--http http://127.0.0.1:PORT] [--json]\n"
"                          [--constrained N (--schema FILE.json | --regex RE)]\n"
"                          [--stall SCHEMA.json [--stall-requests N] [--stall-rounds N]] [-- RUNTIME OPTIONS...]\n"
"  Without --socket it starts a runtime per run with the ringlmd options after `--`\n"
"  (e.g. -- --backend sim --sim-step-us 5000 --sim-token-us 20).\n"
"  --trace: CSV lines prompt_len,output_len (a header line is skipped).\n"
"  --http URL: run the load twice, over the rings of --socket and over the ringlm-http at URL\n"
"  that serves the same runtime, and show what HTTP costs per request and per token.\n"
"  --constrained N: the first N clients' requests are under the constraint (structured output;\n"
"  a model with a vocabulary), and the table adds their ITL beside the other clients'.\n"
"  --stall SCHEMA.json: one client streams while another sends N (default 8) requests\n"
"  (--prompt, --output; default 128 and 64 tokens), each under a fresh variant of the schema,\n"
"  then the same without: the stream's worst gap in each, alternated --stall-rounds (2) times;\n"
"  the runtime gets only the options after `--` (its default budget).\n");
}

static int parse_len(const char *v, struct len_spec *l)
{
	char *end;
	unsigned long a = strtoul(v, &end, 10), b = a;
	if (end == v)
		return -1;
	if (*end == '-') {
		const char *s = end + 1;
		b = strtoul(s, &end, 10);
		if (end == s)
			return -1;
	}
	if (*end || a < 1 || b < a || b > 1u << 20)
		return -1;
	l->lo = (uint32_t)a;
	l->hi = (uint32_t)b;
	return 0;
}

static int load_trace(struct opts *o)
{
	FILE *f = fopen(o->trace, "r");
	if (!f) {
		fprintf(stderr, "bench serve: cannot open --trace %s: %s\n", o->trace, strerror(errno));
		return -errno;
	}
	o->trace_len = malloc(sizeof *o->trace_len * MAX_TRACE);
	char line[256];
	unsigned a, b;
	while (o->trace_len && o->n_trace < MAX_TRACE && fgets(line, sizeof line, f))
		if (sscanf(line, "%u,%u", &a, &b) == 2 && a > 0 && b > 0) {
			o->trace_len[o->n_trace][0] = a;
			o->trace_len[o->n_trace][1] = b;
			o->n_trace++;
		}
	fclose(f);
	if (!o->n_trace) {
		fprintf(stderr, "bench serve: --trace %s has no prompt_len,output_len lines\n", o->trace);
		return -EINVAL;
	}
	return 0;
}

static int parse_opts(struct opts *o, int argc, char **argv)
{
	*o = (struct opts){ .users = 8, .duration = 15, .drain = 30, .prompt = { 128, 128 },
			    .output = { 64, 64 }, .seed = 1, .budget = "512", .out_dir = "bench/out",
			    .name = "serve" };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--")) {
			o->rt_argv = argv + i + 1;
			o->rt_argc = argc - i - 1;
			break;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage();
			return 1;
		}
		if (!strcmp(a, "--json")) {
			o->json = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "bench serve: %s needs a value (see ringlm bench serve --help)\n", a);
			return -EINVAL;
		}
		i++;
		char *end = NULL;
		int bad = 0;
		if (!strcmp(a, "--socket"))
			o->socket = v;
		else if (!strcmp(a, "--http")) {
			o->http = v;
			char host[64] = "";
			int port = 0;
			bad = sscanf(v, "http://%63[^:/]:%d", host, &port) != 2 || port < 1 || port > 65535;
			snprintf(o->http_host, sizeof o->http_host, "%s", !strcmp(host, "localhost") ? "127.0.0.1" : host);
			o->http_port = port;
			struct in_addr ia;
			bad = bad || inet_pton(AF_INET, o->http_host, &ia) != 1;
		}
		else if (!strcmp(a, "--rate"))
			bad = (o->rate = strtod(v, &end)) <= 0 || *end;
		else if (!strcmp(a, "--users"))
			bad = !(o->users = (uint32_t)strtoul(v, &end, 10)) || *end;
		else if (!strcmp(a, "--clients"))
			bad = !(o->clients = (uint32_t)strtoul(v, &end, 10)) || *end || o->clients > MAX_CLIENTS;
		else if (!strcmp(a, "--requests"))
			bad = !(o->max_requests = (uint32_t)strtoul(v, &end, 10)) || *end;
		else if (!strcmp(a, "--duration"))
			bad = (o->duration = strtod(v, &end)) <= 0 || *end;
		else if (!strcmp(a, "--drain"))
			bad = (o->drain = strtod(v, &end)) < 0 || *end;
		else if (!strcmp(a, "--seed"))
			o->seed = strtoull(v, &end, 10), bad = *end != 0;
		else if (!strcmp(a, "--prompt"))
			bad = parse_len(v, &o->prompt);
		else if (!strcmp(a, "--output"))
			bad = parse_len(v, &o->output);
		else if (!strcmp(a, "--stall"))
			o->stall = v;
		else if (!strcmp(a, "--stall-requests"))
			bad = !(o->stall_requests = (uint32_t)strtoul(v, &end, 10)) || *end || o->stall_requests > 256;
		else if (!strcmp(a, "--stall-rounds"))
			bad = (o->stall_rounds = (int)strtol(v, &end, 10)) < 1 || *end || o->stall_rounds > 20;
		else if (!strcmp(a, "--trace"))
			o->trace = v;
		else if (!strcmp(a, "--system-frac"))
			bad = (o->system_frac = strtod(v, &end)) < 0 || o->system_frac > 1 || *end;
		else if (!strcmp(a, "--itl-target-us"))
			bad = !(o->itl_target_us = strtoull(v, &end, 10)) || *end;
		else if (!strcmp(a, "--max-batch-tokens"))
			o->budget = v, bad = strcmp(v, "auto") && (strtoul(v, &end, 10) < 1 || *end);
		else if (!strcmp(a, "--sweep")) {
			if (strncmp(v, "max-batch-tokens=", 17)) {
				fprintf(stderr, "bench serve: --sweep takes max-batch-tokens=N,N,...[,auto], got '%s'\n", v);
				return -EINVAL;
			}
			char *list = strdup(v + 17);
			for (char *t = strtok(list, ","); t && o->n_sweep < MAX_SWEEP; t = strtok(NULL, ","))
				o->sweep[o->n_sweep++] = t;
			for (int k = 0; k < o->n_sweep; k++)
				if (strcmp(o->sweep[k], "auto") && (strtoul(o->sweep[k], &end, 10) < 1 || *end)) {
					fprintf(stderr, "bench serve: --sweep value '%s' is neither a token count nor auto\n", o->sweep[k]);
					return -EINVAL;
				}
		} else if (!strcmp(a, "--constrained"))
			bad = !(o->n_constrained = (uint32_t)strtoul(v, &end, 10)) || *end;
		else if (!strcmp(a, "--regex")) {
			free(o->cons_text);
			o->cons_text = strdup(v);
			o->cons_len = strlen(v);
			o->cons_kind = RINGLM_CONSTRAINT_REGEX;
		} else if (!strcmp(a, "--schema")) {
			FILE *sf = fopen(v, "rb");
			if (!sf) {
				fprintf(stderr, "bench serve: cannot open --schema %s: %s\n", v, strerror(errno));
				return -EINVAL;
			}
			free(o->cons_text);
			o->cons_text = malloc(1 << 16);
			o->cons_len = o->cons_text ? fread(o->cons_text, 1, 1 << 16, sf) : 0;
			fclose(sf);
			o->cons_kind = RINGLM_CONSTRAINT_JSON_SCHEMA;
			bad = !o->cons_len;
		} else if (!strcmp(a, "--out"))
			o->out_dir = v;
		else if (!strcmp(a, "--name"))
			o->name = v;
		else {
			fprintf(stderr, "bench serve: unknown option %s (runtime options go after --; see --help)\n", a);
			return -EINVAL;
		}
		if (bad) {
			fprintf(stderr, "bench serve: bad value '%s' for %s (see ringlm bench serve --help)\n", v, a);
			return -EINVAL;
		}
	}
	o->rt_cpu = -1;
	for (int i = 0; i + 1 < o->rt_argc; i++)
		if (!strcmp(o->rt_argv[i], "--cpu"))
			o->rt_cpu = atoi(o->rt_argv[i + 1]);
	if (!o->clients)
		o->clients = o->rate > 0 ? 4 : (o->users < 8 ? o->users : 8);
	if (o->rate == 0 && o->clients > o->users)
		o->clients = o->users;
	if (!o->n_constrained != !o->cons_text || o->n_constrained > o->clients) {
		fprintf(stderr, "bench serve: --constrained N (at most --clients) and --schema FILE or --regex RE go together\n");
		return -EINVAL;
	}
	if (o->n_constrained && o->http) {
		fprintf(stderr, "bench serve: --constrained runs over the rings only; drop --http\n");
		return -EINVAL;
	}
	if (o->http && (!o->socket || o->rate > 0 || o->n_sweep)) {
		fprintf(stderr, "bench serve: --http URL runs the same closed-loop load over the rings and over HTTP: it needs "
			"--socket NAME (the ringlmd that ringlm-http serves) and --users, without --rate or --sweep\n");
		return -EINVAL;
	}
	if (o->socket && (o->n_sweep || o->rt_argc)) {
		fprintf(stderr, "bench serve: --sweep and runtime options need a runtime this command starts; drop --socket\n");
		return -EINVAL;
	}
	int wants_auto = !strcmp(o->budget, "auto");
	for (int k = 0; k < o->n_sweep; k++)
		wants_auto |= !strcmp(o->sweep[k], "auto");
	if (wants_auto && !o->itl_target_us) {
		fprintf(stderr, "bench serve: max-batch-tokens auto needs --itl-target-us T\n");
		return -EINVAL;
	}
	if (o->trace && load_trace(o))
		return -EINVAL;
	o->progress = isatty(2);
	return 0;
}

/* --stall: the stall test's options from the command's */
static int run_stall(const struct opts *o)
{
	if (o->socket || o->http || o->n_sweep || o->rate > 0 || o->n_constrained) {
		fprintf(stderr, "bench serve: --stall starts its own runtimes and clients; drop --socket, --http, --sweep, "
			"--rate and --constrained\n");
		return 2;
	}
	FILE *f = fopen(o->stall, "rb");
	if (!f) {
		fprintf(stderr, "bench serve: cannot open --stall %s: %s\n", o->stall, strerror(errno));
		return 2;
	}
	static char text[1 << 16];
	const size_t n = fread(text, 1, sizeof text, f);
	fclose(f);
	const struct rl_stall_opts so = {
		.rt_argv = o->rt_argv, .rt_argc = o->rt_argc, .schema = text, .schema_len = n,
		.requests = o->stall_requests ? o->stall_requests : 8, .prompt = o->prompt.lo,
		.output = o->output.lo, .stream_output = 1500, .rounds = o->stall_rounds ? o->stall_rounds : 2,
		.seed = o->seed, .out_dir = o->out_dir, .name = o->name };
	if (o->prompt.lo != o->prompt.hi || o->output.lo != o->output.hi) {
		fprintf(stderr, "bench serve: --stall takes one --prompt and one --output length\n");
		return 2;
	}
	return rl_bench_serve_stall(&so);
}

int rl_cmd_bench_serve(int argc, char **argv)
{
	struct opts o;
	int rc = parse_opts(&o, argc, argv);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!strcmp(o.out_dir, "bench/out"))
		rl_bench_outdir();
	else
		mkdir(o.out_dir, 0755);
	if (o.stall)
		return run_stall(&o);
	int n = o.n_sweep ? o.n_sweep : o.http ? 2 : 1;
	struct result *R = calloc(n, sizeof *R);
	if (!R)
		return 1;
	fprintf(stderr, "bench serve: %s, %s, %.0f s per run, prompts %u-%u, outputs %u-%u%s\n",
		o.socket ? o.socket : "own runtime", o.rate > 0 ? "Poisson arrivals" : "closed loop",
		o.duration, o.prompt.lo, o.prompt.hi, o.output.lo, o.output.hi, o.trace ? " (trace)" : "");
	for (int i = 0; i < n; i++) {
		const char *b = o.n_sweep ? o.sweep[i] : o.budget;
		char tag[256];
		snprintf(tag, sizeof tag, o.n_sweep ? "%s-%s" : "%s", o.name, b);
		o.use_http = o.http && i == 1;
		if (o.http)
			snprintf(tag, sizeof tag, "%s-%s", o.name, o.use_http ? "http" : "rings");
		fprintf(stderr, "run %d/%d: max-batch-tokens %s\n", i + 1, n, o.socket ? "(the daemon's)" : b);
		rc = run_once(&o, o.socket ? NULL : b, tag, &R[i]);
		if (rc)
			return 1;
		if (o.http) {
			snprintf(R[i].budget, sizeof R[i].budget, "%s", o.use_http ? "http" : "rings");
		} else if (o.socket) {    /* the daemon's budget, as its stats say */
			const char *k = strstr(R[i].stats, "\"budget\":");
			if (k)
				snprintf(R[i].budget, sizeof R[i].budget, "%lu", strtoul(k + 9, NULL, 10));
		}
	}
	char path[512];
	snprintf(path, sizeof path, "%s/%s.json", o.out_dir, o.name);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "bench serve: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	for (int pass = 0; pass < 1 + o.json; pass++) {
		FILE *out = pass ? stdout : f;
		if (n > 1)
			fprintf(out, "{\"points\":[");
		for (int i = 0; i < n; i++) {
			if (i)
				fputc(',', out);
			json_result(out, &o, &R[i]);
		}
		fprintf(out, n > 1 ? "]}\n" : "\n");
	}
	fclose(f);
	print_table(o.json ? stderr : stdout, &o, R, n, 0);
	snprintf(path, sizeof path, "%s/%s-table.md", o.out_dir, o.name);
	if ((f = fopen(path, "w"))) {
		print_table(f, &o, R, n, 1);
		fclose(f);
	}
	if (o.n_sweep)
		plot_sweep(&o, R, n);
	if (o.http)             /* what HTTP adds, at the medians (the rows' first column says which) */
		printf("HTTP over the rings: TTFT p50 %+.3f ms per request, ITL p50 %+.3f ms per token, E2E p50 %+.3f ms\n",
		       (R[1].ttft.p50 - (double)R[0].ttft.p50) / 1e6, (R[1].itl.p50 - (double)R[0].itl.p50) / 1e6,
		       (R[1].e2e.p50 - (double)R[0].e2e.p50) / 1e6);
	for (int i = 0; i < n; i++) {
		free(R[i].ttft_v);
		free(R[i].itl_v);
	}
	free(R);
	return 0;
}
