/* bench_latency.c — `ringlm bench latency`: the tails a latency-bound client meets, beside this
 * machine's own floors, from log-bucketed histograms (percentiles to p99.99 and the maximum).
 *
 * Rows (each a histogram of round trips or first-token times):
 *   floors    a cache line bounced between two threads pinned to cpus 0 and 1 (round trip),
 *             a futex wake of a thread sleeping on an idle cpu 1 (wake to running), and the
 *             times cpu 1 is taken from a thread spinning on it (what bounds p99.99);
 *   ring      the request/event ring pair alone between the same two cpus (round trip);
 *   runtime   a one-token request on the sim backend (step cost 0) through a runtime process:
 *             back-to-back and sporadic (--gap-ms between requests), with the defaults (nothing
 *             pinned, the runtime sleeping after its idle spin) and tuned (ringlmd --latency
 *             --cpu 1 --threads 1: pinned, never sleeping, memory locked; client on cpu 0), and
 *             back-to-back beside a noisy neighbour (a process spinning on cpu 1); the runtime
 *             thread's page faults during each row are counted;
 *   model     (with --model) one-token completions of a real model, sporadic: defaults and
 *             tuned, and the embedded runtime (a thread of the client process);
 *   embedded  the runtime path with the runtime on a thread of the client process.
 * Every figure is read against the floors printed above it. Prints a table; the JSON goes to
 * bench/out/latency.json (or --json FILE). Nothing passes or fails on time.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"
#include "ipc/rl_ipc.h"
#include "ipc/rl_wire.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/loop/rl_rt_fork.h"

/* ---- log-bucketed histogram: 32 sub-buckets per power of two (under 3.1% relative error) -- */

#define SUB 32
#define NB (64 * SUB)

struct hist {
	uint64_t n, max, min;
	uint64_t b[NB];
};

static uint32_t bucket(uint64_t v)
{
	if (v < SUB)
		return (uint32_t)v;
	const int e = 63 - __builtin_clzll(v);           /* v in [2^e, 2^(e+1)) */
	return (uint32_t)((e - 4) * SUB + (v >> (e - 5)) - SUB);   /* e >= 5 here */
}

static uint64_t bucket_hi(uint32_t i)                 /* the largest value of bucket i */
{
	if (i < SUB)
		return i;
	const int e = (int)(i / SUB) + 4;
	const uint64_t m = i % SUB + SUB;
	return ((m + 1) << (e - 5)) - 1;
}

static void hist_add(struct hist *h, uint64_t v)
{
	h->b[bucket(v)]++;
	h->max = v > h->max ? v : h->max;
	h->min = !h->n || v < h->min ? v : h->min;
	h->n++;
}

/* The q-quantile: the top of the bucket that holds it (at most the maximum) */
static uint64_t hist_q(const struct hist *h, double q)
{
	const uint64_t want = (uint64_t)ceil(q * (double)h->n);
	uint64_t acc = 0;
	for (uint32_t i = 0; i < NB; i++) {
		acc += h->b[i];
		if (acc >= want && acc)
			return bucket_hi(i) < h->max ? bucket_hi(i) : h->max;
	}
	return h->max;
}

/* ---- floors ------------------------------------------------------------------------- */

static struct {
	_Alignas(64) _Atomic uint64_t ping;
	_Alignas(64) _Atomic uint64_t pong;
	_Alignas(64) _Atomic uint32_t word;              /* futex */
	_Atomic uint64_t woke_ns;
	_Atomic int stop;
	long iters;
} fl;

static void *pong_main(void *arg)
{
	(void)arg;
	rl_bench_pin(1);
	for (uint64_t i = 1; i <= (uint64_t)fl.iters; i++) {
		while (atomic_load_explicit(&fl.ping, memory_order_acquire) != i)
			rl_cpu_relax();
		atomic_store_explicit(&fl.pong, i, memory_order_release);
	}
	return NULL;
}

