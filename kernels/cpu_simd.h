/* cpu_simd.h — what the CPU kernels share about instruction sets: the target attributes
 * (one per level, named for what it enables) and width-generic primitives, so that a kernel
 * is written once and compiled for 8 and 16 lanes (cpu_attention.c, the 16-bit engine).
 * Header-only, static inline.
 *
 * Target attributes. A function compiled for a level may only run when rl_cpu_isa() (and,
 * for VNNI and BF16, rl_cpu_features()) allows it: kernels/cpu_features.h owns that. Every
 * CPU with AVX2 that this project targets has FMA and F16C, so the AVX2 level enables all
 * three; a kernel that issues F16C instructions on data still checks RL_CPUF_F16C.
 */
#ifndef RL_CPU_SIMD_H
#define RL_CPU_SIMD_H

#include <stdint.h>
#include <immintrin.h>

#define RL_TGT_AVX2        __attribute__((target("avx2,fma,f16c")))
#define RL_TGT_AVX512      __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define RL_TGT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define RL_TGT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define RL_INLINE          static inline __attribute__((always_inline))

/* F(n) with n (1..8, larger as 8) a constant, so that a kernel instantiated per row count or
 * vector count keeps its accumulators in registers */
#define RL_CASES_1_TO_8(n, F) do {                                                                \
	switch (n) {                                                                              \
	case 1: F(1); break; case 2: F(2); break; case 3: F(3); break; case 4: F(4); break;       \
	case 5: F(5); break; case 6: F(6); break; case 7: F(7); break; default: F(8); break;      \
	}                                                                                         \
} while (0)

/* ---------------------------------------------------------------- horizontal sums ---- */
/* Horizontal sums of many vectors at once (attention's scores of 8 or 16 keys): W vectors of
 * W lanes become one vector whose lane j is the sum of vector j, through a transpose-and-add
 * tree (~3 shuffles and adds a vector) instead of a full reduce per vector (~10 dependent ops
 * each). */

/* a[0..3] -> 128-bit lane c holds (sum of a[0] over lane c's 4 floats, a[1]'s, a[2]'s, a[3]'s) */
RL_TGT_AVX512 RL_INLINE __m512 rl_simd_tree4_512(const __m512 *a)
{
	__m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
	__m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
	return _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
}

