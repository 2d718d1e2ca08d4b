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
#include "kernels/cpu_ops.h"
#include "kernels/rl_half.h"
#include "kernels/cpu_simd.h"

#define MM_ROW_BLOCK 64

typedef void mm_fn(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o0, uint32_t o1, int acc);
typedef void attn_fn(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		     uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
		     float *scratch);

RL_INLINE void store_out(float *y, float s, const float *bias, int accumulate)
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

RL_INLINE float dot_scalar(const float *a, const float *b, uint32_t n)
{
	float s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

RL_INLINE void scale_scalar(float *a, float f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] *= f;
}

RL_INLINE void axpy_scalar(float *y, float a, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

/* ---------------------------------------------------------------- AVX2 + FMA ------ */

static const int32_t mask_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

/* mask of the first k (< 8) lanes */
RL_TGT_AVX2 RL_INLINE __m256i mask256(uint32_t k)
{
	return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - k));
}

RL_TGT_AVX2 RL_INLINE float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* NR activation rows x NC weight rows; NR*NC + NR + 1 <= 16 ymm registers. */
RL_TGT_AVX2 RL_INLINE void tile256(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
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
			__m256 w = _mm256_loadu_ps(W + (size_t)c * ldw + i);
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
			__m256 w = _mm256_maskload_ps(W + (size_t)c * ldw + i, m);
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

RL_TGT_AVX2 static void mm_avx2_k(float *Y, size_t ldy, const float *X, size_t ldx, const float *W, size_t ldw,
			   const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	for (uint32_t rb = 0; rb < n; rb += MM_ROW_BLOCK) {
		uint32_t re = rb + MM_ROW_BLOCK < n ? rb + MM_ROW_BLOCK : n;
		for (uint32_t o = o0; o < o1;) {
			int nc = o + 4 <= o1 ? 4 : 1;
			const float *w = W + (size_t)o * ldw, *b = bias ? bias + o : NULL;
			for (uint32_t r = rb; r < re;) {
				uint32_t nr = re - r < 3 ? re - r : 3;
				float *y = Y + r * ldy + o;
				const float *x = X + r * ldx;
#define T2(R, C) tile256(y, ldy, x, ldx, w, ldw, b, in, R, C, acc)
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


/* Long rows in slices of MM_K_BLOCK inputs (the first slice stores, the rest add): a 4-row
 * weight tile of 2048 inputs is all of L1 and was evicted by the activation rows streaming past
 * it, so the tile was read again from L2 for every 3 activation rows. A slice keeps it in L1.
 * The slicing depends on the model only, never on the batch, so a row's sums are the same in
 * any batch. */
#define MM_K_BLOCK 512
RL_TGT_AVX2 static void mm_avx2(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
			 const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	if (in <= MM_K_BLOCK + MM_K_BLOCK / 2) {
		mm_avx2_k(Y, ldy, X, ldx, W, in, bias, n, in, o0, o1, acc);
		return;
	}
	for (uint32_t k = 0; k < in; k += MM_K_BLOCK) {
		uint32_t len = in - k < MM_K_BLOCK ? in - k : MM_K_BLOCK;
		mm_avx2_k(Y, ldy, X + k, ldx, W + k, in, k ? NULL : bias, n, len, o0, o1, k ? 1 : acc);
	}
}

RL_TGT_AVX2 RL_INLINE float dot_avx2(const float *a, const float *b, uint32_t n)
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

RL_TGT_AVX2 RL_INLINE void scale_avx2(float *a, float f, uint32_t n)
{
	__m256 F = _mm256_set1_ps(f);
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), F));
	for (; i < n; i++)
		a[i] *= f;
}

RL_TGT_AVX2 RL_INLINE void axpy_avx2(float *y, float a, const float *x, uint32_t n)
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
RL_TGT_AVX512 RL_INLINE void tile512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
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

RL_TGT_AVX512 static void mm_avx512(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
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


RL_TGT_AVX512 RL_INLINE float dot_avx512(const float *a, const float *b, uint32_t n)
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

RL_TGT_AVX512 RL_INLINE void scale_avx512(float *a, float f, uint32_t n)
{
	__m512 F = _mm512_set1_ps(f);
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(a + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i), F));
	}
}

RL_TGT_AVX512 RL_INLINE void axpy_avx512(float *y, float a, const float *x, uint32_t n)
{
	__m512 A = _mm512_set1_ps(a);
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(A, _mm512_maskz_loadu_ps(m, x + i),
							       _mm512_maskz_loadu_ps(m, y + i)));
	}
}

/* ---------------------------------------------------------------- attention ------- */

/* Online softmax throughout (running max m, running sum l, output o rescaled whenever m
 * grows), so nothing is sized by the context.
 *
 * The scalar fallback walks key by key per query row. The SIMD kernels (tiled512/tiled256)
 * loop key blocks outer and query rows inner: a block's keys are transposed once into
 * kt [hd, bsp], then every row that sees the block (all q_len rows of all n_qh heads sharing
 * the KV head) gets W scores at once from hd full-vector FMAs (no horizontal reduce), one
 * vectorised exp, and o += P V. The running max is reduced horizontally only when some score
 * exceeds it; the running sum is kept per lane. For small head_dim this replaces W reduces,
 * W scalar exps and W short axpys per row and block.
 *
 * A row's arithmetic depends only on its own query and keys, never on q_len, n_qh or which
 * rows share the call, so a sequence's logits are bitwise the same however its prompt is
 * chunked or batched (tests/test_forward.c checks this); hence one kernel per ISA, decode
 * included, rather than a per-row kernel below some row count. */

/* The half KV cache: the kernels below read fp32 blocks; the vector row kernels widen halves
 * in registers, the others get each block they visit widened here. */
RL_TGT_AVX2 static size_t widen_f16c(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	return i;
}

/* dst[n] = src[n] widened: the inverse of rl_cpu_f32_to_f16 */
static void widen(float *dst, const uint16_t *src, size_t n)
{
	size_t i = rl_cpu_isa() != RL_CPU_SCALAR && rl_cpu_has_f16c() ? widen_f16c(dst, src, n) : 0;
	for (; i < n; i++)
		dst[i] = rl_f16_to_f32(src[i]);
}

/* round to nearest even, as rl_f32_to_f16 */
RL_TGT_AVX2 static uint32_t narrow_f16c(uint16_t *dst, const float *src, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	return i;
}

/* Prefetch into L2 the K and V tiles ([bs, hd] each) of blocks [b0, b1) of a sequence's
 * n_keys positions; kv_prefetch_ahead, before block bi: block bi + KV_AHEAD (at bi 0, blocks
 * 1 .. KV_AHEAD too). The block table scatters a sequence's blocks over the pool, and one
 * (block, KV head)'s tile is only 2 KB (bs 16, hd 64, half), so the hardware prefetcher,
 * which follows streams, starts over at every block. Into L2, one block ahead: into L1
 * instead, or 2 blocks ahead, gained nothing (the L1's miss buffers fill). RL_INLINE: GCC's
 * IPA deletes calls to a function whose body is only prefetches (it counts them as no side
 * effect), so this one must be inlined before that runs. */
