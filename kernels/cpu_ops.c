/* cpu_ops.c — the fast CPU kernels (see cpu_ops.h).
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
#include "cpu_ops.h"

#define MM_ROW_BLOCK 64
#define AI static inline __attribute__((always_inline))
#define T512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define T256 __attribute__((target("avx2,fma")))

typedef void mm_fn(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o0, uint32_t o1, int acc);
typedef void attn_fn(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		     uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *scratch);

AI void store_out(float *y, float s, const float *bias, int accumulate)
{
	if (bias)
		s += *bias;
	*y = accumulate ? *y + s : s;
}

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

AI float dot_scalar(const float *a, const float *b, uint32_t n)
{
	float s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

AI void scale_scalar(float *a, float f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] *= f;
}

AI void axpy_scalar(float *y, float a, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

/* ---------------------------------------------------------------- AVX2 + FMA ------ */

static const int32_t mask_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* mask of the first k (< 8) lanes */
T256 AI __m256i mask256(uint32_t k)
{
	return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - k));
}

T256 AI float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* NR activation rows x NC weight rows; NR*NC + NR + 1 <= 16 ymm registers. */
T256 AI void tile256(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		     const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m256 acc[3][4], x[3];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 8 <= in; i += 8) {
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm256_loadu_ps(X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m256 w = _mm256_loadu_ps(W + (size_t)c * in + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
	if (i < in) {
		__m256i m = mask256(in - i);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm256_maskload_ps(X + r * ldx + i, m);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m256 w = _mm256_maskload_ps(W + (size_t)c * in + i, m);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm256_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			store_out(Y + r * ldy + c, hsum256(acc[r][c]), bias ? bias + c : NULL, accumulate);
}

T256 static void mm_avx2(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
			 const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * in, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				uint32_t nr = re - r < 3 ? re - r : 3;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T2(R, C) tile256(y, ldy, x, ldx, w, b, in, R, C, acc)
				if (nc == 4)
					nr == 3 ? T2(3, 4) : nr == 2 ? T2(2, 4) : T2(1, 4);
				else
					nr == 3 ? T2(3, 1) : nr == 2 ? T2(2, 1) : T2(1, 1);
#undef T2
				r += nr;
			}
			o += nc;
		}
	}
}

T256 AI float dot_avx2(const float *a, const float *b, uint32_t n)
{
	__m256 s = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
	if (i < n) {
		__m256i m = mask256(n - i);
		s = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s);
	}
	return hsum256(s);
}

T256 AI void scale_avx2(float *a, float f, uint32_t n)
{
	__m256 F = _mm256_set1_ps(f);
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), F));
	for (; i < n; i++)
		a[i] *= f;
}

T256 AI void axpy_avx2(float *y, float a, const float *x, uint32_t n)
{
	__m256 A = _mm256_set1_ps(a);
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(A, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * x[i];
}

/* ---------------------------------------------------------------- AVX-512 --------- */

/* NR activation rows x NC weight rows; NR*NC + NR + 1 <= 32 zmm registers. */
T512 AI void tile512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		     const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m512 acc[4][4], x[4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm512_setzero_ps();
	uint32_t i = 0;
	for (; i + 16 <= in; i += 16) {
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm512_loadu_ps(X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512 w = _mm512_loadu_ps(W + (size_t)c * in + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
	if (i < in) {
		__mmask16 m = (__mmask16)((1u << (in - i)) - 1);
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = _mm512_maskz_loadu_ps(m, X + r * ldx + i);
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512 w = _mm512_maskz_loadu_ps(m, W + (size_t)c * in + i);
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_fmadd_ps(x[r], w, acc[r][c]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			store_out(Y + r * ldy + c, _mm512_reduce_add_ps(acc[r][c]), bias ? bias + c : NULL, accumulate);
}

T512 static void mm_avx512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
			   const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * in, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				uint32_t nr = re - r < 4 ? re - r : 4;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T5(R, C) tile512(y, ldy, x, ldx, w, b, in, R, C, acc)
				if (nc == 4)
					nr == 4 ? T5(4, 4) : nr == 3 ? T5(3, 4) : nr == 2 ? T5(2, 4) : T5(1, 4);
				else
					nr == 4 ? T5(4, 1) : nr == 3 ? T5(3, 1) : nr == 2 ? T5(2, 1) : T5(1, 1);
#undef T5
				r += nr;
			}
			o += nc;
		}
	}
}

T512 AI float dot_avx512(const float *a, const float *b, uint32_t n)
{
	__m512 s = _mm512_setzero_ps();
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16)
		s = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s);
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s);
	}
	return _mm512_reduce_add_ps(s);
}

T512 AI void scale_avx512(float *a, float f, uint32_t n)
{
	__m512 F = _mm512_set1_ps(f);
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(a + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i), F));
	}
}

T512 AI void axpy_avx512(float *y, float a, const float *x, uint32_t n)
{
	__m512 A = _mm512_set1_ps(a);
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(A, _mm512_maskz_loadu_ps(m, x + i),
							       _mm512_maskz_loadu_ps(m, y + i)));
	}
}

