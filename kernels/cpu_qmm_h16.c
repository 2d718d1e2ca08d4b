/* cpu_qmm_h16.c — the 16-bit engine: F16 and BF16 weights, and bf16 products.
 *
 * F16 and BF16 matrices are repacked once at load (rl_cpu_wmat_pack) into blocks of 48 output
 * rows, input-major, and every row count takes one outer-product kernel over them
 * (rl_qmm_h16_panels): an activation broadcast times whole vectors of outputs, widened to
 * fp32 in registers by F16C or a 16-bit shift. Each panel kernel is written once
 * (DEFINE_H16_PANEL) and compiled for 8 lanes (AVX2) and 16 (AVX-512); on AVX2 two BF16
 * shapes of their own (bf16_pair256, bf16_tri256) keep more of a block in flight.
 * With AVX512-BF16 (from two rows over BF16, and prefill over unpacked block types) the
 * activations are rounded to bf16 once per call and multiplied by vdpbf16ps, two products
 * per fp32 lane (dpbf_panel, rl_qmm_gemm_dpbf), as ggml on such CPUs.
 * Accuracy: fp32 arithmetic on exact widenings, except the bf16-rounded activations of the
 * vdpbf16ps paths (8 significant bits; rl_cpu_qmatmul_bf16_acts says when).
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

/* the AVX-512 widths: 16 weights widened per load (rows of a multiple of 16) */
RL_TGT_AVX512 AI __m512 ld16_f16(const uint16_t *w) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w)); }
RL_TGT_AVX512 AI __m512 ld16_bf16(const uint16_t *w)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w)), 16));
}


/* AVX512-BF16: activations rounded to bf16 once per call (to nearest even), two products per
 * fp32 lane per instruction (vdpbf16ps) against bf16 weights: twice the multiply-adds of an
 * fp32 FMA, for 8 significant bits in each activation, the trade ggml makes on such CPUs.
 * A 4x4 tile (16 accumulators of the 32 registers); rows of a multiple of 32. */
RL_TGT_AVX512_BF16 AI void dpbf_tile(float *Y, size_t ldy, const uint16_t *X, size_t ldx, const uint16_t *W, size_t ldw,
		      const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m512 acc[4][4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (uint32_t i = 0; i < in; i += 32) {
		__m512bh x[4];
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = (__m512bh)_mm512_loadu_si512((const void *)(X + r * ldx + i));
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512bh w = (__m512bh)_mm512_loadu_si512((const void *)(W + (size_t)c * ldw + i));
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x[r], w);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			float v = _mm512_reduce_add_ps(acc[r][c]) + (bias ? bias[c] : 0);
			float *y = Y + r * ldy + c;
			*y = accumulate ? *y + v : v;
		}
}

/* Y[r, o] for o in [o0, o1) from bf16 activation rows X [n, ldx] and bf16 weight rows W [*, in]:
 * 64 activation rows at a time against 4 weight rows (a tile of them stays in L1 while the rows
 * pass); rows longer than 768 inputs in slices of 512, as the fp32 GEMMs. */
RL_TGT_AVX512_BF16 void rl_qmm_gemm_dpbf(float *Y, size_t ldy, const uint16_t *X, size_t ldx, const uint16_t *W,
			  const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	uint32_t ks = in <= 768 ? in : 512;
	for (uint32_t k = 0; k < in; k += ks) {
		uint32_t len = in - k < ks ? in - k : ks;
		const float *bk = k ? NULL : bias;
		int ak = k ? 1 : acc;
		for (uint32_t rb = 0; rb < n; rb += 64) {
			uint32_t re = rb + 64 < n ? rb + 64 : n;
			for (uint32_t o = o0; o < o1;) {
				int nc = o + 4 <= o1 ? 4 : 1;
				const uint16_t *w = W + (size_t)o * in + k;
				const float *b = bk ? bk + o : NULL;
				for (uint32_t r = rb; r < re;) {
					uint32_t nr = re - r < 4 ? re - r : 4;
					float *y = Y + r * ldy + o;
					const uint16_t *x = X + r * ldx + k;
#define DPBF(R, C) dpbf_tile(y, ldy, x, ldx, w, in, b, len, R, C, ak)
					if (nc == 4)
						nr == 4 ? DPBF(4, 4) : nr == 3 ? DPBF(3, 4) : nr == 2 ? DPBF(2, 4) : DPBF(1, 4);
					else
						nr == 4 ? DPBF(4, 1) : nr == 3 ? DPBF(3, 1) : nr == 2 ? DPBF(2, 1) : DPBF(1, 1);
#undef DPBF
					r += nr;
				}
				o += nc;
			}
		}
	}
}

