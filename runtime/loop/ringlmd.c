/* ringlmd.c — the runtime daemon: parse options, build the runtime, run it on this thread.
 * SIGINT/SIGTERM (through signalfd in the io_uring loop) finish in-flight work and exit 0. */
#include <stdio.h>
#include <stdlib.h>
#include "runtime/loop/rl_rt_args.h"

int main(int argc, char **argv)
{
	struct rl_rt_params p;
	char err[512] = "";
	rl_rt_default_params(&p);
	p.handle_signals = 1;
	p.verbose = getenv("RINGLM_QUIET") ? 0 : 1;
	int rc = rl_rt_parse_args(&p, argc, argv, err, sizeof err);
	if (rc == 1) {
		rl_rt_usage(stdout);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "ringlmd: %s\n", err);
		return 2;
	}
	struct rl_rt *rt;
	rc = rl_rt_create(&p, &rt, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ringlmd: %s\n", err);
		return 1;
	}
	rl_rt_run(rt);
	rl_rt_destroy(rt);
	return 0;
}
