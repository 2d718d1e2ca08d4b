/* rt_harness.h — start a real runtime in a child process for multi-process tests, and small
 * client helpers. The child runs the same code as ringlmd (rl_rt_*); tests talk to it only
 * through libringlm and the socket, like any client. */
#ifndef RL_RT_HARNESS_H
#define RL_RT_HARNESS_H
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ringlm.h"
#include "rl_clock.h"
#include "rl_rt.h"
#include "rl_sim.h"
#include "rl_ipc.h"

struct rt_child { pid_t pid; char sock[108]; };

/* Starts a runtime with ringlmd-style args (a space-separated string). Returns 0 when it
 * listens. */
static inline int rt_start(struct rt_child *rc, const char *args)
{
	static int counter;
	/* a full path, so clients of other uids resolve the same socket */
	char name[64];
	snprintf(name, sizeof name, "t%d-%d", (int)getpid(), counter++);
	if (rl_sock_path(name, rc->sock, sizeof rc->sock))
		return -ENAMETOOLONG;
	int pfd[2];
	if (pipe(pfd) < 0)
		return -errno;
	rc->pid = fork();
	if (rc->pid == 0) {
		close(pfd[0]);
		struct rl_rt_params p;
		char err[512] = "", buf[1024], *argv[64] = { "ringlmd" };
		int argc = 1;
		rl_rt_default_params(&p);
		snprintf(buf, sizeof buf, "%s", args ? args : "");
		for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " "))
			argv[argc++] = t;
		if (rl_rt_parse_args(&p, argc, argv, err, sizeof err)) {
			fprintf(stderr, "rt_start: %s\n", err);
			_exit(3);
		}
		p.socket = rc->sock;
		p.handle_signals = 1;
		if (getenv("RL_TEST_VERBOSE"))
			p.verbose = 1;
		struct rl_rt *rt;
		if (rl_rt_create(&p, &rt, err, sizeof err)) {
			fprintf(stderr, "rt_start: %s\n", err);
			_exit(4);
		}
		(void)!write(pfd[1], "x", 1);
		close(pfd[1]);
		rl_rt_run(rt);
		rl_rt_destroy(rt);
		_exit(0);
	}
	close(pfd[1]);
	char x;
	int ok = read(pfd[0], &x, 1) == 1;
	close(pfd[0]);
	if (!ok) {
		waitpid(rc->pid, NULL, 0);
		return -ECHILD;
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

/* Expected sim output for a prompt: n tokens by the rl_sim.h chain. */
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

static inline int rl_slow(void) { return getenv("RL_SLOW") ? atoi(getenv("RL_SLOW")) : 1; }
#endif