/* fp32 -> bf16, nearest even (n a multiple of 32) */
RL_TGT_AVX512_BF16 void rl_qmm_to_bf16(uint16_t *o, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 32)
		_mm512_storeu_si512((void *)(o + i), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16),
										  _mm512_loadu_ps(x + i)));
}

/* ------------------------------------------------------------ tiles to bf16 -------- */

/* Weight rows decoded to bf16 for the tile path (rl_qmm_tile_bf16): the bits rl_cpu_wmat_row
 * and rl_qmm_to_bf16 make (the table's decoder's fp32, rounded to nearest even), in registers.
 * The decoders' arithmetic is d * q (Q4_0, Q5_0, Q8_0) or d * q + m (Q4_1, Q5_1): d an f16
 * (11 significant bits) and q at most 8, so the product is exact and only the sum rounds,
 * fused into an FMA (as GCC may) or not. A 4/5-bit block's weight depends on its q alone, so
 * its 16 or 32 possible bf16 values are computed that way once and looked up. */

/* A 4/5-bit block's 32 weights to bf16 at out, from its 16 qs bytes and (5-bit) its qh as the
 * file has it (bit j: weight j's fifth bit), by lookup: the bf16 of each of the 2^bits values
 * d * (q - off) (+ m), picked by q (vpermw). off, has_min, bits5: the type's (q45_off, q45_min,
 * q45_bits5). */
RL_TGT_AVX512_BF16 AI void q45_lut_put(uint16_t *out, __m128i qs, uint32_t qh, float d, float m, const int off,
					const int has_min, const int bits5)
{
	const __m512 q0 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
	__m512 f0 = _mm512_mul_ps(_mm512_sub_ps(q0, _mm512_set1_ps((float)off)), dv);
	__m512 f1 = _mm512_mul_ps(_mm512_sub_ps(q0, _mm512_set1_ps((float)(off - 16))), dv);
	if (has_min) {
		f0 = _mm512_add_ps(f0, mv);
		f1 = _mm512_add_ps(f1, mv);
	}
	__m512i lut = bits5 ? (__m512i)_mm512_cvtne2ps_pbh(f1, f0) : _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(f0));
	/* q as words: qs byte i's low nibble is weight i, its high one weight 16 + i */
	__m256i w = _mm256_cvtepu8_epi16(qs);
	__m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(w, _mm256_set1_epi16(15))),
					 _mm256_srli_epi16(w, 4), 1);
	if (bits5)
		idx = _mm512_mask_add_epi16(idx, (__mmask32)qh, idx, _mm512_set1_epi16(16));
	_mm512_storeu_si512((void *)out, _mm512_permutexvar_epi16(idx, lut));
}

/* one block as the file lays it out (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) to 32 bf16 at out */
RL_TGT_AVX512_BF16 AI void block_bf16(uint16_t *out, const uint8_t *p, int dt)
{
	const float d = H2F(p);
	if (dt == RL_DT_Q8_0) {
		__m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 2))));
		__m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 18))));
		_mm512_storeu_si512((void *)out, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_set1_ps(d), f1),
									     _mm512_mul_ps(_mm512_set1_ps(d), f0)));
		return;
	}
	const int has_min = q45_min(dt), bits5 = q45_bits5(dt), hd = 2 + 2 * has_min;
	uint32_t qh = 0;
	if (bits5)
		memcpy(&qh, p + hd, 4);
	q45_lut_put(out, _mm_loadu_si128((const __m128i *)(p + hd + 4 * bits5)), qh, d, has_min ? H2F(p + 2) : 0,
		    q45_off(dt), has_min, bits5);
}

/* a packed 16-row group of a 4/5-bit type (cpu_qmm_pack.c's layout) to tile rows [16][in]:
 * off, has_min, bits5 the type's (q45_off, q45_min, q45_bits5) */
