/* cpu_qmm_kx.c — the integer kernels for the 256-weight block types Q2_K, Q3_K and Q5_K (the
 * types llama-quantize's Q2_K, Q3_K_M and Q5_K_M presets write) on AVX2 and AVX-512 without
 * VNNI for any number of activation rows, and their prefill on AVX512-VNNI (whose decode steps
 * take the lane-per-row kq_t16, cpu_qmm_avx512.c).
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
 * Prefill on AVX512-VNNI takes kx_many_vnni (below: the weights transposed once a call for
 * one multiply per 64 products), whose float sums run in another order.
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

/* ---- Q5_K's prefill on AVX512-VNNI: sixteen weight rows a lane each -----------------------
 *
 * kx_rows spends two multiplies (vpmaddubsw, then vpmaddwd with the scales) and a dozen more
 * instructions of tail per super-block and activation row, on the one port that takes 512-bit
 * integer multiplies. For a prefill chunk the weights can be laid out for the cheaper
 * arithmetic of the lane-per-row kernels instead, once per call: each group of 16 weight rows'
 * super-blocks decoded (kx_decode) and transposed so that lane L of vector k holds bytes
 * 4k .. 4k + 3 of row L's q (unsigned, as vpdpbusd wants them), with the scales of each
 * sub-block of 32 as floats and the m16 words in pairs. Per activation row and sub-block: 8
 * vpdpbusd (16 rows x 4 weights each) into an exact int32, one convert and one FMA by the
 * lanes' scales; per super-block acc += d dx f - dmin dx msum, the mins as 8 vpdpwssd against
 * the activations' sums of 16. For Q5_K this beats kq_t16 8 rows at a time (which transposes
 * the file's rows every pass; cpu_qmm.c's table notes); Q2_K and Q3_K run that. The float sums
 * run in another order than kq_t16's, so the deterministic mode runs kq_t16 (cpu_qmm.c). */

/* one group's super-block, transposed (KXG_BYTES each, 64-byte aligned) */
struct kxg {
	__m512i q[64];                 /* lane L: bytes 4k .. 4k + 3 of row L's q */
	__m512 sc[8];                  /* [sub-block]: lane L's scale */
	__m512i m[8];                  /* lane L: m16 words 2i, 2i + 1 of row L */
	__m512 d, dmin;
};

RL_TGT_AVX512_VNNI static void kxg_build(const struct rl_wmat *W, uint32_t o, uint32_t n, uint32_t b, struct kxg *G)
{
	uint8_t q[16][256] __attribute__((aligned(64)));
	int16_t sc[16][128] __attribute__((aligned(64))), m16[16][16] __attribute__((aligned(64)));
	float d[16], dmin[16];
	for (uint32_t L = 0; L < 16; L++) {
		if (L >= n) {                  /* lanes past the last row: zeros, never stored */
			memset(q[L], 0, sizeof q[L]);
			memset(sc[L], 0, sizeof sc[L]);
			memset(m16[L], 0, sizeof m16[L]);
			d[L] = dmin[L] = 0;
			continue;
		}
		struct kx_sb S;
		kx_q5_k((const uint8_t *)W->data + (size_t)(o + L) * W->row_bytes + (size_t)b * W->blk_bytes, &S);
		for (int c = 0; c < 8; c++) {
			_mm256_store_si256((__m256i *)(q[L] + 32 * c), S.q[c]);
			_mm256_store_si256((__m256i *)(sc[L] + 16 * c), S.sc[c]);
		}
		_mm256_store_si256((__m256i *)m16[L], S.m16);
		d[L] = S.d;
		dmin[L] = S.dmin;
	}
	const uint8_t *rp[16];
	for (int L = 0; L < 16; L++)
		rp[L] = q[L];
	for (int c = 0; c < 8; c++)    /* 32 bytes of the 16 rows at a time: 64 gathers made this build 1.25x slower */
		t16_load(rp, 32 * (size_t)c, G->q + 8 * c);
	for (int s = 0; s < 8; s++) {          /* sub-block s: chunk s's words (each its scale) */
		float v[16];
		for (int L = 0; L < 16; L++)
			v[L] = sc[L][16 * s];
		G->sc[s] = _mm512_loadu_ps(v);
	}
	for (int i = 0; i < 8; i++) {
		int32_t v[16];
		for (int L = 0; L < 16; L++)
			v[L] = (int32_t)(uint16_t)m16[L][2 * i] | (int32_t)((uint32_t)(uint16_t)m16[L][2 * i + 1] << 16);
		G->m[i] = _mm512_loadu_si512((const void *)v);
	}
	G->d = _mm512_loadu_ps(d);
	G->dmin = _mm512_loadu_ps(dmin);
}

