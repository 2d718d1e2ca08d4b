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

#include <immintrin.h>

#define RL_TGT_AVX2        __attribute__((target("avx2,fma,f16c")))
#define RL_TGT_AVX512      __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define RL_TGT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define RL_TGT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define RL_INLINE          static inline __attribute__((always_inline))

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

#endif