RL_TGT_AVX512_BF16 AI void q45_group_bf16(uint16_t *tile, uint32_t in, const uint8_t *g, const int off,
					   const int has_min, const int bits5)
{
	const uint32_t bb = 18 + 2 * has_min + 4 * bits5, ndw = 4 + bits5;
	for (uint32_t b = 0; b < in / 32; b++) {
		const uint8_t *blk = g + (size_t)b * 16 * bb, *tails = blk + 64 * ndw;
		float dm[32];                  /* has_min: d, m of lane L at 2L, 2L + 1; else d at L */
		_mm512_storeu_ps(dm, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tails)));
		if (has_min)
			_mm512_storeu_ps(dm + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tails + 32))));
		uint32_t qh[16] = { 0 };
		if (bits5) {
			memcpy(qh, blk, 64);
			for (int L = 0; L < 16; L++)
				qh[L] = q5_qh_perm(qh[L]);     /* back to the file's order */
		}
		/* the qs dwords j of the 16 lanes, transposed in each 128-bit lane: t[k] lane q holds
		 * row 4q + k's 16 bytes */
		const uint8_t *qs = blk + 64 * bits5;
		__m512i v0 = _mm512_loadu_si512((const void *)qs), v1 = _mm512_loadu_si512((const void *)(qs + 64));
		__m512i v2 = _mm512_loadu_si512((const void *)(qs + 128)), v3 = _mm512_loadu_si512((const void *)(qs + 192));
		__m512i a0 = _mm512_unpacklo_epi32(v0, v1), a1 = _mm512_unpackhi_epi32(v0, v1);
		__m512i a2 = _mm512_unpacklo_epi32(v2, v3), a3 = _mm512_unpackhi_epi32(v2, v3);
		__m512i t[4] = { _mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
				 _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3) };
		uint16_t *out = tile + 32 * b;
#define Q45_LANE(Q)                                                                                  \
		for (int k = 0; k < 4; k++)                                                          \
			q45_lut_put(out + (size_t)(4 * (Q) + k) * in, _mm512_extracti32x4_epi32(t[k], Q),     \
				    qh[4 * (Q) + k], dm[has_min ? 8 * (Q) + 2 * k : 4 * (Q) + k],             \
				    has_min ? dm[8 * (Q) + 2 * k + 1] : 0, off, has_min, bits5);
		Q45_LANE(0) Q45_LANE(1) Q45_LANE(2) Q45_LANE(3)
#undef Q45_LANE
	}
}

/* Rows [o, o + n) of W to bf16, tile [n][in]: packed 16-row groups of the 4/5-bit types and
 * rows of them or of Q8_0 as the file has them (packed rows' blocks gathered back) in registers,
 * any other type through rl_cpu_wmat_row into row [in] then rl_qmm_to_bf16; the same bits
 * either way (test_qmatmul's tiles_decode_as_rows). */
RL_TGT_AVX512_BF16 void rl_qmm_tile_bf16(const struct rl_wmat *W, uint32_t o, uint32_t n, uint16_t *tile, float *row)
{
	const int dt = W->dtype, direct = q45_type(dt) || dt == RL_DT_Q8_0;
	const uint32_t in = W->cols, nb = in / 32;
	for (uint32_t j = 0; j < n; j++) {
		const uint32_t r = o + j;
		uint16_t *out = tile + (size_t)j * in;
		if (q45_type(dt) && r % 16 == 0 && r + 16 <= W->packed_rows && j + 16 <= n) {
			const uint8_t *g = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
			switch (dt) {
			case RL_DT_Q4_0: q45_group_bf16(out, in, g, 8, 0, 0); break;
			case RL_DT_Q4_1: q45_group_bf16(out, in, g, 0, 1, 0); break;
			case RL_DT_Q5_0: q45_group_bf16(out, in, g, 16, 0, 1); break;
			default:         q45_group_bf16(out, in, g, 0, 1, 1); break;   /* Q5_1 */
			}
			j += 15;
		} else if (direct) {
			uint8_t tmp[64];
			for (uint32_t b = 0; b < nb; b++)
				block_bf16(out + 32 * b, rl_qmm_block(W, r, b, tmp), dt);
		} else {
			rl_cpu_wmat_row(W, r, row);
			rl_qmm_to_bf16(out, row, in);
		}
	}
}