#define KV_AHEAD 4
/* the K and V tiles of tile elements at element at of the pools */
RL_INLINE void kv_prefetch_tile(const struct rl_cpu_kv_view *kv, size_t at, size_t tile)
{
	const char *k = kv->hk ? (const char *)(kv->hk + at) : (const char *)(kv->k + at);
	const char *v = kv->hk ? (const char *)(kv->hv + at) : (const char *)(kv->v + at);
	for (size_t l = 0; l < tile * (kv->hk ? 2 : 4); l += 64) {
		_mm_prefetch(k + l, _MM_HINT_T1);
		_mm_prefetch(v + l, _MM_HINT_T1);
	}
}
/* Whether a walk over n_kv heads' tiles (tile elements each) of block bi must fetch the next
 * block by hand (attn_heads16): there is one, and it does not continue the run the hardware
 * prefetcher follows, i.e. the walk takes part of a block, or the next is elsewhere. */
RL_INLINE int kv_next_jumps(const struct rl_cpu_kv_view *kv, uint32_t bi, uint32_t n_keys, uint32_t n_kv, size_t tile)
{
	return (size_t)(bi + 1) * kv->block_size < n_keys &&
	       !(n_kv * tile == kv->block_stride && kv->block_table[bi + 1] == kv->block_table[bi] + 1);
}
RL_INLINE void kv_prefetch_blocks(const struct rl_cpu_kv_view *kv, uint32_t b0, uint32_t b1, uint32_t n_keys, uint32_t hd)
{
	for (uint32_t b = b0; b < b1 && (size_t)b * kv->block_size < n_keys; b++)
		kv_prefetch_tile(kv, (size_t)kv->block_table[b] * kv->block_stride, (size_t)kv->block_size * hd);
}
RL_INLINE void kv_prefetch_ahead(const struct rl_cpu_kv_view *kv, uint32_t bi, uint32_t n_keys, uint32_t hd)
{
	kv_prefetch_blocks(kv, bi ? bi + KV_AHEAD : 1, bi + KV_AHEAD + 1, n_keys, hd);
}

/* The keys and values of the block at table index bi, first n slots of [bs, hd]: in the
 * pool itself (fp32), or widened into kv->wide (half; slots past n are never read). */
static inline void kv_block(const struct rl_cpu_kv_view *kv, uint32_t bi, uint32_t n, uint32_t hd,
			    const float **kb, const float **vb)
{
	size_t blk = (size_t)kv->block_table[bi] * kv->block_stride, len = (size_t)n * hd;
	if (!kv->hk) {
		*kb = kv->k + blk;
		*vb = kv->v + blk;
		return;
	}
	float *wk = kv->wide, *wv = kv->wide + (size_t)kv->block_size * hd;
	widen(wk, kv->hk + blk, len);
	widen(wv, kv->hv + blk, len);
	*kb = wk;
	*vb = wv;
}

/* The keys block as kt[d][j] = kb[j][d] for j < nb, zero for nb <= j < bsp (so padded lanes
 * score a finite 0, which the row's lane mask then drops). */
RL_INLINE void transpose_keys(float *kt, const float *kb, uint32_t nb, uint32_t bsp, uint32_t hd)
{
	for (uint32_t d = 0; d < hd; d++) {
		float *row = kt + (size_t)d * bsp;                 /* [bsp] */
		for (uint32_t j = 0; j < nb; j++)
			row[j] = kb[(size_t)j * hd + d];
		for (uint32_t j = nb; j < bsp; j++)
			row[j] = 0;
	}
}

/* The per-row kernel: query head g of row i at q + i*ldq + g*hd attends to positions
 * [0, pos0 + i], key by key, with an online softmax (s: [block_size] scores, then their
 * weights, exponentiated a block at a time by EXPB: the vector exp of the tiled kernels, or
 * expf on the scalar ISA). Instantiated per ISA so dot/scale/axpy/exp inline. It is the
 * scalar fallback, and the choice for head_dim >= 32, where a dot product fills whole vectors and transposing every key block (what the tiled
 * kernel below does) would cost more than it saves on decode rows. */
#define DEFINE_ROW_ATTN(NAME, TARGET, DOT, SCALE, AXPY, EXPB)                                \
TARGET static void NAME(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,   \
			uint32_t n_qh, uint32_t pos0, uint32_t hd,                          \
			const struct rl_cpu_kv_view *kv, float *s)                          \
{                                                                                            \
	float scale = 1.0f / sqrtf((float)hd);                                               \
	uint32_t bs = kv->block_size;                                                        \
	for (uint32_t r = 0; r < q_len * n_qh; r++) {                                        \
		uint32_t i = r / n_qh, g = r % n_qh;                                         \
		const float *qi = q + i * ldq + g * hd;        /* [hd] */                    \
		float *o = out + i * ldo + g * hd;             /* [hd] */                    \
		uint32_t n_keys = pos0 + i + 1;                                              \
		float mx = -INFINITY, l = 0;                                                 \
		memset(o, 0, hd * sizeof(float));                                            \
		for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {                               \
			uint32_t n = n_keys - p0 < bs ? n_keys - p0 : bs;                    \
			const float *kb, *vb;                            /* [n, hd] */       \
			kv_prefetch_ahead(kv, p0 / bs, n_keys, hd);                          \
			kv_block(kv, p0 / bs, n, hd, &kb, &vb);                              \
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
			EXPB(s, n, mx);                /* s[j] = exp(s[j] - mx), j < n */     \
			for (uint32_t j = 0; j < n; j++) {                                   \
				l += s[j];                                                   \
				AXPY(o, s[j], vb + (size_t)j * hd, hd);                      \
			}                                                                    \
		}                                                                            \
		SCALE(o, 1.0f / l, hd);                                                      \
	}                                                                                    \
}


/* exp(x) for x <= 0 (scores minus their running max), -inf and anything below -87 giving ~0:
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact), e^r from the Cephes
 * expf polynomial (rel. error ~1.2e-7), times 2^n. */
#define EXP_C5 1.9875691500e-4f
#define EXP_C4 1.3981999507e-3f
#define EXP_C3 8.3334519073e-3f
#define EXP_C2 4.1665795894e-2f
#define EXP_C1 1.6666665459e-1f
#define EXP_C0 5.0000001201e-1f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f

RL_TGT_AVX512 RL_INLINE __m512 exp512(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
	__m512 p = _mm512_set1_ps(EXP_C5);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C0));
	p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(p, n);
}

