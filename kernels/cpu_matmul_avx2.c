/* cpu_matmul_avx2.c — the fp32 matmul on AVX2+FMA (rl_cpu_matmul's AVX2 path): the register
 * tiles of cpu_matmul_tmpl.h at 8 lanes, 3 x 4, long rows in slices that keep a weight tile
 * in L1. */
#include <stdint.h>
#include <immintrin.h>
#include "kernels/cpu_matmul.h"

#define VW 8
#define VT __m256
#define V(op) rl_v8_##op
#define W_(x) x##8
#define TGT RL_TGT_AVX2
#define MM_NR 3
#include "kernels/cpu_matmul_tmpl.h"

/* Long rows in slices of MM_K_BLOCK inputs (the first slice stores, the rest add): a 4-row
 * weight tile of 2048 inputs is all of L1 and was evicted by the activation rows streaming past
 * it, so the tile was read again from L2 for every 3 activation rows. A slice keeps it in L1.
 * The slicing depends on the model only, never on the batch, so a row's sums are the same in
 * any batch. */
#define MM_K_BLOCK 512
RL_TGT_AVX2 void rl_mm_avx2(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
			    const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	if (in <= MM_K_BLOCK + MM_K_BLOCK / 2) {
		mm_rows8(Y, ldy, X, ldx, W, in, bias, n, in, o0, o1, acc);
		return;
	}
	for (uint32_t k = 0; k < in; k += MM_K_BLOCK) {
		uint32_t len = in - k < MM_K_BLOCK ? in - k : MM_K_BLOCK;
		mm_rows8(Y, ldy, X + k, ldx, W + k, in, k ? NULL : bias, n, len, o0, o1, k ? 1 : acc);
	}
}
