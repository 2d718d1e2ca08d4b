/* cpu_qmm_act.c — the activation side of the integer kernels: each activation row quantized
 * once per call to 8 bits (Q8_0's blocks of 32 with their sums of 16; the K-quants' blocks of
 * 256 with their sums of 16, ggml's Q8_K), and the per-call sums the lane-per-row kernels fold
 * in (Q4_K's min pairs, the VNNI kernels' seeds). Written for AVX2; the AVX-512 kernels read
 * the same blocks. Rounding: to nearest even, as the scalar reference's nearbyintf.
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

RL_TGT_AVX2 void rl_qmm_quantize_q8(const float *x, uint32_t n, struct q8x *o)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (uint32_t b = 0; b < n / 32; b++, x += 32) {
		__m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
		__m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
		__m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
					 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		float amax = _mm_cvtss_f32(h), d = amax / 127, id = d ? 1 / d : 0;
		o[b].d = d;
		__m256 s = _mm256_set1_ps(id);
		/* round to nearest (even), as nearbyintf in the scalar path */
		__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, s)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, s));
		__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, s)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, s));
		o[b].s[0] = (int16_t)hsum_i32(_mm256_add_epi32(i0, i1));
		o[b].s[1] = (int16_t)hsum_i32(_mm256_add_epi32(i2, i3));
		/* packs interleave the 128-bit lanes; the permute puts the 32 bytes back in order */
		__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)o[b].q, p);
	}
}

RL_TGT_AVX2 void rl_qmm_quantize_q8k(const float *x, uint32_t n, struct q8k *o)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (uint32_t b = 0; b < n / 256; b++, x += 256) {
		__m256 m = _mm256_setzero_ps();
		for (int i = 0; i < 256; i += 8)
			m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		float amax = _mm_cvtss_f32(h), d = amax / 127, id = d ? 1 / d : 0;
		o[b].d = d;
		__m256 s = _mm256_set1_ps(id);
		for (int i = 0; i < 256; i += 32) {
			__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), s));
			__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), s));
			__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), s));
			__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), s));
			o[b].bsums[i / 16] = (int16_t)hsum_i32(_mm256_add_epi32(i0, i1));
			o[b].bsums[i / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(i2, i3));
			__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
			p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
			_mm256_storeu_si256((__m256i *)(o[b].q + i), p);
		}
	}
}


/* Per activation row and super-block, its 8 sums of 32 as the word pairs (s0, s2), (s1, s3),
 * (s4, s6), (s5, s7), against which the 16/8-row Q4_K kernels multiply-add their rows' mins
 * (bp: nr * nb * 4 int32). */
static void q4k_min_pairs(const struct q8k *const *xk, uint32_t nr, uint32_t nb, int32_t *bp)
{
	for (uint32_t r = 0; r < nr; r++)
		for (uint32_t b = 0; b < nb; b++) {
			const int16_t *s = xk[r][b].bsums;
			int32_t *q = bp + ((size_t)r * nb + b) * 4;
			for (int k = 0; k < 4; k++) {
				int j = (k >> 1) * 4 + (k & 1);        /* pairs (j, j + 2) */
				uint16_t lo = (uint16_t)(s[2 * j] + s[2 * j + 1]), hi = (uint16_t)(s[2 * j + 4] + s[2 * j + 5]);
				q[k] = (int32_t)((uint32_t)lo | (uint32_t)hi << 16);
			}
		}
}

/* The per-call sums the K-quant lane-per-row kernels take, made once for the activation rows
 * xk[0 .. nr) (aux: nr * nb * KQ_AUX int32): Q4_K's and Q5_K's min pairs (q4k_min_pairs) for
 * either ISA; Q6_K's and Q3_K's seeds for the VNNI kernels, -32 (Q3_K: -4) * each sum of 16
 * activations (the AVX2 one forms its own offset term); none for Q2_K (its kernel reads the
 * sums of 16 as they are). */
void rl_qmm_kq_aux(int dt, int vnni, const struct q8k *const *xk, uint32_t nr, uint32_t nb, int32_t *aux)
{
	if (dt == RL_DT_Q4_K || dt == RL_DT_Q5_K) {    /* the same (scale, min) pairs */
		q4k_min_pairs(xk, nr, nb, aux);
		return;
	}
	if ((dt == RL_DT_Q6_K || dt == RL_DT_Q3_K) && vnni)   /* q6k_t16's and q3k_t16's seeds */
		for (uint32_t r = 0; r < nr; r++)
			for (uint32_t b = 0; b < nb; b++)
				for (int j = 0; j < 16; j++)
					aux[((size_t)r * nb + b) * 16 + j] = (dt == RL_DT_Q6_K ? -32 : -4) * (int32_t)xk[r][b].bsums[j];
}

/* seed[b] of one activation row: -128 times the sum of its block b (from its q8 sums) */
void rl_qmm_q8_0_seeds(const struct q8x *x, uint32_t nb, int32_t *seed)
{
	for (uint32_t b = 0; b < nb; b++)
		seed[b] = -128 * ((int32_t)x[b].s[0] + x[b].s[1]);
}