/* y[0 .. 8) or [0 .. 16) (=, or +=) s (+ b[..]): where the panel kernels put a vector of sums
 * (put16 on AVX-512F alone, so that both the F16C and the AVX512-BF16 kernels inline it) */
RL_TGT_AVX2 AI void put8(float *y, __m256 s, const float *b, int accumulate)
{
	if (b)
		s = _mm256_add_ps(s, _mm256_loadu_ps(b));
	_mm256_storeu_ps(y, accumulate ? _mm256_add_ps(s, _mm256_loadu_ps(y)) : s);
}
__attribute__((target("avx512f"))) AI void put16(float *y, __m512 s, const float *b, int accumulate)
{
	if (b)
		s = _mm512_add_ps(s, _mm512_loadu_ps(b));
	_mm512_storeu_ps(y, accumulate ? _mm512_add_ps(s, _mm512_loadu_ps(y)) : s);
}

/* Y[r, 0 .. NV*VW) (=, or +=) the NR activation rows against NV vectors of outputs of a block:
 * blk the block's first weight of those outputs (bw halfs per input), xt the activations
 * with input k of row r at xt[k * xs + r]; pf, pfs: prefetch pf + k * pfs at input k (or
 * NULL). TGT/V/VW/LD/BCAST/FMA/ZERO/PUT: the vector width's target, type, lanes, widening
 * load, broadcast, fp32 operations and put8/put16. */
#define DEFINE_H16_PANEL(NAME, TGT, V, VW, LD, BCAST, FMA, ZERO, PUT)                           \
TGT AI void NAME(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw, \
		 uint32_t K, const int NR, const int NV, const float *bias, int accumulate,           \
		 const char *pf, uint32_t pfs)                                                          \
{                                                                                                \
	V acc[8][6], w[6];                                                                       \
	_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)                                     \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			acc[r][v] = ZERO();                                                      \
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {                                  \
		if (pf)                                                                          \
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);                          \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			w[v] = LD(blk + v * VW);                                                 \
		_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {                           \
			V x = BCAST(xt[r]);                                                      \
			_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                     \
				acc[r][v] = FMA(w[v], x, acc[r][v]);                             \
		}                                                                                \
	}                                                                                        \
	_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)                                     \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			PUT(Y + (size_t)r * ldy + v * VW, acc[r][v], bias ? bias + v * VW : NULL, accumulate); \
}
DEFINE_H16_PANEL(h16_panel256, RL_TGT_AVX2, __m256, 8, ld8_f16, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, put8)
DEFINE_H16_PANEL(h16_panel512, RL_TGT_AVX512, __m512, 16, ld16_f16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, put16)
DEFINE_H16_PANEL(bf16_panel256, RL_TGT_AVX2, __m256, 8, ld8_bf16, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, put8)
DEFINE_H16_PANEL(bf16_panel512, RL_TGT_AVX512, __m512, 16, ld16_bf16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, put16)

/* y[0 .. 16) (=, or +=) the sums of the even outputs e (0, 2, .., 14) and odd outputs o put
 * back in order (+ b[..]) */
RL_TGT_AVX2 AI void put_pair(float *y, __m256 e, __m256 o, const float *b, int accumulate)
{
	const __m256 lo = _mm256_unpacklo_ps(e, o), up = _mm256_unpackhi_ps(e, o);
	put8(y, _mm256_permute2f128_ps(lo, up, 0x20), b, accumulate);
	put8(y + 8, _mm256_permute2f128_ps(lo, up, 0x31), b ? b + 8 : NULL, accumulate);
}

/* AVX2 over a BF16 block, 2..4 rows: 16 outputs per 32-byte load, widened exactly into the
 * even outputs (0, 2, .., 14: a shift) and the odd ones (a mask), two operations where
 * ld8_bf16 takes four; the sums are put back in order at the end. Its 8 accumulators are just
 * the FMA's latency times its rate (4x3 pairs would not fit the 16 registers). Otherwise as
 * DEFINE_H16_PANEL with NV 2. */
