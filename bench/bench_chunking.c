/* bench_chunking.c — chunked prefill bounds inter-token latency, measured end to end.
 *
 * A runtime process (sim backend, --sim-step-us 1000 --sim-token-us 10) serves client A, which
 * decodes 500 tokens, while client B (another process) submits a 2,000-token prompt once A is
 * streaming. With a 64-token budget B's prompt is chunked into steps of at most 64 rows, so A's
 * gaps stay near one small step (~1.6 ms); with 4096 the whole prompt lands in one step and A
 * sees a ~21 ms stall. Part of `ringlm bench sched` (and `--chunking-only`). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench/bench_chunking.h"
#include "bench/bench_util.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/loop/rl_rt_fork.h"

static char chunking_why[320];

const char *rl_bench_chunking_error(void)
{
	return chunking_why;
}

static pid_t start_runtime(const char *sock, uint32_t budget)
{
	struct rl_rt_params p;
	char err[256];
	rl_rt_default_params(&p);
	p.socket = sock;
	p.backend = "sim";
	p.sim_step_ns = 1000 * 1000;
	p.sim_token_ns = 10 * 1000;
	p.max_batch_tokens = budget;
	p.cpu = 1;             /* A spins on cpu 0; B sleeps; nobody preempts the runtime */
	pid_t pid = rl_rt_fork(&p, err, sizeof err);
	if (pid < 0)
		snprintf(chunking_why, sizeof chunking_why, "%s", err);
	return pid;
}

static int connect_sock(const char *sock, int spin_us, struct ringlm **c)
{
	struct ringlm_params p = ringlm_default_params();
	p.socket = sock;
	p.spin_us = spin_us;
	return ringlm_connect(&p, c);
}

/* One run: A's gaps (ns) into res. */
static int run_one(uint32_t budget, struct rl_chunking_result *res)
{
	char sock[64];
	snprintf(sock, sizeof sock, "bench-chunk-%d-%u", (int)getpid(), budget);
	pid_t rt = start_runtime(sock, budget);
	if (rt < 0)
		return -ECHILD;
	int go[2];
	if (pipe(go) < 0)
		return -errno;
	pid_t b = fork();
	if (b == 0) {               /* client B: the long prompt, once A is streaming */
		close(go[1]);
		struct ringlm *c;
		char x;
		if (read(go[0], &x, 1) != 1 || connect_sock(sock, 0, &c))
			_exit(1);
		static uint32_t prompt[2000];
		for (int i = 0; i < 2000; i++)
			prompt[i] = (uint32_t)(i * 7 + 3) % 30000;
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = 2000;
		r.max_new = 1;
		if (ringlm_submit(c, &r, NULL))
			_exit(2);
		struct ringlm_event ev[4];
		for (int done = 0; !done;) {
			int n = ringlm_wait(c, ev, 4, 10000);
			if (n <= 0)
				_exit(3);
			for (int i = 0; i < n; i++)
				done |= ev[i].type != RINGLM_EV_TOKEN;
		}
		ringlm_close(c);
		_exit(0);
	}
	close(go[0]);
	rl_bench_pin(0);
	struct ringlm *c;
	int rc = connect_sock(sock, 1000000, &c);
	uint64_t *gaps = calloc(500, sizeof *gaps);
	uint32_t ng = 0, ntok = 0;
	if (!rc) {
		uint32_t prompt[1] = { 1 };
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = 1;
		r.max_new = 500;
		rc = ringlm_submit(c, &r, NULL);
		uint64_t last = 0;
		struct ringlm_event ev[16];
		for (int done = 0; !rc && !done;) {
			int n = ringlm_wait(c, ev, 16, 10000);
			if (n <= 0) {
				rc = n ? n : -ETIMEDOUT;
				break;
			}
			for (int i = 0; i < n; i++) {
				if (ev[i].type != RINGLM_EV_TOKEN) {
					done = 1;
					continue;
				}
				uint64_t now = rl_now_ns();
				if (ntok++)
					gaps[ng++] = now - last;
				last = now;
				if (ntok == 50)
					(void)!write(go[1], "x", 1);   /* B goes in mid-stream */
			}
		}
		ringlm_close(c);
	}
	close(go[1]);
	int st;
	waitpid(b, &st, 0);
	kill(rt, SIGTERM);
	waitpid(rt, NULL, 0);
	if (!rc && (!WIFEXITED(st) || WEXITSTATUS(st)))
		rc = -EIO;
	if (!rc) {
		res->budget = budget;
		res->tokens = ntok;
		res->itl_p50_us = rl_bench_pct(gaps, ng, 0.5, 0) / 1e3;
		res->itl_p99_us = rl_bench_pct(gaps, ng, 0.99, 1) / 1e3;
		res->itl_max_us = gaps[ng - 1] / 1e3;
	}
	free(gaps);
	return rc;
}

int rl_bench_chunking(struct rl_chunking_result res[2])
{
	static const uint32_t budgets[2] = { 64, 4096 };
	for (int i = 0; i < 2; i++) {
		int rc = run_one(budgets[i], &res[i]);
		if (rc)
			return rc;
	}
	return 0;
}

void rl_bench_chunking_print(FILE *f, const struct rl_chunking_result res[2])
{
	fprintf(f, "\nchunked prefill vs a 500-token decode (sim: 1000 us/step + 10 us/token; 2,000-token prompt arrives mid-stream)\n");
	fprintf(f, "%18s %10s %12s %12s %12s\n", "max-batch-tokens", "tokens", "itl p50 us", "itl p99 us", "itl max us");
	for (int i = 0; i < 2; i++)
		fprintf(f, "%18u %10u %12.0f %12.0f %12.0f\n", res[i].budget, res[i].tokens, res[i].itl_p50_us,
			res[i].itl_p99_us, res[i].itl_max_us);
}

void rl_bench_chunking_json(FILE *f, const struct rl_chunking_result res[2])
{
	fprintf(f, "\"chunking\":{");
	for (int i = 0; i < 2; i++)
		fprintf(f, "%s\"%u\":{\"itl_us_p50\":%.1f,\"itl_us_p99\":%.1f,\"itl_us_max\":%.1f,\"tokens\":%u}",
			i ? "," : "", res[i].budget, res[i].itl_p50_us, res[i].itl_p99_us, res[i].itl_max_us,
			res[i].tokens);
	fprintf(f, "}");
}
