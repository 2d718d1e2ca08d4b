/* rl_rt_fork.h — a runtime in a forked child process (rl_rt_fork.c), for tests and benchmarks
 * that need a real separate runtime process without exec'ing ringlmd. */
#ifndef RL_RT_FORK_H
#define RL_RT_FORK_H
#include <stddef.h>
#include <sys/types.h>
#include "runtime/loop/rl_rt.h"

/* Runs a runtime (params, with signal handling on) in a forked child process and returns its
 * pid once it listens; SIGTERM stops it. The child starts from every cpu the process's cgroup
 * allows, not the caller's affinity (params->cpu pins it). On failure: the child's own -errno
 * (-ECHILD when it died without one) and its reason in err. */
pid_t rl_rt_fork(const struct rl_rt_params *params, char *err, size_t errlen);
#endif
