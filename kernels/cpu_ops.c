/* cpu_ops.c — the fp32 matmul's dispatch and plain-C path (its AVX2 and AVX-512 kernels:
 * cpu_matmul_avx2.c, cpu_matmul_avx512.c), and the small per-row ops (RMSNorm, RoPE, SwiGLU)
 * of the cpu backend (see cpu_ops.h); attention is cpu_attention.c, the matmul over stored
 * weights cpu_qmm.c.
 *
 * Matmul is written in the dot-product form that the [out][in] weight layout asks for: a tile
 * of NC weight rows times NR activation rows keeps NR*NC vector accumulators, loads each weight
 * vector once and each activation vector once per tile, and reduces horizontally only at the
 * end. Activation rows are walked in blocks of MM_ROW_BLOCK so the block stays in L2 while the
 * weight tiles stream past it: for a decode step (a few rows) the weights are read from memory
 * exactly once, which is what bounds decode speed.
 *
 * No BLAS dependency: on the 2-core AVX-512 dev VM these kernels run the 110M shape's prefill
 * at ~1.3k tokens/s (~220 GFLOP/s of matmul, near the cores' FMA peak) and batch-1 decode at
 * ~40 GB/s of weight streaming, so a BLAS could add little. OpenBLAS was not measured against
 * them yet; add it only if `ringlm bench model` shows it faster.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <immintrin.h>
#include "kernels/cpu_ops.h"
#include "kernels/rl_half.h"
#include "kernels/cpu_simd.h"
#include "kernels/cpu_matmul.h"

typedef void mm_fn(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o0, uint32_t o1, int acc);

/* ---------------------------------------------------------------- scalar ---------- */

static void mm_scalar(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		      const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t o = o0; o < o1; o++) {
		const float *w = W + (size_t)o * in;               /* [in] */
		for (uint32_t r = 0; r < n; r++) {
			const float *x = X + r * ldx;              /* [in] */
			float s = 0;
			for (uint32_t i = 0; i < in; i++)
				s += x[i] * w[i];
			store_out(Y + r * ldy + o, s, bias ? bias + o : NULL, acc);
		}
	}
}

/* ---------------------------------------------------------------- dispatch -------- */

static mm_fn *const mm_impl[] = { mm_scalar, rl_mm_avx2, rl_mm_avx512 };

void rl_cpu_matmul(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o_begin,
		   uint32_t o_end, int accumulate)
{
	mm_impl[rl_cpu_isa()](Y, ldy, X, ldx, W, bias, n_rows, in, o_begin, o_end, accumulate);
}

/* ---------------------------------------------------------------- small ops ------- */

/* Sum of squares in four 8-lane accumulators: the plain loop is one long chain of dependent
 * adds (~4 cycles an element), which made the norms ~3% of a batch-8 decode step. */
RL_TGT_AVX2 static float sumsq_avx2(const float *x, uint32_t n, uint32_t *done)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	uint32_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
		__m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
		a0 = _mm256_fmadd_ps(v0, v0, a0); a1 = _mm256_fmadd_ps(v1, v1, a1);
		a2 = _mm256_fmadd_ps(v2, v2, a2); a3 = _mm256_fmadd_ps(v3, v3, a3);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		a0 = _mm256_fmadd_ps(v, v, a0);
	}
	*done = i;
	return rl_v8_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}
RL_TGT_AVX2 static uint32_t scale_mul_avx2(float *o, const float *x, const float *w, float s, uint32_t n)
{
	__m256 vs = _mm256_set1_ps(s);
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
						      _mm256_loadu_ps(w + i)));
	return i;
}

void rl_cpu_rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps)
{
	int vec = rl_cpu_isa() != RL_CPU_SCALAR;
	uint32_t i = 0;
	float ss = vec ? sumsq_avx2(x, n, &i) : 0;
	for (; i < n; i++)
		ss += x[i] * x[i];
	float s = 1.0f / sqrtf(ss / n + eps);
	for (i = vec ? scale_mul_avx2(o, x, w, s, n) : 0; i < n; i++)
		o[i] = x[i] * s * w[i];
}