RL_TGT_AVX2 AI void bf16_pair256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			  uint32_t K, const int NR, const float *bias, int accumulate, const char *pf, uint32_t pfs)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256 ae[4], ao[4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		ae[r] = ao[r] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		const __m256i v = _mm256_loadu_si256((const __m256i *)blk);
		const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
		const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			const __m256 x = _mm256_set1_ps(xt[r]);
			ae[r] = _mm256_fmadd_ps(we, x, ae[r]);
			ao[r] = _mm256_fmadd_ps(wo, x, ao[r]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		put_pair(Y + (size_t)r * ldy, ae[r], ao[r], bias, accumulate);
}

/* One of bf16_tri256's two passes: B 0 takes outputs 0..15 (even and odd) and the even ones
 * of 16..31; B 1 the odd ones of 16..31 and 32..47. The mask is read from memory at each use
 * (an operand of vpand), since 12 accumulators, 3 weight vectors and a broadcast fill the 16
 * registers. */
RL_TGT_AVX2 AI void bf16_tri_pass(__m256 (*a)[3], const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			   uint32_t K, const int NR, const int B, const char *pf, uint32_t pfs)
{
	static const uint32_t hi[8] __attribute__((aligned(32))) = {
		0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u };
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		a[r][0] = a[r][1] = a[r][2] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		const __m256i *m = (const __m256i *)hi;
		__asm__("" : "+r"(m));         /* not hoisted into a register */
		const __m256i v1 = _mm256_loadu_si256((const __m256i *)(blk + 16));
		const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + (B ? 32 : 0)));
		__m256 w[3];
		if (B) {
			w[0] = _mm256_castsi256_ps(_mm256_and_si256(v1, *m));
			w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
			w[2] = _mm256_castsi256_ps(_mm256_and_si256(v, *m));
		} else {
			w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
			w[1] = _mm256_castsi256_ps(_mm256_and_si256(v, *m));
			w[2] = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
		}
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			const __m256 x = _mm256_set1_ps(xt[r]);
#pragma GCC unroll 3
			for (int j = 0; j < 3; j++)
				a[r][j] = _mm256_fmadd_ps(w[j], x, a[r][j]);
		}
	}
}

/* AVX2 over a whole 48-row BF16 block, 2..4 rows: bf16_pair256's even/odd widening with 12
 * accumulators instead of 8, in two passes of 24 outputs (two pairs split as 1.5 + 1.5; the
 * even sums of the middle pair wait in mid[] for their odd ones). One operation widens 8
 * outputs, as in the pairs, and 12 FMAs in flight cover their latency (4 cycles at 2 a cycle),
 * where the pairs' 8 just do. Arguments as DEFINE_H16_PANEL; pass B prefetches pf + pfs * K
 * on, the share after pass A's. */
RL_TGT_AVX2 AI void bf16_tri256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			 uint32_t K, const int NR, const float *bias, int accumulate, const char *pf, uint32_t pfs)
{
	__m256 a[4][3], mid[4];
	bf16_tri_pass(a, xt, xs, blk, bw, K, NR, 0, pf, pfs);
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		put_pair(Y + (size_t)r * ldy, a[r][0], a[r][1], bias, accumulate);
		mid[r] = a[r][2];
	}
	bf16_tri_pass(a, xt, xs, blk, bw, K, NR, 1, pf ? pf + (size_t)pfs * K : NULL, pfs);
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		put_pair(Y + (size_t)r * ldy + 16, mid[r], a[r][0], bias ? bias + 16 : NULL, accumulate);
		put_pair(Y + (size_t)r * ldy + 32, a[r][1], a[r][2], bias ? bias + 32 : NULL, accumulate);
	}
}

/* AVX512-BF16 over a BF16 block: the weights of 16 outputs at inputs k and k + 1 (two runs of
 * the block) interleaved in a register (vpermt2w) into the (k, k + 1) pairs that vdpbf16ps
 * multiplies against a broadcast pair of bf16 activations: 32 products an instruction, twice
 * the fp32 FMA's. xt holds row r's pair (k, k + 1) as the bits of xt[(k / 2) * xs + r]
 * (bf16 k in the low half); K even. Otherwise as DEFINE_H16_PANEL. */