/* ---------------------------------------------------------------- attention ------- */

/* One body, instantiated per ISA so dot/scale/axpy inline into it. Per query row: online
 * softmax over the keys block by block (running max mx, running sum l, output o rescaled
 * whenever the max grows), which needs only block_size floats of scratch. */
#define DEFINE_ATTN(NAME, TARGET, DOT, SCALE, AXPY)                                          \
TARGET static void NAME(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,   \
			uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *s)  \
{                                                                                            \
	float scale = 1.0f / sqrtf((float)hd);                                               \
	uint32_t bs = kv->block_size;                                                        \
	for (uint32_t i = 0; i < q_len; i++) {                                               \
		const float *qi = q + i * ldq;                 /* [hd] */                    \
		float *o = out + i * ldo;                      /* [hd] */                    \
		uint32_t n_keys = pos0 + i + 1;                                              \
		float mx = -INFINITY, l = 0;                                                 \
		memset(o, 0, hd * sizeof(float));                                            \
		for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {                               \
			size_t blk = (size_t)kv->block_table[p0 / bs] * kv->block_stride;    \
			const float *kb = kv->k + blk, *vb = kv->v + blk; /* [bs, hd] */     \
			uint32_t n = n_keys - p0 < bs ? n_keys - p0 : bs;                    \
			float bm = mx;                                                       \
			for (uint32_t j = 0; j < n; j++) {                                   \
				s[j] = DOT(qi, kb + (size_t)j * hd, hd) * scale;             \
				bm = s[j] > bm ? s[j] : bm;                                  \
			}                                                                    \
			if (bm > mx) {                                                       \
				float corr = expf(mx - bm);                                  \
				SCALE(o, corr, hd);                                          \
				l *= corr;                                                   \
				mx = bm;                                                     \
			}                                                                    \
			for (uint32_t j = 0; j < n; j++) {                                   \
				float e = expf(s[j] - mx);                                   \
				l += e;                                                      \
				AXPY(o, e, vb + (size_t)j * hd, hd);                         \
			}                                                                    \
		}                                                                            \
		SCALE(o, 1.0f / l, hd);                                                      \
	}                                                                                    \
}

DEFINE_ATTN(attn_scalar, , dot_scalar, scale_scalar, axpy_scalar)
DEFINE_ATTN(attn_avx2, T256, dot_avx2, scale_avx2, axpy_avx2)
DEFINE_ATTN(attn_avx512, T512, dot_avx512, scale_avx512, axpy_avx512)

/* ---------------------------------------------------------------- dispatch -------- */

static mm_fn *const mm_impl[] = { mm_scalar, mm_avx2, mm_avx512 };
static attn_fn *const attn_impl[] = { attn_scalar, attn_avx2, attn_avx512 };
static enum rl_cpu_isa cur_isa;

enum rl_cpu_isa rl_cpu_isa_best(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("fma"))
		return RL_CPU_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return RL_CPU_AVX2;
	return RL_CPU_SCALAR;
}

__attribute__((constructor)) static void pick_isa(void)
{
	cur_isa = rl_cpu_isa_best();
}

int rl_cpu_set_isa(enum rl_cpu_isa isa)
{
	if (isa > rl_cpu_isa_best())
		return -ENOTSUP;
	cur_isa = isa;
	return 0;
}

enum rl_cpu_isa rl_cpu_isa(void)
{
	return cur_isa;
}

const char *rl_cpu_isa_name(enum rl_cpu_isa isa)
{
	return isa == RL_CPU_AVX512 ? "avx512" : isa == RL_CPU_AVX2 ? "avx2" : "scalar";
}

void rl_cpu_matmul(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o_begin,
		   uint32_t o_end, int accumulate)
{
	mm_impl[cur_isa](Y, ldy, X, ldx, W, bias, n_rows, in, o_begin, o_end, accumulate);
}

void rl_cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		      uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *scratch)
{
	attn_impl[cur_isa](out, ldo, q, ldq, q_len, pos0, hd, kv, scratch);
}

/* ---------------------------------------------------------------- small ops ------- */

void rl_cpu_rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps)
{
	float ss = 0;
	for (uint32_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	float s = 1.0f / sqrtf(ss / n + eps);
	for (uint32_t i = 0; i < n; i++)
		o[i] = x[i] * s * w[i];
}

void rl_cpu_rope(float *v, uint32_t n_heads, uint32_t hd, float pos_scaled,
		 const float *inv_freq, int halves)
{
	for (uint32_t i = 0; i < hd / 2; i++) {
		float a = pos_scaled * inv_freq[i], cs = cosf(a), sn = sinf(a);
		uint32_t i0 = halves ? i : 2 * i, i1 = halves ? i + hd / 2 : 2 * i + 1;
		for (uint32_t h = 0; h < n_heads; h++) {
			float *vh = v + (size_t)h * hd;            /* [hd] */
			float v0 = vh[i0], v1 = vh[i1];
			vh[i0] = v0 * cs - v1 * sn;
			vh[i1] = v0 * sn + v1 * cs;
		}
	}
}

void rl_cpu_silu_mul(float *g, const float *u, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