void rl_cpu_rope_angles(float *cs, uint32_t rot, float pos_scaled, const float *inv_freq, float mscale)
{
	for (uint32_t i = 0; i < rot / 2; i++) {
		float a = pos_scaled * inv_freq[i];
		cs[2 * i] = cosf(a) * mscale;
		cs[2 * i + 1] = sinf(a) * mscale;
	}
}

/* rl_cpu_rope's pairs [0, returned) on AVX2, in the scalar loop's arithmetic and order (two
 * products, then their difference or sum, no FMA), so the results match it bit for bit. cs
 * is deinterleaved once per run of pairs and serves every head. One step's rows (110M, batch
 * 8) rotated strided scalars for ~1% of a decode step. */
__attribute__((target("avx2")))   /* no "fma": GCC would contract x0 c - x1 s into one */
static uint32_t rope_avx2(float *v, uint32_t n_heads, uint32_t hd, uint32_t rot, const float *cs, int halves)
{
	const uint32_t np = rot / 2;
	uint32_t i = 0;
	if (halves) {                   /* pairs (i, i + rot/2): 8 a vector from each half */
		for (; i + 8 <= np; i += 8) {
			const __m256 a = _mm256_loadu_ps(cs + 2 * i), b = _mm256_loadu_ps(cs + 2 * i + 8);
			/* per 128-bit lane (a0 a2 b0 b2), (a1 a3 b1 b3); then the 64-bit halves in order */
			const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
			const __m256 sn = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
			for (uint32_t h = 0; h < n_heads; h++) {
				float *vh = v + (size_t)h * hd;    /* [hd] */
				const __m256 x0 = _mm256_loadu_ps(vh + i), x1 = _mm256_loadu_ps(vh + i + np);
				_mm256_storeu_ps(vh + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, sn)));
				_mm256_storeu_ps(vh + i + np, _mm256_add_ps(_mm256_mul_ps(x0, sn), _mm256_mul_ps(x1, c)));
			}
		}
		return i;
	}
	for (; i + 4 <= np; i += 4) {   /* pairs (2i, 2i + 1): 4 a vector */
		const __m256 a = _mm256_loadu_ps(cs + 2 * i);
		const __m256 c = _mm256_moveldup_ps(a), sn = _mm256_movehdup_ps(a);   /* c0 c0 c1 c1 .., s0 s0 .. */
		for (uint32_t h = 0; h < n_heads; h++) {
			float *vh = v + (size_t)h * hd + 2 * i;
			const __m256 x = _mm256_loadu_ps(vh);
			/* even lanes x0 c - x1 s, odd lanes x1 c + x0 s */
			_mm256_storeu_ps(vh, _mm256_addsub_ps(_mm256_mul_ps(x, c),
							      _mm256_mul_ps(_mm256_permute_ps(x, 0xB1), sn)));
		}
	}
	return i;
}

void rl_cpu_rope(float *v, uint32_t n_heads, uint32_t hd, uint32_t rot, const float *cs, int halves)
{
	for (uint32_t i = rl_cpu_isa() != RL_CPU_SCALAR ? rope_avx2(v, n_heads, hd, rot, cs, halves) : 0; i < rot / 2; i++) {
		float c = cs[2 * i], sn = cs[2 * i + 1];
		uint32_t i0 = halves ? i : 2 * i, i1 = halves ? i + rot / 2 : 2 * i + 1;
		for (uint32_t h = 0; h < n_heads; h++) {
			float *vh = v + (size_t)h * hd;            /* [hd] */
			float v0 = vh[i0], v1 = vh[i1];
			vh[i0] = v0 * c - v1 * sn;
			vh[i1] = v0 * sn + v1 * c;
		}
	}
}

/* g / (1 + e^-a) * u over whole vectors with the vector exp of the attention kernels, a = g
 * for SiLU, a = 2 sqrt(2/pi) (g + 0.044715 g^3) for GELU's tanh form (0.5 (1 + tanh(a/2)) is
 * 1 / (1 + e^-a)); e^-a is clamped at e^88 (rl_v8_exp builds 2^n in the exponent field), which
 * leaves g / (1 + e^88) ~ 0, the limit. Returns how many elements it did; act_tail does the
 * rest. */
