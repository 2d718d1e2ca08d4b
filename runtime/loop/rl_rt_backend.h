/* rl_rt_backend.h — the runtime's backend factory (rl_rt_backend.c): the runtime's
 * parameters (what the command line gave) turned into a backend and its KV pool. It lives in
 * loop/ because it reads struct rl_rt_params; backend/ knows only struct rl_backend_params.
 */
#ifndef RL_RT_BACKEND_H
#define RL_RT_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/loop/rl_rt.h"

/* Builds the backend the runtime's params ask for (sim; cpu over a loaded or synthetic
 * model; cuda through librlcuda.so), sizing its KV pool; *n_blocks gets the pool size and
 * *model the loaded model (cpu; the caller destroys it after the backend). */
int rl_rt_backend_open(const struct rl_rt_params *p, struct rl_backend **be, struct rl_model **model,
		       uint32_t *n_blocks, char *err, size_t errlen);
/* --spec FILE: the draft model (stored matrices) on a cpu backend of its own with n_blocks KV
 * blocks, after checking it shares target's vocabulary (size, BOS, EOS). The caller destroys
 * both. */
int rl_rt_draft_open(const struct rl_rt_params *p, const struct rl_backend_info *target, uint32_t n_blocks,
		     struct rl_backend **be, struct rl_model **model, char *err, size_t errlen);
/* The CUDA backend's two builds, side by side: the backend ringlmd loads, and the same with
 * the kernel test entry points and `ringlm bench gpu` (tests and benchmarks load it; the
 * build tree has it, an install does not). */
#define RL_CUDA_LIB     "librlcuda.so"
#define RL_CUDA_DEV_LIB "librlcuda_dev.so"
/* out = lib with the file name RL_CUDA_LIB replaced by RL_CUDA_DEV_LIB (a path to another
 * name: lib as it is, so RINGLM_CUDA_LIB may name either build). -ENAMETOOLONG when out is
 * too small. */
int  rl_cuda_dev_path(const char *lib, char *out, size_t n);
/* dlopen()s librlcuda.so, or with dev librlcuda_dev.so (RINGLM_CUDA_LIB, its dev sibling;
 * else beside the running binary, else the library path); NULL and a one-line reason in err
 * when it is not there. */
void *rl_cuda_lib_open(int dev, char *err, size_t errlen);

#endif
