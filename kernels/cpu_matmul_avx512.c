/* cpu_matmul_avx512.c — the fp32 matmul on AVX-512 (rl_cpu_matmul's AVX-512 path): the
 * register tiles of cpu_matmul_tmpl.h at 16 lanes, 4 x 4. */
#include <stdint.h>
#include <immintrin.h>
#include "kernels/cpu_matmul.h"

#define VW 16
#define VT __m512
#define V(op) rl_v16_##op
#define W_(x) x##16
#define TGT RL_TGT_AVX512
#define MM_NR 4
#include "kernels/cpu_matmul_tmpl.h"

RL_TGT_AVX512 void rl_mm_avx512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
				const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	mm_rows16(Y, ldy, X, ldx, W, in, bias, n, in, o0, o1, acc);
}
