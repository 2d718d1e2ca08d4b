/* cpu_matmul.h — private to the fp32 matmul (cpu_ops.c and its per-ISA kernels
 * cpu_matmul_avx2.c, cpu_matmul_avx512.c): the blocking constants and the store they share. */
#ifndef RL_CPU_MATMUL_H
#define RL_CPU_MATMUL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu_simd.h"

/* Activation rows walked in blocks that stay in L2 while the weight tiles stream past. */
#define MM_ROW_BLOCK 64

RL_INLINE void store_out(float *y, float s, const float *bias, int accumulate)
{
	if (bias)
		s += *bias;
	*y = accumulate ? *y + s : s;
}

/* Y[r, o] (=, or += when acc) sum_i X[r, i] W[o, i] (+ bias[o]), r < n, o in [o0, o1) */
void rl_mm_avx2(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc);
void rl_mm_avx512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		  const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc);

#endif
