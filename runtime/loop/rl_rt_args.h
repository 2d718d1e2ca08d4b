/* rl_rt_args.h — ringlmd's command line into struct rl_rt_params (rl_rt_args.c), shared by
 * ringlmd, the embedded mode (ringlm_params.runtime_args) and the benchmarks that fork one. */
#ifndef RL_RT_ARGS_H
#define RL_RT_ARGS_H
#include <stddef.h>
#include <stdio.h>
#include "runtime/loop/rl_rt.h"

/* Parses ringlmd's options into p (which rl_rt_default_params filled). Returns 0, 1 for
 * --help (print rl_rt_usage), or -EINVAL with a one-line reason in err. */
int  rl_rt_parse_args(struct rl_rt_params *p, int argc, char **argv, char *err, size_t errlen);
void rl_rt_usage(FILE *f);
#endif