#define GELU_K 1.5957691216057308f    /* 2 sqrt(2/pi) */
#define GELU_C 0.044715f
/* written once for both widths: V(op) is the width's rl_vN_op (cpu_simd.h) */
#define DEFINE_ACT_MUL(NAME, TGT, VT, VW, V)                                                         \
	TGT RL_INLINE uint32_t NAME(float *g, const float *u, uint32_t n, const int gelu)              \
	{                                                                                              \
		uint32_t i = 0;                                                                        \
		for (; i + VW <= n; i += VW) {                                                         \
			VT x = V(load)(g + i), a = x;                                                  \
			if (gelu)                                                                      \
				a = V(mul)(V(mul)(x, V(set1)(GELU_K)),                                 \
					   V(fma)(V(mul)(x, x), V(set1)(GELU_C), V(set1)(1.0f)));     \
			VT e = V(exp)(V(vmin)(V(sub)(V(zero)(), a), V(set1)(88.0f)));                 \
			V(store)(g + i, V(mul)(V(div)(x, V(add)(V(set1)(1.0f), e)), V(load)(u + i)));  \
		}                                                                                      \
		return i;                                                                              \
	}
#define V16(op) rl_v16_##op
#define V8(op) rl_v8_##op
DEFINE_ACT_MUL(act_mul_avx512, RL_TGT_AVX512, __m512, 16, V16)
DEFINE_ACT_MUL(act_mul_avx2, RL_TGT_AVX2, __m256, 8, V8)
#undef V16
#undef V8
RL_TGT_AVX512 static uint32_t silu_mul_avx512(float *g, const float *u, uint32_t n) { return act_mul_avx512(g, u, n, 0); }
RL_TGT_AVX2 static uint32_t silu_mul_avx2(float *g, const float *u, uint32_t n) { return act_mul_avx2(g, u, n, 0); }
RL_TGT_AVX512 static uint32_t gelu_mul_avx512(float *g, const float *u, uint32_t n) { return act_mul_avx512(g, u, n, 1); }
RL_TGT_AVX2 static uint32_t gelu_mul_avx2(float *g, const float *u, uint32_t n) { return act_mul_avx2(g, u, n, 1); }

/* The vector kernel on the last n - i (< 16) elements too, through a padded copy: an element's
 * value must not depend on where a worker's range cuts the row (the scalar expf rounds
 * otherwise than the vector exp), or a row's activations would depend on the thread count. */
static uint32_t act_tail(float *g, const float *u, uint32_t i, uint32_t n, uint32_t (*fn)(float *, const float *, uint32_t))
{
	float gt[16] = { 0 }, ut[16] = { 0 };
	if (i >= n)
		return i;
	memcpy(gt, g + i, (n - i) * sizeof *gt);
	memcpy(ut, u + i, (n - i) * sizeof *ut);
	fn(gt, ut, 16);
	memcpy(g + i, gt, (n - i) * sizeof *gt);
	return n;
}

void rl_cpu_gelu_mul(float *g, const float *u, uint32_t n)
{
	enum rl_cpu_isa isa = rl_cpu_isa();
	uint32_t (*fn)(float *, const float *, uint32_t) = isa == RL_CPU_AVX512 ? gelu_mul_avx512 :
							     isa == RL_CPU_AVX2 ? gelu_mul_avx2 : NULL;
	uint32_t i = fn ? act_tail(g, u, fn(g, u, n), n, fn) : 0;
	for (; i < n; i++) {
		float a = GELU_K * g[i] * (1.0f + GELU_C * g[i] * g[i]);
		g[i] = g[i] / (1.0f + expf(-a)) * u[i];
	}
}

void rl_cpu_silu_mul(float *g, const float *u, uint32_t n)
{
	enum rl_cpu_isa isa = rl_cpu_isa();
	uint32_t (*fn)(float *, const float *, uint32_t) = isa == RL_CPU_AVX512 ? silu_mul_avx512 :
							     isa == RL_CPU_AVX2 ? silu_mul_avx2 : NULL;
	uint32_t i = fn ? act_tail(g, u, fn(g, u, n), n, fn) : 0;
	for (; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

