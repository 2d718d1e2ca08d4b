/* bench_ipc.c — `ringlm bench ipc [--json] [--iters N]`: round-trip latency between two
 * processes pinned to different CPUs, measured in one run over
 *   ring     the request/event ring pair alone (a record there, a record back);
 *   runtime  the full runtime path: libringlm submit of a one-token request → a runtime process
 *            (sim backend, step cost 0) drains, schedules, steps, publishes → the token event;
 *   uds      a Unix stream socket (16 bytes there, 16 back).
 * Prints p50/p99/p99.9 per path and writes bench/out/ipc.json. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt.h"
#include "ipc/rl_wire.h"
#include "runtime/loop/rl_rt_fork.h"

struct pct { uint64_t p50, p99, p999; };

static struct pct summarize(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, rl_bench_cmp_u64);
	return (struct pct){ rl_bench_pct(v, n, 0.5, 1), rl_bench_pct(v, n, 0.99, 1), rl_bench_pct(v, n, 0.999, 1) };
}

/* ring: two SPSC rings in one shared mapping; the child echoes every record back */
static int bench_ring(int iters, uint64_t *lat)
{
	enum { CAP = 1024 };
	size_t ring_bytes = sizeof(struct rl_ring_hdr) + CAP * sizeof(struct rl_evt);
	uint8_t *m = mmap(NULL, 2 * ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	struct rl_ring_hdr *a = (void *)m, *b = (void *)(m + ring_bytes);
	rl_ring_hdr_init(a);
	rl_ring_hdr_init(b);
	pid_t pid = fork();
	if (pid == 0) {
		rl_bench_pin(1);
		struct rl_ring_cons in;
		struct rl_ring_prod out;
		rl_ring_cons_init(&in, a, a + 1, CAP, sizeof(struct rl_evt));
		rl_ring_prod_init(&out, b, b + 1, CAP, sizeof(struct rl_evt));
		for (int i = 0; i < iters; i++) {
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
		_exit(0);
	}
	rl_bench_pin(0);
	struct rl_ring_prod out;
	struct rl_ring_cons in;
	rl_ring_prod_init(&out, a, a + 1, CAP, sizeof(struct rl_evt));
	rl_ring_cons_init(&in, b, b + 1, CAP, sizeof(struct rl_evt));
	int bad = 0;
	for (int i = 0; i < iters; i++) {
		struct rl_evt e = { .rid = (uint32_t)i, .token = (uint32_t)i * 7 };
		uint64_t t0 = rl_now_ns();
		rl_ring_prod_space(&out, 1);
		memcpy(rl_ring_prod_slot(&out, 0), &e, sizeof e);
		rl_ring_prod_publish(&out, 1);
		while (rl_ring_cons_avail(&in) <= 0)
			rl_cpu_relax();
		const struct rl_evt *r = rl_ring_cons_slot(&in, 0);
		bad |= r->rid != (uint32_t)i;
		rl_ring_cons_release(&in, 1);
		lat[i] = rl_now_ns() - t0;
	}
	waitpid(pid, NULL, 0);
	munmap(m, 2 * ring_bytes);
	return bad ? -EIO : 0;
}

/* uds: a socketpair, 16 bytes each way */
static int bench_uds(int iters, uint64_t *lat)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		rl_bench_pin(1);
		close(sv[0]);
		char buf[16];
		for (int i = 0; i < iters; i++) {
			if (recv(sv[1], buf, 16, MSG_WAITALL) != 16 || send(sv[1], buf, 16, 0) != 16)
				_exit(1);
		}
		_exit(0);
	}
	rl_bench_pin(0);
	close(sv[1]);
	char buf[16] = { 0 };
	for (int i = 0; i < iters; i++) {
		uint64_t t0 = rl_now_ns();
		if (send(sv[0], buf, 16, 0) != 16 || recv(sv[0], buf, 16, MSG_WAITALL) != 16)
			return -EIO;
		lat[i] = rl_now_ns() - t0;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return 0;
}

static char why[320];                  /* a path's own reason for failing, when it has one */

/* runtime: a forked runtime process (sim backend, zero step cost) pinned to cpu 1 */
static int bench_runtime(int iters, uint64_t *lat)
{
	char sock[64];
	snprintf(sock, sizeof sock, "bench-ipc-%d", (int)getpid());
	struct rl_rt_params rp;
	char err[256];
	rl_rt_default_params(&rp);
	rp.socket = sock;
	rp.backend = "sim";
	rp.cpu = 1;
	rp.idle_spin_ns = 50ull * 1000000;   /* stay awake between pings */
	pid_t pid = rl_rt_fork(&rp, err, sizeof err);
	if (pid < 0) {
		snprintf(why, sizeof why, "%s", err);
		return pid;
	}
	rl_bench_pin(0);
	struct ringlm_params p = ringlm_default_params();
	p.socket = sock;
	p.spin_us = 1000000;
	struct ringlm *c;
	int rc = ringlm_connect(&p, &c);
	if (rc) {
		snprintf(why, sizeof why, "%s", ringlm_last_error());
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return rc;
	}
	struct ringlm_request r = ringlm_default_request();
	uint32_t prompt[1] = { 1 };
	r.prompt = prompt;
	r.n_prompt = 1;
	r.max_new = 1;
	struct ringlm_event ev[4];
	for (int i = 0; i < iters && !rc; i++) {
		uint64_t t0 = rl_now_ns(), t1 = 0;
		prompt[0] = (uint32_t)(i % 1000) + 1;
		rc = ringlm_submit(c, &r, NULL);
		int done = 0;
		while (!rc && !done) {
			int n = ringlm_poll(c, ev, 4);
			if (n < 0)
				rc = n;
			for (int k = 0; k < n; k++) {
				if (ev[k].type == RINGLM_EV_TOKEN && !t1)
					t1 = rl_now_ns();
				if (ev[k].type != RINGLM_EV_TOKEN)
					done = 1;
				if (ev[k].type == RINGLM_EV_ERROR)
					rc = ev[k].code;
			}
		}
		lat[i] = t1 - t0;
	}
	ringlm_close(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return rc;
}

int rl_cmd_bench_ipc(int argc, char **argv)
{
	int json = 0, iters = 200000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else {
			if (strcmp(argv[i], "--help"))
				fprintf(stderr, "ringlm bench ipc: unknown option '%s'\n", argv[i]);
			fprintf(stderr, "usage: ringlm bench ipc [--json] [--iters N]\n");
			return 2;
		}
	}
	if (iters < 100) {
		fprintf(stderr, "ringlm bench ipc: --iters must be at least 100\n");
		return 2;
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		fprintf(stderr, "ringlm bench ipc: only one CPU: both sides share it, numbers are not meaningful\n");
	uint64_t *lat = calloc(iters, sizeof *lat);
	const char *names[3] = { "ring", "runtime", "uds" };
	struct pct res[3];
	int (*fns[3])(int, uint64_t *) = { bench_ring, bench_runtime, bench_uds };
	int runtime_iters = iters / 4 > 1000 ? iters / 4 : iters;
	for (int k = 0; k < 3; k++) {
		int n = k == 1 ? runtime_iters : (k == 2 ? iters / 4 : iters);
		int rc = fns[k](n, lat);
		if (rc) {
			fprintf(stderr, "ringlm bench ipc: %s path failed: %s\n", names[k], *why ? why : strerror(-rc));
			free(lat);
			return 1;
		}
		/* drop the first 5% as warm-up */
		int skip = n / 20;
		res[k] = summarize(lat + skip, n - skip);
	}
	free(lat);
	char js[512];
	snprintf(js, sizeof js,
		 "{\"ring_rtt_ns\":{\"p50\":%llu,\"p99\":%llu,\"p999\":%llu},"
		 "\"runtime_rtt_ns\":{\"p50\":%llu,\"p99\":%llu,\"p999\":%llu},"
		 "\"uds_rtt_ns\":{\"p50\":%llu,\"p99\":%llu,\"p999\":%llu},\"uds_over_ring_p50\":%.1f}",
		 (unsigned long long)res[0].p50, (unsigned long long)res[0].p99, (unsigned long long)res[0].p999,
		 (unsigned long long)res[1].p50, (unsigned long long)res[1].p99, (unsigned long long)res[1].p999,
		 (unsigned long long)res[2].p50, (unsigned long long)res[2].p99, (unsigned long long)res[2].p999,
		 res[0].p50 ? (double)res[2].p50 / res[0].p50 : 0.0);
	rl_bench_outdir();
	FILE *f = fopen("bench/out/ipc.json", "w");
	if (f) {
		fprintf(f, "%s\n", js);
		fclose(f);
	}
	if (json) {
		puts(js);
		return 0;
	}
	printf("round trip between two processes pinned to cpus 0 and 1 (ns)\n");
	printf("%-10s %10s %10s %10s\n", "path", "p50", "p99", "p99.9");
	for (int k = 0; k < 3; k++)
		printf("%-10s %10llu %10llu %10llu\n", names[k], (unsigned long long)res[k].p50,
		       (unsigned long long)res[k].p99, (unsigned long long)res[k].p999);
	printf("uds / ring at p50: %.0fx\n", res[0].p50 ? (double)res[2].p50 / res[0].p50 : 0.0);
	return 0;
}