RL_TGT_AVX2 RL_INLINE __m256 exp256(__m256 x)
{
	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
	__m256 p = _mm256_set1_ps(EXP_C5);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C0));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* 2^n through the exponent field: n >= -126 after the clamp, so n + 127 >= 1 */
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* s[j] = exp(s[j] - mx) for j < n: the row kernel's weights of one key block */
static inline void expb_scalar(float *s, uint32_t n, float mx)
{
	for (uint32_t j = 0; j < n; j++)
		s[j] = expf(s[j] - mx);
}
RL_TGT_AVX2 RL_INLINE void expb_avx2(float *s, uint32_t n, float mx)
{
	__m256 m = _mm256_set1_ps(mx);
	for (uint32_t j = 0; j < n; j += 8) {
		__m256i k = mask256(n - j < 8 ? n - j : 8);
		_mm256_maskstore_ps(s + j, k, exp256(_mm256_sub_ps(_mm256_maskload_ps(s + j, k), m)));
	}
}
RL_TGT_AVX512 RL_INLINE void expb_avx512(float *s, uint32_t n, float mx)
{
	__m512 m = _mm512_set1_ps(mx);
	uint32_t j = 0;
	for (; j + 16 <= n; j += 16)           /* plain stores: the scalar reads after them forward */
		_mm512_storeu_ps(s + j, exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), m)));
	for (; j < n; j++)
		s[j] = _mm_cvtss_f32(_mm512_castps512_ps128(exp512(_mm512_set1_ps(s[j] - mx))));
}

/* The vector row kernels (head_dim a multiple of the lane count, up to 8 vectors): the same
 * online softmax as DEFINE_ROW_ATTN, but the row's query and output stay in registers, and a
 * block's keys are taken a vector's width at a time: each key's hd/W lane-wise products with
 * q are summed to one vector t[j], and a transpose-and-add tree turns W of those into one
 * vector of W scores (~3 shuffles and adds a key, against a full horizontal reduce each). The
 * scores get one vector exp; o += p_j v_j is NV FMAs a key into registers. DEFINE_ROW_ATTN
 * read and wrote o in memory for every key, a store-to-load chain a key long. */

/* 16 / 8 fp32 lanes at element e of a block: from the fp32 pool, or halves widened */
#define LD16(f, h, e) (F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((h) + (e)))) \
			   : _mm512_loadu_ps((f) + (e)))
#define LD8(f, h, e) (F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((h) + (e)))) \
			  : _mm256_loadu_ps((f) + (e)))

/* One row's online softmax over the first n keys of one block's tile (kb/hkb, vb/hvb: [bs, hd],
 * the pool's type): the query qv, the running output ov, max *pmx and sum *pl in and out. The
 * one body of the row kernel and of the heads kernel, so the two agree bit for bit. */
RL_TGT_AVX512 RL_INLINE void attn_tile16(const __m512 *qv, __m512 *ov, float *pmx, float *pl, const float *kb, const uint16_t *hkb,
			 const float *vb, const uint16_t *hvb, uint32_t n, float scale, const int NV, const int F16,
			 float *s)
{
	const uint32_t hd = 16 * (uint32_t)NV;
	float mx = *pmx, l = *pl;
	for (uint32_t j0 = 0; j0 < n; j0 += 16) {
		const uint32_t m = n - j0 < 16 ? n - j0 : 16;
		const size_t e0 = (size_t)j0 * hd;
		__m512 u[4];
#pragma GCC unroll 4
		for (int g = 0; g < 4; g++) {
			__m512 t[4];
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const uint32_t j = 4 * (uint32_t)g + (uint32_t)c;
				t[c] = _mm512_setzero_ps();
				if (j < m)      /* slots past the context are never read */
#pragma GCC unroll 8
					for (int v = 0; v < NV; v++)
						t[c] = _mm512_fmadd_ps(qv[v], LD16(kb, hkb, e0 + (size_t)j * hd + 16 * v), t[c]);
			}
			u[g] = rl_simd_tree4_512(t);
		}
		__m512 sv = _mm512_mul_ps(rl_simd_join4_512(u), _mm512_set1_ps(scale));  /* lane j: key j */
		const __mmask16 lm = (__mmask16)(m == 16 ? 0xffffu : (1u << m) - 1);
		float bm = _mm512_mask_reduce_max_ps(lm, sv);
		if (bm > mx) {
			float corr = expf(mx - bm);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = _mm512_mul_ps(ov[v], _mm512_set1_ps(corr));
			l *= corr;
			mx = bm;
		}
		__m512 pv = _mm512_maskz_mov_ps(lm, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(mx))));
		l += _mm512_reduce_add_ps(pv);
		_mm512_storeu_ps(s, pv);
		for (uint32_t j = 0; j < m; j++) {
			const __m512 pj = _mm512_set1_ps(s[j]);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = _mm512_fmadd_ps(pj, LD16(vb, hvb, e0 + (size_t)j * hd + 16 * v), ov[v]);
		}
	}
	*pmx = mx;
	*pl = l;
}

RL_TGT_AVX512 RL_INLINE void attn_row16(float *o, const float *qi, uint32_t n_keys, float scale, const int NV,
			const int F16, const struct rl_cpu_kv_view *kv, float *s)
{
	const uint32_t bs = kv->block_size, hd = 16 * (uint32_t)NV;
	__m512 qv[8], ov[8];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++) {
		qv[v] = _mm512_loadu_ps(qi + 16 * v);
		ov[v] = _mm512_setzero_ps();
	}
	float mx = -INFINITY, l = 0;
	for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {
		kv_prefetch_ahead(kv, p0 / bs, n_keys, hd);
		size_t blk = (size_t)kv->block_table[p0 / bs] * kv->block_stride;
		const float *kb = F16 ? NULL : kv->k + blk, *vb = F16 ? NULL : kv->v + blk;  /* [bs, hd] */
		const uint16_t *hkb = F16 ? kv->hk + blk : NULL, *hvb = F16 ? kv->hv + blk : NULL;
		attn_tile16(qv, ov, &mx, &l, kb, hkb, vb, hvb, n_keys - p0 < bs ? n_keys - p0 : bs, scale, NV, F16, s);
	}
	const __m512 inv = _mm512_set1_ps(1.0f / l);
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		_mm512_storeu_ps(o + 16 * v, _mm512_mul_ps(ov[v], inv));
}

/* Floats of one query head's state in rl_cpu_attention_heads' scratch: output [hd], then its
 * running max and sum, padded to whole vectors */
#define HEAD_STATE(hd) ((size_t)(hd) + 16)

/* One decode row's query heads over the view's n_kv KV heads (adjacent in every block, bs * hd
 * elements apart; KV head kh serves query heads kh * group .. + group - 1, at q + r * hd and
 * out + r * hd), a block at a time: all the heads' tiles of a block, one contiguous run per
 * pool, before the next block. Walking head by head instead reads 2 KB tiles (bs 16, hd 64,
 * half) scattered a block's width apart, which the hardware prefetcher cannot follow; whole
 * blocks it can, on into the next when that lies right after, so only a jump (to a block
 * elsewhere, or past the heads of the block that another call takes) is prefetched by hand,
 * head by head a block ahead. st: [n_kv * group][HEAD_STATE(hd)], the rows' states between
 * blocks. */
