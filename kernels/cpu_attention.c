/* cpu_attention.c — attention over the paged KV cache on the CPU (rl_cpu_attention,
 * rl_cpu_attention_heads; see cpu_ops.h): the scalar key-by-key kernel, and the vector kernels
 * written once in cpu_attention_tmpl.h and compiled here for 16 lanes (AVX-512) and 8 (AVX2).
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include "kernels/cpu_ops.h"
#include "kernels/cpu_simd.h"
#include "kernels/rl_half.h"

typedef void attn_fn(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		     uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
		     float *scratch);


/* Online softmax throughout (running max m, running sum l, output o rescaled whenever m
 * grows), so nothing is sized by the context.
 *
 * The scalar fallback walks key by key per query row. The SIMD kernels (tiled16/tiled8)
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
 * block by hand (attn_heads): there is one, and it does not continue the run the hardware
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
RL_INLINE void transpose_keys8(float *kt, const float *kb, uint32_t nb, uint32_t bsp, uint32_t hd)
{
	for (uint32_t d = 0; d < hd; d++) {
		float *row = kt + (size_t)d * bsp;                 /* [bsp] */
		for (uint32_t j = 0; j < nb; j++)
			row[j] = kb[(size_t)j * hd + d];
		for (uint32_t j = nb; j < bsp; j++)
			row[j] = 0;
	}
}

/* The first of n_keys positions (those before the query's own, and it) that the query sees:
 * 0, or the start of its sliding window */
RL_INLINE uint32_t kv_first_key(const struct rl_cpu_kv_view *kv, uint32_t n_keys)
{
	return kv->window && n_keys > kv->window ? n_keys - kv->window : 0;
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
		uint32_t n_keys = pos0 + i + 1, lo = kv_first_key(kv, n_keys);               \
		float mx = -INFINITY, l = 0;                                                 \
		memset(o, 0, hd * sizeof(float));                                            \
		for (uint32_t p0 = lo / bs * bs; p0 < n_keys; p0 += bs) {                    \
			uint32_t n = n_keys - p0 < bs ? n_keys - p0 : bs;                    \
			uint32_t j0 = lo > p0 ? lo - p0 : 0;     /* the window's first */   \
			const float *kb, *vb;                            /* [n, hd] */       \
			kv_prefetch_ahead(kv, p0 / bs, n_keys, hd);                          \
			kv_block(kv, p0 / bs, n, hd, &kb, &vb);                              \
			float bm = mx;                                                       \
			for (uint32_t j = j0; j < n; j++) {                                  \
				s[j] = DOT(qi, kb + (size_t)j * hd, hd) * scale;             \
				bm = s[j] > bm ? s[j] : bm;                                  \
			}                                                                    \
			if (bm > mx) {                                                       \
				float corr = expf(mx - bm);                                  \
				SCALE(o, corr, hd);                                          \
				l *= corr;                                                   \
				mx = bm;                                                     \
			}                                                                    \
			EXPB(s + j0, n - j0, mx);      /* s[j] = exp(s[j] - mx), j0 <= j < n */ \
			for (uint32_t j = j0; j < n; j++) {                                  \
				l += s[j];                                                   \
				AXPY(o, s[j], vb + (size_t)j * hd, hd);                      \
			}                                                                    \
		}                                                                            \
		SCALE(o, 1.0f / l, hd);                                                      \
	}                                                                                    \
}



/* Floats of one query head's state in rl_cpu_attention_heads' scratch: output [hd], then its
 * running max and sum, padded to whole vectors */
#define HEAD_STATE(hd) ((size_t)(hd) + 16)

/* Where rl_cpu_attention_heads' states start in its scratch: past the scores, [bs] */
static size_t heads_states_at(uint32_t block_size)
{
	return ((size_t)block_size + 15) / 16 * 16;
}

/* Rows the many-row key kernel (attn_krows) takes at a time, and its scratch in floats: max,
 * sum and correction [KR_ROWS] each, then scores [KR_ROWS, bs rounded to 16] */