RL_TGT_AVX512_BF16 AI void dpbf_panel(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
		       uint32_t K, const int NR, const int NV, const float *bias, int accumulate,
		       const char *pf, uint32_t pfs)
{
	uint16_t ix[32];
	for (int i = 0; i < 16; i++) {
		ix[2 * i] = (uint16_t)i;              /* word i of the run at k */
		ix[2 * i + 1] = (uint16_t)(32 + i);   /* word i of the run at k + 1 */
	}
	const __m512i idx = _mm512_loadu_si512((const void *)ix);
	__m512 acc[8][3];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			acc[r][v] = _mm512_setzero_ps();
	for (uint32_t k = 0; k < K; k += 2, blk += 2 * bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		__m512bh w[3];
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			w[v] = (__m512bh)_mm512_permutex2var_epi16(
				_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 16 * v))), idx,
				_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + bw + 16 * v))));
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			__m512bh x = (__m512bh)_mm512_set1_ps(xt[r]);
#pragma GCC unroll 3
			for (int v = 0; v < NV; v++)
				acc[r][v] = _mm512_dpbf16_ps(acc[r][v], w[v], x);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			put16(Y + (size_t)r * ldy + 16 * v, acc[r][v], bias ? bias + 16 * v : NULL, accumulate);
}

/* One group of nr (<= 8 on AVX-512, 4 on AVX2) activation rows against nv vectors of a block:
 * the dispatch to a kernel whose shape is a constant, so that its accumulators stay in
 * registers. nv: 1 or 3; on AVX2 also 6, a whole 48-row block (one row in one pass; BF16's
 * bf16_tri256), and for BF16 2 (bf16_pair256). */
enum h16_kind { H16_F16, H16_BF16, H16_DPBF };     /* the weights' type; vdpbf16ps on bf16 pairs */
#define H16_ARGS Y, ldy, xt, xs, blk, bw, K
#define H16_CALL(F, n, v) F(H16_ARGS, n, v, bias, acc, pf, pfs)
RL_TGT_AVX512 static void h16_group512(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			      uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			      enum h16_kind kind)
{
#define P512(n) (kind == H16_F16 ? (nv == 3 ? H16_CALL(h16_panel512, n, 3) : H16_CALL(h16_panel512, n, 1)) \
			       : (nv == 3 ? H16_CALL(bf16_panel512, n, 3) : H16_CALL(bf16_panel512, n, 1)))
	switch (nr) {
	case 1: P512(1); break; case 2: P512(2); break; case 3: P512(3); break; case 4: P512(4); break;
	case 5: P512(5); break; case 6: P512(6); break; case 7: P512(7); break; default: P512(8); break;
	}
#undef P512
}
RL_TGT_AVX512_BF16 static void dpbf_group(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			   uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			   enum h16_kind kind)
{
#define PBF(n) (nv == 3 ? H16_CALL(dpbf_panel, n, 3) : H16_CALL(dpbf_panel, n, 1))
	switch (nr) {
	case 1: PBF(1); break; case 2: PBF(2); break; case 3: PBF(3); break; case 4: PBF(4); break;
	case 5: PBF(5); break; case 6: PBF(6); break; case 7: PBF(7); break; default: PBF(8); break;
	}
#undef PBF
}
RL_TGT_AVX2 static void h16_group256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			      uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			      enum h16_kind kind)
{
	const int f = kind == H16_F16;
	if (nv == 2) {                 /* BF16 only */
		switch (nr) {
		case 1: bf16_pair256(H16_ARGS, 1, bias, acc, pf, pfs); break;
		case 2: bf16_pair256(H16_ARGS, 2, bias, acc, pf, pfs); break;
		case 3: bf16_pair256(H16_ARGS, 3, bias, acc, pf, pfs); break;
		default: bf16_pair256(H16_ARGS, 4, bias, acc, pf, pfs); break;
		}
		return;
	}
	if (nr == 1 && nv == 6) {
		f ? H16_CALL(h16_panel256, 1, 6) : H16_CALL(bf16_panel256, 1, 6);
		return;
	}
	if (nv == 6) {                 /* BF16, a whole 48-row block */
		switch (nr) {
		case 2: bf16_tri256(H16_ARGS, 2, bias, acc, pf, pfs); break;
		case 3: bf16_tri256(H16_ARGS, 3, bias, acc, pf, pfs); break;
		default: bf16_tri256(H16_ARGS, 4, bias, acc, pf, pfs); break;
		}
		return;
	}
#define P256(n) (f ? (nv == 3 ? H16_CALL(h16_panel256, n, 3) : H16_CALL(h16_panel256, n, 1)) \
		   : (nv == 3 ? H16_CALL(bf16_panel256, n, 3) : H16_CALL(bf16_panel256, n, 1)))
	switch (nr) {
	case 1: P256(1); break; case 2: P256(2); break; case 3: P256(3); break; default: P256(4); break;
	}