RL_TGT_AVX512 RL_INLINE void attn_heads16(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys, float scale,
			  const int NV, const int F16, const struct rl_cpu_kv_view *kv, float *s, float *st)
{
	const uint32_t bs = kv->block_size, hd = 16 * (uint32_t)NV;
	const size_t sl = HEAD_STATE(hd);
	const size_t tile = (size_t)bs * hd;
	for (uint32_t r = 0; r < n_kv * group; r++) {
		float *sr = st + (size_t)r * sl;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			_mm512_storeu_ps(sr + 16 * v, _mm512_setzero_ps());
		sr[hd] = -INFINITY;
		sr[hd + 1] = 0;
	}
	for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {
		const uint32_t bi = p0 / bs, n = n_keys - p0 < bs ? n_keys - p0 : bs;
		const size_t blk = (size_t)kv->block_table[bi] * kv->block_stride;
		const int jump = kv_next_jumps(kv, bi, n_keys, n_kv, tile);
		for (uint32_t kh = 0; kh < n_kv; kh++) {
			const size_t at = blk + kh * tile;
			if (jump)
				kv_prefetch_tile(kv, (size_t)kv->block_table[bi + 1] * kv->block_stride + kh * tile, tile);
			const float *kb = F16 ? NULL : kv->k + at, *vb = F16 ? NULL : kv->v + at;  /* [bs, hd] */
			const uint16_t *hkb = F16 ? kv->hk + at : NULL, *hvb = F16 ? kv->hv + at : NULL;
			for (uint32_t g = 0; g < group; g++) {
				const uint32_t r = kh * group + g;
				float *sr = st + (size_t)r * sl;
				__m512 qv[8], ov[8];
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++) {
					qv[v] = _mm512_loadu_ps(q + (size_t)r * hd + 16 * v);
					ov[v] = _mm512_loadu_ps(sr + 16 * v);
				}
				attn_tile16(qv, ov, sr + hd, sr + hd + 1, kb, hkb, vb, hvb, n, scale, NV, F16, s);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					_mm512_storeu_ps(sr + 16 * v, ov[v]);
			}
		}
	}
	for (uint32_t r = 0; r < n_kv * group; r++) {
		const float *sr = st + (size_t)r * sl;
		const __m512 inv = _mm512_set1_ps(1.0f / sr[hd + 1]);
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			_mm512_storeu_ps(out + (size_t)r * hd + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(sr + 16 * v), inv));
	}
}

RL_TGT_AVX2 RL_INLINE float hmax256(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* 8-lane twin of attn_tile16 */
RL_TGT_AVX2 RL_INLINE void attn_tile8(const __m256 *qv, __m256 *ov, float *pmx, float *pl, const float *kb, const uint16_t *hkb,
			 const float *vb, const uint16_t *hvb, uint32_t n, float scale, const int NV, const int F16,
			 float *s)
{
	const uint32_t hd = 8 * (uint32_t)NV;
	float mx = *pmx, l = *pl;
	for (uint32_t j0 = 0; j0 < n; j0 += 8) {
		const uint32_t m = n - j0 < 8 ? n - j0 : 8;
		const size_t e0 = (size_t)j0 * hd;
		__m256 u[2];
#pragma GCC unroll 2
		for (int g = 0; g < 2; g++) {
			__m256 t[4];
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const uint32_t j = 4 * (uint32_t)g + (uint32_t)c;
				t[c] = _mm256_setzero_ps();
				if (j < m)
#pragma GCC unroll 8
					for (int v = 0; v < NV; v++)
						t[c] = _mm256_fmadd_ps(qv[v], LD8(kb, hkb, e0 + (size_t)j * hd + 8 * v), t[c]);
			}
			u[g] = rl_simd_tree4_256(t);
		}
		__m256 sv = _mm256_mul_ps(rl_simd_join2_256(u[0], u[1]), _mm256_set1_ps(scale));
		const __m256 lm = _mm256_castsi256_ps(mask256(m));
		float bm = hmax256(_mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sv, lm));
		if (bm > mx) {
			float corr = expf(mx - bm);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = _mm256_mul_ps(ov[v], _mm256_set1_ps(corr));
			l *= corr;
			mx = bm;
		}
		__m256 pv = _mm256_and_ps(lm, exp256(_mm256_sub_ps(sv, _mm256_set1_ps(mx))));
		l += hsum256(pv);
		_mm256_storeu_ps(s, pv);
		for (uint32_t j = 0; j < m; j++) {
			const __m256 pj = _mm256_set1_ps(s[j]);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = _mm256_fmadd_ps(pj, LD8(vb, hvb, e0 + (size_t)j * hd + 8 * v), ov[v]);
		}
	}
	*pmx = mx;
	*pl = l;
}

/* 8-lane twin of attn_row16 */
RL_TGT_AVX2 RL_INLINE void attn_row8(float *o, const float *qi, uint32_t n_keys, float scale, const int NV,
		       const int F16, const struct rl_cpu_kv_view *kv, float *s)
{
	const uint32_t bs = kv->block_size, hd = 8 * (uint32_t)NV;
	__m256 qv[8], ov[8];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++) {
		qv[v] = _mm256_loadu_ps(qi + 8 * v);
		ov[v] = _mm256_setzero_ps();
	}
	float mx = -INFINITY, l = 0;
	for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {
		kv_prefetch_ahead(kv, p0 / bs, n_keys, hd);
		size_t blk = (size_t)kv->block_table[p0 / bs] * kv->block_stride;
		const float *kb = F16 ? NULL : kv->k + blk, *vb = F16 ? NULL : kv->v + blk;  /* [bs, hd] */
		const uint16_t *hkb = F16 ? kv->hk + blk : NULL, *hvb = F16 ? kv->hv + blk : NULL;
		attn_tile8(qv, ov, &mx, &l, kb, hkb, vb, hvb, n_keys - p0 < bs ? n_keys - p0 : bs, scale, NV, F16, s);
	}
	const __m256 inv = _mm256_set1_ps(1.0f / l);
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		_mm256_storeu_ps(o + 8 * v, _mm256_mul_ps(ov[v], inv));
}

