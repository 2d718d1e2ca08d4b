/* cpu_matmul_avx2.c — the fp32 matmul on AVX2+FMA (rl_cpu_matmul's AVX2 path): NR x NC
 * register tiles in dot-product form, long rows in slices that keep a weight tile in L1. */
#include <stdint.h>
#include <immintrin.h>
#include "kernels/cpu_matmul.h"

/* NR activation rows x NC weight rows; NR*NC + NR + 1 <= 16 ymm registers. */
RL_TGT_AVX2 RL_INLINE void tile256(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
		     const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m256 acc[3][4], x[3];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 8 <= in; i += 8) {
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm256_loadu_ps(X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m256 w = _mm256_loadu_ps(W + (size_t)c * ldw + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
	if (i < in) {
		__m256i m = rl_v8_mask(in - i);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm256_maskload_ps(X + r * ldx + i, m);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m256 w = _mm256_maskload_ps(W + (size_t)c * ldw + i, m);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			store_out(Y + r * ldy + c, rl_v8_sum(acc[r][c]), bias ? bias + c : NULL, accumulate);
}

RL_TGT_AVX2 static void mm_avx2_k(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
			   const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * ldw, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				uint32_t nr = re - r < 3 ? re - r : 3;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T2(R, C) tile256(y, ldy, x, ldx, w, ldw, b, in, R, C, acc)
				if (nc == 4)
					nr == 3 ? T2(3, 4) : nr == 2 ? T2(2, 4) : T2(1, 4);
				else
					nr == 3 ? T2(3, 1) : nr == 2 ? T2(2, 1) : T2(1, 1);
#undef T2
				r += nr;
			}
			o += nc;
		}
	}
}


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
		mm_avx2_k(Y, ldy, X, ldx, W, in, bias, n, in, o0, o1, acc);
		return;
	}
	for (uint32_t k = 0; k < in; k += MM_K_BLOCK) {
		uint32_t len = in - k < MM_K_BLOCK ? in - k : MM_K_BLOCK;
		mm_avx2_k(Y, ldy, X + k, ldx, W + k, in, k ? NULL : bias, n, len, o0, o1, k ? 1 : acc);
	}
}