#undef P256
}
#undef H16_CALL
#undef H16_ARGS

/* t[k * ng + r] = src[r * ld + k] for r < ng, k < n: ng rows of 32-bit elements, interleaved
 * for the panel kernels' broadcasts. Four or eight rows eight columns at a time in registers
 * (an element-wise loop is a visible share of a small decode step). */
RL_TGT_AVX2 static void xpose32(float *t, const float *src, size_t ld, uint32_t ng, uint32_t n)
{
	uint32_t k = 0;
	if (ng == 4 || ng == 8)
		for (; k + 8 <= n; k += 8) {
			__m256 a[8], u[8];
#pragma GCC unroll 8
			for (uint32_t r = 0; r < ng; r++)
				a[r] = _mm256_loadu_ps(src + r * ld + k);
#pragma GCC unroll 2
			for (uint32_t h = 0; h < ng; h += 4) {     /* u[h + j]: columns j, j + 4 of rows h..h+3 */
				const __m256 t0 = _mm256_unpacklo_ps(a[h], a[h + 1]), t1 = _mm256_unpackhi_ps(a[h], a[h + 1]);
				const __m256 t2 = _mm256_unpacklo_ps(a[h + 2], a[h + 3]), t3 = _mm256_unpackhi_ps(a[h + 2], a[h + 3]);
				u[h] = _mm256_shuffle_ps(t0, t2, 0x44);
				u[h + 1] = _mm256_shuffle_ps(t0, t2, 0xee);
				u[h + 2] = _mm256_shuffle_ps(t1, t3, 0x44);
				u[h + 3] = _mm256_shuffle_ps(t1, t3, 0xee);
			}
			float *o = t + (size_t)k * ng;
			if (ng == 8)
#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					_mm256_storeu_ps(o + 8 * j, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
					_mm256_storeu_ps(o + 8 * (j + 4), _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
				}
			else
#pragma GCC unroll 2
				for (int j = 0; j < 2; j++) {           /* columns 2j, 2j + 1; then + 4 */
					_mm256_storeu_ps(o + 8 * j, _mm256_permute2f128_ps(u[2 * j], u[2 * j + 1], 0x20));
					_mm256_storeu_ps(o + 16 + 8 * j, _mm256_permute2f128_ps(u[2 * j], u[2 * j + 1], 0x31));
				}
		}
	for (; k < n; k++)
		for (uint32_t r = 0; r < ng; r++)
			t[(size_t)k * ng + r] = src[r * ld + k];
}

/* Y[r, o] for r < n_rows and the outputs o in [o0, o1) of a packed F16 or BF16 matrix.
 * Activation rows in chunks of 64, each transposed once into scratch as groups of G rows
 * ([in][G] floats each; bf16 pairs for vdpbf16ps; one fp32 row is read where it is); then
 * for each run of outputs, every group, so that the run's weights (48 rows x in halfs: 72 KB
 * at 768) are read from DRAM once per chunk and from L2 for the other groups. A vector may start at any
 * output of a block; the outputs short of one at a block's or the range's end are gathered
 * row by row. xt: [64 * in], row: [in]. */