/* 8-lane twin of attn_heads16 */
RL_TGT_AVX2 RL_INLINE void attn_heads8(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys, float scale,
			  const int NV, const int F16, const struct rl_cpu_kv_view *kv, float *s, float *st)
{
	const uint32_t bs = kv->block_size, hd = 8 * (uint32_t)NV;
	const size_t sl = HEAD_STATE(hd);
	const size_t tile = (size_t)bs * hd;
	for (uint32_t r = 0; r < n_kv * group; r++) {
		float *sr = st + (size_t)r * sl;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			_mm256_storeu_ps(sr + 8 * v, _mm256_setzero_ps());
		sr[hd] = -INFINITY;
		sr[hd + 1] = 0;
	}
	for (uint32_t p0 = 0; p0 < n_keys; p0 += bs) {
		const uint32_t bi = p0 / bs, n = n_keys - p0 < bs ? n_keys - p0 : bs;
		const size_t blk = (size_t)kv->block_table[bi] * kv->block_stride;
		const int jump = kv_next_jumps(kv, bi, n_keys, n_kv, tile);
		for (uint32_t kh = 0; kh < n_kv; kh++) {
			const size_t at = blk + kh * tile;
			if (jump)
				kv_prefetch_tile(kv, (size_t)kv->block_table[bi + 1] * kv->block_stride + kh * tile, tile);
			const float *kb = F16 ? NULL : kv->k + at, *vb = F16 ? NULL : kv->v + at;  /* [bs, hd] */
			const uint16_t *hkb = F16 ? kv->hk + at : NULL, *hvb = F16 ? kv->hv + at : NULL;
			for (uint32_t g = 0; g < group; g++) {
				const uint32_t r = kh * group + g;
				float *sr = st + (size_t)r * sl;
				__m256 qv[8], ov[8];
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++) {
					qv[v] = _mm256_loadu_ps(q + (size_t)r * hd + 8 * v);
					ov[v] = _mm256_loadu_ps(sr + 8 * v);
				}
				attn_tile8(qv, ov, sr + hd, sr + hd + 1, kb, hkb, vb, hvb, n, scale, NV, F16, s);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					_mm256_storeu_ps(sr + 8 * v, ov[v]);
			}
		}
	}
	for (uint32_t r = 0; r < n_kv * group; r++) {
		const float *sr = st + (size_t)r * sl;
		const __m256 inv = _mm256_set1_ps(1.0f / sr[hd + 1]);
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			_mm256_storeu_ps(out + (size_t)r * hd + 8 * v, _mm256_mul_ps(_mm256_loadu_ps(sr + 8 * v), inv));
	}
}

/* Every row of the call through attn_row16 / attn_row8 with NV = hd / lanes as a constant;
 * head dims that are not 1..8 whole vectors take the DEFINE_ROW_ATTN kernel (the choice
 * depends on hd alone, so a row's arithmetic never depends on its batch). */
#define VEC_ROWS_NV(ROW, LANES, F16) do {                                                    \
	switch (hd / LANES) {                                                                \
	case 1: ROW(o, qi, pos0 + i + 1, scale, 1, F16, kv, s); break;                       \
	case 2: ROW(o, qi, pos0 + i + 1, scale, 2, F16, kv, s); break;                       \
	case 3: ROW(o, qi, pos0 + i + 1, scale, 3, F16, kv, s); break;                       \
	case 4: ROW(o, qi, pos0 + i + 1, scale, 4, F16, kv, s); break;                       \
	case 5: ROW(o, qi, pos0 + i + 1, scale, 5, F16, kv, s); break;                       \
	case 6: ROW(o, qi, pos0 + i + 1, scale, 6, F16, kv, s); break;                       \
	case 7: ROW(o, qi, pos0 + i + 1, scale, 7, F16, kv, s); break;                       \
	default: ROW(o, qi, pos0 + i + 1, scale, 8, F16, kv, s); break;                      \
	}                                                                                    \
} while (0)
#define DEFINE_VEC_ROWS(NAME, TARGET, ROW, LANES, FALLBACK)                                  \
TARGET static void NAME(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,   \
			uint32_t n_qh, uint32_t pos0, uint32_t hd,                          \
			const struct rl_cpu_kv_view *kv, float *s)                          \
{                                                                                            \
	const int f16 = kv->hk != NULL;                                                      \
	if (hd % LANES || hd / LANES > 8 || (f16 && !rl_cpu_has_f16c())) {                   \
		FALLBACK(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, s);                    \
		return;                                                                      \
	}                                                                                    \
	const float scale = 1.0f / sqrtf((float)hd);                                         \
	for (uint32_t r = 0; r < q_len * n_qh; r++) {                                        \
		uint32_t i = r / n_qh, g = r % n_qh;                                         \
		const float *qi = q + i * ldq + g * hd;        /* [hd] */                    \
		float *o = out + i * ldo + g * hd;             /* [hd] */                    \
		if (f16)                                                                     \
			VEC_ROWS_NV(ROW, LANES, 1);                                          \
		else                                                                         \
			VEC_ROWS_NV(ROW, LANES, 0);                                          \
	}                                                                                    \
}

DEFINE_ROW_ATTN(attn_scalar, , dot_scalar, scale_scalar, axpy_scalar, expb_scalar)
DEFINE_ROW_ATTN(attn_keys_avx2, RL_TGT_AVX2, dot_avx2, scale_avx2, axpy_avx2, expb_avx2)
DEFINE_ROW_ATTN(attn_keys_avx512, RL_TGT_AVX512, dot_avx512, scale_avx512, axpy_avx512, expb_avx512)
DEFINE_VEC_ROWS(attn_rows_avx2, RL_TGT_AVX2, attn_row8, 8, attn_keys_avx2)
DEFINE_VEC_ROWS(attn_rows_avx512, RL_TGT_AVX512, attn_row16, 16, attn_keys_avx512)

/* A decode row's heads through attn_heads16 / attn_heads8, NV = hd / lanes and the pool type
 * as constants; -ENOTSUP where the row kernels would fall back (the caller then goes head by
 * head, through rl_cpu_attention). */
#define VEC_HEADS_NV(HEADS, LANES, F16) do {                                                 \
	switch (hd / LANES) {                                                                \
	case 1: HEADS(out, q, n_kv, group, n_keys, scale, 1, F16, kv, s, st); break;          \
	case 2: HEADS(out, q, n_kv, group, n_keys, scale, 2, F16, kv, s, st); break;          \
	case 3: HEADS(out, q, n_kv, group, n_keys, scale, 3, F16, kv, s, st); break;          \
	case 4: HEADS(out, q, n_kv, group, n_keys, scale, 4, F16, kv, s, st); break;          \
	case 5: HEADS(out, q, n_kv, group, n_keys, scale, 5, F16, kv, s, st); break;          \
	case 6: HEADS(out, q, n_kv, group, n_keys, scale, 6, F16, kv, s, st); break;          \
	case 7: HEADS(out, q, n_kv, group, n_keys, scale, 7, F16, kv, s, st); break;          \
	default: HEADS(out, q, n_kv, group, n_keys, scale, 8, F16, kv, s, st); break;         \
	}                                                                                    \
} while (0)
#define DEFINE_VEC_HEADS(NAME, TARGET, HEADS, LANES)                                         \
TARGET static int NAME(float *out, const float *q, uint32_t n_kv, uint32_t group,            \
		       uint32_t n_keys, uint32_t hd, const struct rl_cpu_kv_view *kv, float *s,     \
		       float *st)                                                            \
{                                                                                            \
	const int f16 = kv->hk != NULL;                                                      \
	if (hd % LANES || hd / LANES > 8 || (f16 && !rl_cpu_has_f16c()))                     \
		return -ENOTSUP;                                                             \
	const float scale = 1.0f / sqrtf((float)hd);                                         \
	if (f16)                                                                             \
		VEC_HEADS_NV(HEADS, LANES, 1);                                               \
	else                                                                                 \
		VEC_HEADS_NV(HEADS, LANES, 0);                                               \
	return 0;                                                                            \
}
DEFINE_VEC_HEADS(attn_heads_avx2, RL_TGT_AVX2, attn_heads8, 8)
DEFINE_VEC_HEADS(attn_heads_avx512, RL_TGT_AVX512, attn_heads16, 16)