static int floor_pingpong(long iters, struct hist *h)
{
	pthread_t th;
	atomic_store(&fl.ping, 0);
	atomic_store(&fl.pong, 0);
	fl.iters = iters;
	if (pthread_create(&th, NULL, pong_main, NULL))
		return -EAGAIN;
	rl_bench_pin(0);
	for (uint64_t i = 1; i <= (uint64_t)iters; i++) {
		const uint64_t t0 = rl_now_ns();
		atomic_store_explicit(&fl.ping, i, memory_order_release);
		while (atomic_load_explicit(&fl.pong, memory_order_acquire) != i)
			rl_cpu_relax();
		if (i > (uint64_t)iters / 20)             /* the first 5%: warm-up */
			hist_add(h, rl_now_ns() - t0);
	}
	pthread_join(th, NULL);
	return 0;
}

/* The request/event ring pair alone between two threads (cpus 0 and 1): a 16-byte record
 * there, the same back; the ring's cost over the ping-pong floor */
#define RCAP 1024
static struct rl_ring_hdr *ring_a, *ring_b;
static void *echo_main(void *arg)
{
	(void)arg;
	rl_bench_pin(1);
	struct rl_ring_cons in;
	struct rl_ring_prod out;
	rl_ring_cons_init(&in, ring_a, ring_a + 1, RCAP, sizeof(struct rl_evt));
	rl_ring_prod_init(&out, ring_b, ring_b + 1, RCAP, sizeof(struct rl_evt));
	for (long i = 0; i < fl.iters; i++) {
		while (rl_ring_cons_avail(&in) <= 0)
			rl_cpu_relax();
		struct rl_evt e;
		memcpy(&e, rl_ring_cons_slot(&in, 0), sizeof e);
		rl_ring_cons_release(&in, 1);
		while (rl_ring_prod_space(&out, 1) <= 0)
			rl_cpu_relax();
		memcpy(rl_ring_prod_slot(&out, 0), &e, sizeof e);
		rl_ring_prod_publish(&out, 1);
	}
	return NULL;
}

static int ring_pair(long iters, struct hist *h)
{
	const size_t bytes = sizeof(struct rl_ring_hdr) + RCAP * sizeof(struct rl_evt);
	uint8_t *m = aligned_alloc(4096, 2 * ((bytes + 4095) & ~(size_t)4095));
	if (!m)
		return -ENOMEM;
	ring_a = (void *)m;
	ring_b = (void *)(m + ((bytes + 4095) & ~(size_t)4095));
	rl_ring_hdr_init(ring_a);
	rl_ring_hdr_init(ring_b);
	fl.iters = iters;
	pthread_t th;
	if (pthread_create(&th, NULL, echo_main, NULL)) {
		free(m);
		return -EAGAIN;
	}
	rl_bench_pin(0);
	struct rl_ring_prod out;
	struct rl_ring_cons in;
	rl_ring_prod_init(&out, ring_a, ring_a + 1, RCAP, sizeof(struct rl_evt));
	rl_ring_cons_init(&in, ring_b, ring_b + 1, RCAP, sizeof(struct rl_evt));
	for (long i = 0; i < iters; i++) {
		struct rl_evt e = { .rid = (uint32_t)i };
		const uint64_t t0 = rl_now_ns();
		while (rl_ring_prod_space(&out, 1) <= 0)
			rl_cpu_relax();
		memcpy(rl_ring_prod_slot(&out, 0), &e, sizeof e);
		rl_ring_prod_publish(&out, 1);
		while (rl_ring_cons_avail(&in) <= 0)
			rl_cpu_relax();
		rl_ring_cons_release(&in, 1);
		if (i >= iters / 20)
			hist_add(h, rl_now_ns() - t0);
	}
	pthread_join(th, NULL);
	free(m);
	return 0;
}

static void *sleeper_main(void *arg)
{
	(void)arg;
	rl_bench_pin(1);
	uint32_t seen = 0;
	for (;;) {
		while (atomic_load(&fl.word) == seen)
			rl_futex_wait(&fl.word, seen, 0);
		atomic_store(&fl.woke_ns, rl_now_ns());
		seen = atomic_load(&fl.word);
		if (atomic_load(&fl.stop))
			return NULL;
	}
}

