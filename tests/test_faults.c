/* test_faults.c — fault injection against a real runtime process (sim backend): clients
 * killed with -9 at random points, a client stopped with SIGSTOP, the runtime killed with -9
 * or stopped with SIGTERM, a hostile client with a racing writer thread, every limit, and the
 * isolation between clients. Pass/fail never depends on wall-clock time: latencies are
 * printed, and waits have generous hang guards. RL_SLOW divides the iteration counts.
 * Tests: runtime/loop, ipc, clients/libringlm.
 */
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include "tests/rl_test.h"
#include "tests/rt_harness.h"

#define VOCAB 1000

static int settle_fds(pid_t pid, int want)
{
	for (int i = 0; i < 10000; i++) {
		if (rt_nfds(pid) == want)
			return 1;
		usleep(1000);
	}
	fprintf(stderr, "  runtime has %d fds, want %d\n", rt_nfds(pid), want);
	return 0;
}

static int wait_ok(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "  child %d ended with status 0x%x\n", (int)pid, st);
		return 0;
	}
	return 1;
}

/* One short request through an attached client: the runtime still serves. */
static int serves(struct ringlm *c)
{
	uint32_t p[2] = { 5, 6 }, want[3];
	sim_expect(p, 2, 3, VOCAB, want);
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = 2;
	r.max_new = 3;
	if (ringlm_submit(c, &r, NULL))
		return 0;
	struct ringlm_event ev[8];
	int got = 0;
	for (;;) {
		int k = ringlm_wait(c, ev, 8, 10000);
		if (k <= 0)
			return 0;
		for (int i = 0; i < k; i++) {
			if (ev[i].type != RINGLM_EV_TOKEN)
				return ev[i].type == RINGLM_EV_DONE && got == 3;
			if (ev[i].token != want[got++])
				return 0;
		}
	}
}

/* ---- kill -9 at random points ------------------------------------------------------------ */

enum { PH_START, PH_ATTACH, PH_SUBMIT, PH_STREAM, PH_CANCEL, PH_N };
static const char *ph_name[PH_N] = { "before-attach", "attached", "submitting", "streaming", "cancelling" };

/* A client that attaches, submits a mix of short and long prompts (long ones span several
 * prefill chunks), streams, cancels some, sleeping a random few µs between steps so a kill
 * lands anywhere. It records how far it got in *phase (shared with the parent). */
static void doomed_client(const struct rt_child *rt, uint64_t seed, _Atomic int *phase)
{
	uint64_t s = seed | 1;
	static uint32_t p[2048];
	atomic_store(phase, PH_START);
	struct ringlm *c;
	if (rt_connect(rt, &c, (int)(seed & 1)))
		_exit(1);
	atomic_store(phase, PH_ATTACH);
	usleep(rt_xs(&s) % 300);
	for (int round = 0;; round++) {
		atomic_store(phase, PH_SUBMIT);
		for (int k = 0; k < 4; k++) {
			uint32_t n = rt_xs(&s) % 4 ? 1 + rt_xs(&s) % 64 : 512 + rt_xs(&s) % 1500;
			for (uint32_t i = 0; i < n; i++)
				p[i] = (uint32_t)(rt_xs(&s) % VOCAB);
			struct ringlm_request r = ringlm_default_request();
			r.prompt = p;
			r.n_prompt = n;
			r.max_new = 1 + rt_xs(&s) % 2000;
			uint32_t id;
			if (ringlm_submit(c, &r, &id) == 0 && rt_xs(&s) % 3 == 0) {
				atomic_store(phase, PH_CANCEL);
				ringlm_cancel(c, id);
				atomic_store(phase, PH_SUBMIT);
			}
			usleep(rt_xs(&s) % 100);
		}
		atomic_store(phase, PH_STREAM);
		struct ringlm_event ev[64];
		for (int k = 0; k < 4; k++) {
			if (ringlm_wait(c, ev, 64, 10) < 0)
				_exit(2);
			usleep(rt_xs(&s) % 100);
		}
	}
}

/* Hundreds of clients killed at random moments: after each, the runtime serves, every KV
 * block is free again, no request is left, the slot count and the runtime's fds are back at
 * the baseline. */