/* Where rl_cpu_attention_heads' states start in its scratch: past the scores, [bs] */
static size_t heads_states_at(uint32_t block_size)
{
	return ((size_t)block_size + 15) / 16 * 16;
}

/* Scratch of the tiled kernels, in floats: m [rows], l [rows, 16], kt [hd, bsp]. */
static size_t tiled_scratch(uint32_t rows, uint32_t hd, uint32_t bs)
{
	return (size_t)rows * 17 + (size_t)hd * ((bs + 15) & ~15u);
}

/* The rows of query row i that see block p0 and how many of its nb keys they see. */
RL_INLINE uint32_t keys_seen(uint32_t pos0, uint32_t i, uint32_t p0, uint32_t nb)
{
	uint32_t k = pos0 + i + 1 - p0;
	return k < nb ? k : nb;
}

/* transpose_keys by gathers, 16 keys at a time; the lanes past nb are zeroed as there. */
RL_TGT_AVX512 RL_INLINE void transpose_keys512(float *kt, const float *kb, uint32_t nb, uint32_t bsp, uint32_t hd)
{
	__m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
					_mm512_set1_epi32((int)hd));
	for (uint32_t t0 = 0; t0 < nb; t0 += 16) {
		__mmask16 km = nb - t0 >= 16 ? 0xffff : (__mmask16)((1u << (nb - t0)) - 1);
		const float *k = kb + (size_t)t0 * hd;                 /* [<= 16, hd] */
		for (uint32_t d = 0; d < hd; d++)
			_mm512_storeu_ps(kt + (size_t)d * bsp + t0,
					 _mm512_mask_i32gather_ps(_mm512_setzero_ps(), km, at, k + d, 4));
	}
}

/* Lane spreads for o += P V at hd 8: entry j * 8 holds j in lanes 0-7 and j + 1 in 8-15, so
 * permuting p by it pairs p[j], p[j+1] with the values of keys j, j+1 in one vector. */
static const int32_t pair_spread[16 * 8] = {
#define PS(j) j, j, j, j, j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1
	PS(0), PS(2), PS(4), PS(6), PS(8), PS(10), PS(12), PS(14),
#undef PS
};

/* AVX-512, W = 16 keys per score vector. HD is a compile-time 8 (the packed o += P V below)
 * or 0 for any hd (o in 16-float chunks, the last masked). */
RL_TGT_AVX512 RL_INLINE void tiled512(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		      uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
		      float *scratch, const uint32_t HD)
{
	if (HD)
		hd = HD;
	const uint32_t W = 16;
	uint32_t bs = kv->block_size, bsp = (bs + W - 1) & ~(W - 1), rows = q_len * n_qh;
	uint32_t n_ctx = pos0 + q_len;
	float *m = scratch;                         /* [rows] running max */
	float *l = m + rows;                        /* [rows, W] running sum, per lane */
	float *kt = l + (size_t)rows * W;           /* [hd, bsp] the block's keys, transposed */
	__m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)hd)), ninf = _mm512_set1_ps(-INFINITY);
	for (uint32_t r = 0; r < rows; r++) {
		m[r] = -INFINITY;
		_mm512_storeu_ps(l + (size_t)r * W, _mm512_setzero_ps());
		memset(out + (r / n_qh) * ldo + (r % n_qh) * hd, 0, hd * sizeof(float));
	}
	for (uint32_t p0 = 0; p0 < n_ctx; p0 += bs) {
		uint32_t nb = n_ctx - p0 < bs ? n_ctx - p0 : bs;
		const float *kb, *vb;                                    /* [nb, hd] */
		kv_prefetch_ahead(kv, p0 / bs, n_ctx, hd);
		kv_block(kv, p0 / bs, nb, hd, &kb, &vb);
		transpose_keys512(kt, kb, nb, bsp, hd);
		for (uint32_t i = p0 > pos0 ? p0 - pos0 : 0; i < q_len; i++) {
			uint32_t seen = keys_seen(pos0, i, p0, nb);
			for (uint32_t g = 0; g < n_qh; g++) {
				uint32_t r = i * n_qh + g;
				const float *qi = q + i * ldq + g * hd;   /* [hd] */
				float *o = out + i * ldo + g * hd;        /* [hd] */
				for (uint32_t t0 = 0; t0 < seen; t0 += W) {
					uint32_t n = seen - t0 < W ? seen - t0 : W;
					__mmask16 valid = (__mmask16)((1u << n) - 1);
					/* s[j] = q . k[t0 + j], two accumulators for latency */
					__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
					uint32_t d = 0;
					for (; d + 2 <= hd; d += 2) {
						a0 = _mm512_fmadd_ps(_mm512_set1_ps(qi[d]), _mm512_loadu_ps(kt + (size_t)d * bsp + t0), a0);
						a1 = _mm512_fmadd_ps(_mm512_set1_ps(qi[d + 1]), _mm512_loadu_ps(kt + (size_t)(d + 1) * bsp + t0), a1);
					}
					if (d < hd)
						a0 = _mm512_fmadd_ps(_mm512_set1_ps(qi[d]), _mm512_loadu_ps(kt + (size_t)d * bsp + t0), a0);
					__m512 s = _mm512_mask_blend_ps(valid, ninf, _mm512_mul_ps(_mm512_add_ps(a0, a1), scale));
					float corr = 1.0f;
					if (_mm512_cmp_ps_mask(s, _mm512_set1_ps(m[r]), _CMP_GT_OQ)) {
						float bm = _mm512_reduce_max_ps(s);
						corr = expf(m[r] - bm);
						m[r] = bm;
					}
					__m512 p = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(s, _mm512_set1_ps(m[r]))));
					__m512 C = _mm512_set1_ps(corr);
					float *lr = l + (size_t)r * W;
					_mm512_storeu_ps(lr, _mm512_fmadd_ps(_mm512_loadu_ps(lr), C, p));
					const float *v = vb + (size_t)t0 * hd;    /* [n, hd] */
					if (HD == 8) {
						/* two keys' values per vector: lanes 0-7 key j, 8-15 key j+1,
						 * times p[j] / p[j+1] spread over the same halves */
						__m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
						if (n == 16) {
							/* a full tile, unrolled with fixed spreads so only the
							 * accumulators carry a dependency */
#pragma GCC unroll 8
							for (uint32_t j = 0; j < 16; j += 4) {
								c0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_loadu_si512(pair_spread + j * 8), p),
										     _mm512_loadu_ps(v + j * 8), c0);
								c1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_loadu_si512(pair_spread + j * 8 + 16), p),
										     _mm512_loadu_ps(v + j * 8 + 16), c1);
							}
						} else {
							for (uint32_t j = 0; j < n; j += 2) {
								__mmask16 vm = n - j >= 2 ? 0xffff : 0x00ff;
								c0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_loadu_si512(pair_spread + j * 8), p),
										     _mm512_maskz_loadu_ps(vm, v + j * 8), c0);
							}
						}
						c0 = _mm512_add_ps(c0, c1);
						__m256 pv = _mm256_add_ps(_mm512_castps512_ps256(c0), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c0), 1)));
						_mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_loadu_ps(o), _mm512_castps512_ps256(C), pv));
					} else {
						float pj[16];
						_mm512_storeu_ps(pj, p);
						for (uint32_t c = 0; c < hd; c += W) {
							__mmask16 om = hd - c >= W ? 0xffff : (__mmask16)((1u << (hd - c)) - 1);
							__m512 c0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(om, o + c), C);
							__m512 c1 = _mm512_setzero_ps();
							uint32_t j = 0;
							for (; j + 2 <= n; j += 2) {
								c0 = _mm512_fmadd_ps(_mm512_set1_ps(pj[j]), _mm512_maskz_loadu_ps(om, v + (size_t)j * hd + c), c0);
								c1 = _mm512_fmadd_ps(_mm512_set1_ps(pj[j + 1]), _mm512_maskz_loadu_ps(om, v + (size_t)(j + 1) * hd + c), c1);
							}
							if (j < n)
								c0 = _mm512_fmadd_ps(_mm512_set1_ps(pj[j]), _mm512_maskz_loadu_ps(om, v + (size_t)j * hd + c), c0);
							_mm512_mask_storeu_ps(o + c, om, _mm512_add_ps(c0, c1));
						}
					}
				}
			}
		}
	}
	for (uint32_t r = 0; r < rows; r++)
		scale_avx512(out + (r / n_qh) * ldo + (r % n_qh) * hd,
			     1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(l + (size_t)r * W)), hd);
}