static void sleep_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6) };
	nanosleep(&ts, NULL);
}

static int floor_futex(int n, double gap_ms, struct hist *h)
{
	pthread_t th;
	atomic_store(&fl.word, 0);
	atomic_store(&fl.stop, 0);
	if (pthread_create(&th, NULL, sleeper_main, NULL))
		return -EAGAIN;
	rl_bench_pin(0);
	for (int i = 0; i < n; i++) {
		sleep_ms(gap_ms);                          /* cpu 1 goes idle */
		atomic_store(&fl.woke_ns, 0);
		const uint64_t t0 = rl_now_ns();
		atomic_fetch_add(&fl.word, 1);
		rl_futex_wake(&fl.word, 1);
		uint64_t t1;
		while (!(t1 = atomic_load(&fl.woke_ns)))
			rl_cpu_relax();
		hist_add(h, t1 - t0);
	}
	atomic_store(&fl.stop, 1);
	atomic_fetch_add(&fl.word, 1);
	rl_futex_wake(&fl.word, 1);
	pthread_join(th, NULL);
	return 0;
}

/* A thread spinning on cpu 1 reads the clock back to back; every step of at least
 * JITTER_MIN_NS is a time the cpu was taken away (the scheduler tick, an interrupt, the host
 * running something else on a VM). Any round trip that spans one pays it: at r interruptions
 * a second on each of two cpus, a fraction 2·r·t of round trips of length t do, so these
 * set the p99.99 floor whenever 2·r·t > 1e-4. */
#define JITTER_MIN_NS 1000

static int floor_jitter(double seconds, struct hist *h, double *per_s)
{
	rl_bench_pin(1);
	const uint64_t t_start = rl_now_ns(), t_end = t_start + (uint64_t)(seconds * 1e9);
	uint64_t prev = t_start;
	for (uint64_t now; (now = rl_now_ns()) < t_end; prev = now)
		if (now - prev >= JITTER_MIN_NS)
			hist_add(h, now - prev);
	*per_s = (double)h->n / seconds;
	rl_bench_pin(0);
	return 0;
}

/* ---- the runtime path ---------------------------------------------------------------- */

struct target {
	const char *model, *tokenizer;
	int embedded;                  /* the runtime on a thread of this process */
	int tuned;                     /* runtime on cpu 1 never sleeping, client on cpu 0 */
	int client_cpu;                /* -1: not pinned */
};

static char why[320];

#define NOISY_NS 3000000000ull         /* 3 s: a few hundred scheduler slices */

/* One-token requests: n back-to-back (gap_ms 0) or sporadic; first-token times into h */
static long long row_faults;           /* run_requests: the runtime's faults while measuring */
static double row_awake;               /* and the share of the row's time it was awake without work */

