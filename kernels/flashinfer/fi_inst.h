// fi_inst.h — what the instantiations of fi_decode.cu and fi_prefill.cu and fi_dispatch.cu
// share (internal to kernels/flashinfer): the entry points of one instantiation, named by
// (type, head dim), and the thread's last error.
#ifndef RL_FI_INST_H
#define RL_FI_INST_H
#include "kernels/rl_cuda_fi.h"

#define RL_FI_CAT2(a, b) a##_##b
#define RL_FI_CAT(a, b) RL_FI_CAT2(a, b)
#ifdef RL_FI_NAME
#define RL_FI_FN(what) RL_FI_CAT(RL_FI_CAT(rl_fi, what), RL_FI_NAME)
#endif

#define RL_FI_DECLARE(name)                                                                      \
	extern "C" int rl_fi_sizes_##name(uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t *, \
					  size_t *);                                                 \
	extern "C" int rl_fi_plan_##name(uint32_t, uint32_t, uint32_t, const rl_cuda_fi_ws *,       \
					 const int32_t *, uint32_t, int, rl_cuda_fi_plan *, void *);     \
	extern "C" int rl_fi_run_##name(uint32_t, uint32_t, uint32_t, const rl_cuda_fi_ws *,        \
					const rl_cuda_fi_plan *, uint16_t *, const uint16_t *,         \
					uint32_t, const uint16_t *, const uint16_t *, const int32_t *,  \
					const int32_t *, const int32_t *, uint32_t, float, void *);      \
	extern "C" int rl_fi_psizes_##name(uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t *, \
					   size_t *);                                                \
	extern "C" int rl_fi_pplan_##name(uint32_t, uint32_t, uint32_t, const rl_cuda_fi_ws *,      \
					  const int32_t *, const int32_t *, uint32_t, uint32_t,         \
					  rl_cuda_fi_plan *, void *);                                   \
	extern "C" int rl_fi_prun_##name(uint32_t, uint32_t, uint32_t, const rl_cuda_fi_ws *,       \
					 const rl_cuda_fi_plan *, uint16_t *, const uint16_t *,        \
					 uint32_t, const uint16_t *, const uint16_t *, const int32_t *, \
					 const int32_t *, const int32_t *, const int32_t *, uint32_t,   \
					 float, void *);

extern "C" void rl_cuda_fi_set_error(const char *msg);

#endif
