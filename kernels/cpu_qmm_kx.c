/* cpu_qmm_kx.c — the integer kernels for the 256-weight block types Q2_K, Q3_K and Q5_K (the
 * types llama-quantize's Q2_K, Q3_K_M and Q5_K_M presets write) on AVX2 and AVX-512 without
 * VNNI for any number of activation rows (AVX512-VNNI takes the lane-per-row kq_t16 over
 * packed groups instead, cpu_qmm_avx512.c).
 *
 * Row at a time: each weight super-block is decoded once into the integer dot's operands
 * (struct kx_sb: 32 weights a vector as unsigned bytes, and their sub-block scales as words),
 * then dotted with each activation row's Q8_K block (ggml's 8 bits per 256 with sums of 16):
 * vpmaddubsw into word pair sums, vpmaddwd with the scales, the mins or offsets through the
 * activations' sums of 16. The rows stay as the file has them (one sequential stream a weight
 * row; no repacking).
 *
 * kx_rows: one row computes the same bits alone, among 2..8 rows, in a prefill chunk, and on
 * either ISA: a super-block's integer sums are exact (no saturation: q < 32 against |x| <= 127), summed
 * across lanes to one int32 before they meet a float, and that float arithmetic (one explicit
 * FMA per term, super-blocks in order) does not depend on the rows beside it.
 * Accuracy: the 8-bit activations' rounding (as ggml's K-quant dots), test_qmatmul's 4e-3.
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

/* A super-block as the integer dot reads it (kx_dot):
 *   q[c]   weights 32c .. 32c + 31, one byte each: q unsigned below 32 (Q5_K; Q2_K; Q3_K's q + 4)
 *   sc[c]  their scales as the 16 words vpmaddwd multiplies vpmaddubsw's pair sums by: words
 *          0-7 for weights 32c .. 32c + 15, 8-15 for the next 16
 *   m16    word j, against the activations' sum over weights 16j .. 16j + 15: the min of its
 *          sub-block (Q5_K, Q2_K: - dmin * m16 . bsums), or 4 * its scale (Q3_K: the -4 offset
 *          of q, subtracted in integers)
 *   d, dmin  the float scales: sum w x = dx * (d * isum - dmin * msum) (dmin: Q5_K, Q2_K) */
struct kx_sb {
	__m256i q[8], sc[8], m16;
	float d, dmin;
};

/* v's bits moved left by n (right for n < 0) within each byte's reach: bit b of a byte to bit
 * b + n of the same byte, for the bits a mask then keeps */
T256 AI __m256i kx_shift(__m256i v, int n)
{
	return n >= 0 ? _mm256_slli_epi16(v, n) : _mm256_srli_epi16(v, -n);
}

/* sc[c] of the per-32 scales (Q5_K): s8's 8 signed bytes, each over its 32 weights */
T256 AI void kx_scales32(__m128i s8, __m256i *sc)
{
	const __m256i D = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));   /* dword k: (s_k, s_k) */
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++)
		sc[c] = _mm256_permutevar8x32_epi32(D, _mm256_set1_epi32(c));
}

/* sc[c] of the per-16 scales (Q2_K, Q3_K): s16's 16 signed bytes, each over its 16 weights */
T256 AI void kx_scales16(__m128i s16, __m256i *sc)
{
	const __m256i D0 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s16, s16));   /* dword k: (s_k, s_k) */
	const __m256i D1 = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(s16, s16));   /* (s_8+k, s_8+k) */
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++) {
		const int k = 2 * (c % 4);
		sc[c] = _mm256_permutevar8x32_epi32(c < 4 ? D0 : D1, _mm256_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1));
	}
}

/* Q5_K (176 bytes): f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs, qh[32], qs[128];
 * w = d * sc * q - dmin * m. Weights 64p .. 64p + 31 are the low nibbles of qs[32p ..], the
 * next 32 the high ones; the fifth bit of weight 32c + l is bit c of qh[l]. */