static int run_requests(const struct target *t, long n, double gap_ms, int noisy, struct hist *h)
{
	char sock[64];
	snprintf(sock, sizeof sock, "bench-lat-%d", (int)getpid());
	struct rl_rt_params rp;
	char err[256], args[256] = "";
	rl_rt_default_params(&rp);
	rp.socket = sock;
	rp.backend = t->model ? "cpu" : "sim";
	rp.model = t->model;
	rp.tokenizer = t->tokenizer;
	rp.cpu = t->tuned ? 1 : -1;
	rp.threads = t->tuned ? 1 : 0;
	rp.latency = t->tuned;                     /* pinned, never sleeps, memory locked */
	pid_t rt = -1, hog = -1;
	struct ringlm *c;
	struct ringlm_params p = ringlm_default_params();
	if (t->tuned)
		p.spin_us = 1000000;               /* tuned: the client spins too (else the library's) */
	if (t->embedded) {
		snprintf(args, sizeof args, "%s%s", t->tuned ? "--cpu 1 --threads 1 --latency" : "",
			 t->model ? "" : " --backend sim");
		p.model = t->model;
		p.tokenizer = t->tokenizer;
		p.backend = t->model ? "cpu" : "sim";
		p.runtime_args = args;
		p.socket = NULL;
	} else {
		if ((rt = rl_rt_fork(&rp, err, sizeof err)) < 0) {
			snprintf(why, sizeof why, "%s", err);
			return (int)rt;
		}
		p.socket = sock;
	}
	/* every cpu while connecting (an embedded runtime thread starts with this thread's
	 * affinity and pins itself), then the client's own */
	cpu_set_t all;
	CPU_ZERO(&all);
	for (int k = 0; k < CPU_SETSIZE && k < 1024; k++)
		CPU_SET(k, &all);
	sched_setaffinity(0, sizeof all, &all);
	int rc = ringlm_connect(&p, &c);
	if (rc) {
		snprintf(why, sizeof why, "%s", ringlm_last_error());
		goto out;
	}
	if (t->client_cpu >= 0)
		rl_bench_pin(t->client_cpu);
	if (noisy && (hog = fork()) == 0) {        /* a neighbour spinning on the runtime's cpu */
		rl_bench_pin(1);
		for (volatile uint64_t x = 0;; x++)
			;
	}
	struct ringlm_request r = ringlm_default_request();
	uint32_t prompt[8] = { 1, 403, 407, 261, 378 };
	r.prompt = prompt;
	r.n_prompt = t->model ? 5 : 1;
	r.max_new = 1;
	struct ringlm_event ev[4];
	const long warm = gap_ms > 0 ? 3 : n / 20;
	/* a noisy neighbour's effect shows over its scheduler slices (ms), not in a burst of
	 * microsecond requests: those rows run for NOISY_NS whatever n is */
	const uint64_t t_end = noisy ? rl_now_ns() + NOISY_NS : UINT64_MAX;
	long long f0 = -1;
	double a0 = 0, w0 = 0;
	for (long i = 0; (noisy ? rl_now_ns() < t_end : i < n + warm) && !rc; i++) {
		if (i == warm) {                   /* after a stats publication (10 Hz) */
			usleep(150000);
			f0 = (long long)rl_cli_stat(c, "rt_page_faults");
			a0 = rl_cli_stat(c, "idle_awake_ms");
			w0 = (double)rl_now_ns();
		}
		if (gap_ms > 0)
			sleep_ms(gap_ms);
		if (!t->model)
			prompt[0] = (uint32_t)(i % 1000) + 1;  /* no prefix-cache effects on sim */
		const uint64_t t0 = rl_now_ns();
		uint64_t t1 = 0;
		rc = ringlm_submit(c, &r, NULL);
		for (int done = 0; !rc && !done;) {
			const int k = gap_ms > 0 || !t->tuned ? ringlm_wait(c, ev, 4, 10000) : ringlm_poll(c, ev, 4);
			if (k < 0)
				rc = k;
			for (int e = 0; e < k; e++) {
				if (ev[e].type == RINGLM_EV_TOKEN && !t1)
					t1 = rl_now_ns();
				done |= ev[e].type != RINGLM_EV_TOKEN;
				if (ev[e].type == RINGLM_EV_ERROR)
					rc = ev[e].code;
			}
		}
		if (!rc && i >= warm)
			hist_add(h, t1 - t0);
	}
	if (rc)
		snprintf(why, sizeof why, "%s", ringlm_strerror(rc));
	usleep(150000);                            /* a stats publication after the last request */
	const long long f1 = (long long)rl_cli_stat(c, "rt_page_faults");
	row_faults = f0 >= 0 && f1 >= f0 ? f1 - f0 : -1;
	row_awake = f0 >= 0 && gap_ms > 0 ? (rl_cli_stat(c, "idle_awake_ms") - a0) * 1e6 / ((double)rl_now_ns() - w0) : -1;
	ringlm_close(c);
out:
	if (hog > 0) {
		kill(hog, SIGKILL);
		waitpid(hog, NULL, 0);
	}
	if (rt > 0) {
		kill(rt, SIGTERM);
		waitpid(rt, NULL, 0);
	}
	return rc;
}

