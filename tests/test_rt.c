/* test_rt.c — the whole data path between real processes: a runtime child (sim backend) and
 * client children attached through the socket, talking through shared-memory rings.
 * Every token is checked against the sim oracle (rl_backend_sim.h).
 * Tests: runtime/loop, ipc, clients/libringlm.
 */
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "tests/rl_test.h"
#include "tests/rt_harness.h"
#include "ipc/rl_ipc.h"
#include "runtime/loop/rl_idle.h"

#define VOCAB 1000

static int wait_children(pid_t *pids, int n)
{
	int fails = 0;
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "client %d failed (status %d)\n", i, st);
			fails++;
		}
	}
	return fails;
}

/* 4 client processes × 100k requests, every token checked for order and value. */
static void rt_stress_4_clients_100k(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --max-inflight 64 --max-batch-tokens 512") == 0);
	long n = 100000 / rl_slow();
	pid_t pids[4];
	for (int i = 0; i < 4; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(rt_run_client(&rt, 1000 + i, n, 48, i == 3, 4, 3));
	}
	CHECK(wait_children(pids, 4) == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	CHECK(rt_stat(c, "requests_done") == 4 * n);
	CHECK(rt_stat(c, "active_requests") == 0);
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* Clients attach and leave out of order while others are served: nine clients over eight
 * slots, finishing in an order unlike their attachment's, so slots are freed from the middle
 * of the runtime's list of attached clients and reused; every token is checked. */
static void rt_clients_come_and_go(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --max-clients 8 --max-inflight 16") == 0);
	struct ringlm *obs;
	REQUIRE(rt_connect(&rt, &obs, 0) == 0);
	static const long len[9] = { 900, 100, 600, 50, 1200, 300, 150, 700, 400 };
	long total = 0;
	pid_t pids[9];
	for (int i = 0; i < 9; i++) {
		if (i == 6)             /* the last three once some of the first six have gone */
			CHECK(rt_settle_above(obs, "detaches", 1));
		const long n = len[i] / rl_slow() + 1;
		total += n;
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(rt_run_client(&rt, 77 + (uint64_t)i, n, 4, i == 4, 6, 5));
	}
	CHECK(wait_children(pids, 9) == 0);
	CHECK(rt_settle(obs, "clients", 1));
	CHECK(rt_stat(obs, "requests_done") == total);
	CHECK(rt_stat(obs, "detaches") == 9);
	CHECK(rt_expect_idle(obs));
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* A client that stops reading: its event ring fills, its sequences pause, another client
 * is served meanwhile, and once it reads again it gets every token in order. */
static void rt_slow_client_loses_nothing(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --event-ring 64 --sim-step-us 50") == 0);
	struct ringlm *slow;
	REQUIRE(rt_connect(&rt, &slow, 0) == 0);
	uint32_t prompts[8][3], expect[8][100];
	uint32_t ids[8];
	for (int r = 0; r < 8; r++) {
		struct ringlm_request q = ringlm_default_request();
		for (int k = 0; k < 3; k++)
			prompts[r][k] = (uint32_t)(r * 31 + k * 7 + 5);
		q.prompt = prompts[r];
		q.n_prompt = 3;
		q.max_new = 100;
		REQUIRE(ringlm_submit(slow, &q, &ids[r]) == 0);
		sim_expect(prompts[r], 3, 100, VOCAB, expect[r]);
	}
	/* let the slow client's ring fill up (64 slots < 800 events) */
	long long paused = 0;
	for (int i = 0; i < 2000 && paused <= 0; i++) {
		usleep(1000);
		paused = rt_stat(slow, "paused");
	}
	CHECKF(paused > 0, "the slow client's sequences never paused");
	/* another client process is fully served while the slow one does not read */
	pid_t pid = fork();
	if (pid == 0)
		_exit(rt_run_client(&rt, 77, 200, 8, 0, 4, 3));
	CHECK(wait_children(&pid, 1) == 0);
	/* now drain: every token, in order, none lost */
	uint32_t got[8] = { 0 };
	int done = 0, bad = 0;
	struct ringlm_event ev[64];
	while (done < 8 && !bad) {
		int k = ringlm_wait(slow, ev, 64, 10000);
		if (k <= 0) {
			bad++;
			break;
		}
		for (int i = 0; i < k; i++) {
			int r = -1;
			for (int j = 0; j < 8; j++)
				if (ids[j] == ev[i].id)
					r = j;
			if (r < 0) {
				bad++;
				continue;
			}
			if (ev[i].type == RINGLM_EV_TOKEN) {
				bad += ev[i].index != got[r] || ev[i].token != expect[r][got[r]];
				got[r]++;
			} else {
				bad += ev[i].code != RINGLM_FIN_LENGTH || got[r] != 100;
				done++;
			}
		}
	}
	CHECK(!bad);
	CHECK(done == 8);
	ringlm_close(slow);
	CHECK(rt_stop(&rt) == 0);
}

/* kill -9 of clients mid-stream: the runtime keeps serving, recycles the slot and frees every
 * KV block and request the client held. */
static void rt_kill9_midstream_recycles(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 100 --max-clients 4 --prefix-cache off") == 0);
	struct ringlm *obs;
	REQUIRE(rt_connect(&rt, &obs, 0) == 0);
	for (int round = 0; round < 10; round++) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			struct ringlm *c;
			if (rt_connect(&rt, &c, round & 1))
				_exit(1);
			uint32_t p[40];
			for (int i = 0; i < 40; i++)
				p[i] = (uint32_t)(i * 13 + round);
			for (int r = 0; r < 4; r++) {
				struct ringlm_request q = ringlm_default_request();
				q.prompt = p;
				q.n_prompt = 40;
				q.max_new = 5000;
				ringlm_submit(c, &q, NULL);
			}
			struct ringlm_event ev[16];
			int seen = 0;
			while (seen < 20) {
				int k = ringlm_wait(c, ev, 16, 5000);
				if (k <= 0)
					_exit(2);
				seen += k;
			}
			(void)!write(pfd[1], "x", 1);
			pause();
			_exit(0);
		}
		close(pfd[1]);
		char x;
		CHECK(read(pfd[0], &x, 1) == 1);
		close(pfd[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		CHECK(rt_settle(obs, "clients", 1));
		CHECK(rt_expect_idle(obs));
	}
	/* still serving */
	pid_t pid = fork();
	if (pid == 0)
		_exit(rt_run_client(&rt, 5, 50, 4, 0, 4, 3));
	CHECK(wait_children(&pid, 1) == 0);
	CHECK(rt_stat(obs, "attaches") >= 12);
	ringlm_close(obs);
	CHECK(rt_stop(&rt) == 0);
}

/* Raw attach without libringlm, so the test can write anything into its own segment. */
/* A hostile client scribbles over every field of its segment. The runtime answers with error
 * events or detaches it, keeps serving a good client concurrently, and survives. */
static void rt_hostile_client_is_contained(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000") == 0);
	pid_t good = fork();
	if (good == 0)
		_exit(rt_run_client(&rt, 99, 20000 / rl_slow(), 16, 0, 4, 3));
	uint64_t s = 12345;
	long errors_seen = 0;
	for (int round = 0; round < 40; round++) {
		struct raw_client r;
		REQUIRE(raw_client_attach(rt.sock, &r) == 0);
		struct rl_ring_hdr *rq = r.rq, *ev = r.ev;
		struct rl_req *slots = r.slots;
		uint32_t *arena = r.arena;
		/* garbage records, published honestly: each must get an event (error, or tokens if
		 * the garbage happens to be a valid request) */
		for (uint32_t i = 0; i < r.h.arena_ids; i++)
			arena[i] = (uint32_t)rt_xs(&s);
		uint32_t nrec = 32;
		for (uint32_t i = 0; i < nrec; i++) {
			uint8_t *b = (uint8_t *)&slots[i];
			for (size_t k = 0; k < sizeof(struct rl_req); k++)
				b[k] = (uint8_t)rt_xs(&s);
			if (round & 1)       /* half the time: plausible op and rid, garbage elsewhere */
				slots[i].op = RL_OP_SUBMIT, slots[i].rid = i, slots[i].n_prompt = 1 + rt_xs(&s) % 8;
		}
		atomic_store(&rq->prod, nrec);
		for (int spin = 0; spin < 2000 && atomic_load(&rq->cons) != nrec; spin++)
			usleep(500);
		CHECK(atomic_load(&rq->cons) == nrec);
		/* the runtime publishes a step's events after taking its records: wait for them
		 * (nearly every record gets one; a garbage CANCEL of nothing gets none) */
		int64_t av = 0;
		for (int spin = 0; spin < 100 && (av = rl_ring_cons_avail(&r.evc)) < nrec; spin++)
			usleep(2000);
		errors_seen += av > 0 ? av : 0;
		/* then the ring indices and the doorbell words themselves */
		struct rl_seg_ctl *ctl = (void *)(r.seg + r.h.ctl_off);
		atomic_store(&ctl->rt_bell, (uint32_t)rt_xs(&s));
		atomic_store(&ctl->cl_sleeping, (uint32_t)rt_xs(&s));
		atomic_store(&ev->cons, (uint32_t)rt_xs(&s));
		atomic_store(&rq->prod, (uint32_t)rt_xs(&s) | 0x80000000u);
		usleep(2000);
		raw_client_close(&r);
	}
	CHECK(errors_seen >= 40 * 32 / 2);
	CHECK(wait_children(&good, 1) == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	CHECK(rt_settle(c, "clients", 1));
	CHECK(rt_stat(c, "hostile_clients") >= 1);
	CHECK(rt_stat(c, "rejected_invalid") + rt_stat(c, "rejected_limit") + rt_stat(c, "rejected_busy") > 0);
	CHECK(rt_expect_idle(c));
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* Bad requests through the API get one error event each and lose nothing accepted. */
static void rt_bad_requests_get_errors(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --max-new 100") == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	uint32_t good[2] = { 3, 4 }, outside[2] = { 3, 5000 };
	struct ringlm_request r = ringlm_default_request();
	r.prompt = good;
	r.n_prompt = 2;
	r.max_new = 10;
	uint32_t id_ok, id_range, id_nan;
	CHECK(ringlm_submit(c, &r, &id_ok) == 0);
	r.prompt = outside;
	CHECK(ringlm_submit(c, &r, &id_range) == 0);
	r.prompt = good;
	r.temperature = __builtin_nanf("");
	CHECK(ringlm_submit(c, &r, &id_nan) == 0);
	r.temperature = 0;
	r.max_new = 1000;
	CHECK(ringlm_submit(c, &r, NULL) == -E2BIG);      /* caught in the library already */
	r.max_new = 10;
	r.deadline_ns = 1;                                /* long past */
	uint32_t id_late;
	CHECK(ringlm_submit(c, &r, &id_late) == 0);
	int got_ok = 0, err_range = 0, err_nan = 0, err_late = 0, left = 4;
	struct ringlm_event ev[32];
	while (left > 0) {
		int k = ringlm_wait(c, ev, 32, 5000);
		REQUIRE(k > 0);
		for (int i = 0; i < k; i++) {
			if (ev[i].id == id_ok && ev[i].type == RINGLM_EV_TOKEN)
				got_ok++;
			if (ev[i].type == RINGLM_EV_TOKEN)
				continue;
			left--;
			if (ev[i].id == id_range) err_range = ev[i].code;
			if (ev[i].id == id_nan) err_nan = ev[i].code;
			if (ev[i].id == id_late) err_late = ev[i].code;
		}
	}
	CHECK(got_ok == 10);
	CHECK(err_range == -ERANGE);
	CHECK(err_nan == -EINVAL);
	CHECK(err_late == -ETIMEDOUT);
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* Cancel mid-stream: DONE(cancel), blocks freed. */
static void rt_cancel_frees(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 200 --prefix-cache off") == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	uint32_t p[100];
	for (int i = 0; i < 100; i++)
		p[i] = (uint32_t)i;
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = 100;
	r.max_new = 100000 > 8000 ? 8000 : 100000;
	uint32_t id;
	REQUIRE(ringlm_submit(c, &r, &id) == 0);
	struct ringlm_event ev[16];
	int toks = 0, code = 0;
	while (toks < 5) {
		int k = ringlm_wait(c, ev, 16, 5000);
		REQUIRE(k > 0);
		toks += k;
	}
	CHECK(ringlm_cancel(c, id) == 0);
	for (int done = 0; !done;) {
		int k = ringlm_wait(c, ev, 16, 5000);
		REQUIRE(k > 0);
		for (int i = 0; i < k; i++)
			if (ev[i].type != RINGLM_EV_TOKEN)
				done = 1, code = ev[i].code;
	}
	CHECK(code == RINGLM_FIN_CANCEL);
	CHECK(rt_expect_idle(c));
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* ringlm_wait sleeps and is woken; the runtime sleeps and is woken — futex path and the
 * forced eventfd fallback. */
static void wake_paths(const char *wake, int fallback)
{
	char args[128];
	snprintf(args, sizeof args, "--sim-vocab 1000 --idle-spin-us 0 --idle-adapt-ms 0 --sim-step-us 20000 --wake %s", wake);
	struct rt_child rt;
	if (rt_start(&rt, args))
		SKIP("runtime cannot start with --wake %s on this kernel", wake);
	struct ringlm_params p = ringlm_default_params();
	p.socket = rt.sock;
	p.spin_us = 0;                 /* sleep at once */
	p.force_fallback = fallback;
	struct ringlm *c;
	REQUIRE(ringlm_connect(&p, &c) == 0);
	struct ringlm_info info;
	ringlm_get_info(c, &info);
	CHECK(info.futex_wake == !fallback);
	long long sleeps_at_submit = 0;
	for (int round = 0; round < 3; round++) {
		/* Idle (spin 0), the runtime sleeps again after the last round's work: wait for that
		 * count to pass the one read at that round's submit. A count read after the last
		 * event is no baseline: the runtime may already be asleep by then (a sanitized run
		 * on a loaded machine showed it), and a fixed wait is no proof either. */
		CHECK(rt_settle_above(c, "sleeps", sleeps_at_submit));
		usleep(2000);
		sleeps_at_submit = rt_stat(c, "sleeps");
		uint32_t prompt[2] = { 7, (uint32_t)round }, want[3];
		sim_expect(prompt, 2, 3, VOCAB, want);
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = 2;
		r.max_new = 3;
		REQUIRE(ringlm_submit(c, &r, NULL) == 0);
		int got = 0, done = 0;
		struct ringlm_event ev[8];
		while (!done) {
			int k = ringlm_wait(c, ev, 8, 10000);
			REQUIRE(k > 0);
			for (int i = 0; i < k; i++) {
				if (ev[i].type == RINGLM_EV_TOKEN)
					CHECK(ev[i].token == want[got++]);
				else
					done = 1;
			}
		}
		CHECK(got == 3);
	}
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}
static void rt_wait_wakes_futex(void) { wake_paths("futex", 0); }
static void rt_wait_wakes_eventfd_fallback(void) { wake_paths("eventfd", 1); }

/* A uid that is not allowed is refused by SO_PEERCRED with a clear message. */
static void rt_refuses_disallowed_uid(void)
{
	if (geteuid() != 0)
		SKIP("needs root to switch uids");
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --allow-uid 65534") == 0);
	for (int allowed = 0; allowed < 2; allowed++) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		pid_t pid = fork();
		if (pid == 0) {
			uid_t u = allowed ? 65534 : 65533;
			if (setgroups(0, NULL) || setgid(u) || setuid(u))
				_exit(9);
			struct ringlm *c;
			int e = rt_connect(&rt, &c, 0);
			char msg[300];
			snprintf(msg, sizeof msg, "%d %s", e, ringlm_last_error());
			(void)!write(pfd[1], msg, strlen(msg) + 1);
			if (!e)
				ringlm_close(c);
			_exit(0);
		}
		close(pfd[1]);
		char msg[300] = "";
		(void)!read(pfd[0], msg, sizeof msg - 1);
		close(pfd[0]);
		waitpid(pid, NULL, 0);
		if (allowed) {
			CHECKF(atoi(msg) == 0, "allowed uid refused: %s", msg);
		} else {
			CHECKF(atoi(msg) == -EACCES && strstr(msg, "not allowed"), "got: %s", msg);
		}
	}
	CHECK(rt_stop(&rt) == 0);
	/* without --allow-uid the socket file itself (0600) refuses other uids: the message says
	 * how the runtime's owner admits them, not "is ringlmd running" */
	REQUIRE(rt_start(&rt, "--sim-vocab 1000") == 0);
	int pfd[2];
	REQUIRE(pipe(pfd) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(65533) || setuid(65533))
			_exit(9);
		struct ringlm *c;
		struct ringlm_params p = ringlm_default_params();
		p.socket = rt.sock;
		int e = ringlm_connect(&p, &c);
		char msg[300];
		snprintf(msg, sizeof msg, "%d %s", e, ringlm_last_error());
		(void)!write(pfd[1], msg, strlen(msg) + 1);
		_exit(0);
	}
	close(pfd[1]);
	char msg[300] = "";
	(void)!read(pfd[0], msg, sizeof msg - 1);
	close(pfd[0]);
	waitpid(pid, NULL, 0);
	CHECKF(atoi(msg) == -EACCES && strstr(msg, "--allow-uid 65533") && !strstr(msg, "is ringlmd running"),
	       "got: %s", msg);
	CHECK(rt_stop(&rt) == 0);
}

/* Embedded mode: the runtime thread inside this process, same API. */
static void embedded_sim_generates(void)
{
	struct ringlm_params p = ringlm_default_params();
	p.socket = NULL;
	p.backend = "sim";
	p.runtime_args = "--sim-vocab 1000";
	struct ringlm *c;
	REQUIRE(ringlm_connect(&p, &c) == 0);
	uint32_t prompt[3] = { 1, 2, 3 }, want[20];
	sim_expect(prompt, 3, 20, VOCAB, want);
	struct ringlm_request r = ringlm_default_request();
	r.prompt = prompt;
	r.n_prompt = 3;
	r.max_new = 20;
	REQUIRE(ringlm_submit(c, &r, NULL) == 0);
	int got = 0, done = 0;
	struct ringlm_event ev[32];
	while (!done) {
		int k = ringlm_wait(c, ev, 32, 5000);
		REQUIRE(k > 0);
		for (int i = 0; i < k; i++) {
			if (ev[i].type == RINGLM_EV_TOKEN)
				CHECK(ev[i].token == want[got++]);
			else
				done = 1;
		}
	}
	CHECK(got == 20);
	ringlm_close(c);
}

/* The runtime killed with -9: waits and submits return -ECONNRESET promptly. */
static void rt_kill9_runtime_clients_notice(void)
{
	struct rt_child rt;
	REQUIRE(rt_start(&rt, "--sim-vocab 1000 --sim-step-us 1000") == 0);
	struct ringlm *c;
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	uint32_t prompt[2] = { 1, 2 };
	struct ringlm_request r = ringlm_default_request();
	r.prompt = prompt;
	r.n_prompt = 2;
	r.max_new = 8000;
	REQUIRE(ringlm_submit(c, &r, NULL) == 0);
	struct ringlm_event ev[64];
	REQUIRE(ringlm_wait(c, ev, 64, 5000) > 0);
	kill(rt.pid, SIGKILL);
	waitpid(rt.pid, NULL, 0);
	int e = 0;
	for (int i = 0; i < 100 && e >= 0; i++)
		e = ringlm_wait(c, ev, 64, 1000);
	CHECK(e == -ECONNRESET);
	CHECK(ringlm_submit(c, &r, NULL) == -ECONNRESET);
	ringlm_close(c);
	/* a restarted runtime takes new clients */
	REQUIRE(rt_start(&rt, "--sim-vocab 1000") == 0);
	REQUIRE(rt_connect(&rt, &c, 0) == 0);
	ringlm_close(c);
	CHECK(rt_stop(&rt) == 0);
}

/* One thread submits (and cancels every 7th request) while another thread waits: the one
 * sharing libringlm allows (ringlm.h, Threading). Every request ends exactly once with the
 * sim's tokens, ids are reused without mix-ups, nothing is lost. Run under TSan too. */
struct sw_state {
	struct ringlm *c;
	_Atomic int submitted, ended, bad;
	uint32_t ids[2000];
};

static void *sw_waiter(void *arg)
{
	struct sw_state *st = arg;
	struct ringlm_event ev[64];
	uint32_t seen[2000] = { 0 };
	while (atomic_load(&st->ended) < 2000) {
		int k = ringlm_wait(st->c, ev, 64, 5000);
		if (k <= 0) {
			atomic_fetch_add(&st->bad, 1);
			return NULL;
		}
		for (int i = 0; i < k; i++) {
			uint64_t tag = ev[i].tag;
			if (tag >= 2000) {
				atomic_fetch_add(&st->bad, 1);
				continue;
			}
			if (ev[i].type == RINGLM_EV_TOKEN) {
				uint32_t want[8], prompt[2] = { (uint32_t)tag % 1000, (uint32_t)tag / 1000 + 7 };
				sim_expect(prompt, 2, 8, 1000, want);
				if (ev[i].index >= 8 || ev[i].token != want[ev[i].index]) {
					if (atomic_fetch_add(&st->bad, 1) < 3)
						fprintf(stderr, "  tag %llu index %u token %u want %u\n", (unsigned long long)tag, ev[i].index, ev[i].token, ev[i].index < 8 ? want[ev[i].index] : 0);
				}
				seen[tag]++;
			} else {
				if ((ev[i].code != RINGLM_FIN_LENGTH && ev[i].code != RINGLM_FIN_CANCEL) ||
				    (ev[i].code == RINGLM_FIN_LENGTH && seen[tag] != 8)) {
					if (atomic_fetch_add(&st->bad, 1) < 3)
						fprintf(stderr, "  tag %llu ended type %u code %d after %u tokens\n",
							(unsigned long long)tag, ev[i].type, ev[i].code, seen[tag]);
				}
				atomic_fetch_add(&st->ended, 1);
			}
		}
	}
	return NULL;
}

static void submit_and_wait_on_two_threads(void)
{
	struct ringlm_params p = ringlm_default_params();
	p.socket = NULL;
	p.backend = "sim";
	p.runtime_args = "--sim-vocab 1000";
	static struct sw_state st;
	memset(&st, 0, sizeof st);
	REQUIRE(ringlm_connect(&p, &st.c) == 0);
	pthread_t w;
	REQUIRE(pthread_create(&w, NULL, sw_waiter, &st) == 0);
	for (uint32_t i = 0; i < 2000; i++) {
		uint32_t prompt[2] = { i % 1000, i / 1000 + 7 }, id;
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = 2;
		r.max_new = 8;
		r.tag = i;
		int rc;
		while ((rc = ringlm_submit(st.c, &r, &id)) == -EAGAIN)
			sched_yield();
		if (rc) {
			atomic_fetch_add(&st.bad, 1);
			break;
		}
		if (i % 7 == 3)                /* -EINVAL when it already ended: both are fine */
			while ((rc = ringlm_cancel(st.c, id)) == -EAGAIN)
				sched_yield();
	}
	pthread_join(w, NULL);
	CHECKF(atomic_load(&st.bad) == 0 && atomic_load(&st.ended) == 2000, "bad %d ended %d",
	       atomic_load(&st.bad), atomic_load(&st.ended));
	ringlm_close(st.c);
}

/* The idle window (rl_idle.h) covers the idle periods the base window missed, up to the cap,
 * and falls back to the base when most of them are longer than the cap. */
static void idle_window_follows_gaps(void)
{
	const uint64_t ms = 1000000, base = 2 * ms, cap = 100 * ms;
	struct rl_idle s;
	rl_idle_init(&s, base, cap);
	CHECK(s.window_ns == base);
	CHECK(rl_idle_gap(&s, 1 * ms) == base && s.n == 0);       /* within the base: not kept */
	CHECK(rl_idle_gap(&s, 600000 * ms) == base);               /* one long pause: nothing to cover */
	CHECK(rl_idle_gap(&s, 20 * ms) == 25 * ms);                /* p80 of {20 ms, 10 min}, + 1/4 */
	for (int i = 0; i < 15; i++)
		CHECK(rl_idle_gap(&s, 20 * ms) == 25 * ms);
	CHECK(s.n == RL_IDLE_GAPS);                                /* the 10-min pause is gone */
	for (int i = 0; i < 3; i++)                                /* 3 of 16 longer than the cap */
		CHECK(rl_idle_gap(&s, 1000 * ms) == 25 * ms);
	CHECK(rl_idle_gap(&s, 1000 * ms) == base);                 /* 4 of 16: back to the base */
	for (int i = 0; i < 16; i++)
		rl_idle_gap(&s, 80 * ms);
	CHECK(s.window_ns == 100 * ms);                            /* 80 ms + 1/4 is the cap itself */
	rl_idle_gap(&s, 81 * ms);
	rl_idle_gap(&s, 81 * ms);
	rl_idle_gap(&s, 81 * ms);
	CHECK(s.window_ns == 100 * ms);                            /* p80 still 80 ms */
	rl_idle_gap(&s, 81 * ms);
	CHECK(s.window_ns == base);                                /* 81 ms + 1/4 passes the cap */
	for (int i = 0; i < 16; i++)                               /* 300 ms apart: the base */
		CHECK(rl_idle_gap(&s, 300 * ms) == base);
	CHECK(rl_idle_gap(&s, 50 * ms) == base);                   /* then 50 ms apart: */
	CHECK(rl_idle_gap(&s, 50 * ms) == base);
	CHECK(rl_idle_gap(&s, 50 * ms) == 62500000);               /* the last 3 say so */
	CHECK(rl_idle_gap(&s, 300 * ms) == base);                  /* one long pause among them */
	rl_idle_init(&s, base, 0);                                 /* --idle-adapt-ms 0 */
	for (int i = 0; i < 20; i++)
		CHECK(rl_idle_gap(&s, 20 * ms) == base);
	rl_idle_init(&s, UINT64_MAX / 2, 0);                       /* --latency: never sleeps */
	CHECK(rl_idle_gap(&s, 600000 * ms) == UINT64_MAX / 2);
}

/* Requests 60 ms apart: the runtime's published idle window grows past the gaps (so it is
 * awake when the next one comes), and stays at --idle-spin-us with --idle-adapt-ms 0. Gaps
 * are at least 60 ms by construction (the client sleeps that long after each answer), so the
 * window's lower bound holds on any machine. Once requests stop, the window runs out and the
 * 10 Hz timer's wake-ups earn only the base: over a second idle the runtime is awake about
 * 75 + 10 x 2 ms, where a window restarted by every wake-up would make it ~800 ms. */
static void rt_idle_window_adapts(void)
{
	for (int adapt = 1; adapt >= 0; adapt--) {
		struct rt_child rt;
		REQUIRE(rt_start(&rt, adapt ? "--sim-vocab 1000 --idle-adapt-ms 10000"
					    : "--sim-vocab 1000 --idle-adapt-ms 0") == 0);
		struct ringlm *c;
		REQUIRE(rt_connect(&rt, &c, 0) == 0);
		CHECK(rt_stat(c, "idle_window_us") == 2000);
		for (int i = 0; i < 6; i++) {
			uint32_t prompt[2] = { 11, (uint32_t)i };
			struct ringlm_request r = ringlm_default_request();
			r.prompt = prompt;
			r.n_prompt = 2;
			r.max_new = 1;
			REQUIRE(ringlm_submit(c, &r, NULL) == 0);
			struct ringlm_event ev[4];
			for (int done = 0; !done;) {
				int k = ringlm_wait(c, ev, 4, 10000);
				REQUIRE(k > 0);
				for (int e = 0; e < k; e++)
					done |= ev[e].type != RINGLM_EV_TOKEN;
			}
			usleep(60000);
		}
		const long long w = rt_stat(c, "idle_window_us");
		if (adapt) {
			CHECKF(w >= 75000 && w <= 10000000, "idle window %lld us after 60 ms gaps", w);
			const long long a0 = rt_stat(c, "idle_awake_ms");
			CHECK(a0 > 0);
			usleep(1000000);
			const long long a1 = rt_stat(c, "idle_awake_ms");
			CHECKF(a1 - a0 < 500, "awake %lld ms of an idle second (window %lld us)", a1 - a0, w);
		} else {
			CHECKF(w == 2000, "idle window %lld us with --idle-adapt-ms 0", w);
		}
		ringlm_close(c);
		CHECK(rt_stop(&rt) == 0);
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(rt_bad_requests_get_errors);
	RUN(rt_cancel_frees);
	RUN(rt_wait_wakes_futex);
	RUN(rt_wait_wakes_eventfd_fallback);
	RUN(idle_window_follows_gaps);
	RUN(rt_idle_window_adapts);
	RUN(embedded_sim_generates);
	RUN(submit_and_wait_on_two_threads);
	RUN(rt_refuses_disallowed_uid);
	RUN(rt_slow_client_loses_nothing);
	RUN(rt_kill9_midstream_recycles);
	RUN(rt_kill9_runtime_clients_notice);
	RUN(rt_hostile_client_is_contained);
	RUN(rt_clients_come_and_go);
	RUN(rt_stress_4_clients_100k);
	TEST_MAIN_END();
}
