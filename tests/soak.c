/* soak.c — `make soak SOAK_SECONDS=N`: mixed load on a sim-backend runtime with faults
 * injected for N seconds, then a leak and loss audit.
 *
 * Load: several client processes at a time, each living a random while, submitting random
 * prompts (short, long enough for several prefill chunks, some sharing a prefix) with random
 * output lengths, cancelling some, checking every token against the sim oracle.
 * Faults: kill -9 of a client, SIGSTOP/SIGCONT of a client, a hostile client that scribbles
 * over its segment from a racing thread.
 * Audit: an accepted request of a client that was not killed must end with all its tokens
 * (DONE) or an event that ends it (cancel, error); otherwise it is lost. At the end every KV
 * block is free, the runtime's fds are back at the baseline, and its RSS grew by less than
 * 16 MiB since warm-up. Prints
 *   soak: requests=N faults=F lost=L leaked_blocks=B leaked_fds=D
 * and exits non-zero if any of L, B, D is not 0 (or a token was wrong, or memory grew).
 * Tests: runtime/loop, runtime/sched, ipc, clients/libringlm (leaks and losses under faults).
 */
#include <pthread.h>
#include "tests/rt_harness.h"

#define VOCAB     1000
#define WORKERS   6
#define MAX_NEW   200
#define RSS_BOUND_KIB (16 * 1024)

struct wstat {                         /* one per worker slot, in shared memory */
	_Atomic long accepted, ended, bad_tokens, lost;
	_Atomic int finish;                /* parent: stop submitting, drain, exit */
};

static uint32_t sys_prompt[64];

/* A client process: submits and checks until its lifetime is over or it is told to finish,
 * then waits for every outstanding request to end. */
static int worker(const struct rt_child *rt, struct wstat *st, uint64_t seed)
{
	uint64_t s = seed | 1;
	struct ringlm_params pp = ringlm_default_params();
	pp.socket = rt->sock;
	pp.force_fallback = rt_xs(&s) % 4 == 0;
	struct ringlm *c;
	if (ringlm_connect(&pp, &c))
		return 3;
	struct ringlm_info info;
	ringlm_get_info(c, &info);
	uint32_t n_ids = info.max_inflight < 256 ? info.max_inflight : 256;
	struct tr { uint32_t want[MAX_NEW], got, n; int live; } *tr = calloc(n_ids, sizeof *tr);
	static uint32_t p[1200];
	uint64_t life_end = rl_now_ns() + (200 + rt_xs(&s) % 2000) * 1000000ull;
	int depth = 1 + (int)(rt_xs(&s) % 32), inflight = 0;
	struct ringlm_event ev[256];
	uint64_t last_event = rl_now_ns();
	for (;;) {
		int stopping = atomic_load(&st->finish) || rl_now_ns() > life_end;
		if (stopping && !inflight)
			break;
		while (!stopping && inflight < depth) {
			uint32_t kind = rt_xs(&s) % 10, n, off = 0;
			if (kind < 6)
				n = 1 + rt_xs(&s) % 32;
			else if (kind < 8)
				n = 200 + rt_xs(&s) % 1000;           /* several prefill chunks */
			else {
				n = 64 + 1 + rt_xs(&s) % 32;          /* a shared "system prompt" */
				memcpy(p, sys_prompt, sizeof sys_prompt);
				off = 64;
			}
			for (uint32_t i = off; i < n; i++)
				p[i] = (uint32_t)(rt_xs(&s) % VOCAB);
			struct ringlm_request r = ringlm_default_request();
			r.prompt = p;
			r.n_prompt = n;
			r.max_new = 1 + rt_xs(&s) % MAX_NEW;
			uint32_t id;
			int e = ringlm_submit(c, &r, &id);
			if (e == -EAGAIN)
				break;
			if (e || id >= n_ids || tr[id].live) {
				fprintf(stderr, "soak worker: submit: %s\n", ringlm_strerror(e));
				return 4;
			}
			sim_expect(p, n, r.max_new, VOCAB, tr[id].want);
			tr[id].n = r.max_new;
			tr[id].got = 0;
			tr[id].live = 1;
			inflight++;
			atomic_fetch_add(&st->accepted, 1);
			if (rt_xs(&s) % 20 == 0)
				ringlm_cancel(c, id);
		}
		int k = ringlm_wait(c, ev, 256, 100);
		if (k < 0) {
			fprintf(stderr, "soak worker: wait: %s\n", ringlm_strerror(k));
			break;
		}
		if (k == 0 && rl_now_ns() - last_event > 10000000000ull)
			break;                 /* nothing for 10 s: what is outstanding is lost */
		if (k > 0)
			last_event = rl_now_ns();
		for (int i = 0; i < k; i++) {
			struct tr *t = ev[i].id < n_ids ? &tr[ev[i].id] : NULL;
			if (!t || !t->live) {
				atomic_fetch_add(&st->bad_tokens, 1);
				continue;
			}
			if (ev[i].type == RINGLM_EV_TOKEN) {
				if (ev[i].index != t->got || t->got >= t->n || ev[i].token != t->want[t->got])
					atomic_fetch_add(&st->bad_tokens, 1);
				t->got++;
				continue;
			}
			if (ev[i].type == RINGLM_EV_DONE && ev[i].code == RINGLM_FIN_LENGTH && t->got != t->n)
				atomic_fetch_add(&st->bad_tokens, 1);
			t->live = 0;
			inflight--;
			atomic_fetch_add(&st->ended, 1);
		}
	}
	atomic_fetch_add(&st->lost, inflight);
	free(tr);
	ringlm_close(c);
	return 0;
}