/* NR activation rows x[r] (their q8k blocks) against one group's nb transposed super-blocks */
RL_TGT_AVX512_VNNI AI void kxg_rows(float *Y, size_t ldy, const struct q8k *const *x, const struct kxg *G,
						uint32_t nb, const int NR, __mmask16 lanes, const float *bias, int accumulate)
{
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const struct kxg *B = &G[b];
		__m512 f[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			f[r] = _mm512_setzero_ps();
#pragma GCC unroll 1
		for (int s = 0; s < 8; s++) {
			__m512i S[8];
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++)
				S[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int k = 8 * s; k < 8 * s + 8; k++) {
				const __m512i T = B->q[k];
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					int32_t xv;
					memcpy(&xv, x[r][b].q + 4 * k, 4);
					S[r] = _mm512_dpbusd_epi32(S[r], T, _mm512_set1_epi32(xv));
				}
			}
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++)
				f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[r]), B->sc[s], f[r]);
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			const struct q8k *xb = &x[r][b];
			const __m512 dx = _mm512_set1_ps(xb->d);
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(B->d, dx), f[r], acc[r]);
			__m512i mi = _mm512_setzero_si512();
			for (int i = 0; i < 8; i++) {
				int32_t bs;
				memcpy(&bs, xb->bsums + 2 * i, 4);
				mi = _mm512_dpwssd_epi32(mi, B->m[i], _mm512_set1_epi32(bs));
			}
			acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(B->dmin, dx), _mm512_cvtepi32_ps(mi), acc[r]);
		}
	}
	t16_store(Y, ldy, acc, NR, 0, lanes, bias, accumulate);
}

_Static_assert(sizeof(struct kxg) == KXG_BYTES, "cpu_qmm.h's KXG_BYTES is struct kxg's size");

RL_TGT_AVX512_VNNI void rl_qmm_kx_many_vnni(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W,
					    const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate,
					    void *buf)
{
	struct kxg *G = buf;
	const uint32_t nb = W->cols / 256;
	for (uint32_t o = o0; o < o1; o += 16) {
		const uint32_t n = o1 - o < 16 ? o1 - o : 16;
		const __mmask16 lanes = (__mmask16)((1u << n) - 1);
		for (uint32_t b = 0; b < nb; b++)
			kxg_build(W, o, n, b, &G[b]);
		for (uint32_t r0 = 0; r0 < nr; r0 += 8) {
			const uint32_t k = nr - r0 < 8 ? nr - r0 : 8;
			const struct q8k *xr[8];
			for (uint32_t r = 0; r < k; r++)
				xr[r] = x + (size_t)(r0 + r) * nb;
			float *y = Y + (size_t)r0 * ldy + o;
			const float *bo = bias ? bias + o : NULL;
#define KXG(NR) kxg_rows(y, ldy, xr, G, nb, NR, lanes, bo, accumulate)
			switch (k) {
			case 8: KXG(8); break;
			case 7: KXG(7); break;
			case 6: KXG(6); break;
			case 5: KXG(5); break;
			case 4: KXG(4); break;
			case 3: KXG(3); break;
			case 2: KXG(2); break;
			default: KXG(1); break;
			}
#undef KXG
		}
	}
}

