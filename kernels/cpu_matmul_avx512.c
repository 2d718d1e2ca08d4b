/* cpu_matmul_avx512.c — the fp32 matmul on AVX-512 (rl_cpu_matmul's AVX-512 path): NR x NC
 * register tiles in dot-product form over blocks of MM_ROW_BLOCK activation rows. */
#include <stdint.h>
#include <immintrin.h>
#include "kernels/cpu_matmul.h"

/* NR activation rows x NC weight rows; NR*NC + NR + 1 <= 32 zmm registers. */
RL_TGT_AVX512 RL_INLINE void tile512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		     const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m512 acc[4][4], x[4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm512_setzero_ps();
	uint32_t i = 0;
	for (; i + 16 <= in; i += 16) {
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm512_loadu_ps(X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512 w = _mm512_loadu_ps(W + (size_t)c * in + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
	if (i < in) {
		__mmask16 m = (__mmask16)((1u << (in - i)) - 1);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm512_maskz_loadu_ps(m, X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512 w = _mm512_maskz_loadu_ps(m, W + (size_t)c * in + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			store_out(Y + r * ldy + c, _mm512_reduce_add_ps(acc[r][c]), bias ? bias + c : NULL, accumulate);
}

RL_TGT_AVX512 void rl_mm_avx512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
			   const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * in, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				uint32_t nr = re - r < 4 ? re - r : 4;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T5(R, C) tile512(y, ldy, x, ldx, w, b, in, R, C, acc)
				if (nc == 4)
					nr == 4 ? T5(4, 4) : nr == 3 ? T5(3, 4) : nr == 2 ? T5(2, 4) : T5(1, 4);
				else
					nr == 4 ? T5(4, 1) : nr == 3 ? T5(3, 1) : nr == 2 ? T5(2, 1) : T5(1, 1);
#undef T5
				r += nr;
			}
			o += nc;
		}
	}
}