/* u[g] = rl_simd_tree4_512(a + 4g) for g < 4 -> lane j = the full sum of a[j] */
RL_TGT_AVX512 RL_INLINE __m512 rl_simd_join4_512(const __m512 *u)
{
	__m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
	__m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
	return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

RL_TGT_AVX2 RL_INLINE __m256 rl_simd_tree4_256(const __m256 *a)
{
	__m256 s01 = _mm256_add_ps(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
	__m256 s23 = _mm256_add_ps(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
	return _mm256_add_ps(_mm256_shuffle_ps(s01, s23, 0x44), _mm256_shuffle_ps(s01, s23, 0xEE));
}

/* u0 = tree4 of a[0..3], u1 of a[4..7] -> lane j = the full sum of a[j] */
RL_TGT_AVX2 RL_INLINE __m256 rl_simd_join2_256(__m256 u0, __m256 u1)
{
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* ---------------------------------------------------------------- vector primitives -- */
/* The same operations at both widths, rl_v8_* on AVX2 (8 lanes) and rl_v16_* on AVX-512 (16),
 * so that a kernel body written once against V(op) compiles for either (cpu_attention.c). n:
 * a lane count 0..W; lanes >= n of a _n load are 0, of a _n store untouched. */

static const int32_t rl_v8_mask_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };
/* mask of the first n (<= 8) lanes */
RL_TGT_AVX2 RL_INLINE __m256i rl_v8_mask(uint32_t n) { return _mm256_loadu_si256((const __m256i *)(rl_v8_mask_tab + 8 - n)); }
RL_TGT_AVX512 RL_INLINE __mmask16 rl_v16_mask(uint32_t n) { return (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1); }

RL_TGT_AVX2 RL_INLINE __m256 rl_v8_zero(void) { return _mm256_setzero_ps(); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_zero(void) { return _mm512_setzero_ps(); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_set1(float f) { return _mm256_set1_ps(f); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_set1(float f) { return _mm512_set1_ps(f); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_load(const float *p) { return _mm256_loadu_ps(p); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_load(const float *p) { return _mm512_loadu_ps(p); }
RL_TGT_AVX2 RL_INLINE void rl_v8_store(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
RL_TGT_AVX512 RL_INLINE void rl_v16_store(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_load_n(const float *p, uint32_t n) { return _mm256_maskload_ps(p, rl_v8_mask(n)); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_load_n(const float *p, uint32_t n) { return _mm512_maskz_loadu_ps(rl_v16_mask(n), p); }
RL_TGT_AVX2 RL_INLINE void rl_v8_store_n(float *p, __m256 v, uint32_t n) { _mm256_maskstore_ps(p, rl_v8_mask(n), v); }
RL_TGT_AVX512 RL_INLINE void rl_v16_store_n(float *p, __m512 v, uint32_t n) { _mm512_mask_storeu_ps(p, rl_v16_mask(n), v); }
/* W halves at p, widened (F16C) */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_load_h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_load_h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_div(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_vmin(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }      /* lane by lane */
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_vmin(__m512 a, __m512 b) { return _mm512_min_ps(a, b); }
/* a * b + c, one rounding */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
/* c - a * b, one rounding */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_fnma(__m256 a, __m256 b, __m256 c) { return _mm256_fnmadd_ps(a, b, c); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_fnma(__m512 a, __m512 b, __m512 c) { return _mm512_fnmadd_ps(a, b, c); }
/* lanes >= n zeroed; lanes >= n set to f */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_keep_n(__m256 v, uint32_t n) { return _mm256_and_ps(_mm256_castsi256_ps(rl_v8_mask(n)), v); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_keep_n(__m512 v, uint32_t n) { return _mm512_maskz_mov_ps(rl_v16_mask(n), v); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_fill_n(__m256 v, uint32_t n, float f)
{
	return _mm256_blendv_ps(_mm256_set1_ps(f), v, _mm256_castsi256_ps(rl_v8_mask(n)));
}
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_fill_n(__m512 v, uint32_t n, float f) { return _mm512_mask_blend_ps(rl_v16_mask(n), _mm512_set1_ps(f), v); }
/* lanes < n set to f (the keys before a sliding window) */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_fill_lo(__m256 v, uint32_t n, float f)
{
	return _mm256_blendv_ps(v, _mm256_set1_ps(f), _mm256_castsi256_ps(rl_v8_mask(n)));
}
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_fill_lo(__m512 v, uint32_t n, float f) { return _mm512_mask_blend_ps(rl_v16_mask(n), v, _mm512_set1_ps(f)); }
RL_TGT_AVX2 RL_INLINE float rl_v8_sum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
RL_TGT_AVX512 RL_INLINE float rl_v16_sum(__m512 v) { return _mm512_reduce_add_ps(v); }
RL_TGT_AVX2 RL_INLINE float rl_v8_max(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}
RL_TGT_AVX512 RL_INLINE float rl_v16_max(__m512 v) { return _mm512_reduce_max_ps(v); }
/* whether some lane of v exceeds x */
RL_TGT_AVX2 RL_INLINE int rl_v8_any_gt(__m256 v, float x) { return _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(x), _CMP_GT_OQ)); }
RL_TGT_AVX512 RL_INLINE int rl_v16_any_gt(__m512 v, float x) { return _mm512_cmp_ps_mask(v, _mm512_set1_ps(x), _CMP_GT_OQ) != 0; }
/* The sums of W vectors as one: u[g] = tree4(t + 4g) for g < W/4, then join(u) has lane j =
 * the full sum of t[j] (the transpose-and-add tree above) */
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_tree4(const __m256 *t) { return rl_simd_tree4_256(t); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_tree4(const __m512 *t) { return rl_simd_tree4_512(t); }
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_join(const __m256 *u) { return rl_simd_join2_256(u[0], u[1]); }
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_join(const __m512 *u) { return rl_simd_join4_512(u); }

/* exp(x) for x <= 0 (scores minus their running max; SiLU's -x clamped), -inf and anything
 * below -87 giving ~0: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact),
 * e^r from the Cephes expf polynomial (rel. error ~1.2e-7), times 2^n. */
#define RL_EXP_POLY(V, x, n) do {                                                                 \
	__typeof__(x) r_ = V(fnma)(n, V(set1)(0.693359375f), x);                                   \
	r_ = V(fnma)(n, V(set1)(-2.12194440e-4f), r_);                                             \
	__typeof__(x) p_ = V(set1)(1.9875691500e-4f);                                              \
	p_ = V(fma)(p_, r_, V(set1)(1.3981999507e-3f));                                            \
	p_ = V(fma)(p_, r_, V(set1)(8.3334519073e-3f));                                            \
	p_ = V(fma)(p_, r_, V(set1)(4.1665795894e-2f));                                            \
	p_ = V(fma)(p_, r_, V(set1)(1.6666665459e-1f));                                            \
	p_ = V(fma)(p_, r_, V(set1)(5.0000001201e-1f));                                            \
	x = V(fma)(p_, V(mul)(r_, r_), V(add)(r_, V(set1)(1.0f)));                                 \
} while (0)
#define RL_V8(op) rl_v8_##op
#define RL_V16(op) rl_v16_##op
RL_TGT_AVX2 RL_INLINE __m256 rl_v8_exp(__m256 x)
{
	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	RL_EXP_POLY(RL_V8, x, n);
	/* 2^n through the exponent field: n >= -126 after the clamp, so n + 127 >= 1 */
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(x, _mm256_castsi256_ps(e));
}
RL_TGT_AVX512 RL_INLINE __m512 rl_v16_exp(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	RL_EXP_POLY(RL_V16, x, n);
	return _mm512_scalef_ps(x, n);
}

#endif
