/* bench_gpu.c — `ringlm bench gpu`: loads librlcuda_dev.so (the backend's build with the bench
 * in it, beside the ringlm binary or RINGLM_CUDA_LIB's librlcuda.so: rl_cuda_lib_open) and runs
 * its rl_cuda_bench (runtime/cuda/cuda_bench.c).
 * Without the library: one line and exit 1; without a device: "skipped: no CUDA device", 0. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "clients/cli/cli.h"
#include "runtime/loop/rl_rt.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/loop/rl_rt_backend.h"

int rl_cmd_bench_gpu(int argc, char **argv)
{
	char err[512];
	void *h = rl_cuda_lib_open(1, err, sizeof err);
	if (!h) {
		fprintf(stderr, "ringlm bench gpu: %s\n", err);
		return 1;
	}
	int (*fn)(int, char **) = (int (*)(int, char **))(uintptr_t)dlsym(h, "rl_cuda_bench");
	if (!fn) {
		fprintf(stderr, "ringlm bench gpu: " RL_CUDA_DEV_LIB " has no rl_cuda_bench\n");
		dlclose(h);
		return 1;
	}
	/* argv[0] is "gpu" when dispatched from `ringlm bench` */
	/* the library stays loaded until exit: unloading it would orphan the C++ runtime's
	 * allocations it made (LeakSanitizer reports them), and the process ends next anyway */
	return argc > 0 && !strcmp(argv[0], "gpu") ? fn(argc - 1, argv + 1) : fn(argc, argv);
}