/* One client decoding n tokens against a fixed-time step (the sim backend's, step_us; a GPU
 * step waits the same way): the gaps between its tokens into h. A step that runs on its own
 * must not keep the client from its core (the client woken onto the runtime's core). */
static int run_decode(int tuned, long n, uint32_t step_us, struct hist *h)
{
	char sock[64], err[256];
	snprintf(sock, sizeof sock, "bench-itl-%d", (int)getpid());
	struct rl_rt_params rp;
	rl_rt_default_params(&rp);
	rp.socket = sock;
	rp.backend = "sim";
	rp.sim_step_ns = (uint64_t)step_us * 1000;
	rp.max_new = (uint32_t)n;
	rp.cpu = tuned ? 1 : -1;
	rp.latency = tuned;
	pid_t rt = rl_rt_fork(&rp, err, sizeof err);
	if (rt < 0) {
		snprintf(why, sizeof why, "%s", err);
		return (int)rt;
	}
	struct ringlm *c;
	struct ringlm_params p = ringlm_default_params();
	p.socket = sock;
	int rc = ringlm_connect(&p, &c);
	if (rc) {
		snprintf(why, sizeof why, "%s", ringlm_last_error());
		kill(rt, SIGTERM);
		waitpid(rt, NULL, 0);
		return rc;
	}
	if (tuned)
		rl_bench_pin(0);
	struct ringlm_request r = ringlm_default_request();
	uint32_t prompt[1] = { 7 };
	r.prompt = prompt;
	r.n_prompt = 1;
	r.max_new = (uint32_t)n;
	rc = ringlm_submit(c, &r, NULL);
	uint64_t last = 0;
	long got = 0;
	struct ringlm_event ev[64];
	for (int done = 0; !rc && !done;) {
		const int k = ringlm_wait(c, ev, 64, 10000);
		if (k < 0)
			rc = k;
		const uint64_t t = rl_now_ns();
		for (int e = 0; e < k; e++) {
			if (ev[e].type == RINGLM_EV_TOKEN) {
				if (last && got >= 8)        /* past the first steps */
					hist_add(h, t - last);
				last = t;
				got++;
			}
			done |= ev[e].type != RINGLM_EV_TOKEN;
			if (ev[e].type == RINGLM_EV_ERROR)
				rc = ev[e].code;
		}
	}
	if (rc)
		snprintf(why, sizeof why, "%s", ringlm_strerror(rc));
	ringlm_close(c);
	kill(rt, SIGTERM);
	waitpid(rt, NULL, 0);
	return rc;
}

/* ---- the table ---------------------------------------------------------------------- */

struct row {
	const char *group, *name;
	struct hist h;
	long long faults;              /* the runtime thread's page faults during the row, -1 n/a */
	double awake;                  /* the share of the row's time the runtime was awake without
					* work (its idle window's cost: a core), -1 n/a */
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: ringlm bench latency [--model PATH [--tokenizer PATH]] [--iters N] [--sporadic N]\n"
"                            [--gap-ms G] [--long-gap-ms L] [--json FILE]\n"
"  back-to-back rows run --iters requests (default 1000000), sporadic rows --sporadic (default\n"
"  200) with --gap-ms (default 20) between them; with --model, one-token completions of it too,\n"
"  and a tenth as many --long-gap-ms (default 300) apart. 'awake' is the share of a row's time\n"
"  the runtime spent awake without work (its idle window's cost in cpu). The decode rows: one\n"
"  client's gaps between tokens against a 1 ms sim step (iters / 500 tokens, at least 2000).\n");
}