#define KR_ROWS 16
static size_t kr_scratch(uint32_t bs)
{
	return (size_t)KR_ROWS * (3 + ((bs + 15) & ~15u));
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

/* transpose_keys by gathers, 16 keys at a time (the AVX-512 tiled kernel's); the lanes past nb are zeroed as there. */
RL_TGT_AVX512 RL_INLINE void transpose_keys16(float *kt, const float *kb, uint32_t nb, uint32_t bsp, uint32_t hd)
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


/* o[0..8) = o * C + sum_j p[j] v[j] over n (<= 16) keys at hd 8: two keys' values per vector
 * (lanes 0-7 key j, 8-15 key j+1) times p[j] / p[j+1] spread over the same halves */
RL_TGT_AVX512 RL_INLINE void tiled_pv8(float *o, const float *v, __m512 p, __m512 C, uint32_t n)
{
	__m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
	if (n == 16) {
		/* a full tile, unrolled with fixed spreads so only the accumulators carry a dependency */
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
}

/* the scalar key-by-key kernel's ops */
static inline float dot_scalar(const float *a, const float *b, uint32_t n)
{
	float s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}
static inline void scale_scalar(float *a, float f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] *= f;
}
static inline void axpy_scalar(float *y, float a, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		y[i] += a * x[i];
}
static inline void expb_scalar(float *s, uint32_t n, float mx)
{
	for (uint32_t j = 0; j < n; j++)
		s[j] = expf(s[j] - mx);
}
DEFINE_ROW_ATTN(attn_scalar, , dot_scalar, scale_scalar, axpy_scalar, expb_scalar)

/* ---------------------------------------------------------------- the two widths -------- */

#define VW 16
#define VT __m512
#define V(op) rl_v16_##op
#define W_(x) x##16
#define TGT RL_TGT_AVX512
#include "kernels/cpu_attention_tmpl.h"
#undef VW
#undef VT
#undef V
#undef W_
#undef TGT

#define VW 8
#define VT __m256
#define V(op) rl_v8_##op
#define W_(x) x##8
#define TGT RL_TGT_AVX2
#include "kernels/cpu_attention_tmpl.h"
#undef VW
#undef VT
#undef V
#undef W_
#undef TGT

/* ---------------------------------------------------------------- dispatch -------- */

static attn_fn *const attn_impl[] = { attn_scalar, attn_tiled8, attn_tiled16 };
static attn_fn *const attn_rows_impl[] = { attn_scalar, attn_rows8, attn_rows16 };
/* Head dims from here on use the per-row kernel (see DEFINE_ROW_ATTN). The choice depends on
 * the model only, never on the batch, so a row's arithmetic is the same however it is chunked
 * or batched. */
#define ROW_ATTN_MIN_HD 32

/* Where kv->wide (the widened blocks) starts in the scratch, 16-float aligned: past the tiled
 * kernels' scratch, or the row kernels' scores ([bs]), or rl_cpu_attention_heads' scores and
 * its rows' states ([rows][HEAD_STATE(hd)]). */
static size_t wide_at(uint32_t rows, uint32_t hd, uint32_t block_size)
{
	const size_t t = tiled_scratch(rows, hd, block_size), h = heads_states_at(block_size) + rows * HEAD_STATE(hd);
	const size_t k = kr_scratch(block_size), th = t > h ? t : h;
	return ((th > k ? th : k) + 15) / 16 * 16;
}

void rl_cpu_attention_prefetch(const struct rl_cpu_kv_view *kv, uint32_t n_keys, uint32_t hd, uint32_t max_blocks)
{
	const uint32_t b0 = kv_first_key(kv, n_keys) / kv->block_size;
	kv_prefetch_blocks(kv, b0, b0 + (max_blocks && max_blocks < KV_AHEAD ? max_blocks : KV_AHEAD), n_keys, hd);
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
	static heads_fn *const heads_impl[] = { NULL, attn_heads_all8, attn_heads_all16 };
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