RL_TGT_AVX512 static void attn_avx512(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
			     uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
			     float *scratch)
{
	if (hd == 8)
		tiled512(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, scratch, 8);
	else
		tiled512(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, scratch, 0);
}

/* AVX2, W = 8 keys per score vector; o in 8-float chunks, the last masked. */
RL_TGT_AVX2 static void tiled256(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
			  uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
			  float *scratch)
{
	const uint32_t W = 8;
	uint32_t bs = kv->block_size, bsp = (bs + W - 1) & ~(W - 1), rows = q_len * n_qh;
	uint32_t n_ctx = pos0 + q_len;
	float *m = scratch;                         /* [rows] running max */
	float *l = m + rows;                        /* [rows, W] running sum, per lane */
	float *kt = l + (size_t)rows * 16;          /* [hd, bsp] the block's keys, transposed */
	__m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)hd)), ninf = _mm256_set1_ps(-INFINITY);
	for (uint32_t r = 0; r < rows; r++) {
		m[r] = -INFINITY;
		_mm256_storeu_ps(l + (size_t)r * 16, _mm256_setzero_ps());
		memset(out + (r / n_qh) * ldo + (r % n_qh) * hd, 0, hd * sizeof(float));
	}
	for (uint32_t p0 = 0; p0 < n_ctx; p0 += bs) {
		uint32_t nb = n_ctx - p0 < bs ? n_ctx - p0 : bs;
		const float *kb, *vb;                                    /* [nb, hd] */
		kv_prefetch_ahead(kv, p0 / bs, n_ctx, hd);
		kv_block(kv, p0 / bs, nb, hd, &kb, &vb);
		transpose_keys(kt, kb, nb, bsp, hd);
		for (uint32_t i = p0 > pos0 ? p0 - pos0 : 0; i < q_len; i++) {
			uint32_t seen = keys_seen(pos0, i, p0, nb);
			for (uint32_t g = 0; g < n_qh; g++) {
				uint32_t r = i * n_qh + g;
				const float *qi = q + i * ldq + g * hd;   /* [hd] */
				float *o = out + i * ldo + g * hd;        /* [hd] */
				for (uint32_t t0 = 0; t0 < seen; t0 += W) {
					uint32_t n = seen - t0 < W ? seen - t0 : W;
					__m256 valid = _mm256_castsi256_ps(mask256(n));
					__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
					uint32_t d = 0;
					for (; d + 2 <= hd; d += 2) {
						a0 = _mm256_fmadd_ps(_mm256_set1_ps(qi[d]), _mm256_loadu_ps(kt + (size_t)d * bsp + t0), a0);
						a1 = _mm256_fmadd_ps(_mm256_set1_ps(qi[d + 1]), _mm256_loadu_ps(kt + (size_t)(d + 1) * bsp + t0), a1);
					}
					if (d < hd)
						a0 = _mm256_fmadd_ps(_mm256_set1_ps(qi[d]), _mm256_loadu_ps(kt + (size_t)d * bsp + t0), a0);
					__m256 s = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_add_ps(a0, a1), scale), valid);
					float corr = 1.0f;
					if (_mm256_movemask_ps(_mm256_cmp_ps(s, _mm256_set1_ps(m[r]), _CMP_GT_OQ))) {
						float bm = hmax256(s);
						corr = expf(m[r] - bm);
						m[r] = bm;
					}
					__m256 p = _mm256_and_ps(valid, exp256(_mm256_sub_ps(s, _mm256_set1_ps(m[r]))));
					__m256 C = _mm256_set1_ps(corr);
					float *lr = l + (size_t)r * 16;
					_mm256_storeu_ps(lr, _mm256_fmadd_ps(_mm256_loadu_ps(lr), C, p));
					const float *v = vb + (size_t)t0 * hd;    /* [n, hd] */
					float pj[8];
					_mm256_storeu_ps(pj, p);
					for (uint32_t c = 0; c < hd; c += W) {
						__m256i om = mask256(hd - c < W ? hd - c : W);
						__m256 c0 = _mm256_mul_ps(_mm256_maskload_ps(o + c, om), C);
						__m256 c1 = _mm256_setzero_ps();
						uint32_t j = 0;
						for (; j + 2 <= n; j += 2) {
							c0 = _mm256_fmadd_ps(_mm256_set1_ps(pj[j]), _mm256_maskload_ps(v + (size_t)j * hd + c, om), c0);
							c1 = _mm256_fmadd_ps(_mm256_set1_ps(pj[j + 1]), _mm256_maskload_ps(v + (size_t)(j + 1) * hd + c, om), c1);
						}
						if (j < n)
							c0 = _mm256_fmadd_ps(_mm256_set1_ps(pj[j]), _mm256_maskload_ps(v + (size_t)j * hd + c, om), c0);
						_mm256_maskstore_ps(o + c, om, _mm256_add_ps(c0, c1));
					}
				}
			}
		}
	}
	for (uint32_t r = 0; r < rows; r++)
		scale_avx2(out + (r / n_qh) * ldo + (r % n_qh) * hd,
			   1.0f / hsum256(_mm256_loadu_ps(l + (size_t)r * 16)), hd);
}

RL_TGT_AVX2 static void attn_avx2(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
			   uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
			   float *scratch)
{
	tiled256(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, scratch);
}

/* ---------------------------------------------------------------- dispatch -------- */