int rl_cmd_bench_latency(int argc, char **argv)
{
	const char *model = NULL, *tok = NULL, *json = NULL;
	long iters = 1000000, sporadic = 200;
	double gap = 20, long_gap = 300;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "ringlm bench latency: %s needs a value (ringlm bench latency --help)\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--tokenizer")) tok = v;
		else if (!strcmp(a, "--json")) json = v;
		else if (!strcmp(a, "--iters")) iters = atol(v);
		else if (!strcmp(a, "--sporadic")) sporadic = atol(v);
		else if (!strcmp(a, "--gap-ms")) gap = atof(v);
		else if (!strcmp(a, "--long-gap-ms")) long_gap = atof(v);
		else {
			fprintf(stderr, "ringlm bench latency: unknown option '%s' (ringlm bench latency --help)\n", a);
			return 2;
		}
	}
	if (iters < 100 || sporadic < 10 || !(gap > 0 && gap <= 10000) || !(long_gap > 0 && long_gap <= 10000)) {
		fprintf(stderr, "ringlm bench latency: --iters >= 100, --sporadic >= 10, --gap-ms and --long-gap-ms in "
			"(0, 10000]\n");
		return 2;
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "ringlm bench latency: needs two cpus (0 and 1)\n");
		return 1;
	}
	static struct row rows[24];
	int nr = 0, rc = 0;
	const long b2b_rt = iters, b2b_other = iters / 10 > 1000 ? iters / 10 : iters;
#define ROW(g, nm) (rows[nr] = (struct row){ .group = g, .name = nm, .faults = -1, .awake = -1 }, &rows[nr++].h)
	rc |= floor_pingpong(iters, ROW("floor", "cache-line ping-pong, cpus 0-1, round trip"));
	rc |= floor_futex((int)sporadic, gap, ROW("floor", "futex wake of an idle cpu"));
	static char jname[96];
	double jrate = 0;
	struct hist *jh = ROW("floor", jname);
	rc |= floor_jitter(2.0, jh, &jrate);
	snprintf(jname, sizeof jname, "cpu 1 taken from a spinning thread (>= 1 us), %.0f/s", jrate);
	rc |= ring_pair(iters, ROW("ring", "request/event ring pair alone, cpus 0-1, round trip"));
	const struct target sim_def = { NULL, NULL, 0, 0, -1 }, sim_tuned = { NULL, NULL, 0, 1, 0 },
			    sim_emb = { NULL, NULL, 1, 1, 0 };
	struct { const char *g, *nm; struct target t; long n; double gap; int noisy; } runs[] = {
		{ "runtime", "back-to-back, tuned (pinned apart, never sleeps)", sim_tuned, b2b_rt, 0, 0 },
		{ "runtime", "back-to-back, defaults (nothing pinned)", sim_def, b2b_other, 0, 0 },
		{ "runtime", "back-to-back, tuned, a process spinning on cpu 1 (3 s)", sim_tuned, 0, 0, 1 },
		{ "runtime", "back-to-back, defaults, a process spinning on cpu 1 (3 s)", sim_def, 0, 0, 1 },
		{ "runtime", "sporadic, tuned", sim_tuned, sporadic, gap, 0 },
		{ "runtime", "sporadic, defaults", sim_def, sporadic, gap, 0 },
		{ "embedded", "back-to-back, tuned (runtime thread on cpu 1)", sim_emb, b2b_other, 0, 0 },
		{ "embedded", "sporadic, tuned", sim_emb, sporadic, gap, 0 },
	};
	for (size_t k = 0; k < sizeof runs / sizeof *runs && !rc; k++) {
		rc = run_requests(&runs[k].t, runs[k].n, runs[k].gap, runs[k].noisy, ROW(runs[k].g, runs[k].nm));
		rows[nr - 1].faults = row_faults;
		rows[nr - 1].awake = row_awake;
		if (rc)
			fprintf(stderr, "ringlm bench latency: %s %s: %s\n", runs[k].g, runs[k].nm, *why ? why : strerror(-rc));
	}
	/* a decoding client's inter-token gaps against a 1 ms step: defaults, then tuned */
	for (int tuned = 0; tuned < 2 && !rc; tuned++) {
		const long n_tok = iters / 500 > 2000 ? iters / 500 : 2000;
		rc = run_decode(tuned, n_tok, 1000, ROW("decode", tuned ? "inter-token gap, 1 ms sim step, tuned"
							  : "inter-token gap, 1 ms sim step, defaults"));
		if (rc)
			fprintf(stderr, "ringlm bench latency: decode: %s\n", *why ? why : strerror(-rc));
	}
	if (model && !rc) {
		const struct target m_def = { model, tok, 0, 0, -1 }, m_tuned = { model, tok, 0, 1, 0 },
				    m_emb = { model, tok, 1, 1, 0 };
		const struct target *mt[4] = { &m_def, &m_tuned, &m_emb, &m_def };
		static char far[96];
		snprintf(far, sizeof far, "1-token completion, %.0f ms apart, defaults, client not pinned", long_gap);
		const char *names[4] = { "1-token completion, sporadic, defaults, client not pinned",
					 "1-token completion, sporadic, tuned", "1-token completion, sporadic, embedded, tuned",
					 far };
		for (int k = 0; k < 4 && !rc; k++) {
			/* the last row: requests further apart than the default idle window adapts to
			 * (rl_idle.h), each meeting a sleeping runtime */
			rc = run_requests(mt[k], k == 3 ? (sporadic / 10 > 10 ? sporadic / 10 : 10) : sporadic,
					  k == 3 ? long_gap : gap, 0, ROW(k == 2 ? "embedded" : "model", names[k]));
			rows[nr - 1].faults = row_faults;
			rows[nr - 1].awake = row_awake;
			if (rc)
				fprintf(stderr, "ringlm bench latency: %s: %s\n", names[k], *why ? why : strerror(-rc));
		}
	}
