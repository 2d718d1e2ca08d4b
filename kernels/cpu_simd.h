/* Horizontal sums of many vectors at once, for the CPU kernels (cpu_ops.c attention's scores
 * of 8 or 16 keys): W vectors of W lanes become one vector whose lane j is the sum
 * of vector j, through a transpose-and-add tree (~3 shuffles and adds a vector) instead of a
 * full reduce per vector (~10 dependent ops each). Header-only, static inline, each function
 * compiled for the ISA it names. */
#ifndef RL_CPU_SIMD_H
#define RL_CPU_SIMD_H

#include <immintrin.h>

#define RL_SIMD512 __attribute__((target("avx512f"), always_inline)) static inline
#define RL_SIMD256 __attribute__((target("avx2"), always_inline)) static inline

/* a[0..3] -> 128-bit lane c holds (sum of a[0] over lane c's 4 floats, a[1]'s, a[2]'s, a[3]'s) */
RL_SIMD512 __m512 rl_simd_tree4_512(const __m512 *a)
{
	__m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
	__m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
	return _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
}

/* u[g] = rl_simd_tree4_512(a + 4g) for g < 4 -> lane j = the full sum of a[j] */
RL_SIMD512 __m512 rl_simd_join4_512(const __m512 *u)
{
	__m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
	__m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
	return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

RL_SIMD256 __m256 rl_simd_tree4_256(const __m256 *a)
{
	__m256 s01 = _mm256_add_ps(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
	__m256 s23 = _mm256_add_ps(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
	return _mm256_add_ps(_mm256_shuffle_ps(s01, s23, 0x44), _mm256_shuffle_ps(s01, s23, 0xEE));
}

/* u0 = tree4 of a[0..3], u1 of a[4..7] -> lane j = the full sum of a[j] */
RL_SIMD256 __m256 rl_simd_join2_256(__m256 u0, __m256 u1)
{
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

#endif
