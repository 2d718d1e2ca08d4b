/* rl_rt_fork.c — a runtime in a child process, for tests and benchmarks that need a real
 * separate runtime process without exec'ing ringlmd (so sanitizer builds test their own code). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runtime/loop/rl_rt_fork.h"

pid_t rl_rt_fork(const struct rl_rt_params *params, char *err, size_t errlen)
{
	int pfd[2];
	if (pipe(pfd) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return e;
	}
	if (pid == 0) {
		/* child: "x" on the pipe once listening, else the reason; then serve until SIGTERM */
		close(pfd[0]);
		struct rl_rt_params p = *params;
		char why[512] = "";
		p.handle_signals = 1;
		/* the runtime is a process of its own: it does not keep a pinning its parent made
		 * for itself (a benchmark pins its measuring thread before forking); a full mask is
		 * cut down by the kernel to the cpus this cgroup allows, and rl_rt_create pins to
		 * p.cpu when one is set */
		cpu_set_t all;
		memset(&all, 0xff, sizeof all);
		(void)sched_setaffinity(0, sizeof all, &all);
		struct rl_rt *rt;
		int rc = rl_rt_create(&p, &rt, why, sizeof why);
		if (rc) {
			(void)!write(pfd[1], why, strlen(why));
			_exit(rc < 0 && -rc < 256 ? -rc : 1);      /* the parent returns it */
		}
		(void)!write(pfd[1], "x", 1);
		close(pfd[1]);
		rl_rt_run(rt);
		rl_rt_destroy(rt);
		_exit(0);
	}
	close(pfd[1]);
	char buf[512];
	ssize_t n = read(pfd[0], buf, sizeof buf - 1);
	close(pfd[0]);
	if (n == 1 && buf[0] == 'x')
		return pid;
	buf[n > 0 ? n : 0] = 0;
	snprintf(err, errlen, "%s", n > 0 ? buf : "the runtime process died while starting");
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) > 1 ? -WEXITSTATUS(st) : -ECHILD;
}