void rl_qmm_h16_panels(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		       const float *bias, uint32_t n_rows, uint32_t o0, uint32_t o1, int accumulate,
		       int dpbf, float *xt, float *row)
{
	const int z = rl_cpu_isa() == RL_CPU_AVX512;
	const enum h16_kind kind = W->dtype == RL_DT_F16 ? H16_F16 : dpbf ? H16_DPBF : H16_BF16;
	void (*group)(float *, size_t, const float *, size_t, const uint16_t *, uint32_t, uint32_t, uint32_t,
		      uint32_t, const float *, int, const char *, uint32_t, enum h16_kind) =
		kind == H16_DPBF ? dpbf_group : z ? h16_group512 : h16_group256;
	const uint32_t in = W->cols, vw = z ? 16 : 8, G = z ? 8 : 4;
	for (uint32_t c0 = 0; c0 < n_rows; c0 += 64) {
		const uint32_t nc = n_rows - c0 < 64 ? n_rows - c0 : 64;
		const float *Xc = X + (size_t)c0 * ldx;
		float *Yc = Y + (size_t)c0 * ldy;
		const int direct = nc == 1 && kind != H16_DPBF;   /* one fp32 row is read where it is */
		if (!direct)
			for (uint32_t g = 0; g < nc; g += G) {
				const uint32_t ng = nc - g < G ? nc - g : G;
				float *t = xt + (size_t)g * in;
				if (kind == H16_DPBF) {
					/* bf16 pairs (k, k + 1): the rows rounded to bf16 (in the free
					 * upper half of this group's in * G floats), read as dwords */
					uint16_t *hb = (uint16_t *)(t + (size_t)in * G / 2);
					for (uint32_t r = 0; r < ng; r++)
						rl_qmm_to_bf16(hb + (size_t)r * in, Xc + (size_t)(g + r) * ldx, in);
					xpose32(t, (const float *)hb, in / 2, ng, in / 2);
				} else {
					xpose32(t, Xc + (size_t)g * ldx, ldx, ng, in);
				}
			}
		for (uint32_t o = o0; o < o1;) {
			uint32_t b0, bw = h16_block(W, o, &b0);
			const uint32_t left = (b0 + bw < o1 ? b0 + bw : o1) - o;   /* in this block and range */
			if (left < vw) {               /* short of a vector: this output alone */
				rl_cpu_wmat_row(W, o, row);
				for (uint32_t r = 0; r < nc; r++) {
					float s = dot_f32_scalar(row, Xc + (size_t)r * ldx, in) + (bias ? bias[o] : 0);
					float *y = Yc + (size_t)r * ldy + o;
					*y = accumulate ? *y + s : s;
				}
				o++;
				continue;
			}
			uint32_t nv = left / vw >= 3 ? 3 : 1;
			if (!z && nc == 1 && left / vw >= 6)
				nv = 6;
			else if (!z && kind == H16_BF16 && !direct)   /* bf16_tri256, else bf16_pair256 */
				nv = left / vw >= 6 ? 6 : left / vw >= 2 ? 2 : 1;
			const uint16_t *blk = (const uint16_t *)W->data + (size_t)b0 * in + (o - b0);
			const float *b = bias ? bias + o : NULL;
			if (direct) {
				group(Yc + o, ldy, Xc, 1, blk, bw, in, 1, nv, b, accumulate, NULL, 0, kind);
				o += nv * vw;
				continue;
			}
			/* Several passes over a block (AVX2's two halves, or more groups): only the
			 * first reads DRAM, so the hardware prefetcher idles through the rest. Each
			 * pass prefetches its share of the next 48-row block. One pass needs none: a block is one
			 * stream. bf16_tri256 makes two passes a call (a one-row group's
			 * kernel one, over both shares). */
			const uint32_t per = nv == 6 && kind == H16_BF16 ? 2 : 1;
			const uint32_t groups = (nc + G - 1) / G, passes = bw / (nv * vw) * groups * per;
			const int pf_next = passes > 1 && b0 + 2 * bw <= W->rows / H16_BW * H16_BW;
			const uint32_t pfs = pf_next ? (2 * bw + passes - 1) / passes : 0;   /* bytes per input k */
			const char *next = (const char *)((const uint16_t *)W->data + (size_t)(b0 + bw) * in);
			for (uint32_t g = 0; g < nc; g += G) {
				const uint32_t ng = nc - g < G ? nc - g : G;
				const uint32_t pass = ((o - b0) / (nv * vw) * groups + g / G) * per;
				group(Yc + (size_t)g * ldy + o, ldy, xt + (size_t)g * in, ng, blk, bw, in, ng, nv, b, accumulate,
				      pf_next ? next + (size_t)pass * pfs * in : NULL, ng == 1 ? pfs * per : pfs, kind);
			}
			o += nv * vw;
		}
	}
}