static mm_fn *const mm_impl[] = { mm_scalar, mm_avx2, mm_avx512 };
static attn_fn *const attn_impl[] = { attn_scalar, attn_avx2, attn_avx512 };
static attn_fn *const attn_rows_impl[] = { attn_scalar, attn_rows_avx2, attn_rows_avx512 };
/* Head dims from here on use the per-row kernel (see DEFINE_ROW_ATTN). The choice depends on
 * the model only, never on the batch, so a row's arithmetic is the same however it is chunked
 * or batched. */
#define ROW_ATTN_MIN_HD 32
void rl_cpu_matmul(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o_begin,
		   uint32_t o_end, int accumulate)
{
	mm_impl[rl_cpu_isa()](Y, ldy, X, ldx, W, bias, n_rows, in, o_begin, o_end, accumulate);
}

/* Where kv->wide (the widened blocks) starts in the scratch, 16-float aligned: past the tiled
 * kernels' scratch, or the row kernels' scores ([bs]), or rl_cpu_attention_heads' scores and
 * its rows' states ([rows][HEAD_STATE(hd)]). */
static size_t wide_at(uint32_t rows, uint32_t hd, uint32_t block_size)
{
	const size_t t = tiled_scratch(rows, hd, block_size), h = heads_states_at(block_size) + rows * HEAD_STATE(hd);
	return ((t > h ? t : h) + 15) / 16 * 16;
}

void rl_cpu_attention_prefetch(const struct rl_cpu_kv_view *kv, uint32_t n_keys, uint32_t hd, uint32_t max_blocks)
{
	kv_prefetch_blocks(kv, 0, max_blocks && max_blocks < KV_AHEAD ? max_blocks : KV_AHEAD, n_keys, hd);
}

size_t rl_cpu_attention_scratch(uint32_t rows, uint32_t hd, uint32_t block_size)
{
	return wide_at(rows, hd, block_size) + 2 * (size_t)block_size * hd;   /* two widened blocks */
}

void rl_cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		      uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
		      float *scratch)
{
	struct rl_cpu_kv_view v = *kv;
	if (kv->hk)
		v.wide = scratch + wide_at(q_len * n_qh, hd, kv->block_size);
	(hd >= ROW_ATTN_MIN_HD ? attn_rows_impl : attn_impl)[rl_cpu_isa()](out, ldo, q, ldq, q_len, n_qh,
								     pos0, hd, &v, scratch);
}

void rl_cpu_attention_heads(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys, uint32_t hd,
			    const struct rl_cpu_kv_view *kv, float *scratch)
{
	typedef int heads_fn(float *, const float *, uint32_t, uint32_t, uint32_t, uint32_t,
			     const struct rl_cpu_kv_view *, float *, float *);
	static heads_fn *const heads_impl[] = { NULL, attn_heads_avx2, attn_heads_avx512 };
	enum rl_cpu_isa isa = rl_cpu_isa();
	if (hd >= ROW_ATTN_MIN_HD && heads_impl[isa] &&
	    heads_impl[isa](out, q, n_kv, group, n_keys, hd, kv, scratch, scratch + heads_states_at(kv->block_size)) == 0)
		return;
	for (uint32_t kh = 0; kh < n_kv; kh++) {       /* head by head: the scalar ISA, other head dims */
		const size_t o = (size_t)kh * kv->block_size * hd;
		struct rl_cpu_kv_view v = *kv;
		if (kv->hk) {
			v.hk += o;
			v.hv += o;
		} else {
			v.k += o;
			v.v += o;
		}
		rl_cpu_attention(out + (size_t)kh * group * hd, group * hd, q + (size_t)kh * group * hd, group * hd, 1,
				 group, n_keys - 1, hd, &v, scratch);
	}
}

void rl_cpu_f32_to_f16(uint16_t *dst, const float *src, uint32_t n)
{
	uint32_t i = 0;
	if (rl_cpu_isa() != RL_CPU_SCALAR && rl_cpu_has_f16c())
		i = narrow_f16c(dst, src, n);
	for (; i < n; i++)
		dst[i] = rl_f32_to_f16(src[i]);
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
	return hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
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

void rl_cpu_rope_angles(float *cs, uint32_t hd, float pos_scaled, const float *inv_freq)
{
	for (uint32_t i = 0; i < hd / 2; i++) {
		float a = pos_scaled * inv_freq[i];
		cs[2 * i] = cosf(a);
		cs[2 * i + 1] = sinf(a);
	}
}

/* rl_cpu_rope's pairs [0, returned) on AVX2, in the scalar loop's arithmetic and order (two
 * products, then their difference or sum, no FMA), so the results match it bit for bit. cs
 * is deinterleaved once per run of pairs and serves every head. One step's rows (110M, batch
 * 8) rotated strided scalars for ~1% of a decode step. */
__attribute__((target("avx2")))   /* no "fma": GCC would contract x0 c - x1 s into one */
static uint32_t rope_avx2(float *v, uint32_t n_heads, uint32_t hd, const float *cs, int halves)
{
	const uint32_t np = hd / 2;
	uint32_t i = 0;
	if (halves) {                   /* pairs (i, i + hd/2): 8 a vector from each half */
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

void rl_cpu_rope(float *v, uint32_t n_heads, uint32_t hd, const float *cs, int halves)
{
	for (uint32_t i = rl_cpu_isa() != RL_CPU_SCALAR ? rope_avx2(v, n_heads, hd, cs, halves) : 0; i < hd / 2; i++) {
		float c = cs[2 * i], sn = cs[2 * i + 1];
		uint32_t i0 = halves ? i : 2 * i, i1 = halves ? i + hd / 2 : 2 * i + 1;
		for (uint32_t h = 0; h < n_heads; h++) {
			float *vh = v + (size_t)h * hd;            /* [hd] */
			float v0 = vh[i0], v1 = vh[i1];
			vh[i0] = v0 * c - v1 * sn;
			vh[i1] = v0 * sn + v1 * c;
		}
	}
}

/* g / (1 + e^-g) * u over whole vectors with the vector exp of the attention kernels; e^-g
 * is clamped at e^88 (exp256 builds 2^n in the exponent field), which leaves g / (1 + e^88)
 * ~ 0, the limit. Returns how many elements it did; rl_cpu_silu_mul does the rest. */
RL_TGT_AVX512 static uint32_t silu_mul_avx512(float *g, const float *u, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 x = _mm512_loadu_ps(g + i);
		__m512 e = exp512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), _mm512_set1_ps(88.0f)));
		_mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
						      _mm512_loadu_ps(u + i)));
	}
	return i;
}
RL_TGT_AVX2 static uint32_t silu_mul_avx2(float *g, const float *u, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(g + i);
		__m256 e = exp256(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), _mm256_set1_ps(88.0f)));
		_mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
						      _mm256_loadu_ps(u + i)));
	}
	return i;
}

void rl_cpu_silu_mul(float *g, const float *u, uint32_t n)
{
	enum rl_cpu_isa isa = rl_cpu_isa();
	uint32_t i = isa == RL_CPU_AVX512 ? silu_mul_avx512(g, u, n) : isa == RL_CPU_AVX2 ? silu_mul_avx2(g, u, n) : 0;
	for (; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