T256 AI void kx_q5_k(const uint8_t *blk, struct kx_sb *S)
{
	const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
	uint32_t u[3];
	memcpy(u, blk + 4, 12);
	/* q4_k_scales's unpacking, kept in registers */
	const uint32_t m6 = 0x3f3f3f3fu, k4 = 0x0f0f0f0fu, m2 = 0x03030303u;
	const uint64_t sc = (u[0] & m6) | (uint64_t)((u[2] & k4) | (((u[0] >> 6) & m2) << 4)) << 32;
	const uint64_t mn = (u[1] & m6) | (uint64_t)(((u[2] >> 4) & k4) | (((u[1] >> 6) & m2) << 4)) << 32;
	const __m128i mn8 = _mm_cvtsi64_si128((long long)mn);
	kx_scales32(_mm_cvtsi64_si128((long long)sc), S->sc);
	S->m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
	const __m256i hv = _mm256_loadu_si256((const __m256i *)(blk + 16));
#pragma GCC unroll 4
	for (int p = 0; p < 4; p++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 48 + 32 * p));
		S->q[2 * p] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(kx_shift(hv, 4 - 2 * p), b4));
		S->q[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
						  _mm256_and_si256(kx_shift(hv, 3 - 2 * p), b4));
	}
	S->d = H2F(blk);
	S->dmin = H2F(blk + 2);
}

/* Q2_K (84 bytes): 16 bytes of (4-bit scale | 4-bit min << 4), qs[64], f16 d, f16 dmin;
 * w = d * sc * q - dmin * m. Weight 32c + l is bits 2 (c % 4) of qs[32 (c / 4) + l]. */
T256 AI void kx_q2_k(const uint8_t *blk, struct kx_sb *S)
{
	const __m128i s = _mm_loadu_si128((const __m128i *)blk), m4 = _mm_set1_epi8(15);
	kx_scales16(_mm_and_si128(s, m4), S->sc);
	S->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
	const __m256i m2 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
	for (int n = 0; n < 2; n++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * n));
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			S->q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
	}
	S->d = H2F(blk + 80);
	S->dmin = H2F(blk + 82);
}

/* Q3_K (110 bytes): hmask[32], qs[64], 12 bytes of 16 6-bit scales, f16 d; w = d * (s - 32) *
 * (q2 - 4 * !h): weight 32c + l's two low bits are bits 2 (c % 4) of qs[32 (c / 4) + l], its
 * h bit c of hmask[l]. Here q = q2 + 4h (0..7), and the -4 leaves through 4 (s - 32) . bsums. */
T256 AI void kx_q3_k(const uint8_t *blk, struct kx_sb *S)
{
	/* the 16 scales (dec_q3_k's unpacking) */
	const uint32_t k1 = 0x03030303u, k2 = 0x0f0f0f0fu;
	uint32_t a[3];
	memcpy(a, blk + 96, 12);
	const __m128i s = _mm_sub_epi8(_mm_setr_epi32((int)((a[0] & k2) | (((a[2] >> 0) & k1) << 4)),
						      (int)((a[1] & k2) | (((a[2] >> 2) & k1) << 4)),
						      (int)(((a[0] >> 4) & k2) | (((a[2] >> 4) & k1) << 4)),
						      (int)(((a[1] >> 4) & k2) | (((a[2] >> 6) & k1) << 4))),
				       _mm_set1_epi8(32));
	kx_scales16(s, S->sc);
	S->m16 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s), 2);
	const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
	const __m256i hv = _mm256_loadu_si256((const __m256i *)blk);
#pragma GCC unroll 2
	for (int n = 0; n < 2; n++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 + 32 * n));
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			const int c = 4 * n + j;
			S->q[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2),
						  _mm256_and_si256(kx_shift(hv, 2 - c), b2));
		}
	}
	S->d = H2F(blk + 108);
}

T256 AI void kx_decode(const int dt, const uint8_t *blk, struct kx_sb *S)
{
	if (dt == RL_DT_Q5_K)
		kx_q5_k(blk, S);
	else if (dt == RL_DT_Q2_K)
		kx_q2_k(blk, S);
	else
		kx_q3_k(blk, S);
}

/* activation rows a pass of the prefill takes against one weight row (their accumulators on
 * the stack) */
#define KX_ROWS 64

/* the dot and the row loop at each ISA (kernels/cpu_qmm_kx_tmpl.h): 32 weights a vector with
 * vpmaddwd + vpaddd (AVX2), 64 (AVX-512BW) */
#define KX_TGT RL_TGT_AVX2
#define KX_FN(name) name##_avx2
#define KX_W 256
#include "kernels/cpu_qmm_kx_tmpl.h"
#undef KX_TGT
#undef KX_FN
#undef KX_W

#define KX_TGT RL_TGT_AVX512
#define KX_FN(name) name##_512
#define KX_W 512
#define KX_MADD(s, p, sc) _mm512_add_epi32(s, _mm512_madd_epi16(p, sc))
#include "kernels/cpu_qmm_kx_tmpl.h"
#undef KX_TGT
#undef KX_FN
#undef KX_MADD
#undef KX_W
