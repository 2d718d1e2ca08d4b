/* cpu_matmul_tmpl.h — the fp32 matmul's register tiles and their walk, written once for both
 * widths: cpu_matmul_avx2.c and cpu_matmul_avx512.c each include this file once, with
 *   VW      lanes (16: AVX-512, 8: AVX2)
 *   V(op)   the width's primitive (kernels/cpu_simd.h: rl_v16_op / rl_v8_op)
 *   VT      the vector type
 *   TGT     the width's target attribute
 *   W_(x)   x with the width appended (mm_tile16, mm_tile8, ...)
 *   MM_NR   activation rows per tile (3 or 4): NR*4 accumulators + NR rows + one weight
 *           vector fit the width's registers (16 ymm, 32 zmm)
 * Not a header of its own: nothing else includes it. */

/* Y[0..NR)[0..NC) (=, or += when accumulate) X[0..NR) . W[0..NC) over in inputs (+ bias):
 * NR activation rows x NC weight rows (ldw apart) in dot-product form, one sum per pair. */
TGT RL_INLINE void W_(mm_tile)(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
			       const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	VT acc[MM_NR][4], x[MM_NR];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = V(zero)();
	uint32_t i = 0;
	for (; i + VW <= in; i += VW) {
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = V(load)(X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			const VT w = V(load)(W + (size_t)c * ldw + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = V(fma)(x[r], w, acc[r][c]);
		}
	}
	if (i < in) {                  /* the ragged end: masked loads read zeros past it */
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = V(load_n)(X + r * ldx + i, in - i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			const VT w = V(load_n)(W + (size_t)c * ldw + i, in - i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = V(fma)(x[r], w, acc[r][c]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			store_out(Y + r * ldy + c, V(sum)(acc[r][c]), bias ? bias + c : NULL, accumulate);
}

/* Y[r, o] for r < n, o in [o0, o1): activation rows in blocks of MM_ROW_BLOCK (kept in L2
 * while the weight tiles stream past), weight rows 4 at a time (then 1), activation rows
 * MM_NR at a time (then what is left). */
TGT static void W_(mm_rows)(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
			    const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		const uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			const int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * ldw, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				const uint32_t nr = re - r < MM_NR ? re - r : MM_NR;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T_(R, C) W_(mm_tile)(y, ldy, x, ldx, w, ldw, b, in, R, C, acc)
#if MM_NR == 4
				if (nr == 4)
					nc == 4 ? T_(4, 4) : T_(4, 1);
				else
#endif
				if (nr == 3)
					nc == 4 ? T_(3, 4) : T_(3, 1);
				else if (nr == 2)
					nc == 4 ? T_(2, 4) : T_(2, 1);
				else
					nc == 4 ? T_(1, 4) : T_(1, 1);
#undef T_
				r += nr;
			}
			o += nc;
		}
	}
}