/* A hostile client for a few ms: garbage records published while a thread scribbles. */
static void hostile(const struct rt_child *rt, uint64_t seed)
{
	struct raw_client r;
	if (raw_client_attach(rt->sock, &r))
		_exit(0);              /* no slot free: nothing to do */
	struct raw_racer z = { .r = &r, .seed = seed };
	pthread_t th;
	pthread_create(&th, NULL, raw_racer_main, &z);
	uint64_t s = seed | 1;
	for (int i = 0; i < 50; i++) {
		struct rl_req q = raw_req((uint32_t)(rt_xs(&s) % 300), 1 + rt_xs(&s) % 100, 1 + rt_xs(&s) % 50);
		q.arena_pos = (uint32_t)rt_xs(&s);
		raw_client_submit(&r, &q, NULL);
		usleep(500);
	}
	atomic_store(&z.stop, 1);
	pthread_join(th, NULL);
	_exit(0);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	double secs = argc > 1 ? atof(argv[1]) : 10;
	for (int i = 0; i < 64; i++)
		sys_prompt[i] = (uint32_t)(i * 37 % VOCAB);
	struct rt_child rt;
	if (rt_start(&rt, "--sim-vocab 1000 --sim-step-us 300 --sim-token-us 1 --max-clients 32 --max-inflight 64 --event-ring 256 --max-batch-tokens 512")) {
		fprintf(stderr, "soak: cannot start the runtime\n");
		return 2;
	}
	struct ringlm *obs;
	if (rt_connect(&rt, &obs, 0))
		return 2;
	long long total = rt_stat(obs, "kv_blocks_total");
	int fds0 = rt_nfds(rt.pid);
	struct wstat *ws = mmap(NULL, sizeof(struct wstat) * 4096, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ws == MAP_FAILED)
		return 2;
	/* every worker ever started gets its own wstat; slot[] maps the live ones */
	struct { pid_t pid; int w, killed; uint64_t cont_at; } slot[WORKERS] = { 0 };
	int n_workers = 0, kills = 0, stops = 0, hostiles = 0, worker_fail = 0;
	pid_t hpids[256];
	int n_h = 0;
	uint64_t s = 0x50a6, t0 = rl_now_ns(), end = t0 + (uint64_t)(secs * 1e9);
	uint64_t warm = t0 + (uint64_t)(secs * 1e9 / 5), next_fault = t0 + 20000000;
	long rss_warm = -1;
	while (rl_now_ns() < end) {
		uint64_t now = rl_now_ns();
		if (rss_warm < 0 && now > warm)
			rss_warm = rt_rss_kib(rt.pid);
		for (int i = 0; i < WORKERS; i++) {
			int st;
			if (slot[i].pid && waitpid(slot[i].pid, &st, WNOHANG) == slot[i].pid) {
				if (!slot[i].killed && (!WIFEXITED(st) || WEXITSTATUS(st))) {
					fprintf(stderr, "soak: worker %d failed (status 0x%x)\n", slot[i].w, st);
					worker_fail++;
				}
				slot[i].pid = 0;
			}
			if (slot[i].cont_at && now > slot[i].cont_at) {
				kill(slot[i].pid, SIGCONT);
				slot[i].cont_at = 0;
			}
			if (!slot[i].pid && n_workers < 4096) {
				slot[i].w = n_workers++;
				slot[i].killed = 0;
				slot[i].pid = fork();
				if (slot[i].pid == 0)
					_exit(worker(&rt, &ws[slot[i].w], rt_xs(&s)));
			}
		}
		if (now > next_fault) {
			next_fault = now + (10 + rt_xs(&s) % 60) * 1000000ull;
			int i = (int)(rt_xs(&s) % WORKERS), what = (int)(rt_xs(&s) % 10);
			if (what < 4 && slot[i].pid && !slot[i].killed) {
				kill(slot[i].pid, SIGKILL);
				slot[i].killed = 1;
				kills++;
			} else if (what < 7 && slot[i].pid && !slot[i].killed && !slot[i].cont_at) {
				kill(slot[i].pid, SIGSTOP);
				slot[i].cont_at = now + (10 + rt_xs(&s) % 150) * 1000000ull;
				stops++;
			} else if (what >= 7) {
				if (n_h == 256) {      /* each lives ~25 ms: reap the batch */
					for (int k = 0; k < n_h; k++)
						waitpid(hpids[k], NULL, 0);
					n_h = 0;
				}
				pid_t h = fork();
				if (h == 0)
					hostile(&rt, rt_xs(&s));
				hpids[n_h++] = h;
				hostiles++;
			}
		}
		usleep(2000);
	}
	/* wind down: no more faults; live workers drain and exit */
	for (int i = 0; i < WORKERS; i++) {
		if (!slot[i].pid)
			continue;
		atomic_store(&ws[slot[i].w].finish, 1);
		if (slot[i].cont_at)
			kill(slot[i].pid, SIGCONT);
		int st;
		waitpid(slot[i].pid, &st, 0);
		if (!slot[i].killed && (!WIFEXITED(st) || WEXITSTATUS(st))) {
			fprintf(stderr, "soak: worker %d failed (status 0x%x)\n", slot[i].w, st);
			worker_fail++;
		}
	}
	for (int i = 0; i < n_h; i++)
		waitpid(hpids[i], NULL, 0);
	/* which workers were killed: their outstanding requests are not "lost" */
	long requests = 0, lost = 0, bad = 0;
	for (int w = 0; w < n_workers; w++) {
		requests += ws[w].accepted;
		bad += ws[w].bad_tokens;
		lost += ws[w].lost;    /* set only by workers that ran to their end */
	}
	int alive = kill(rt.pid, 0) == 0;
	rt_settle(obs, "clients", 1);
	rt_expect_idle(obs);
	long long leaked_blocks = total - rt_stat(obs, "kv_blocks_free");
	for (int i = 0; i < 10000 && rt_nfds(rt.pid) != fds0; i++)
		usleep(1000);
	int leaked_fds = rt_nfds(rt.pid) - fds0;
	long rss_end = rt_rss_kib(rt.pid);
	long growth = rss_warm > 0 && rss_end > 0 ? rss_end - rss_warm : 0;
	long long done = rt_stat(obs, "requests_done"), errs = rt_stat(obs, "requests_error");
	long long hostile_n = rt_stat(obs, "hostile_clients");
	ringlm_close(obs);
	int stop_rc = rt_stop(&rt);
	printf("soak: %.0f s, %d workers (%d failed), kills=%d stops=%d hostile=%d (detached as hostile %lld), "
	       "runtime done=%lld errors=%lld, bad_tokens=%ld, rss %ld -> %ld KiB, runtime exit %d\n",
	       secs, n_workers, worker_fail, kills, stops, hostiles, hostile_n, done, errs, bad,
	       rss_warm, rss_end, stop_rc);
	printf("soak: requests=%ld faults=%d lost=%ld leaked_blocks=%lld leaked_fds=%d\n",
	       requests, kills + stops + hostiles, lost, leaked_blocks, leaked_fds);
	int ok = alive && !lost && !leaked_blocks && !leaked_fds && !bad && !worker_fail &&
		 growth < RSS_BOUND_KIB && stop_rc == 0;
	if (growth >= RSS_BOUND_KIB)
		fprintf(stderr, "soak: runtime RSS grew by %ld KiB (bound %d)\n", growth, RSS_BOUND_KIB);
	if (!alive)
		fprintf(stderr, "soak: the runtime died\n");
	return ok ? 0 : 1;
}