#undef ROW
	printf("ringlm bench latency: %s%s, %s (us; log-bucketed, within 3.1%%)\n", model ? "model " : "sim backend",
	       model ? model : "", rl_cpu_isa_name(rl_cpu_isa_best()));
	printf("%-9s %-58s %8s %8s %8s %8s %8s %8s %8s %7s %7s\n", "", "", "n", "p50", "p90", "p99", "p99.9", "p99.99",
	       "max", "faults", "awake");
	rl_bench_outdir();
	FILE *jf = fopen(json ? json : "bench/out/latency.json", "w");
	if (jf)
		fprintf(jf, "{\"cpu\":\"%s\",\"model\":\"%s\",\"gap_ms\":%.1f,\"rows\":[", rl_cpu_isa_name(rl_cpu_isa_best()),
			model ? model : "", gap);
	const double qs[5] = { 0.5, 0.9, 0.99, 0.999, 0.9999 };
	for (int k = 0; k < nr; k++) {
		const struct hist *h = &rows[k].h;
		if (!h->n)
			continue;
		printf("%-9s %-58s %8llu", rows[k].group, rows[k].name, (unsigned long long)h->n);
		for (int q = 0; q < 5; q++)
			printf(" %8.2f", hist_q(h, qs[q]) / 1e3);
		printf(" %8.2f", h->max / 1e3);
		if (rows[k].faults >= 0)
			printf(" %7lld", rows[k].faults);
		else
			printf(" %7s", "-");
		if (rows[k].awake >= 0)
			printf(" %6.0f%%\n", 100 * rows[k].awake);
		else
			printf(" %7s\n", "-");
		if (jf) {
			fprintf(jf, "%s{\"group\":\"%s\",\"name\":\"%s\",\"rt_page_faults\":%lld,\"idle_awake\":%.3f,\"n\":%llu,\"ns\":{\"p50\":%llu,"
				"\"p90\":%llu,\"p99\":%llu,\"p999\":%llu,\"p9999\":%llu,\"max\":%llu}}", k ? "," : "", rows[k].group,
				rows[k].name, rows[k].faults, rows[k].awake,
				(unsigned long long)h->n, (unsigned long long)hist_q(h, 0.5), (unsigned long long)hist_q(h, 0.9),
				(unsigned long long)hist_q(h, 0.99), (unsigned long long)hist_q(h, 0.999),
				(unsigned long long)hist_q(h, 0.9999), (unsigned long long)h->max);
		}
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	return rc ? 1 : 0;
}