static void faults_kill9_random_points(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 200 --max-clients 8 --max-batch-tokens 256 --prefix-cache off") == 0);
	struct ringlm *obs;
	REQUIRE(rt_connect(&rt, &obs, 0) == 0);
	int fds0 = rt_nfds(rt.pid);
	REQUIRE(fds0 > 0);
	_Atomic int *phase = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(phase != MAP_FAILED);
	int rounds = 300 / rl_slow(), hist[PH_N] = { 0 }, bad = 0;
	uint64_t s = 0x5eed;
	for (int round = 0; round < rounds && !bad; round++) {
		atomic_store(phase, PH_START);
		pid_t pid = fork();
		if (pid == 0)
			doomed_client(&rt, (uint64_t)round * 7919 + 1, phase);
		usleep(rt_xs(&s) % 6000);
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		if (!WIFSIGNALED(st)) {        /* it failed on its own before the kill */
			fprintf(stderr, "  round %d: client exited with status %d\n", round, WEXITSTATUS(st));
			bad++;
		}
		hist[atomic_load(phase)]++;
		bad += !rt_settle(obs, "clients", 1);
		bad += !rt_expect_idle(obs);
		bad += !settle_fds(rt.pid, fds0);
		if (round % 25 == 0)
			bad += !serves(obs);
	}
	CHECK(bad == 0);
	printf("  %d kills; killed while", rounds);
	for (int i = 0; i < PH_N; i++)
		printf(" %s: %d", ph_name[i], hist[i]);
	printf("\n");
	/* a new client process is served in full */
	pid_t pid = fork();
	if (pid == 0)
		_exit(rt_run_client(&rt, 3, 200, 8, 0, 8, 16));
	CHECK(wait_ok(pid));
	/* every client that got as far as attaching was detached */
	CHECK(rt_stat(obs, "detaches") >= rounds - hist[PH_START]);
	munmap((void *)phase, 4096);
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* ---- SIGSTOP ------------------------------------------------------------------------------- */

/* A client stopped with SIGSTOP while its event ring fills: its sequences pause, another
 * client is served in full meanwhile, and after SIGCONT it gets every token in order. */
static void faults_sigstop_client_pauses_only_itself(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --event-ring 64 --sim-step-us 100") == 0);
	struct ringlm *obs;
	REQUIRE(rt_connect(&rt, &obs, 0) == 0);
	/* the other client's time alone, for the printout */
	uint64_t t0 = rl_now_ns();
	pid_t other = fork();
	if (other == 0)
		_exit(rt_run_client(&rt, 11, 300, 8, 0, 8, 16));
	CHECK(wait_ok(other));
	double alone_ms = (rl_now_ns() - t0) / 1e6;

	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t sleeper = fork();
	if (sleeper == 0) {
		struct ringlm *c;
		if (rt_connect(&rt, &c, 0))
			_exit(1);
		uint32_t p[8][3], want[8][200], ids[8], got[8] = { 0 };
		for (int r = 0; r < 8; r++) {
			for (int k = 0; k < 3; k++)
				p[r][k] = (uint32_t)(r * 17 + k * 3 + 1);
			sim_expect(p[r], 3, 200, VOCAB, want[r]);
			struct ringlm_request q = ringlm_default_request();
			q.prompt = p[r];
			q.n_prompt = 3;
			q.max_new = 200;
			if (ringlm_submit(c, &q, &ids[r]))
				_exit(2);
		}
		(void)!write(pfd[1], "x", 1);  /* the parent stops us from here on, at any point */
		int done = 0, bad = 0;
		struct ringlm_event ev[16];
		while (done < 8 && !bad) {
			int k = ringlm_wait(c, ev, 16, 10000);
			if (k <= 0)
				_exit(3);
			for (int i = 0; i < k; i++) {
				int r = 0;
				while (r < 8 && ids[r] != ev[i].id)
					r++;
				if (r == 8) {
					bad++;
				} else if (ev[i].type == RINGLM_EV_TOKEN) {
					bad += ev[i].index != got[r] || ev[i].token != want[r][got[r]];
					got[r]++;
				} else {
					bad += ev[i].type != RINGLM_EV_DONE || got[r] != 200;
					done++;
				}
			}
			usleep(200);           /* a slow reader even when running */
		}
		ringlm_close(c);
		_exit(bad ? 4 : 0);
	}
	close(pfd[1]);
	char x;
	CHECK(read(pfd[0], &x, 1) == 1);
	close(pfd[0]);
	kill(sleeper, SIGSTOP);
	long long paused = 0;
	for (int i = 0; i < 10000 && paused <= 0; i++) {
		usleep(1000);
		paused = rt_stat(obs, "paused");
	}
	CHECKF(paused > 0, "the stopped client's sequences never paused");
	t0 = rl_now_ns();
	other = fork();
	if (other == 0)
		_exit(rt_run_client(&rt, 12, 300, 8, 0, 8, 16));
	CHECK(wait_ok(other));
	double beside_ms = (rl_now_ns() - t0) / 1e6;
	CHECK(rt_stat(obs, "paused") > 0);    /* still stopped, still paused, nothing dropped */
	printf("  other client: %.1f ms alone, %.1f ms beside a stopped client (%lld paused seqs)\n",
	       alone_ms, beside_ms, paused);
	kill(sleeper, SIGCONT);
	CHECK(wait_ok(sleeper));
	CHECK(rt_settle(obs, "paused", 0));
	CHECK(rt_expect_idle(obs));
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* ---- the runtime killed with -9 ------------------------------------------------------------ */

/* Clients blocked in ringlm_wait (futex and eventfd modes) and one spinning on a full
 * in-flight table in ringlm_submit all get -ECONNRESET when the runtime is killed; the delay
 * is printed. Then a restarted runtime takes them back. */
static void faults_runtime_kill9_unblocks_everyone(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 500000 --max-inflight 2") == 0);
	struct res { _Atomic uint64_t kill_ns; _Atomic int code[3]; _Atomic uint64_t done_ns[3]; } *sh;
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(sh != MAP_FAILED);
	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t kids[3];
	for (int k = 0; k < 3; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			struct ringlm *c;
			if (rt_connect(&rt, &c, k == 1))
				_exit(1);
			uint32_t p[2] = { 1, 2 };
			struct ringlm_request r = ringlm_default_request();
			r.prompt = p;
			r.n_prompt = 2;
			r.max_new = 1000;
			int n = k == 2 ? 2 : 1, e = 0;
			for (int i = 0; i < n; i++)
				if (ringlm_submit(c, &r, NULL))
					_exit(2);
			(void)!write(pfd[1], "x", 1);
			if (k < 2) {
				struct ringlm_event ev[16];
				while ((e = ringlm_wait(c, ev, 16, 10000)) > 0)
					;
			} else {
				while ((e = ringlm_submit(c, &r, NULL)) == -EAGAIN)
					usleep(50);
			}
			sh->done_ns[k] = rl_now_ns();
			sh->code[k] = e;
			ringlm_close(c);
			_exit(0);
		}
	}
	close(pfd[1]);
	char x;
	for (int k = 0; k < 3; k++)
		CHECK(read(pfd[0], &x, 1) == 1);
	close(pfd[0]);
	usleep(50000);                 /* let the waiters fall asleep */
	sh->kill_ns = rl_now_ns();
	kill(rt.pid, SIGKILL);
	waitpid(rt.pid, NULL, 0);
	for (int k = 0; k < 3; k++)
		CHECK(wait_ok(kids[k]));
	static const char *what[3] = { "wait (futex)", "wait (eventfd)", "submit (spinning on -EAGAIN)" };
	for (int k = 0; k < 3; k++) {
		CHECKF(sh->code[k] == -ECONNRESET, "%s returned %d", what[k], sh->code[k]);
		printf("  %s: -ECONNRESET after %.1f ms\n", what[k], (double)(sh->done_ns[k] - sh->kill_ns) / 1e6);
	}
	munmap(sh, 4096);
	REQUIRE(rt_start(&rt, "--sim-vocab 1000") == 0);
	pid_t pid = fork();
	if (pid == 0)
		_exit(rt_run_client(&rt, 9, 50, 4, 0, 8, 16));
	CHECK(wait_ok(pid));
	CHECK(rt_stop(&rt) == 0);
}

/* ---- SIGTERM ----------------------------------------------------------------------------- */

/* SIGTERM: a short request finishes, a long one gets ERROR(-ESHUTDOWN) at the drain
 * deadline, a submit during the drain gets -ESHUTDOWN (from the library, which reads the
 * runtime's state, and from the runtime for a raw record), a new client is refused with
 * -ESHUTDOWN, and the runtime exits 0. */
static void faults_sigterm_drains(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 2000 --drain-timeout-ms 400") == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	struct raw_client lw;
	REQUIRE(raw_client_attach(rt.sock, &lw) == 0);
	uint32_t p[2] = { 4, 2 }, want[20];
	sim_expect(p, 2, 20, VOCAB, want);
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = 2;
	uint32_t id_short, id_long, id_late;
	r.max_new = 20;
	REQUIRE(ringlm_submit(c, &r, &id_short) == 0);
	r.max_new = 8000;
	REQUIRE(ringlm_submit(c, &r, &id_long) == 0);
	struct ringlm_event ev[64];
	int got_short = 0, bad = 0, short_code = 0, long_code = 0, late_code = 0, ends = 0;
	uint16_t short_type = 0;
	/* both are running before the signal */
	int first_long = 0;
	while (!first_long || !got_short) {
		int k = ringlm_wait(c, ev, 64, 10000);
		REQUIRE(k > 0);
		for (int i = 0; i < k; i++) {
			if (ev[i].id == id_long)
				first_long = 1;
			if (ev[i].id == id_short && ev[i].type == RINGLM_EV_TOKEN)
				bad += ev[i].token != want[got_short++];
		}
	}
	kill(rt.pid, SIGTERM);
	/* the drain has begun once a new attach is refused with -ESHUTDOWN */
	int e = 0;
	for (int i = 0; i < 2000 && e != -ESHUTDOWN; i++) {
		struct ringlm *late;
		struct ringlm_params pp = ringlm_default_params();
		pp.socket = rt.sock;
		e = ringlm_connect(&pp, &late);
		if (!e) {
			ringlm_close(late);
			usleep(1000);
		}
	}
	CHECKF(e == -ESHUTDOWN, "attach during the drain returned %d (%s)", e, ringlm_last_error());
	/* the library sees the draining state and refuses at once, with a reason */
	r.max_new = 5;
	CHECK(ringlm_submit(c, &r, &id_late) == -ESHUTDOWN);
	CHECKF(strstr(ringlm_last_error(), "shutting down"), "message: %s", ringlm_last_error());
	/* and the runtime refuses a record that reaches its ring anyway (a raw client's) */
	struct rl_req late = raw_req(0, 2, 5);
	raw_client_submit(&lw, &late, NULL);
	uint16_t late_type = 0;
	late_code = raw_client_result(&lw, 0, &late_type);
	CHECK(late_type == RL_EV_ERROR);
	raw_client_close(&lw);
	while (ends < 2) {
		int k = ringlm_wait(c, ev, 64, 10000);
		if (k <= 0)
			break;
		for (int i = 0; i < k; i++) {
			if (ev[i].type == RINGLM_EV_TOKEN) {
				if (ev[i].id == id_short)
					bad += ev[i].token != want[got_short++];
				continue;
			}
			ends++;
			if (ev[i].id == id_short)
				short_code = ev[i].code, short_type = ev[i].type;
			else if (ev[i].id == id_long)
				long_code = ev[i].code;
		}
	}
	CHECK(ends == 2);
	CHECK(!bad);
	CHECK(short_type == RINGLM_EV_DONE && short_code == RINGLM_FIN_LENGTH && got_short == 20);
	CHECK(long_code == -ESHUTDOWN);
	CHECK(late_code == -ESHUTDOWN);
	int st;
	REQUIRE(waitpid(rt.pid, &st, 0) == rt.pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "runtime status 0x%x", st);
	CHECK(ringlm_wait(c, ev, 64, 10000) == -ECONNRESET);
	ringlm_close(c);
}

/* ---- hostile client with a racing writer ---------------------------------------------------- */

/* A hostile client whose own thread races the runtime over every word of its segment: the
 * runtime never crashes (ASan in the runtime child checks it never reads outside the
 * segment), answers with error events or detaches the client, and serves a good client in
 * full meanwhile. */
static void faults_hostile_racing_writer(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 50") == 0);
	struct ringlm *obs;
	REQUIRE(rt_connect(&rt, &obs, 0) == 0);
	int fds0 = rt_nfds(rt.pid);
	pid_t good = fork();
	if (good == 0)
		_exit(rt_run_client(&rt, 77, 3000 / rl_slow(), 16, 0, 8, 16));
	int rounds = 30 / rl_slow() + 2, attached = 0;
	for (int round = 0; round < rounds; round++) {
		struct raw_client r;
		if (raw_client_attach(rt.sock, &r))
			continue;       /* refused: the slot of a previous round is not free yet */
		attached++;
		struct raw_racer z = { .r = &r, .seed = (uint64_t)round * 31 + 7 };
		pthread_t th;
		REQUIRE(pthread_create(&th, NULL, raw_racer_main, &z) == 0);
		/* meanwhile the main thread publishes plausible requests, as a buggy client would */
		for (int i = 0; i < 200; i++) {
			struct rl_req q = raw_req((uint32_t)i % 300, 1 + i % 40, 1 + i % 30);
			q.arena_pos = (uint32_t)i * 97;
			raw_client_submit(&r, &q, NULL);
			usleep(100);
		}
		atomic_store(&z.stop, 1);
		pthread_join(th, NULL);
		raw_client_close(&r);
	}
	CHECK(attached > 0);
	CHECK(wait_ok(good));
	CHECK(kill(rt.pid, 0) == 0);   /* still alive */
	CHECK(rt_settle(obs, "clients", 1));
	CHECK(rt_expect_idle(obs));
	CHECK(settle_fds(rt.pid, fds0));
	CHECK(serves(obs));
	printf("  %d racing clients: hostile_clients=%lld rejected_invalid=%lld rejected_busy=%lld rejected_limit=%lld\n",
	       attached, rt_stat(obs, "hostile_clients"), rt_stat(obs, "rejected_invalid"),
	       rt_stat(obs, "rejected_busy"), rt_stat(obs, "rejected_limit"));
	CHECK(rt_stat(obs, "hostile_clients") + rt_stat(obs, "rejected_invalid") +
	      rt_stat(obs, "rejected_busy") + rt_stat(obs, "rejected_limit") > 0);
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* ---- limits ---------------------------------------------------------------------------------- */

/* Each limit and each bad parameter: the right error code, and the matching counter moves. */
static void faults_limits_rejected_and_counted(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 200 --max-clients 2 --max-inflight 4 --max-prompt 64 --max-new 100") == 0);
	struct ringlm *c, *c2, *c3;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);

	/* max in-flight through the API: the 5th submit is -EAGAIN (ids exhausted) */
	uint32_t p[65];
	for (int i = 0; i < 65; i++)
		p[i] = (uint32_t)i;
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = 2;
	r.max_new = 100;
	for (int i = 0; i < 4; i++)
		CHECK(ringlm_submit(c, &r, NULL) == 0);
	CHECK(ringlm_submit(c, &r, NULL) == -EAGAIN);
	/* max prompt / max new through the API: caught before the ring */
	r.n_prompt = 65;
	CHECK(ringlm_submit(c, &r, NULL) == -E2BIG);
	r.n_prompt = 2;
	r.max_new = 101;
	CHECK(ringlm_submit(c, &r, NULL) == -E2BIG);

	/* max clients: c + a raw client fill both slots; a third is refused, clearly, and counted */
	struct raw_client w;
	REQUIRE(raw_client_attach(rt.sock, &w) == 0);
	long long refused0 = rt_stat(c, "refused");
	struct ringlm_params pp = ringlm_default_params();
	pp.socket = rt.sock;
	CHECK(ringlm_connect(&pp, &c3) == -EUSERS);
	CHECKF(strstr(ringlm_last_error(), "--max-clients"), "message: %s", ringlm_last_error());
	CHECK(rt_settle(c, "refused", refused0 + 1));   /* counted just after the reply goes out */

	/* the runtime's own checks, through a raw client that bypasses the library's */
	struct { const char *what; struct rl_req q; int code; const char *counter; } cases[] = {
		{ "rid over --max-inflight", raw_req(4, 2, 5), -EINVAL, "rejected_invalid" },
		{ "prompt over --max-prompt", raw_req(0, 65, 5), -E2BIG, "rejected_limit" },
		{ "max_new over --max-new", raw_req(0, 2, 101), -E2BIG, "rejected_limit" },
		{ "prompt id outside the vocabulary", raw_req(0, 2, 5), -ERANGE, "rejected_invalid" },
		{ "deadline already past", raw_req(0, 2, 5), -ETIMEDOUT, "rejected_invalid" },
		{ "NaN temperature", raw_req(0, 2, 5), -EINVAL, "rejected_invalid" },
		{ "negative temperature", raw_req(0, 2, 5), -EINVAL, "rejected_invalid" },
		{ "top_p > 1", raw_req(0, 2, 5), -EINVAL, "rejected_invalid" },
		{ "top_p NaN", raw_req(0, 2, 5), -EINVAL, "rejected_invalid" },
		{ "stop id outside the vocabulary", raw_req(0, 2, 5), -ERANGE, "rejected_invalid" },
		{ "unknown op", raw_req(0, 2, 5), -EINVAL, "rejected_invalid" },
		{ "empty prompt", raw_req(0, 0, 5), -EINVAL, "rejected_invalid" },
	};
	cases[4].q.deadline_ns = 1;
	cases[5].q.temperature = NAN;
	cases[6].q.temperature = -1;
	cases[7].q.top_p = 1.5f;
	cases[8].q.top_p = NAN;
	cases[9].q.n_stop = 1, cases[9].q.stop[0] = VOCAB;
	cases[10].q.op = 77;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		long long before = rt_stat(c, cases[i].counter);
		uint32_t outside[2] = { 3, VOCAB + 5 };
		raw_client_submit(&w, &cases[i].q, i == 3 ? outside : NULL);
		uint16_t type = 0;
		int code = raw_client_result(&w, cases[i].q.rid, &type);
		CHECKF(type == RINGLM_EV_ERROR && code == cases[i].code, "%s: type %u code %d, want %d",
		       cases[i].what, type, code, cases[i].code);
		CHECKF(rt_settle(c, cases[i].counter, before + 1), "%s: %s did not move", cases[i].what, cases[i].counter);
	}
	/* a duplicate live id: -EBUSY, counted as busy */
	struct rl_req big = raw_req(1, 2, 100);
	raw_client_submit(&w, &big, NULL);
	long long busy0 = rt_stat(c, "rejected_busy");
	raw_client_submit(&w, &big, NULL);
	uint16_t type = 0;
	CHECK(raw_client_result(&w, 1, &type) == -EBUSY && type == RINGLM_EV_ERROR);
	CHECK(rt_settle(c, "rejected_busy", busy0 + 1));
	raw_client_close(&w);
	/* the slot frees: a new client gets in */
	CHECK(rt_settle(c, "clients", 1));
	REQUIRE(rt_connect(&rt, &c2, 0) == 0);
	ringlm_close(c2);
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* ---- isolation ------------------------------------------------------------------------------ */

/* The runtime's own socket folder is created 0711 and never changed afterwards; access is on
 * each daemon's socket file: 0600, 0660 with the allowed gid as its group (--allow-gid), 0666
 * with --allow-uid (SO_PEERCRED decides). */
static void faults_socket_dir_mode(void)
{
	char tmpl[] = "/tmp/rlfz-XXXXXX";
	REQUIRE(mkdtemp(tmpl));
	for (int mode = 0; mode < 3; mode++) {
		char dir[128];
		snprintf(dir, sizeof dir, "%s/d%d", tmpl, mode);
		setenv("RINGLM_SOCKET_DIR", dir, 1);
		struct rt_child rt;
		gid_t g = getegid() + 1;
		char args[128];
		if (mode == 1)
			snprintf(args, sizeof args, "--sim-vocab 1000 --allow-gid %u", (unsigned)g);
		else
			snprintf(args, sizeof args, "--sim-vocab 1000%s", mode == 2 ? " --allow-uid 65534" : "");
		int rc = rt_start(&rt, args);
		unsetenv("RINGLM_SOCKET_DIR");
		REQUIRE(rc == 0);
		struct stat st, ss;
		REQUIRE(stat(dir, &st) == 0 && stat(rt.sock, &ss) == 0);
		CHECKF((st.st_mode & 07777) == 0711u, "folder mode %o", st.st_mode & 07777);
		unsigned want = mode == 0 ? 0600 : mode == 1 ? 0660 : 0666;
		CHECKF((ss.st_mode & 0777) == want, "socket mode %o, want %o", ss.st_mode & 0777, want);
		if (mode == 1 && geteuid() == 0)
			CHECK(ss.st_gid == g);
		CHECK(rt_stop(&rt) == 0);
		rmdir(dir);
	}
	rmdir(tmpl);
}

/* A folder that exists keeps its mode: a shared 1777 folder, one of ours at 0755 (as the
 * working folder would be), and the runtime's own folder after a second daemon starts
 * beside one with --allow-uid (which must stay reachable by the allowed uid). A folder any
 * user can write without the sticky bit is refused with a reason. */
static void faults_socket_dir_untouched(void)
{
	char tmpl[] = "/tmp/rlfz-XXXXXX";
	REQUIRE(mkdtemp(tmpl) && chmod(tmpl, 0711) == 0);   /* other uids pass through */
	unsigned modes[] = { 01777, 0755 };
	for (int i = 0; i < 2; i++) {
		char dir[128];
		snprintf(dir, sizeof dir, "%s/m%d", tmpl, i);
		REQUIRE(mkdir(dir, 0700) == 0 && chmod(dir, modes[i]) == 0);
		struct rl_rt_params p;
		rl_rt_default_params(&p);
		char sock[160], err[512] = "";
		snprintf(sock, sizeof sock, "%s/s", dir);
		p.socket = sock;
		p.backend = "sim";
		pid_t pid = rl_rt_fork(&p, err, sizeof err);
		CHECKF(pid > 0, "start in a %o folder: %s", modes[i], err);
		struct stat st;
		REQUIRE(stat(dir, &st) == 0);
		CHECKF((st.st_mode & 07777) == modes[i], "folder was %o, now %o", modes[i], st.st_mode & 07777);
		if (pid > 0) {
			kill(pid, SIGTERM);
			waitpid(pid, NULL, 0);
		}
		REQUIRE(stat(dir, &st) == 0);
		CHECKF((st.st_mode & 07777) == modes[i], "after stop: folder was %o, now %o", modes[i], st.st_mode & 07777);
		unlink(sock);
		rmdir(dir);
	}
	/* 0777 without the sticky bit: refused, one line naming the folder and the fix */
	char dir[128], sock[160], err[512] = "";
	snprintf(dir, sizeof dir, "%s/open", tmpl);
	REQUIRE(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
	snprintf(sock, sizeof sock, "%s/s", dir);
	struct rl_rt_params p;
	rl_rt_default_params(&p);
	p.socket = sock;
	p.backend = "sim";
	pid_t pid = rl_rt_fork(&p, err, sizeof err);
	CHECKF(pid < 0 && strstr(err, dir) && strstr(err, "sticky") && !strchr(err, '\n'), "got %d '%s'", (int)pid, err);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	rmdir(dir);
	/* two daemons in the runtime's own folder: the second must not revoke the first's
	 * --allow-uid (it used to chmod the shared folder back to 0700) */
	if (geteuid() == 0) {
		char own[128];
		snprintf(own, sizeof own, "%s/own", tmpl);
		setenv("RINGLM_SOCKET_DIR", own, 1);
		struct rt_child pa, pb;
		REQUIRE(rt_start(&pa, "--sim-vocab 1000 --allow-uid 65534") == 0);
		REQUIRE(rt_start(&pb, "--sim-vocab 1000") == 0);
		unsetenv("RINGLM_SOCKET_DIR");
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		pid_t c = fork();
		if (c == 0) {
			if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
				_exit(9);
			struct ringlm_params cp = ringlm_default_params();
			cp.socket = pa.sock;
			struct ringlm *cl;
			int e = ringlm_connect(&cp, &cl);
			char msg[300];
			snprintf(msg, sizeof msg, "%d %s", e, e ? ringlm_last_error() : "");
			(void)!write(pfd[1], msg, strlen(msg) + 1);
			if (!e)
				ringlm_close(cl);
			_exit(0);
		}
		close(pfd[1]);
		char msg[300] = "";
		(void)!read(pfd[0], msg, sizeof msg - 1);
		close(pfd[0]);
		waitpid(c, NULL, 0);
		CHECKF(atoi(msg) == 0, "uid 65534 refused by the first daemon after a second started: %s", msg);
		CHECK(rt_stop(&pb) == 0);
		CHECK(rt_stop(&pa) == 0);
		rmdir(own);
	}
	rmdir(tmpl);
}

/* Stats are published before the events they explain: a client that has read its request's
 * DONE (or a cancel's) never then reads stats that count the request as active. */
static void faults_stats_before_events(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000") == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	uint32_t p[2] = { 5, 6 };
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = 2;
	int stale = 0, rounds = 200;
	for (int i = 0; i < rounds; i++) {
		uint32_t id;
		r.max_new = i % 2 ? 3 : 500;
		REQUIRE(ringlm_submit(c, &r, &id) == 0);
		if (!(i % 2))
			REQUIRE(ringlm_cancel(c, id) == 0);
		struct ringlm_event ev[64];
		int done = 0;
		while (!done) {
			int k = ringlm_wait(c, ev, 64, 10000);
			REQUIRE(k > 0);
			for (int j = 0; j < k; j++)
				done |= ev[j].type != RINGLM_EV_TOKEN;
		}
		long long a = rt_stat(c, "active_requests"), d = rt_stat(c, "requests_done");
		stale += a != 0 || d != i + 1;
	}
	CHECKF(!stale, "%d of %d rounds read stale stats after the final event", stale, rounds);
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* ---- the pre-attach window --------------------------------------------------------------- */

/* A child that keeps n silent connections to sock open for ms milliseconds, re-opening each
 * as soon as the runtime drops it; as uid when uid >= 0 (needs root). Exits 0. */
static pid_t flooder(const char *sock, int n, int ms, int uid)
{
	pid_t pid = fork();
	if (pid)
		return pid;
	if (uid >= 0 && (setgroups(0, NULL) || setgid(uid) || setuid(uid)))
		_exit(9);
	int fd[256];
	for (int i = 0; i < n; i++)
		fd[i] = -1;
	uint64_t end = rl_now_ns() + (uint64_t)ms * 1000000;
	while (rl_now_ns() < end) {
		for (int i = 0; i < n; i++) {
			if (fd[i] >= 0) {
				struct pollfd pf = { .fd = fd[i], .events = POLLIN | POLLRDHUP };
				if (poll(&pf, 1, 0) == 0)
					continue;      /* still held open by the runtime */
				close(fd[i]);
			}
			fd[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			struct sockaddr_un a = { .sun_family = AF_UNIX };
			snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
			(void)!connect(fd[i], (struct sockaddr *)&a, sizeof a);
		}
		usleep(2000);
	}
	_exit(0);
}

/* Silent connections cannot lock clients out: more than the runtime's pre-attach entries,
 * from the client's own uid (and, as root, from an allowed and a disallowed uid), held open
 * and re-opened as fast as they are dropped, while a client attaches again and again. Every
 * attach succeeds and the drops are counted; the disallowed uid never takes an entry. */
static void faults_preattach_flood(void)
{
	struct rt_child rt;
	int root = geteuid() == 0;
	REQUIRE(rt_start(&rt, root ? "--sim-vocab 1000 --max-clients 4 --allow-uid 65534"
				   : "--sim-vocab 1000 --max-clients 4") == 0);
	struct ringlm_params p = ringlm_default_params();
	p.socket = rt.sock;
	p.observe = 1;
	struct ringlm *obs;
	REQUIRE(ringlm_connect(&p, &obs) == 0);
	p.observe = 0;
	pid_t fl[3];
	int nfl = 0;
	fl[nfl++] = flooder(rt.sock, 150, 3000, -1);
	if (root) {
		fl[nfl++] = flooder(rt.sock, 150, 3000, 65534);   /* allowed in */
		fl[nfl++] = flooder(rt.sock, 150, 3000, 65533);   /* not allowed */
	}
	/* wait until the flood has filled the pre-attach entries and drops are happening */
	for (int i = 0; i < 2000 && rt_stat(obs, "dropped_preattach") < 50; i++)
		usleep(1000);
	int ok = 0, tries = 20;
	uint64_t worst = 0;
	for (int i = 0; i < tries; i++) {
		struct ringlm *c;
		uint64_t t0 = rl_now_ns();
		int rc = ringlm_connect(&p, &c);
		uint64_t dt = rl_now_ns() - t0;
		worst = dt > worst ? dt : worst;
		if (rc == 0) {
			ok += serves(c);
			ringlm_close(c);
		} else {
			fprintf(stderr, "  attach %d under flood: %s\n", i, ringlm_last_error());
		}
	}
	for (int i = 0; i < nfl; i++)
		CHECK(wait_ok(fl[i]));
	long long dropped = rt_stat(obs, "dropped_preattach"), ruid = rt_stat(obs, "refused_uid");
	printf("  %d/%d attaches served under a flood of %d x 150 silent connections (slowest attach %.1f ms); "
	       "dropped %lld silent connections, refused %lld at accept\n",
	       ok, tries, nfl, worst / 1e6, dropped, ruid);
	CHECKF(ok == tries, "%d of %d attaches failed under the flood", tries - ok, tries);
	CHECK(dropped > 0);
	if (root)
		CHECKF(ruid > 0, "the disallowed uid was never refused at accept");
	/* a connection that says nothing is dropped within the pre-attach timeout */
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", rt.sock);
	REQUIRE(connect(s, (struct sockaddr *)&a, sizeof a) == 0);
	struct pollfd pf = { .fd = s, .events = POLLIN | POLLRDHUP };
	uint64_t t0 = rl_now_ns();
	CHECKF(poll(&pf, 1, 30000) == 1, "a silent connection was kept 30 s");
	printf("  a silent connection was closed after %.0f ms\n", (rl_now_ns() - t0) / 1e6);
	close(s);
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* Attached clients that never submit hold every --max-clients slot: ringlm stats still
 * works (observers take no slot) and the refusal is counted. As root with --allow-uid, a
 * foreign uid cannot take the last slot, which stays the owner's. */
static void faults_idle_clients_and_observers(void)
{
	struct rt_child rt;
	int root = geteuid() == 0;
	REQUIRE(rt_start(&rt, root ? "--sim-vocab 1000 --max-clients 2 --allow-uid 65534"
				   : "--sim-vocab 1000 --max-clients 2") == 0);
	struct raw_client a, b;
	struct ringlm_params p = ringlm_default_params();
	p.socket = rt.sock;
	if (root) {
		/* nobody attaches once (1 of 2), then is refused the owner's last slot */
		int up[2], down[2];
		REQUIRE(pipe(up) == 0 && pipe(down) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			close(up[0]);
			close(down[1]);
			if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
				_exit(9);
			struct raw_client x, y;
			int e1 = raw_client_attach(rt.sock, &x), e2 = raw_client_attach(rt.sock, &y);
			char out[64];
			snprintf(out, sizeof out, "%d %d", e1, e2);
			(void)!write(up[1], out, strlen(out) + 1);
			char done;
			(void)!read(down[0], &done, 1);   /* hold x until the parent is done */
			_exit(0);
		}
		close(up[1]);
		close(down[0]);
		char msg[64] = "";
		int e1 = 1, e2 = 1;
		(void)!read(up[0], msg, sizeof msg - 1);
		sscanf(msg, "%d %d", &e1, &e2);
		CHECKF(e1 == 0 && e2 == -EUSERS, "nobody: first attach %d, second %d (want 0, -EUSERS)", e1, e2);
		struct ringlm *own = NULL;
		CHECKF(ringlm_connect(&p, &own) == 0, "the owner was locked out: %s", ringlm_last_error());
		p.observe = 1;
		struct ringlm *obs;
		REQUIRE(ringlm_connect(&p, &obs) == 0);
		CHECK(rt_stat(obs, "refused_full") >= 1);
		ringlm_close(obs);
		p.observe = 0;
		ringlm_close(own);
		close(down[1]);
		close(up[0]);
		CHECK(wait_ok(pid));
	}
	/* two idle clients take both slots */
	for (int i = 0; i < 1000; i++) {
		if (raw_client_attach(rt.sock, &a) == 0)
			break;
		usleep(2000);     /* the slots of the root part are freed as the runtime sees them go */
	}
	REQUIRE(raw_client_attach(rt.sock, &b) == 0);
	struct ringlm *c;
	CHECK(ringlm_connect(&p, &c) == -EUSERS);
	p.observe = 1;
	REQUIRE(ringlm_connect(&p, &c) == 0);
	char js[8192];
	CHECK(ringlm_stats_json(c, js, sizeof js) > 0);
	CHECK(rt_stat(c, "clients") == 2);
	CHECK(rt_stat(c, "refused_full") >= 1);
	CHECK(rt_stat(c, "observers") >= 1);
	struct ringlm_info info;
	CHECK(ringlm_get_info(c, &info) == 0 && info.vocab_size == VOCAB && info.max_new > 0);
	/* an observer cannot submit or poll, and says so */
	uint32_t ids[2] = { 5, 6 };
	struct ringlm_request r = ringlm_default_request();
	r.prompt = ids;
	r.n_prompt = 2;
	struct ringlm_event ev[4];
	CHECK(ringlm_submit(c, &r, NULL) == -EPERM && strstr(ringlm_last_error(), "observes"));
	CHECK(ringlm_poll(c, ev, 4) == -EPERM);
	CHECK(ringlm_wait(c, ev, 4, 0) == -EPERM);
	ringlm_close(c);
	raw_client_close(&a);
	raw_client_close(&b);
	CHECK(rt_stop(&rt) == 0);
}

/* Segments are memfds: in no filesystem, handed only to their client. The info segment
 * cannot be mapped writable, and no segment can be resized. As root, a client running as
 * nobody (allowed with --allow-uid) can open none of the runtime's fds through /proc, so it
 * cannot reach another client's segment; and a uid that is not allowed is refused. */
static void faults_isolation(void)
{
	struct rt_child rt;
	int root = geteuid() == 0;
	REQUIRE(rt_start(&rt, root ? "--sim-vocab 1000 --allow-uid 65534" : "--sim-vocab 1000") == 0);
	struct raw_client a;
	REQUIRE(raw_client_attach(rt.sock, &a) == 0);
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, a.fds[1], 0);
	CHECKF(m == MAP_FAILED && (errno == EPERM || errno == EACCES), "info segment mapped writable");
	if (m != MAP_FAILED)
		munmap(m, 4096);
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, a.fds[1], 0);
	CHECK(m != MAP_FAILED && mprotect(m, 4096, PROT_READ | PROT_WRITE) < 0);
	if (m != MAP_FAILED)
		munmap(m, 4096);
	CHECK(ftruncate(a.fds[0], (off_t)a.size * 2) < 0 && errno == EPERM);
	CHECK(ftruncate(a.fds[1], 1 << 20) < 0 && errno == EPERM);
	char link[256] = "";
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", a.fds[0]);
	CHECK(readlink(path, link, sizeof link - 1) > 0 && strstr(link, "memfd:"));
	if (!root) {
		raw_client_close(&a);
		CHECK(rt_stop(&rt) == 0);
		SKIP("the cross-uid part needs root to switch uids (memfd and sealing checks passed)");
	}
	for (int allowed = 1; allowed >= 0; allowed--) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			uid_t u = allowed ? 65534 : 65533;
			if (setgroups(0, NULL) || setgid(u) || setuid(u))
				_exit(9);
			char out[512];
			struct raw_client b;
			int e = raw_client_attach(rt.sock, &b), opened = 0, tried = 0;
			if (!e) {
				/* every fd of the runtime, and every fd of the other client (us as root) */
				pid_t targets[2] = { rt.pid, getppid() };
				for (int t = 0; t < 2; t++) {
					for (int fd = 0; fd < 64; fd++) {
						char p2[64];
						snprintf(p2, sizeof p2, "/proc/%d/fd/%d", (int)targets[t], fd);
						int x = open(p2, O_RDWR);
						if (x < 0)
							x = open(p2, O_RDONLY);
						tried++;
						if (x >= 0) {
							opened++;
							close(x);
						}
					}
					char p3[64];
					snprintf(p3, sizeof p3, "/proc/%d/mem", (int)targets[t]);
					int x = open(p3, O_RDONLY);
					if (x >= 0) {
						opened++;
						close(x);
					}
				}
				raw_client_close(&b);
			}
			snprintf(out, sizeof out, "%d %d %d", e, opened, tried);
			(void)!write(pfd[1], out, strlen(out) + 1);
			_exit(0);
		}
		close(pfd[1]);
		char msg[512] = "";
		(void)!read(pfd[0], msg, sizeof msg - 1);
		close(pfd[0]);
		CHECK(wait_ok(pid));
		int e = 0, opened = -1, tried = 0;
		sscanf(msg, "%d %d %d", &e, &opened, &tried);
		if (allowed) {
			CHECKF(e == 0 && opened == 0 && tried == 128, "nobody: attach %d, opened %d of %d foreign fds", e, opened, tried);
		} else {
			CHECKF(e == -EACCES, "a disallowed uid got %d", e);
		}
	}
	raw_client_close(&a);
	CHECK(rt_stop(&rt) == 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(faults_limits_rejected_and_counted);
	RUN(faults_socket_dir_mode);
	RUN(faults_socket_dir_untouched);
	RUN(faults_isolation);
	RUN(faults_stats_before_events);
	RUN(faults_preattach_flood);
	RUN(faults_idle_clients_and_observers);
	RUN(faults_sigterm_drains);
	RUN(faults_runtime_kill9_unblocks_everyone);
	RUN(faults_sigstop_client_pauses_only_itself);
	RUN(faults_hostile_racing_writer);
	RUN(faults_kill9_random_points);
	TEST_MAIN_END();
}
