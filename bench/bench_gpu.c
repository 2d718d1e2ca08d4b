/* bench_gpu.c — `ringlm bench gpu`: loads librlcuda.so (beside the ringlm binary, like
 * runtime/backends.c does for ringlmd) and runs its rl_cuda_bench (runtime/cuda/cuda_bench.c).
 * Without the library: one line and exit 1; without a device: "skipped: no CUDA device", 0. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

int rl_cmd_bench_gpu(int argc, char **argv)
{
	char path[4096];
	void *h = NULL;
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
	if (n > 0) {
		path[n] = 0;
		char *slash = strrchr(path, '/');
		strcpy(slash ? slash + 1 : path, "librlcuda.so");
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!h)
		h = dlopen("librlcuda.so", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "ringlm bench gpu: cannot load librlcuda.so (%s); build with nvcc on PATH and CUDA!=0\n", dlerror());
		return 1;
	}
	int (*fn)(int, char **) = (int (*)(int, char **))(uintptr_t)dlsym(h, "rl_cuda_bench");
	if (!fn) {
		fprintf(stderr, "ringlm bench gpu: librlcuda.so has no rl_cuda_bench\n");
		dlclose(h);
		return 1;
	}
	/* argv[0] is "gpu" when dispatched from `ringlm bench` */
	int rc = argc > 0 && !strcmp(argv[0], "gpu") ? fn(argc - 1, argv + 1) : fn(argc, argv);
	dlclose(h);
	return rc;
}
