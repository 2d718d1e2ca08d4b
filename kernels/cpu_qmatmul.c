/* cpu_qmatmul.c — matmul over weights kept as the file stores them (struct rl_wmat; see
 * rl_cpu_qmatmul in cpu_ops.h).
 *
 * F16 and BF16 are repacked once at load (rl_cpu_wmat_pack) into blocks of 48 output rows,
 * input-major, and every row count takes one outer-product kernel over them (h16_panels:
 * an activation broadcast times whole vectors of outputs, widened to fp32 in registers by
 * F16C or a 16-bit shift; from two rows over BF16 with AVX512-BF16, vdpbf16ps on activations
 * rounded to bf16, as ggml).
 *
 * For the block types, decode steps (a few activation rows) are bounded by the bytes of
 * weights streamed, so they compute on the stored form directly:
 *   - Q8_0, Q4_K, Q6_K: the activation rows are quantized once per call to q8 blocks of 32
 *     (one fp32 scale per block and the sums of each 16 quantized values, as ggml's q8
 *     activations), and each weight block is dotted in integers (AVX2 maddubs/madd), scaled
 *     to float once per block of 32;
 *   - every other block type: a weight row is decoded to fp32 (the table's decoder, as ggml)
 *     and dotted in fp32.
 * Each weight block is loaded once for all (up to 8) activation rows. On AVX512-VNNI, 2..8
 * rows over Q8_0 and 1..8 rows over Q4_K and Q6_K take sixteen weight rows at a time, one
 * output row per lane (q8_0_t16_group, q4k_t16_body, q6k_t16_body): vpdpbusd then does 64
 * multiply-adds of 16 rows against 4 broadcast activations, and the block and sub-block
 * scales meet whole lanes. The three types are repacked at load so that those lanes are
 * loaded, not transposed in registers (t16_load, left for the rows past the last group); on
 * AVX2 the same packed groups are read as 8-lane halves (q8_0_t8_group, in 16-bit products;
 * q4k_t8_group, q6k_t8p_half; from two rows q4k_t8k_half, q6k_t8k_half, the rows inside;
 * eight rows on rotated activations, loads instead of broadcasts: the three with ROT,
 * struct q8kr, q8r). One
 * row over packed Q8_0 takes q8_0_t8_group on every ISA; over unpacked Q8_0 a weight row
 * streams alone (four accumulators inside it).
 * Steps of more rows (prefill chunks) are bounded by arithmetic instead: packed Q8_0 and
 * K-quants run the decode kernels 8 rows at a time over each group (q8_0_packed_many,
 * kq_packed_many); otherwise a tile of
 * weight rows is decoded to fp32 (or bf16) in the caller's scratch and multiplied by the
 * float matmul, whose tiling reads the tile once for all rows. Matrices left unpacked (the
 * scalar ISA, or a caller that never packs) take those decoded-row paths for every type.
 *
 * Accuracy (tests/test_qmatmul.c holds the tolerances): the float paths round like fp32
 * matmul; the q8 activation path adds the activations' 8-bit rounding (relative error of a
 * row's dot about 0.3% of the row's magnitude), the same trade ggml makes.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "kernels/cpu_ops.h"
#include "kernels/rl_half.h"
#include "kernels/rl_model.h"

#define AI static inline __attribute__((always_inline))
#define T256 __attribute__((target("avx2,fma,f16c")))
#define Q8_ROWS 8                      /* rows at most on the integer/float dot paths */
/* Software prefetch distance in a weight row, bytes. Batch-1 decode streamed several weight
 * rows at once and the hardware prefetcher alone left it at ~70% of llama.cpp's speed on a
 * Zen 3 VM (Q8_0 110M: 59 tok/s; with 768 bytes ahead 63, 2048: 78, 4096: 84, 8192: 81).
 * Since then one activation row streams one weight row at a time (see dots_avx2); the 16-bit
 * rows then do better without it (DEFINE_H16_ROW1). */
#define PF_DIST 4096
/* The K-quant dots (four interleaved rows of 144/210-byte blocks) want it further: 110M
 * Q4_K_M batch-1 decode on a Zen 5 VM, 4096: 244 tok/s, 16384: 282, 65536: 283. */
#define PF_DIST_K 16384
#define TILE 16                        /* weight rows decoded at once on the tile path */

/* One activation block: x[i] ~ d * q[i]; s[h] = sum of q over elements 16h .. 16h+15. */
struct q8x {
	float   d;
	int16_t s[2];
	int8_t  q[32];
};

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
/* a block's f16 scale, by the F16C instruction on the AVX2 paths */
#define H2F(p) _cvtsh_ss(ld16(p))

/* ------------------------------------------------------------ activations -------- */

T256 static int32_t hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

T256 static float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

T256 static void quantize_avx2(const float *x, uint32_t n, struct q8x *o)
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

/* ------------------------------------------------------------ integer dots ------- */

/* sum over 32 of u[i] * s[i] (u unsigned bytes < 128 or |w|, s signed) as 8 int32 lanes */
T256 AI __m256i dot_us(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* an unaligned, aliasing dword (4 activations broadcast from memory) */
typedef int32_t __attribute__((may_alias, aligned(1))) i32u;

/* One Q8_0 weight row against one activation row: four accumulators over consecutive blocks,
 * so the FMA latency is hidden inside the row and the row streams alone (see dots_avx2). */
T256 AI float q8_0_row1(const uint8_t *w, const struct q8x *x, uint32_t nb)
{
	__m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
	uint32_t b = 0;
	for (; b + 4 <= nb; b += 4) {
		_mm_prefetch((const char *)w + (size_t)b * 34 + PF_DIST, _MM_HINT_T0);
		_mm_prefetch((const char *)w + (size_t)b * 34 + PF_DIST + 64, _MM_HINT_T0);
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			const uint8_t *blk = w + (size_t)(b + k) * 34;
			__m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
			__m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[b + k].q), wv);
			acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(H2F(blk) * x[b + k].d),
						 _mm256_cvtepi32_ps(dot_us(_mm256_sign_epi8(wv, wv), sx)), acc[k]);
		}
	}
	for (; b < nb; b++) {
		const uint8_t *blk = w + (size_t)b * 34;
		__m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
		__m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[b].q), wv);
		acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(H2F(blk) * x[b].d),
					 _mm256_cvtepi32_ps(dot_us(_mm256_sign_epi8(wv, wv), sx)), acc[0]);
	}
	return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

/* ------------------------------ packed block groups: Q8_0, Q4_K, Q6_K (rl_cpu_wmat_pack) ----- */

/* The dwords of a block that a packed group keeps as 16-lane vectors: Q8_0's 32 quants, all
 * of Q4_K's (d|dmin, the 12 scale bytes, qs), Q6_K's but the trailing f16 d (ql, qh, the
 * scales); 0: this type is not packed. They start pack_head bytes into the block; the bytes
 * before and after them (Q8_0's f16 d, Q6_K's) follow the vectors as each row's tail. The one
 * owner of the packed layout, with pack_pos, rl_cpu_wmat_pack and wmat_block. */
static uint32_t pack_dwords(int dt)
{
	return dt == RL_DT_Q8_0 ? 8 : dt == RL_DT_Q4_K ? 36 : dt == RL_DT_Q6_K ? 52 : 0;
}

static uint32_t pack_head(int dt)
{
	return dt == RL_DT_Q8_0 ? 2 : 0;
}

/* The vector that holds dword j of the 16 rows' blocks, in the order the kernels read them,
 * so that a group streams front to back: Q4_K's is the file's; Q6_K's the scales (48-51),
 * then for each half the 2-bit tops (32-39, 40-47) before their low nibbles (0-15, 16-31).
 * (Q6_K in the file's order, read out of order, left the hardware prefetcher behind: 8.5 GB/s
 * from DRAM at one row without software prefetch, against Q4_K's 31.) */
AI uint32_t pack_pos(int dt, uint32_t j)
{
	if (dt != RL_DT_Q6_K)
		return j;
	return j >= 48 ? j - 48 : j >= 40 ? j - 40 + 28 : j >= 32 ? j - 32 + 4 : j >= 16 ? j - 16 + 36 : j + 12;
}

/* Row r's block b as the file lays it out: in place, or gathered from its packed group into
 * tmp[blk_bytes]. */
static const uint8_t *wmat_block(const struct rl_wmat *W, uint32_t r, uint32_t b, uint8_t *tmp)
{
	const uint8_t *base = W->data;
	if (r >= W->packed_rows)
		return base + (size_t)r * W->row_bytes + (size_t)b * W->blk_bytes;
	const uint32_t ndw = pack_dwords(W->dtype), hd = pack_head(W->dtype), tail = W->blk_bytes - 4 * ndw;
	const uint32_t L = r % 16;
	const uint8_t *g = base + (size_t)(r - L) * W->row_bytes + (size_t)b * 16 * W->blk_bytes;
	const uint8_t *t = g + 64 * ndw + (size_t)L * tail;
	for (uint32_t j = 0; j < ndw; j++)
		memcpy(tmp + hd + 4 * j, g + 64 * pack_pos(W->dtype, j) + 4 * L, 4);
	memcpy(tmp, t, hd);
	memcpy(tmp + hd + 4 * ndw, t + hd, tail - hd);
	return tmp;
}

/* The 8-row groups of the AVX2 lane-per-row kernels (q8_0_t8_body, q4k_t8_group): rp[l] =
 * row o + l, a group past o1 repeating its last row (whose lanes t8_store leaves alone). */
T256 AI void t8_rows(const struct rl_wmat *W, uint32_t o, uint32_t o1, const uint8_t **rp)
{
	for (uint32_t l = 0; l < 8; l++)
		rp[l] = (const uint8_t *)W->data + (size_t)(o + l < o1 ? o + l : o1 - 1) * W->row_bytes;
}

/* T[k], lane L = bytes off+4k .. off+4k+3 of row rp[L] (32 bytes of each of 8 rows, an 8x8
 * dword transpose in registers). */
T256 AI void t8_load(const uint8_t *const *rp, size_t off, __m256i *T)
{
	__m256i z[8], t[8], u[8];
#pragma GCC unroll 8
	for (int l = 0; l < 8; l++)
		z[l] = _mm256_loadu_si256((const __m256i *)(rp[l] + off));
#pragma GCC unroll 4
	for (int l = 0; l < 8; l += 2) {
		t[l] = _mm256_unpacklo_epi32(z[l], z[l + 1]);
		t[l + 1] = _mm256_unpackhi_epi32(z[l], z[l + 1]);
	}
#pragma GCC unroll 2
	for (int h = 0; h < 8; h += 4) {
		u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
		u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
		u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
		u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		T[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
		T[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
	}
}

/* Y[r, o + L] (=, or +=) lane L of acc[r] (+ bias[o + L]) for lanes l0 <= L < n */
T256 AI void t8_store(float *Y, size_t ldy, const __m256 *acc, const int NR, uint32_t o, uint32_t l0, uint32_t n,
		      const float *bias, int accumulate)
{
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i m = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)l0), lane),
					      _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane));
	const int whole = l0 == 0 && n == 8;
	const __m256 bv = !bias ? _mm256_setzero_ps() : whole ? _mm256_loadu_ps(bias + o)
							      : _mm256_maskload_ps(bias + o, m);
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++) {
		float *y = Y + (size_t)r * ldy + o;
		__m256 v = _mm256_add_ps(acc[r], bv);
		if (whole) {   /* vmaskmovps stores are slow on AMD: ~10% of a half's 8 rows on Zen 4 */
			if (accumulate)
				v = _mm256_add_ps(v, _mm256_loadu_ps(y));
			_mm256_storeu_ps(y, v);
			continue;
		}
		if (accumulate)
			v = _mm256_add_ps(v, _mm256_maskload_ps(y, m));
		_mm256_maskstore_ps(y, m, v);
	}
}

/* K-quant activations: one scale per 256 (the super-block), so that a super-block's
 * sub-block products add up in integers and meet a float once (ggml's Q8_K). */
struct q8k {
	float   d;
	int16_t bsums[16];             /* sums of q over each 16 */
	int8_t  q[256];
};

T256 static void quantize_k_avx2(const float *x, uint32_t n, struct q8k *o)
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

/* Q4_K super-block (144 bytes, 256 weights): f16 d, f16 dmin, 12 bytes of 6-bit (scale,
 * min) pairs for 8 sub-blocks of 32, 128 bytes of 4-bit q; w = d*sc*q - dmin*m. As ggml. */
static inline void q4_k_scales(const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
	/* the 12 bytes as three words, unpacked without branches (as ggml's kmask trick):
	 * scales 0-3 and mins 0-3 are the low 6 bits of bytes 0-7; scales/mins 4-7 take their
	 * low 4 bits from bytes 8-11 and their top 2 from the top bits of bytes 0-7 */
	uint32_t u[4], out[4];
	memcpy(u, q, 12);
	const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
	out[0] = u[0] & m6;                                     /* scales 0-3 */
	out[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);       /* scales 4-7 */
	out[2] = u[1] & m6;                                     /* mins 0-3 */
	out[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4-7 */
	memcpy(sc, out, 8);
	memcpy(mn, out + 2, 8);
}

/* sum_i w_i x_i over a Q4_K super-block against a q8k block:
 * d*dx * sum_s sc_s (q_s . xq_s) - dmin*dx * sum_s m_s bsum32_s, both sums in integers */
T256 AI void q4_k_tile(const uint8_t *const *w, int nw, const struct q8k *const *x, int nr,
		       uint32_t nb, float *out)
{
	/* A super-block's integer sums meet a float once: in vector accumulators for one or
	 * two rows (no horizontal sum per super-block), in scalars for more, so the vector
	 * registers stay free for up to 8 rows' integer sums (no spills). nr is a constant. */
	float acc[8], mins[8];
	const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
	for (int k = 0; k < nw * nr; k++)
		acc[k] = mins[k] = 0;
	__m256 vacc4[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
	for (uint32_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
		for (int j = 0; j < nw; j++) {
			const uint8_t *blk = w[j] + (size_t)b * 144;
			for (int l = 0; l < 144; l += 64)
				_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
			float d = H2F(blk), dmin = H2F(blk + 2);
			uint8_t sc[8], mn[8];
			q4_k_scales(blk + 4, sc, mn);
			/* the 8 mins as int16 against the 8 sums of 32 activations */
			__m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
			__m256i sumi[8];
#pragma GCC unroll 8
			for (int r = 0; r < nr; r++)
				sumi[r] = _mm256_setzero_si256();
			for (int p = 0; p < 4; p++) {                  /* 64 weights: two sub-blocks */
				__m256i qv = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * p));
				__m256i lo = _mm256_and_si256(qv, low4);
				__m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4);
				__m256i s0 = _mm256_set1_epi16(sc[2 * p]), s1 = _mm256_set1_epi16(sc[2 * p + 1]);
#pragma GCC unroll 8
				for (int r = 0; r < nr; r++) {
					const int8_t *xq = x[r][b].q + 64 * p;
					__m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
					__m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
					sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_madd_epi16(p0, s0),
											       _mm256_madd_epi16(p1, s1)));
				}
			}
#pragma GCC unroll 8
			for (int r = 0; r < nr; r++) {
				const struct q8k *xb = &x[r][b];
				/* pairwise sums of bsums: the 8 sums of 32 */
				__m128i b16 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
							     _mm_loadu_si128((const __m128i *)(xb->bsums + 8)));
				__m128i pm = _mm_madd_epi16(mins16, b16);
				pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0x4e));
				pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0xb1));
				if (nw * nr <= 4) {
					vacc4[j * nr + r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), _mm256_cvtepi32_ps(sumi[r]),
									    vacc4[j * nr + r]);
					mins[j * nr + r] += dmin * xb->d * (float)_mm_cvtsi128_si32(pm);
				} else {
					acc[j * nr + r] += xb->d * (d * (float)hsum_i32(sumi[r]) - dmin * (float)_mm_cvtsi128_si32(pm));
				}
			}
		}
	}
#pragma GCC unroll 8
	for (int k = 0; k < nw * nr; k++)
		out[k] = nw * nr <= 4 ? hsum_ps(vacc4[k]) - mins[k] : acc[k];
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
 * xk[0 .. nr) (aux: nr * nb * KQ_AUX int32): Q4_K's min pairs (q4k_min_pairs) for either ISA;
 * Q6_K's seeds for the VNNI kernel, -32 * each sum of 16 activations (the AVX2 one forms its
 * own offset term). */
#define KQ_AUX 16
static void kq_aux(int dt, int vnni, const struct q8k *const *xk, uint32_t nr, uint32_t nb, int32_t *aux)
{
	if (dt == RL_DT_Q4_K) {
		q4k_min_pairs(xk, nr, nb, aux);
		return;
	}
	if (vnni)
		for (uint32_t r = 0; r < nr; r++)
			for (uint32_t b = 0; b < nb; b++)
				for (int j = 0; j < 16; j++)
					aux[((size_t)r * nb + b) * 16 + j] = -32 * (int32_t)xk[r][b].bsums[j];
}

/* Eight activation rows' super-block, rotated, for the AVX2 8-row K-quant kernels
 * (q4k_t8k_half, q6k_t8k_half with ROT): each dword row holds one dword of the 8 rows twice
 * over, so that the 32 bytes at dword s are rows s, s + 1, .., s + 7 (mod 8): one plain
 * load gives lane L the activations of row (L + s) % 8, where a broadcast gave every lane one
 * row's. A kernel then keeps 8 sums, one per rotation s, each lane a (weight row, activation
 * row) pair, and turns them back into rows once at its store (t8r_unrotate). On Zen 4 a
 * vpbroadcastd from memory takes a slot on the pipes that multiply; a load does not. */
struct q8kr {
	int32_t q[64][16];             /* dword t of the block (bytes 4t .. 4t + 3) */
	int32_t aux[8][16];            /* Q4_K: the min pairs k < 4 (q4k_min_pairs); Q6_K: bsums 2i, 2i + 1 */
	float   d[16];
};

/* The 8 rows rp[] from dword 0 to n_dw (a multiple of 8), rotated: dst[t] = dword t of the
 * 8 rows, twice over (the layout of struct q8kr and q8r) */
T256 static void rot_rows(const uint8_t *const *rp, uint32_t n_dw, int32_t (*dst)[16])
{
	for (uint32_t g = 0; g < n_dw / 8; g++) {
		__m256i T[8];
		t8_load(rp, 32 * (size_t)g, T);
		for (int k = 0; k < 8; k++) {
			_mm256_store_si256((__m256i *)dst[8 * g + k], T[k]);
			_mm256_store_si256((__m256i *)(dst[8 * g + k] + 8), T[k]);
		}
	}
}

/* xr[b] for the blocks b < nb of the 8 rows xk[] (bp: their q4k_min_pairs, or NULL for Q6_K) */
T256 static void q8kr_make(const struct q8k *const *xk, const int32_t *bp, uint32_t nb, struct q8kr *xr)
{
	const uint8_t *rp[8];
	for (uint32_t b = 0; b < nb; b++) {
		struct q8kr *o = &xr[b];
		for (uint32_t r = 0; r < 8; r++)
			rp[r] = (const uint8_t *)xk[r][b].q;
		rot_rows(rp, 64, o->q);
		for (uint32_t r = 0; r < 8; r++) {
			const void *a = bp ? (const void *)(bp + ((size_t)r * nb + b) * 4) : (const void *)xk[r][b].bsums;
			for (int k = 0; k < 8; k++) {
				int32_t v = 0;                  /* Q4_K: 4 pairs */
				if (!bp || k < 4)
					memcpy(&v, (const char *)a + 4 * k, 4);
				o->aux[k][r] = o->aux[k][r + 8] = v;
			}
			o->d[r] = o->d[r + 8] = xk[r][b].d;
		}
	}
}

/* lane L of row r's output is lane L of rotation (r - L) % 8 (variable blends: an immediate
 * needs the loops unrolled, which -O1 builds do not) */
T256 AI void t8r_unrotate(const __m256 *acc, __m256 *out)
{
	static const int32_t lane[8][8] __attribute__((aligned(32))) = {
		{ -1 }, { 0, -1 }, { 0, 0, -1 }, { 0, 0, 0, -1 }, { 0, 0, 0, 0, -1 }, { 0, 0, 0, 0, 0, -1 },
		{ 0, 0, 0, 0, 0, 0, -1 }, { 0, 0, 0, 0, 0, 0, 0, -1 },
	};
#pragma GCC unroll 8
	for (int r = 0; r < 8; r++) {
		__m256 v = acc[r];
#pragma GCC unroll 7
		for (int l = 1; l < 8; l++)
			v = _mm256_blendv_ps(v, acc[(r - l) & 7], _mm256_load_ps((const float *)lane[l]));
		out[r] = v;
	}
}

/* t8_store of the rows' sums, or with ROT of the 8 rotations' (turned into rows first) */
T256 AI void t8_store_rows(float *Y, size_t ldy, const __m256 *acc, const int ROT, const int NR, uint32_t o,
			   uint32_t l0, uint32_t n, const float *bias, int accumulate)
{
	if (!ROT) {
		t8_store(Y, ldy, acc, NR, o, l0, n, bias, accumulate);
		return;
	}
	__m256 out[8];
	t8r_unrotate(acc, out);
	t8_store(Y, ldy, out, NR, o, l0, n, bias, accumulate);
}

/* the f16 in the low half of each dword of g, as 8 floats */
T256 AI __m256 f16_lo8(__m256i g)
{
	return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packs_epi32(
		_mm256_srai_epi32(_mm256_slli_epi32(g, 16), 16), _mm256_setzero_si256()), 0x08)));
}

/* dword off of each of the 8 rows */
T256 AI __m256i ld32x8(const uint8_t *const *rp, size_t off)
{
	uint32_t v[8];
	for (int l = 0; l < 8; l++)
		memcpy(&v[l], rp[l] + off, 4);
	return _mm256_loadu_si256((const __m256i *)v);
}

/* An 8-row lane set of the AVX2 K-quant kernels: half h of a packed 16-row group (PK: the
 * 32 bytes at 32 h of each of its vectors, pk = group + 32 h), or rows rp[] (t8_rows)
 * transposed in registers. */
struct t8g {
	const uint8_t *rp[8];
	const uint8_t *pk;
	const uint8_t *tl;             /* PK: the half's first row's tail (Q8_0's d) in block 0 */
};

/* The packed half that holds row o (o < W->packed_rows) into G; returns its first row. */
T256 AI uint32_t t8_half(const struct rl_wmat *W, uint32_t o, struct t8g *G)
{
	const uint32_t g = o & ~15u, h = (o - g) / 8, ndw = pack_dwords(W->dtype);
	G->pk = (const uint8_t *)W->data + (size_t)g * W->row_bytes + 32 * h;
	G->tl = (const uint8_t *)W->data + (size_t)g * W->row_bytes + 64 * ndw + 8 * h * (W->blk_bytes - 4 * ndw);
	return g + 8 * h;
}

/* T[k], lane L = dword off/4 + k (k < 8) of row L's block of type dt at byte blk of a row */
T256 AI void t8_run(const struct t8g *G, const int PK, const int dt, size_t blk, size_t off, __m256i *T)
{
	if (PK) {
		const uint8_t *p = G->pk + 16 * blk + 64 * (size_t)pack_pos(dt, (uint32_t)off / 4);
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			T[k] = _mm256_loadu_si256((const __m256i *)(p + 64 * k));
	} else {
		t8_load(G->rp, blk + off, T);
	}
}

/* lane L = the dword at byte off of row L's block at blk */
T256 AI __m256i t8_dword(const struct t8g *G, const int PK, const int dt, size_t blk, size_t off)
{
	return PK ? _mm256_loadu_si256((const __m256i *)(G->pk + 16 * blk + 64 * (size_t)pack_pos(dt, (uint32_t)off / 4)))
		  : ld32x8(G->rp, blk + off);
}

/* The lane sets covering [o0, o1): halves of packed groups (a half's lanes outside the range
 * computed, not stored), then runs of 8 rows. GROUP(PK, G, o, l0, n) does one: its first
 * row o, the lanes [l0, n) to store. A packed group's second half reads the lines its first
 * half brought in. */
#define T8_GROUPS(GROUP) do {                                                                      \
	for (uint32_t o = o0; o < o1;) {                                                           \
		struct t8g G;                                                                      \
		if (o < W->packed_rows) {                                                          \
			const uint32_t s = t8_half(W, o, &G), n = o1 - s < 8 ? o1 - s : 8;         \
			GROUP(1, &G, s, o - s, n);                                                 \
			o = s + n;                                                                 \
		} else {                                                                           \
			const uint32_t n = o1 - o < 8 ? o1 - o : 8;                                \
			t8_rows(W, o, o + n, G.rp);                                                \
			GROUP(0, &G, o, 0, n);                                                     \
			o += n;                                                                    \
		}                                                                                  \
	}                                                                                          \
} while (0)

/* Activation block b of a row as int16 pairs, in the order q8_0_t8_group's even/odd weight
 * vectors take them: dword 2k = (x[4k], x[4k+2]), dword 2k+1 = (x[4k+1], x[4k+3]). */
T256 static void q8_0_pairs(const struct q8x *x, uint32_t nb, int16_t *p /* [nb][32] */)
{
	/* within each dword: bytes 0, 2, 1, 3 */
	const __m256i mid = _mm256_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15,
					     0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
	for (uint32_t b = 0; b < nb; b++, p += 32) {
		__m256i q = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)x[b].q), mid);
		_mm256_storeu_si256((__m256i *)p, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
		_mm256_storeu_si256((__m256i *)(p + 16), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
	}
}

/* Eight activation rows' Q8_0 block as rotated int16 pairs (as struct q8kr): dword row t
 * holds dword t of the 8 rows' q8_0_pairs twice over; d the rows' scales twice over. */
struct q8r {
	int32_t p[16][16];
	float   d[16];
};

/* xr[b] for the blocks b < nb of the 8 rows xq[] with their pairs xp[] */
T256 static void q8r_make(const struct q8x *const *xq, const int16_t *const *xp, uint32_t nb, struct q8r *xr)
{
	const uint8_t *rp[8];
	for (uint32_t b = 0; b < nb; b++) {
		struct q8r *o = &xr[b];
		for (uint32_t r = 0; r < 8; r++)
			rp[r] = (const uint8_t *)(xp[r] + (size_t)b * 32);
		rot_rows(rp, 16, o->p);
		for (uint32_t r = 0; r < 8; r++)
			o->d[r] = o->d[r + 8] = xq[r][b].d;
	}
}

/* Decode steps over Q8_0 on AVX2 (no VNNI), eight weight rows at a time, one output row per
 * lane, as q8_0_t16_group: vector k of a block holds bytes 4k..4k+3 of each row (loaded as
 * packed, else transposed in registers, t8_run), and is split into its even and odd bytes
 * sign-extended to int16 (E = (w[4k], w[4k+2]), O = (w[4k+1], w[4k+3]) per lane, three
 * shifts); then for every activation row, vpmaddwd of E and O against the row's broadcast
 * int16 pairs (q8_0_pairs), added into that row's int32 lanes. k runs outside and the rows
 * inside, so a weight vector is loaded and split once for all rows while the rows' 8 sums stay
 * in registers.
 * Why 16-bit: without VNNI the 8-bit route is ggml's sign trick (vpsignb, vpmaddubsw, vpmaddwd
 * by ones: three operations per 32 products, all on the two pipes that also multiply), where
 * one vpmaddwd does 16 products. Per row and block (256 products) that is 16 vpmaddwd and 16
 * broadcasts against 24 and 8, exact as before (|x| <= 127, |w| <= 128). Register-only loops
 * on the Zen 4 VM, cycles per row and block: the sign trick with rows outside (the kernel
 * before this one, bound by its 4 loads a step) 17.7, with k outside 13.8, int16 12.2; the
 * 8x8 transpose of unpacked rows adds ~4, which is why Q8_0 is packed too. With ROT (8 rows
 * of a packed half, xr: struct q8r) the pairs are plain loads of the rotations instead of
 * broadcasts. */
T256 AI void q8_0_t8_group(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			   const struct q8r *xr, const int ROT, const struct rl_wmat *W, const float *bias,
			   const int NR, const int PK, const struct t8g *G, uint32_t o, uint32_t l0, uint32_t n,
			   int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	/* the next 16 (packed: the half's share of them) or 8 rows, one contiguous run */
	const size_t ahead = PK ? (size_t)((o & ~15u) + 16) * W->row_bytes + (o & 8) * 34 : (size_t)(o + 8) * W->row_bytes;
	__m256 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t blk = (size_t)b * 34;
		/* into L2, a slice per block: 8 rows' blocks are 272 bytes, five lines (a loop
		 * over them mispredicted) */
		const char *pf = (const char *)base + ahead + (PK ? 16 : 8) * blk;
#pragma GCC unroll 5
		for (int l = 0; l < 5; l++)
			_mm_prefetch(pf + 64 * l, _MM_HINT_T1);
		__m256i T[8];                  /* stored by the compiler: the rows' sums keep the registers */
		t8_run(G, PK, RL_DT_Q8_0, blk, 2, T);
		__m256i s[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			s[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++) {
			const __m256i e = _mm256_srai_epi16(_mm256_slli_epi16(T[k], 8), 8);
			const __m256i od = _mm256_srai_epi16(T[k], 8);
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++) {
				const i32u *p2 = ROT ? NULL : (const i32u *)(xp[r] + (size_t)b * 32) + 2 * k;
				const __m256i x0 = ROT ? _mm256_loadu_si256((const __m256i *)(xr[b].p[2 * k] + r))
						       : _mm256_set1_epi32(p2[0]);
				const __m256i x1 = ROT ? _mm256_loadu_si256((const __m256i *)(xr[b].p[2 * k + 1] + r))
						       : _mm256_set1_epi32(p2[1]);
				s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(e, x0));
				s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(od, x1));
				/* each sum as written: GCC otherwise reassociates the rows' chains into
				 * trees whose 128 products do not fit the registers */
				__asm__("" : "+x"(s[r]));
			}
		}
		/* the 8 rows' block scales: packed, one run of 8 f16; else word loads (an AVX2
		 * gather is slower on Zen) */
		const __m256 dw = PK ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G->tl + 16 * blk)))
				     : _mm256_cvtph_ps(_mm_setr_epi16(
					(short)ld16(G->rp[0] + blk), (short)ld16(G->rp[1] + blk), (short)ld16(G->rp[2] + blk),
					(short)ld16(G->rp[3] + blk), (short)ld16(G->rp[4] + blk), (short)ld16(G->rp[5] + blk),
					(short)ld16(G->rp[6] + blk), (short)ld16(G->rp[7] + blk)));
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]),
						 _mm256_mul_ps(dw, ROT ? _mm256_loadu_ps(xr[b].d + r) : _mm256_set1_ps(xq[r][b].d)),
						 acc[r]);
	}
	t8_store_rows(Y, ldy, acc, ROT, NR, o, l0, n, bias, accumulate);
}

T256 AI void q8_0_t8_body(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			  const struct q8r *xr, const struct rl_wmat *W, const float *bias, const int NR,
			  uint32_t o0, uint32_t o1, int accumulate)
{
#define Q8_0_T8(PK, G, o, l0, n) do {                                                              \
	if (PK && NR == 8 && xr)   /* packed halves of 8 rows: rotated */                          \
		q8_0_t8_group(Y, ldy, xq, xp, xr, 1, W, bias, NR, 1, G, o, l0, n, accumulate);     \
	else                                                                                       \
		q8_0_t8_group(Y, ldy, xq, xp, NULL, 0, W, bias, NR, PK, G, o, l0, n, accumulate);  \
} while (0)
	T8_GROUPS(Q8_0_T8);
#undef Q8_0_T8
}

/* xp: the rows' q8_0_pairs */
T256 static void q8_0_rows_t8(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			      const struct q8r *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
			      uint32_t o0, uint32_t o1, int accumulate)
{
	switch (nr) {
	case 1: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 1, o0, o1, accumulate); break;
	case 2: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 2, o0, o1, accumulate); break;
	case 3: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 3, o0, o1, accumulate); break;
	case 4: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 4, o0, o1, accumulate); break;
	case 5: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 5, o0, o1, accumulate); break;
	case 6: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 6, o0, o1, accumulate); break;
	case 7: q8_0_t8_body(Y, ldy, xq, xp, NULL, W, bias, 7, o0, o1, accumulate); break;
	default: q8_0_t8_body(Y, ldy, xq, xp, xr, W, bias, 8, o0, o1, accumulate); break;
	}
}

/* A Q4_K super-block's header for the 8 rows of a lane set (at byte off of a row): d and
 * dmin; the 8 sub-block scales as words in both halves of each dword (scw, vpmaddwd's
 * operand); the mins as word pairs (m0, m2), (m1, m3), (m4, m6), (m5, m7) (P), as
 * q4k_min_pairs pairs the activations' sums. */
T256 AI void q4k_t8_head(const struct t8g *G, const int PK, size_t off, __m256 *d, __m256 *dmin, __m256i *scw,
			 __m256i *P)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
	const __m256i mff = _mm256_set1_epi32(0x00FF00FF), lowb = _mm256_set1_epi32(0xFF);
	const __m256i g = t8_dword(G, PK, RL_DT_Q4_K, off, 0), u0 = t8_dword(G, PK, RL_DT_Q4_K, off, 4),
		      u1 = t8_dword(G, PK, RL_DT_Q4_K, off, 8), u2 = t8_dword(G, PK, RL_DT_Q4_K, off, 12);
	*d = f16_lo8(g);
	*dmin = f16_lo8(_mm256_srli_epi32(g, 16));
	/* byte j of s03: scale j; of s47: scale 4 + j (4 low bits from u2, 2 high from u0) */
	const __m256i s03 = _mm256_and_si256(u0, m6);
	const __m256i s47 = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(u0, 2), m30));
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		__m256i s = _mm256_and_si256(_mm256_srli_epi32(j < 4 ? s03 : s47, 8 * (j & 3)), lowb);
		scw[j] = _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
	}
	const __m256i m03 = _mm256_and_si256(u1, m6);
	const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
					    _mm256_and_si256(_mm256_srli_epi32(u1, 2), m30));
	P[0] = _mm256_and_si256(m03, mff);
	P[1] = _mm256_and_si256(_mm256_srli_epi32(m03, 8), mff);
	P[2] = _mm256_and_si256(m47, mff);
	P[3] = _mm256_and_si256(_mm256_srli_epi32(m47, 8), mff);
}

/* acc + dx * (d * M - dmin * sum_k P[k] . bq[k]): the integer sums M over a super-block,
 * and the mins term, meet the floats; bq[k] and dx per lane (an activation row's broadcast,
 * or a rotation's lanes: q4k_t8k_half with ROT) */
T256 AI __m256 q4k_t8_finish_v(__m256 acc, __m256i M, const __m256i *P, const __m256i *bq, __m256 d, __m256 dmin,
			       __m256 dx)
{
	__m256i mi = _mm256_madd_epi16(P[0], bq[0]);
#pragma GCC unroll 3
	for (int k = 1; k < 4; k++)
		mi = _mm256_add_epi32(mi, _mm256_madd_epi16(P[k], bq[k]));
	__m256 tt = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(mi), _mm256_mul_ps(d, _mm256_cvtepi32_ps(M)));
	return _mm256_fmadd_ps(tt, dx, acc);
}

/* q4k_t8_finish_v for one activation row (its min pairs bq[4], its dx) */
T256 AI __m256 q4k_t8_finish(__m256 acc, __m256i M, const __m256i *P, const int32_t *bq, __m256 d, __m256 dmin,
			     float dx)
{
	__m256i v[4];
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		v[k] = _mm256_set1_epi32(bq[k]);
	return q4k_t8_finish_v(acc, M, P, v, d, dmin, _mm256_set1_ps(dx));
}

/* Decode steps of 1..8 rows over Q4_K on AVX2, eight weight rows at a time, one output row
 * per lane (the layout of q4k_t16_group, without VNNI): each 32-byte run of q is 8 vectors of
 * the 8 rows' dwords (packed: loaded; else transposed, 8x8 dwords) and its nibbles kept in L1;
 * per activation row and sub-block, 8 vpmaddubsw (unsigned nibbles against broadcast
 * activations: 2 * 15 * 127 per word, so the 8 of a sub-block add up in int16 without
 * saturating), then one vpmaddwd by the lanes' 6-bit scale, which widens and scales at once.
 * The mins are q4k_t16_group's word pairs (vpmaddwd). One activation row takes this only
 * on packed groups (else the row-wise q4_k_tile), and there each nibble vector goes straight
 * into its vpmaddubsw (no unpacking pass through memory). */
T256 AI void q4k_t8_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			  const struct rl_wmat *W, const float *bias, const int NR, const int PK,
			  const struct t8g *G, uint32_t o, uint32_t l0, uint32_t n, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m256i q[8][8], scw[8];       /* sub-block j's nibbles, k-th dword of each row; its scales */
	/* the next group's rows, one contiguous run, into L2 a slice per block (a packed
	 * group's first half fetches for both) */
	const int pf = !PK || o % 16 == 0;
	const char *next = (const char *)W->data + (size_t)(PK ? o - o % 16 + 16 : o + 8) * rb;
	const size_t pfb = PK ? 16 * 144 : 8 * 144;
	__m256 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 144;
		if (pf)
			for (size_t l = 0; l < pfb; l += 64)
				_mm_prefetch(next + (size_t)b * pfb + l, _MM_HINT_T1);
		__m256 d, dmin;
		__m256i P[4];
		q4k_t8_head(G, PK, off, &d, &dmin, scw, P);
		/* one activation row: its sums here, M1 (storing a super-block's 64 nibble vectors
		 * for the rows to reload costs more than their one use); more: the nibbles into q */
		__m256i M1 = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int p = 0; p < 4; p++) {
			__m256i T[8];
			t8_run(G, PK, RL_DT_Q4_K, off, 16 + 32 * (size_t)p, T);
			if (NR == 1) {
				const i32u *xl = (const i32u *)(xk[0][b].q + 64 * p), *xh = xl + 8;
				__m256i sl = _mm256_setzero_si256(), sh = sl;
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++) {
					sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(_mm256_and_si256(T[k], m4),
										       _mm256_set1_epi32(xl[k])));
					sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(T[k], 4), m4),
										       _mm256_set1_epi32(xh[k])));
				}
				M1 = _mm256_add_epi32(M1, _mm256_add_epi32(_mm256_madd_epi16(sl, scw[2 * p]),
									   _mm256_madd_epi16(sh, scw[2 * p + 1])));
				continue;
			}
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) {
				q[2 * p][k] = _mm256_and_si256(T[k], m4);
				q[2 * p + 1][k] = _mm256_and_si256(_mm256_srli_epi16(T[k], 4), m4);
			}
		}
#pragma GCC unroll 1
		for (int r = 0; r < NR; r++) {
			const struct q8k *xb = &xk[r][b];
			__m256i M = M1;
			/* rolled, a sub-block a turn: the whole super-block unrolled was slower */
#pragma GCC unroll 1
			for (int j = 0; j < 8 && NR > 1; j++) {
				const i32u *x4 = (const i32u *)(xb->q + 32 * j);
				__m256i s = _mm256_maddubs_epi16(q[j][0], _mm256_set1_epi32(x4[0]));
#pragma GCC unroll 7
				for (int k = 1; k < 8; k++)
					s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[j][k], _mm256_set1_epi32(x4[k])));
				M = _mm256_add_epi32(M, _mm256_madd_epi16(s, scw[j]));
			}
			acc[r] = q4k_t8_finish(acc[r], M, P, bp + ((size_t)r * nb + b) * 4, d, dmin, xb->d);
		}
	}
	t8_store(Y, ldy, acc, NR, o, l0, n, bias, accumulate);
}

/* The 8 lanes' activations at dword t of block b for activation row r: its broadcast, or
 * with ROT rotation r of the 8 rows (struct q8kr: lane L meets row (L + r) % 8) */
T256 AI __m256i kq_act(const struct q8k *const *xk, const struct q8kr *xr, const int ROT, int r, uint32_t b, int t)
{
	return ROT ? _mm256_loadu_si256((const __m256i *)(xr[b].q[t] + r)) : _mm256_set1_epi32(((const i32u *)xk[r][b].q)[t]);
}

/* 2..8 rows over half a packed Q4_K group on AVX2: q4k_t8_group's arithmetic with the
 * sub-block and k outside and the rows inside, as q8_0_t8_group: each nibble vector is loaded
 * and masked once and meets every row's broadcast dword while the rows' 8 int16 sums stay in
 * registers (pinned as written: GCC reassociates them into spilling trees). With the rows
 * outside, the super-block's 64 nibble vectors went to the stack and each product cost a
 * reload beside its broadcast: 2 loads a vpmaddubsw where this takes 1 + 1/8. With ROT
 * (8 rows, xr) the sums are the rotations' and the activations plain loads (struct q8kr). */
T256 AI void q4k_t8k_half(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			  const struct q8kr *xr, const int ROT, const struct rl_wmat *W, const float *bias,
			  const int NR, const struct t8g *G, uint32_t o, uint32_t l0, uint32_t n, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const int pf = o % 16 == 0;
	const char *next = (const char *)W->data + (size_t)(o - o % 16 + 16) * rb;
	__m256 acc[8];
	__m256i M[8];                  /* the rows' (rotations') super-block sums (the compiler stores them) */
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 144;
		if (pf)
			for (size_t l = 0; l < 16 * 144; l += 64)
				_mm_prefetch(next + (size_t)b * 16 * 144 + l, _MM_HINT_T1);
		__m256 d, dmin;
		__m256i P[4], scw[8];
		q4k_t8_head(G, 1, off, &d, &dmin, scw, P);
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int j = 0; j < 8; j++) {
			const uint8_t *pk = G->pk + 16 * off + 64 * (size_t)pack_pos(RL_DT_Q4_K, 4 + 8 * (uint32_t)(j / 2));
			__m256i s[8];
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++)
				s[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) {
				const __m256i T = _mm256_loadu_si256((const __m256i *)(pk + 64 * k));
				const __m256i q = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(T, 4), m4) : _mm256_and_si256(T, m4);
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(q, kq_act(xk, xr, ROT, r, b, 8 * j + k)));
					__asm__("" : "+x"(s[r]));
				}
			}
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++)
				M[r] = _mm256_add_epi32(M[r], _mm256_madd_epi16(s[r], scw[j]));
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			if (!ROT) {
				acc[r] = q4k_t8_finish(acc[r], M[r], P, bp + ((size_t)r * nb + b) * 4, d, dmin, xk[r][b].d);
				continue;
			}
			__m256i bq[4];
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				bq[k] = _mm256_loadu_si256((const __m256i *)(xr[b].aux[k] + r));
			acc[r] = q4k_t8_finish_v(acc[r], M[r], P, bq, d, dmin, _mm256_loadu_ps(xr[b].d + r));
		}
	}
	t8_store_rows(Y, ldy, acc, ROT, NR, o, l0, n, bias, accumulate);
}

T256 AI void q4k_t8_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			 const struct q8kr *xr, const struct rl_wmat *W, const float *bias, const int NR,
			 uint32_t o0, uint32_t o1, int accumulate)
{
	/* packed halves of 2..8 rows: q4k_t8k_half; one row, or rows not packed: q4k_t8_group */
#define Q4K_T8(PK, G, o, l0, n) do {                                                               \
	if (PK && NR == 8 && xr)                                                                   \
		q4k_t8k_half(Y, ldy, xk, bp, xr, 1, W, bias, NR, G, o, l0, n, accumulate);         \
	else if (PK && NR > 1)                                                                     \
		q4k_t8k_half(Y, ldy, xk, bp, NULL, 0, W, bias, NR, G, o, l0, n, accumulate);       \
	else                                                                                       \
		q4k_t8_group(Y, ldy, xk, bp, W, bias, NR, PK, G, o, l0, n, accumulate);            \
} while (0)
	T8_GROUPS(Q4K_T8);
#undef Q4K_T8
}

/* bp: kq_aux's */
T256 static void q4k_rows_t8(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			     const struct q8kr *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
			     uint32_t o0, uint32_t o1, int accumulate)
{
	switch (nr) {
	case 1: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 1, o0, o1, accumulate); break;
	case 2: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 2, o0, o1, accumulate); break;
	case 3: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 3, o0, o1, accumulate); break;
	case 4: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 4, o0, o1, accumulate); break;
	case 5: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 5, o0, o1, accumulate); break;
	case 6: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 6, o0, o1, accumulate); break;
	case 7: q4k_t8_body(Y, ldy, xk, bp, NULL, W, bias, 7, o0, o1, accumulate); break;
	default: q4k_t8_body(Y, ldy, xk, bp, xr, W, bias, 8, o0, o1, accumulate); break;
	}
}

/* A Q6_K super-block's scales for the 8 rows of a packed half (at byte off of a row): scale j
 * of each row as a word in both halves of its lane (scw[16]), scales 2i, 2i + 1 as a word
 * pair (pair[8]); returns the rows' d (the half's 8 of the group's 16 f16 after its 52
 * vectors). The one owner of these, with q6k_t8_finish, for q6k_t8p_half and q6k_t8k_half. */
T256 AI __m256 q6k_t8_head(const struct t8g *G, size_t off, __m256i *scw, __m256i *pair)
{
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		const __m256i g = t8_dword(G, 1, RL_DT_Q6_K, off, 192 + 4 * (size_t)i);
		__m256i sc[4];
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			sc[c] = _mm256_srai_epi32(_mm256_slli_epi32(g, 24 - 8 * c), 24);
			scw[4 * i + c] = _mm256_blend_epi16(sc[c], _mm256_slli_epi32(sc[c], 16), 0xAA);
		}
		pair[2 * i] = _mm256_blend_epi16(sc[0], _mm256_slli_epi32(sc[1], 16), 0xAA);
		pair[2 * i + 1] = _mm256_blend_epi16(sc[2], _mm256_slli_epi32(sc[3], 16), 0xAA);
	}
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G->tl + 16 * off)));
}

/* acc + (M - 32 sum_j sc_j bsum_j) * ddx: the super-block sums M with the -32 offset taken
 * against the activations' sums of 16 (scale pairs against sum pairs bs[i], sums 2i, 2i + 1);
 * bs and ddx = d * dx per lane (an activation row's broadcast, or a rotation's lanes:
 * q6k_t8k_half with ROT) */
T256 AI __m256 q6k_t8_finish_v(__m256 acc, __m256i M, const __m256i *pair, const __m256i *bs, __m256 ddx)
{
	__m256i c = _mm256_madd_epi16(pair[0], bs[0]);
#pragma GCC unroll 7
	for (int i = 1; i < 8; i++)
		c = _mm256_add_epi32(c, _mm256_madd_epi16(pair[i], bs[i]));
	__m256i t = _mm256_sub_epi32(M, _mm256_slli_epi32(c, 5));
	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), ddx, acc);
}

/* q6k_t8_finish_v for one activation row's block xb */
T256 AI __m256 q6k_t8_finish(__m256 acc, __m256i M, const __m256i *pair, const struct q8k *xb, __m256 d)
{
	const i32u *bs = (const i32u *)xb->bsums;
	__m256i v[8];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		v[i] = _mm256_set1_epi32(bs[i]);
	return q6k_t8_finish_v(acc, M, pair, v, _mm256_mul_ps(d, _mm256_set1_ps(xb->d)));
}

/* The 6-bit q of run m (0..3) from a vector of low nibbles TL and one of 2-bit tops TH: the
 * low or high nibble, and the top at bits 2m moved to bits 4, 5 (m a constant where inlined,
 * so the shifts are immediates). The one AVX2 owner of Q6_K's recombination. */
T256 AI __m256i q6k_q8(__m256i TL, __m256i TH, const int m)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
	const __m256i lo = m >> 1 ? _mm256_srli_epi16(TL, 4) : TL;
	const __m256i top = m == 0 ? _mm256_slli_epi16(TH, 4) : m == 1 ? _mm256_slli_epi16(TH, 2) :
			    m == 2 ? TH : _mm256_srli_epi16(TH, 2);
	return _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(top, m30));
}

/* One activation row over packed Q6_K groups on AVX2 (2..8 rows: q6k_t8k_half), half a
 * group (eight rows) at a time, one output row per lane, the arithmetic of q6k_t16_group
 * without VNNI: the 6-bit q recombined from the loaded vectors (ql, qh), per sub-block of 16
 * two pairs of vpmaddubsw (q <= 63 and |x| <= 127: two of them still add up in int16), each pair
 * widened and scaled by one vpmaddwd by the lanes' int8 scale as words; the -32 offset is
 * -32 sum_j sc_j bsum_j, 8 vpmaddwd of scale pairs against the activations' sums per block.
 * Rows outside packed groups stay with the row-wise q6_k_tile. */
T256 AI void q6k_t8p_half(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			  const struct t8g *G, uint32_t o, uint32_t l0, uint32_t n, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256, h2 = o % 16 / 8;   /* which half of its group */
	const char *next = (const char *)W->data + (size_t)(o - o % 16 + 16) * rb;
	__m256i scw[16], pair[8];
	__m256 acc = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 210;
		const __m256 d = q6k_t8_head(G, off, scw, pair);
		__m256i M = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int h = 0; h < 2; h++) {
			__m256i TH[8], TL[8], Q[8];
			t8_run(G, 1, RL_DT_Q6_K, off, 128 + 32 * (size_t)h, TH);
#pragma GCC unroll 1
			for (int run = 0; run < 2; run++) {
				if (h2 == 0)   /* the next group, a quarter block at a time */
					for (size_t l = 0; l < 840; l += 64)
						_mm_prefetch(next + 16 * off + 840 * (size_t)(2 * h + run) + l, _MM_HINT_T1);
				t8_run(G, 1, RL_DT_Q6_K, off, 64 * (size_t)h + 32 * (size_t)run, TL);
#pragma GCC unroll 2
				for (int hi = 0; hi < 2; hi++) {
					const int m = run + 2 * hi;     /* weights 128h + 32m .. + 31 */
#pragma GCC unroll 8
					for (int k = 0; k < 8; k++) {
						Q[k] = q6k_q8(TL[k], TH[k], m);
					}
					const int j = 8 * h + 2 * m;         /* sub-blocks j, j + 1 */
					const i32u *x4 = (const i32u *)(x[b].q + 16 * j);
					__m256i s[4];
#pragma GCC unroll 4
					for (int k = 0; k < 4; k++)
						s[k] = _mm256_add_epi16(_mm256_maddubs_epi16(Q[2 * k], _mm256_set1_epi32(x4[2 * k])),
									_mm256_maddubs_epi16(Q[2 * k + 1], _mm256_set1_epi32(x4[2 * k + 1])));
					M = _mm256_add_epi32(M, _mm256_add_epi32(
						_mm256_add_epi32(_mm256_madd_epi16(s[0], scw[j]), _mm256_madd_epi16(s[1], scw[j])),
						_mm256_add_epi32(_mm256_madd_epi16(s[2], scw[j + 1]), _mm256_madd_epi16(s[3], scw[j + 1]))));
				}
			}
		}
		acc = q6k_t8_finish(acc, M, pair, &x[b], d);
	}
	t8_store(Y, 0, &acc, 1, o, l0, n, bias, accumulate);
}

/* The 6-bit q of 32-weight run m (0..3) of a packed Q6_K half block at dwords k, k + 1 (tl: its
 * low nibbles' run at dword k, th: the tops' at dword k): the low or high nibble, and the
 * 2-bit top at bits 2m shifted to bits 4, 5 by immediates (m a constant where inlined: a
 * shift by a register count costs more on Zen 4) */
T256 AI void q6k_t8_q(const uint8_t *tl, const uint8_t *th, const int m, __m256i *Q)
{
#pragma GCC unroll 2
	for (int e = 0; e < 2; e++)
		Q[e] = q6k_q8(_mm256_loadu_si256((const __m256i *)(tl + 64 * e)),
			      _mm256_loadu_si256((const __m256i *)(th + 64 * e)), m);
}

/* 2..8 rows over half a packed Q6_K group on AVX2: q6k_t8p_half's arithmetic with k outside
 * and the rows inside (as q4k_t8k_half): each pair of recombined 6-bit vectors meets every
 * row's two broadcast dwords while the rows' int32 sums stay in registers. The four 32-weight
 * runs of a half are unrolled inside a rolled loop over dword pairs, so that their shifts are
 * immediates (q6k_t8_q) and the super-block's code still fits (unrolled whole, GCC spilled).
 * With ROT (8 rows, xr) the sums are the rotations' and the activations plain loads (struct
 * q8kr). */
T256 AI void q6k_t8k_half(float *Y, size_t ldy, const struct q8k *const *xk, const struct q8kr *xr, const int ROT,
			  const struct rl_wmat *W, const float *bias, const int NR, const struct t8g *G, uint32_t o,
			  uint32_t l0, uint32_t n, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256, h2 = o % 16 / 8;   /* which half of its group */
	const char *next = (const char *)W->data + (size_t)(o - o % 16 + 16) * rb;
	__m256i scw[16], pair[8];
	__m256 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 210;
		const __m256 d = q6k_t8_head(G, off, scw, pair);
		__m256i M[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int h = 0; h < 2; h++) {
			const uint8_t *blk = G->pk + 16 * off;
			const uint8_t *th = blk + 64 * (size_t)pack_pos(RL_DT_Q6_K, (128 + 32 * (uint32_t)h) / 4);
			const uint8_t *tl[2] = { blk + 64 * (size_t)pack_pos(RL_DT_Q6_K, 16 * (uint32_t)h),
						 blk + 64 * (size_t)pack_pos(RL_DT_Q6_K, 16 * (uint32_t)h + 8) };
#pragma GCC unroll 1
			for (int k = 0; k < 8; k += 2) {
				if (h2 == 0)   /* the next group, an eighth of a block at a time */
					for (size_t l = 0; l < 420; l += 64)
						_mm_prefetch(next + 16 * off + 420 * (size_t)(4 * h + k / 2) + l, _MM_HINT_T1);
#pragma GCC unroll 4
				for (int m = 0; m < 4; m++) {
					const int j = 8 * h + 2 * m;    /* weights 128h + 32m .. + 31: sub-blocks j, j + 1 */
					__m256i Q[2];
					q6k_t8_q(tl[m & 1] + 64 * k, th + 64 * k, m, Q);
					const __m256i sc = scw[j + k / 4];
#pragma GCC unroll 8
					for (int r = 0; r < NR; r++) {
						__m256i t = _mm256_add_epi16(
							_mm256_maddubs_epi16(Q[0], kq_act(xk, xr, ROT, r, b, 4 * j + k)),
							_mm256_maddubs_epi16(Q[1], kq_act(xk, xr, ROT, r, b, 4 * j + k + 1)));
						M[r] = _mm256_add_epi32(M[r], _mm256_madd_epi16(t, sc));
						__asm__("" : "+x"(M[r]));
					}
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			if (!ROT) {
				acc[r] = q6k_t8_finish(acc[r], M[r], pair, &xk[r][b], d);
				continue;
			}
			__m256i bs[8];
#pragma GCC unroll 8
			for (int i = 0; i < 8; i++)
				bs[i] = _mm256_loadu_si256((const __m256i *)(xr[b].aux[i] + r));
			acc[r] = q6k_t8_finish_v(acc[r], M[r], pair, bs, _mm256_mul_ps(d, _mm256_loadu_ps(xr[b].d + r)));
		}
	}
	t8_store_rows(Y, ldy, acc, ROT, NR, o, l0, n, bias, accumulate);
}

/* o0 .. o1 inside W->packed_rows */
T256 static void q6k_rows_t8p(float *Y, size_t ldy, const struct q8k *const *xk, const struct q8kr *xr,
			      const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
			      int accumulate)
{
#define Q6K_T8(NR) do {                                                                            \
	for (uint32_t o = o0; o < o1;) {                                                           \
		struct t8g G;                                                                      \
		const uint32_t s = t8_half(W, o, &G), n = o1 - s < 8 ? o1 - s : 8;                 \
		if (NR == 8 && xr)                                                                 \
			q6k_t8k_half(Y, ldy, xk, xr, 1, W, bias, NR, &G, s, o - s, n, accumulate); \
		else if (NR > 1)                                                                   \
			q6k_t8k_half(Y, ldy, xk, NULL, 0, W, bias, NR, &G, s, o - s, n, accumulate); \
		else                                                                               \
			q6k_t8p_half(Y, xk[0], W, bias, &G, s, o - s, n, accumulate);              \
		o = s + n;                                                                         \
	}                                                                                          \
} while (0)
	switch (nr) {
	case 1: Q6K_T8(1); break;
	case 2: Q6K_T8(2); break;
	case 3: Q6K_T8(3); break;
	case 4: Q6K_T8(4); break;
	case 5: Q6K_T8(5); break;
	case 6: Q6K_T8(6); break;
	case 7: Q6K_T8(7); break;
	default: Q6K_T8(8); break;
	}
#undef Q6K_T8
}

/* Q6_K super-block (210 bytes, 256 weights): 128 bytes low 4 bits, 64 bytes high 2 bits,
 * 16 int8 scales (one per 16 weights), f16 d; w = d * sc * (q - 32). As ggml:
 * d*dx * (sum_j sc_j (q_j . xq_j) - 32 sum_j sc_j bsum_j), all in integers. */
T256 AI void q6_k_tile(const uint8_t *const *w, int nw, const struct q8k *const *x, int nr,
		       uint32_t nb, float *out)
{
	float acc[8];                  /* vector or scalar accumulators, as in q4_k_tile */
	__m256 vacc4[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
	const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
#pragma GCC unroll 8
	for (int k = 0; k < nw * nr; k++)
		acc[k] = 0;
	for (uint32_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
		for (int j = 0; j < nw; j++) {
			const uint8_t *blk = w[j] + (size_t)b * 210;
			for (int l = 0; l < 210; l += 64)
				_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
			const int8_t *sc = (const int8_t *)(blk + 192);
			float d = H2F(blk + 208);
			__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
			__m256i sumi[8];
#pragma GCC unroll 8
			for (int r = 0; r < nr; r++) {
				/* the offset: 32 * sum_j sc_j bsum_j, subtracted from the start */
				__m256i o = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[r][b].bsums));
				sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(o, 5));
			}
			for (int h = 0; h < 2; h++) {                  /* 128 weights: four sub-blocks */
				const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
				const int8_t *s = sc + 8 * h;
				__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
				__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
				__m256i hv = _mm256_loadu_si256((const __m256i *)qh);
				__m256i q[4];
				q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
						       _mm256_slli_epi16(_mm256_and_si256(hv, low2), 4));
				q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), low2), 4));
				q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), low2), 4));
				q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), low2), 4));
#pragma GCC unroll 4
				for (int k = 0; k < 4; k++) {
					/* sub-block k: weights 32k..32k+31 of this half; scales s[2k], s[2k+1]
					 * for its two 16s (the 128-bit lanes of the maddubs result) */
					__m256i scv = _mm256_setr_m128i(_mm_set1_epi16(s[2 * k]), _mm_set1_epi16(s[2 * k + 1]));
#pragma GCC unroll 8
					for (int r = 0; r < nr; r++) {
						const int8_t *xq = x[r][b].q + 128 * h + 32 * k;
						__m256i p16 = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)xq));
						sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p16, scv));
					}
				}
			}
#pragma GCC unroll 8
			for (int r = 0; r < nr; r++) {
				if (nw * nr <= 4)
					vacc4[j * nr + r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r][b].d), _mm256_cvtepi32_ps(sumi[r]),
									    vacc4[j * nr + r]);
				else
					acc[j * nr + r] += d * x[r][b].d * (float)hsum_i32(sumi[r]);
			}
		}
	}
#pragma GCC unroll 8
	for (int k = 0; k < nw * nr; k++)
		out[k] = nw * nr <= 4 ? hsum_ps(vacc4[k]) : acc[k];
}

/* Y[r, o + j] (=, or +=) res[j * nr + r] (+ bias[o + j]) for nw weight rows x nr activation
 * rows: where the tile-at-a-time dot paths put their sums */
static inline void put_dots(float *Y, size_t ldy, const float *res, int nw, uint32_t nr, uint32_t o,
			    const float *bias, int accumulate)
{
	for (int j = 0; j < nw; j++)
		for (uint32_t r = 0; r < nr; r++) {
			float v = res[j * nr + r] + (bias ? bias[o + j] : 0);
			float *y = Y + (size_t)r * ldy + o + j;
			*y = accumulate ? *y + v : v;
		}
}

/* ------------------------------------------------------------ float dots --------- */

/* 8 weights of a 16-bit row at element i, widened to fp32 */
T256 AI __m256 ld8_f16(const uint16_t *w) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w)); }
T256 AI __m256 ld8_bf16(const uint16_t *w)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w)), 16));
}

/* the AVX-512 widths: 16 weights widened per load (rows of a multiple of 16) */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
T512 AI __m512 ld16_f16(const uint16_t *w) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w)); }
T512 AI __m512 ld16_bf16(const uint16_t *w)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w)), 16));
}


/* One activation row over Q4_K weights on AVX-512BW: q4_k_tile's arithmetic 64 weights per
 * instruction (a super-block's two sub-blocks of one 32-byte load side by side in a zmm, their
 * two scales as the halves of one word vector), four weight rows at a time. */
T512 static void q4k_rows512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			     uint32_t o0, uint32_t o1, int accumulate)
{
	const uint8_t *base = W->data;
	uint32_t nb = W->cols / 256;
	const __m256i low4 = _mm256_set1_epi8(0x0F);
	/* word lanes 0-15 take scale 2p, 16-31 scale 2p + 1, from the 8 scales as words */
	__m512i sidx[4];
	for (int p = 0; p < 4; p++)
		sidx[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * p))),
					     _mm256_set1_epi16((short)(2 * p + 1)), 1);
	for (uint32_t o = o0; o < o1;) {
		int nw = o + 4 <= o1 ? 4 : 1;
		__m512 vacc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
		float mins[4] = { 0, 0, 0, 0 };
		for (uint32_t b = 0; b < nb; b++) {
			const struct q8k *xb = &x[b];
			/* the 8 sums of 32 activations, for the mins */
			__m128i b16 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb->bsums),
						     _mm_loadu_si128((const __m128i *)(xb->bsums + 8)));
			__m512i xv[4];
			for (int p = 0; p < 4; p++)
				xv[p] = _mm512_loadu_si512((const void *)(xb->q + 64 * p));
			for (int j = 0; j < nw; j++) {
				const uint8_t *blk = base + (size_t)(o + j) * W->row_bytes + (size_t)b * 144;
				for (int l = 0; l < 144; l += 64)
					_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
				uint8_t sc[8], mn[8];
				q4_k_scales(blk + 4, sc, mn);
				__m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
				__m512i sum = _mm512_setzero_si512();
				for (int p = 0; p < 4; p++) {
					__m256i qv = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * p));
					__m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qv, low4)),
								       _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4), 1);
					__m512i s16 = _mm512_permutexvar_epi16(sidx[p], sc16);
					sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(w, xv[p]), s16));
				}
				__m128i pm = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn)), b16);
				pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0x4e));
				pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 0xb1));
				float d = H2F(blk), dmin = H2F(blk + 2);
				vacc[j] = _mm512_fmadd_ps(_mm512_set1_ps(d * xb->d), _mm512_cvtepi32_ps(sum), vacc[j]);
				mins[j] += dmin * xb->d * (float)_mm_cvtsi128_si32(pm);
			}
		}
		for (int j = 0; j < nw; j++) {
			float v = _mm512_reduce_add_ps(vacc[j]) - mins[j] + (bias ? bias[o + j] : 0);
			Y[o + j] = accumulate ? Y[o + j] + v : v;
		}
		o += (uint32_t)nw;
	}
}

/* One activation row over Q6_K weights on AVX-512BW: q6_k_tile's arithmetic 64 weights per
 * instruction (two of its 32-weight vectors side by side; the four 16-weight scales of a zmm
 * spread over its four 128-bit lanes), four weight rows at a time. */
T512 static void q6k_rows512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			     uint32_t o0, uint32_t o1, int accumulate)
{
	const uint8_t *base = W->data;
	uint32_t nb = W->cols / 256;
	const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
	__m512i sidx[4];                       /* lane L of vector m takes scale 4m + L */
	for (int m = 0; m < 4; m++) {
		short t[32];
		for (int i = 0; i < 32; i++)
			t[i] = (short)(4 * m + i / 8);
		sidx[m] = _mm512_loadu_si512((const void *)t);
	}
	for (uint32_t o = o0; o < o1;) {
		int nw = o + 4 <= o1 ? 4 : 1;
		__m512 vacc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
		for (uint32_t b = 0; b < nb; b++) {
			const struct q8k *xb = &x[b];
			__m512i xv[4];
			for (int p = 0; p < 4; p++)
				xv[p] = _mm512_loadu_si512((const void *)(xb->q + 64 * p));
			__m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
			for (int j = 0; j < nw; j++) {
				const uint8_t *blk = base + (size_t)(o + j) * W->row_bytes + (size_t)b * 210;
				for (int l = 0; l < 210; l += 64)
					_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
				__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
				__m512i sc = _mm512_castsi256_si512(sc16);   /* the permutes read words 0-15 only */
				/* the offset first: -32 sum_j sc_j bsum_j */
				__m512i sum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(),
							_mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5)));
				for (int h = 0; h < 2; h++) {
					const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
					__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
					__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
					__m256i hv = _mm256_loadu_si256((const __m256i *)qh);
					__m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, low4),
								     _mm256_slli_epi16(_mm256_and_si256(hv, low2), 4));
					__m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, low4),
								     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), low2), 4));
					__m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
								     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), low2), 4));
					__m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
								     _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), low2), 4));
					__m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
					__m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(q2), q3, 1);
					sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(a, xv[2 * h]),
										      _mm512_permutexvar_epi16(sidx[2 * h], sc)));
					sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(c, xv[2 * h + 1]),
										      _mm512_permutexvar_epi16(sidx[2 * h + 1], sc)));
				}
				vacc[j] = _mm512_fmadd_ps(_mm512_set1_ps(H2F(blk + 208) * xb->d), _mm512_cvtepi32_ps(sum), vacc[j]);
			}
		}
		for (int j = 0; j < nw; j++) {
			float v = _mm512_reduce_add_ps(vacc[j]) + (bias ? bias[o + j] : 0);
			Y[o + j] = accumulate ? Y[o + j] + v : v;
		}
		o += (uint32_t)nw;
	}
}

T256 static float dot_f32_avx2(const float *a, const float *b, uint32_t n)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	float s = hsum_ps(_mm256_add_ps(s0, s1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static float dot_f32_scalar(const float *a, const float *b, uint32_t n)
{
	float s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* AVX512-BF16: activations rounded to bf16 once per call (to nearest even), two products per
 * fp32 lane per instruction (vdpbf16ps) against bf16 weights: twice the multiply-adds of an
 * fp32 FMA, for 8 significant bits in each activation, the trade ggml makes on such CPUs.
 * A 4x4 tile (16 accumulators of the 32 registers); rows of a multiple of 32. */
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
TBF AI void dpbf_tile(float *Y, size_t ldy, const uint16_t *X, size_t ldx, const uint16_t *W, size_t ldw,
		      const float *bias, uint32_t in, const int NR, const int NC, int accumulate)
{
	__m512 acc[4][4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (uint32_t i = 0; i < in; i += 32) {
		__m512bh x[4];
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++)
			x[r] = (__m512bh)_mm512_loadu_si512((const void *)(X + r * ldx + i));
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			__m512bh w = (__m512bh)_mm512_loadu_si512((const void *)(W + (size_t)c * ldw + i));
#pragma GCC unroll 4
			for (int r = 0; r < NR; r++)
				acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x[r], w);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
		for (int c = 0; c < NC; c++) {
			float v = _mm512_reduce_add_ps(acc[r][c]) + (bias ? bias[c] : 0);
			float *y = Y + r * ldy + c;
			*y = accumulate ? *y + v : v;
		}
}

/* Y[r, o] for o in [o0, o1) from bf16 activation rows X [n, ldx] and bf16 weight rows W [*, in]:
 * 64 activation rows at a time against 4 weight rows (a tile of them stays in L1 while the rows
 * pass); rows longer than 768 inputs in slices of 512, as the fp32 GEMMs. */
TBF static void gemm_dpbf(float *Y, size_t ldy, const uint16_t *X, size_t ldx, const uint16_t *W,
			  const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc)
{
	uint32_t ks = in <= 768 ? in : 512;
	for (uint32_t k = 0; k < in; k += ks) {
		uint32_t len = in - k < ks ? in - k : ks;
		const float *bk = k ? NULL : bias;
		int ak = k ? 1 : acc;
		for (uint32_t rb = 0; rb < n; rb += 64) {
			uint32_t re = rb + 64 < n ? rb + 64 : n;
			for (uint32_t o = o0; o < o1;) {
				int nc = o + 4 <= o1 ? 4 : 1;
				const uint16_t *w = W + (size_t)o * in + k;
				const float *b = bk ? bk + o : NULL;
				for (uint32_t r = rb; r < re;) {
					uint32_t nr = re - r < 4 ? re - r : 4;
					float *y = Y + r * ldy + o;
					const uint16_t *x = X + r * ldx + k;
#define DPBF(R, C) dpbf_tile(y, ldy, x, ldx, w, in, b, len, R, C, ak)
					if (nc == 4)
						nr == 4 ? DPBF(4, 4) : nr == 3 ? DPBF(3, 4) : nr == 2 ? DPBF(2, 4) : DPBF(1, 4);
					else
						nr == 4 ? DPBF(4, 1) : nr == 3 ? DPBF(3, 1) : nr == 2 ? DPBF(2, 1) : DPBF(1, 1);
#undef DPBF
					r += nr;
				}
				o += nc;
			}
		}
	}
}

/* fp32 -> bf16, nearest even (n a multiple of 32) */
TBF static void to_bf16_avx512(uint16_t *o, const float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 32)
		_mm512_storeu_si512((void *)(o + i), (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16),
										  _mm512_loadu_ps(x + i)));
}

/* ------------------------------------------------------------ 2..8 rows, VNNI ---- */

/* Decode steps of 2..8 rows over Q8_0 on AVX512-VNNI, sixteen weight rows at a time, one
 * output row per lane. A weight block of 16 rows is loaded (packed; else transposed in
 * registers) so that vector k holds bytes 4k..4k+3 of each row; vpdpbusd against bytes 4k..4k+3 of an
 * activation block (broadcast from memory) then adds that block's 4-byte partial dot of all 16
 * rows, and 8 of them make 16 whole block dots, which the block scales meet in one convert,
 * multiply and FMA. Per activation row that is 11 instructions for 16 row-blocks (512
 * multiply-adds), where a dot along the row (one vpdpbusd per two blocks, then convert,
 * scale and FMA for each) takes 32; a transpose (24 shuffles) is shared by all the rows.
 * vpdpbusd multiplies unsigned by signed bytes: the weights go in as w + 128 (a sign flip of
 * the top bit), and each activation block's 128 * sum(x) seeds its sum negated. */
#define TVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
/* The next group of 16 rows is prefetched a slice per block, into L2 (measured on the Zen 4
 * VM, 2048x768 matrices from DRAM: Q8_0 two rows 19-21 GB/s into L2, 17-18 into L1; Q6_K one
 * row 15-18 into L2, 10 into L1), except Q4_K at one or two activation rows, which goes 1.3x
 * faster into L1; from four rows the longer work per block lets L1 evict the lines before
 * they are used, so those go into L2 like the rest (figures in
 * bench/results/cpu-kernel-decisions-2026-11.md). */
#define T16_PREFETCH(p, l1) do { if (l1) _mm_prefetch((p), _MM_HINT_T0); else _mm_prefetch((p), _MM_HINT_T1); } while (0)

/* The 16-row groups of the AVX-512 lane-per-row kernels: rp[l] = row o + l, a group past o1
 * repeating its last row (whose lanes t16_store leaves alone); the result, each row's byte
 * offset from rp[0], for gathers. */
TVNNI AI __m512i t16_rows(const struct rl_wmat *W, uint32_t o, uint32_t o1, const uint8_t **rp)
{
	int32_t idx[16];
	for (uint32_t l = 0; l < 16; l++) {
		uint32_t row = o + l < o1 ? o + l : o1 - 1;
		rp[l] = (const uint8_t *)W->data + (size_t)row * W->row_bytes;
		idx[l] = (int32_t)((size_t)(row - o) * W->row_bytes);
	}
	return _mm512_loadu_si512((const void *)idx);
}

/* Y[r, o + L] (=, or +=) lane L of acc[r] (+ bias[o + L]) for the lanes L in m */
TVNNI AI void t16_store(float *Y, size_t ldy, const __m512 *acc, const int NR, uint32_t o, __mmask16 m,
			const float *bias, int accumulate)
{
	const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + o) : _mm512_setzero_ps();
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++) {
		float *y = Y + (size_t)r * ldy + o;
		__m512 v = _mm512_add_ps(acc[r], bv);
		if (accumulate)
			v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y));
		_mm512_mask_storeu_ps(y, m, v);
	}
}

/* lanes [l0, l1) of a group */
static inline __mmask16 t16_lanes(uint32_t l0, uint32_t l1)
{
	return (__mmask16)(((1u << l1) - 1) & ~((1u << l0) - 1));
}

/* T[k], lane L = bytes off+4k .. off+4k+3 of row rp[L] (32 bytes of each of 16 rows,
 * transposed in registers). */
TVNNI AI void t16_load(const uint8_t *const *rp, size_t off, __m512i *T)
{
	/* z[l]: rows l and l+4 (l < 4), rows l+4 and l+8 (l >= 4), so that the transpose below
	 * leaves lane L = row L */
	__m512i z[8], t[8], u[8];
#pragma GCC unroll 8
	for (int l = 0; l < 8; l++) {
		int ra = l < 4 ? l : l + 4, rb = ra + 4;
		z[l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rp[ra] + off))),
					  _mm256_loadu_si256((const __m256i *)(rp[rb] + off)), 1);
	}
	/* 8x8 dword transposes in each 256-bit half, then the halves to their lanes */
#pragma GCC unroll 4
	for (int l = 0; l < 8; l += 2) {
		t[l] = _mm512_unpacklo_epi32(z[l], z[l + 1]);
		t[l + 1] = _mm512_unpackhi_epi32(z[l], z[l + 1]);
	}
#pragma GCC unroll 2
	for (int h = 0; h < 8; h += 4) {
		u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
		u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
		u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
		u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		T[k] = _mm512_shuffle_i32x4(u[k], u[k + 4], 0x88);
		T[k + 4] = _mm512_shuffle_i32x4(u[k], u[k + 4], 0xdd);
	}
}

/* ------------------------------------------------------------ 16-bit panels ------ */

/* F16 and BF16 matrices repacked (rl_cpu_wmat_pack; the layout is in cpu_ops.h): rows in
 * blocks of H16_BW, then of 16, then the rest, each block at data + o * row_bytes holding
 * [cols][width] halfs, so that the weights of `width` consecutive output rows at one
 * input k are one run of memory. The kernels then broadcast an activation and multiply it
 * into whole vectors of outputs, the outer-product form of a GEMM micro-kernel: no horizontal
 * sums at the end, and a block is one sequential stream whatever the batch (48-row blocks:
 * three 16-row blocks a step are read as three streams, which the prefetcher follows worse). */
#define H16_BW 48

/* whether W's packed rows are 16-bit panels (else packed block groups: Q8_0, K-quants; or none) */
static inline int h16_packed(const struct rl_wmat *W)
{
	return W->packed_rows && (W->dtype == RL_DT_F16 || W->dtype == RL_DT_BF16);
}

/* width of the block holding row o, and that block's first row: 48, then 16, then the last
 * rows % 16 */
static inline uint32_t h16_block(const struct rl_wmat *W, uint32_t o, uint32_t *b0)
{
	const uint32_t p16 = W->rows / 16 * 16, p48 = W->rows / H16_BW * H16_BW;
	const uint32_t w = o < p48 ? H16_BW : o < p16 ? 16 : W->rows - p16;
	*b0 = o < p16 ? o - o % w : p16;
	return w;
}

/* y[0 .. 8) or [0 .. 16) (=, or +=) s (+ b[..]): where the panel kernels put a vector of sums
 * (put16 on AVX-512F alone, so that both the F16C and the AVX512-BF16 kernels inline it) */
T256 AI void put8(float *y, __m256 s, const float *b, int accumulate)
{
	if (b)
		s = _mm256_add_ps(s, _mm256_loadu_ps(b));
	_mm256_storeu_ps(y, accumulate ? _mm256_add_ps(s, _mm256_loadu_ps(y)) : s);
}
__attribute__((target("avx512f"))) AI void put16(float *y, __m512 s, const float *b, int accumulate)
{
	if (b)
		s = _mm512_add_ps(s, _mm512_loadu_ps(b));
	_mm512_storeu_ps(y, accumulate ? _mm512_add_ps(s, _mm512_loadu_ps(y)) : s);
}

/* Y[r, 0 .. NV*VW) (=, or +=) the NR activation rows against NV vectors of outputs of a block:
 * blk the block's first weight of those outputs (bw halfs per input), xt the activations
 * with input k of row r at xt[k * xs + r]; pf, pfs: prefetch pf + k * pfs at input k (or
 * NULL). TGT/V/VW/LD/BCAST/FMA/ZERO/PUT: the vector width's target, type, lanes, widening
 * load, broadcast, fp32 operations and put8/put16. */
#define DEFINE_H16_PANEL(NAME, TGT, V, VW, LD, BCAST, FMA, ZERO, PUT)                           \
TGT AI void NAME(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw, \
		 uint32_t K, const int NR, const int NV, const float *bias, int accumulate,           \
		 const char *pf, uint32_t pfs)                                                          \
{                                                                                                \
	V acc[8][6], w[6];                                                                       \
	_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)                                     \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			acc[r][v] = ZERO();                                                      \
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {                                  \
		if (pf)                                                                          \
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);                          \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			w[v] = LD(blk + v * VW);                                                 \
		_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {                           \
			V x = BCAST(xt[r]);                                                      \
			_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                     \
				acc[r][v] = FMA(w[v], x, acc[r][v]);                             \
		}                                                                                \
	}                                                                                        \
	_Pragma("GCC unroll 8") for (int r = 0; r < NR; r++)                                     \
		_Pragma("GCC unroll 6") for (int v = 0; v < NV; v++)                             \
			PUT(Y + (size_t)r * ldy + v * VW, acc[r][v], bias ? bias + v * VW : NULL, accumulate); \
}
DEFINE_H16_PANEL(h16_panel256, T256, __m256, 8, ld8_f16, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, put8)
DEFINE_H16_PANEL(h16_panel512, T512, __m512, 16, ld16_f16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, put16)
DEFINE_H16_PANEL(bf16_panel256, T256, __m256, 8, ld8_bf16, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, put8)
DEFINE_H16_PANEL(bf16_panel512, T512, __m512, 16, ld16_bf16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, put16)

/* y[0 .. 16) (=, or +=) the sums of the even outputs e (0, 2, .., 14) and odd outputs o put
 * back in order (+ b[..]) */
T256 AI void put_pair(float *y, __m256 e, __m256 o, const float *b, int accumulate)
{
	const __m256 lo = _mm256_unpacklo_ps(e, o), up = _mm256_unpackhi_ps(e, o);
	put8(y, _mm256_permute2f128_ps(lo, up, 0x20), b, accumulate);
	put8(y + 8, _mm256_permute2f128_ps(lo, up, 0x31), b ? b + 8 : NULL, accumulate);
}

/* AVX2 over a BF16 block, 2..4 rows: 16 outputs per 32-byte load, widened exactly into the
 * even outputs (0, 2, .., 14: a shift) and the odd ones (a mask), two operations where
 * ld8_bf16 takes four; the sums are put back in order at the end. Its 8 accumulators are just
 * the FMA's latency times its rate (4x3 pairs would not fit the 16 registers). Otherwise as
 * DEFINE_H16_PANEL with NV 2. */
T256 AI void bf16_pair256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			  uint32_t K, const int NR, const float *bias, int accumulate, const char *pf, uint32_t pfs)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256 ae[4], ao[4];
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		ae[r] = ao[r] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		const __m256i v = _mm256_loadu_si256((const __m256i *)blk);
		const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
		const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			const __m256 x = _mm256_set1_ps(xt[r]);
			ae[r] = _mm256_fmadd_ps(we, x, ae[r]);
			ao[r] = _mm256_fmadd_ps(wo, x, ao[r]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		put_pair(Y + (size_t)r * ldy, ae[r], ao[r], bias, accumulate);
}

/* One of bf16_tri256's two passes: B 0 takes outputs 0..15 (even and odd) and the even ones
 * of 16..31; B 1 the odd ones of 16..31 and 32..47. The mask is read from memory at each use
 * (an operand of vpand), since 12 accumulators, 3 weight vectors and a broadcast fill the 16
 * registers. */
T256 AI void bf16_tri_pass(__m256 (*a)[3], const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			   uint32_t K, const int NR, const int B, const char *pf, uint32_t pfs)
{
	static const uint32_t hi[8] __attribute__((aligned(32))) = {
		0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u };
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++)
		a[r][0] = a[r][1] = a[r][2] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < K; k++, blk += bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		const __m256i *m = (const __m256i *)hi;
		__asm__("" : "+r"(m));         /* not hoisted into a register */
		const __m256i v1 = _mm256_loadu_si256((const __m256i *)(blk + 16));
		const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + (B ? 32 : 0)));
		__m256 w[3];
		if (B) {
			w[0] = _mm256_castsi256_ps(_mm256_and_si256(v1, *m));
			w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
			w[2] = _mm256_castsi256_ps(_mm256_and_si256(v, *m));
		} else {
			w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
			w[1] = _mm256_castsi256_ps(_mm256_and_si256(v, *m));
			w[2] = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
		}
#pragma GCC unroll 4
		for (int r = 0; r < NR; r++) {
			const __m256 x = _mm256_set1_ps(xt[r]);
#pragma GCC unroll 3
			for (int j = 0; j < 3; j++)
				a[r][j] = _mm256_fmadd_ps(w[j], x, a[r][j]);
		}
	}
}

/* AVX2 over a whole 48-row BF16 block, 2..4 rows: bf16_pair256's even/odd widening with 12
 * accumulators instead of 8, in two passes of 24 outputs (two pairs split as 1.5 + 1.5; the
 * even sums of the middle pair wait in mid[] for their odd ones). One operation widens 8
 * outputs, as in the pairs, and 12 FMAs in flight cover their latency (4 cycles at 2 a cycle),
 * where the pairs' 8 just do. Arguments as DEFINE_H16_PANEL; pass B prefetches pf + pfs * K
 * on, the share after pass A's. */
T256 AI void bf16_tri256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			 uint32_t K, const int NR, const float *bias, int accumulate, const char *pf, uint32_t pfs)
{
	__m256 a[4][3], mid[4];
	bf16_tri_pass(a, xt, xs, blk, bw, K, NR, 0, pf, pfs);
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		put_pair(Y + (size_t)r * ldy, a[r][0], a[r][1], bias, accumulate);
		mid[r] = a[r][2];
	}
	bf16_tri_pass(a, xt, xs, blk, bw, K, NR, 1, pf ? pf + (size_t)pfs * K : NULL, pfs);
#pragma GCC unroll 4
	for (int r = 0; r < NR; r++) {
		put_pair(Y + (size_t)r * ldy + 16, mid[r], a[r][0], bias ? bias + 16 : NULL, accumulate);
		put_pair(Y + (size_t)r * ldy + 32, a[r][1], a[r][2], bias ? bias + 32 : NULL, accumulate);
	}
}

/* AVX512-BF16 over a BF16 block: the weights of 16 outputs at inputs k and k + 1 (two runs of
 * the block) interleaved in a register (vpermt2w) into the (k, k + 1) pairs that vdpbf16ps
 * multiplies against a broadcast pair of bf16 activations: 32 products an instruction, twice
 * the fp32 FMA's. xt holds row r's pair (k, k + 1) as the bits of xt[(k / 2) * xs + r]
 * (bf16 k in the low half); K even. Otherwise as DEFINE_H16_PANEL. */
TBF AI void dpbf_panel(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
		       uint32_t K, const int NR, const int NV, const float *bias, int accumulate,
		       const char *pf, uint32_t pfs)
{
	uint16_t ix[32];
	for (int i = 0; i < 16; i++) {
		ix[2 * i] = (uint16_t)i;              /* word i of the run at k */
		ix[2 * i + 1] = (uint16_t)(32 + i);   /* word i of the run at k + 1 */
	}
	const __m512i idx = _mm512_loadu_si512((const void *)ix);
	__m512 acc[8][3];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			acc[r][v] = _mm512_setzero_ps();
	for (uint32_t k = 0; k < K; k += 2, blk += 2 * bw, xt += xs) {
		if (pf)
			_mm_prefetch(pf + (size_t)k * pfs, _MM_HINT_T1);
		__m512bh w[3];
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			w[v] = (__m512bh)_mm512_permutex2var_epi16(
				_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 16 * v))), idx,
				_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + bw + 16 * v))));
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			__m512bh x = (__m512bh)_mm512_set1_ps(xt[r]);
#pragma GCC unroll 3
			for (int v = 0; v < NV; v++)
				acc[r][v] = _mm512_dpbf16_ps(acc[r][v], w[v], x);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
		for (int v = 0; v < NV; v++)
			put16(Y + (size_t)r * ldy + 16 * v, acc[r][v], bias ? bias + 16 * v : NULL, accumulate);
}

/* One group of nr (<= 8 on AVX-512, 4 on AVX2) activation rows against nv vectors of a block:
 * the dispatch to a kernel whose shape is a constant, so that its accumulators stay in
 * registers. nv: 1 or 3; on AVX2 also 6, a whole 48-row block (one row in one pass; BF16's
 * bf16_tri256), and for BF16 2 (bf16_pair256). */
enum h16_kind { H16_F16, H16_BF16, H16_DPBF };     /* the weights' type; vdpbf16ps on bf16 pairs */
#define H16_ARGS Y, ldy, xt, xs, blk, bw, K
#define H16_CALL(F, n, v) F(H16_ARGS, n, v, bias, acc, pf, pfs)
T512 static void h16_group512(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			      uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			      enum h16_kind kind)
{
#define P512(n) (kind == H16_F16 ? (nv == 3 ? H16_CALL(h16_panel512, n, 3) : H16_CALL(h16_panel512, n, 1)) \
			       : (nv == 3 ? H16_CALL(bf16_panel512, n, 3) : H16_CALL(bf16_panel512, n, 1)))
	switch (nr) {
	case 1: P512(1); break; case 2: P512(2); break; case 3: P512(3); break; case 4: P512(4); break;
	case 5: P512(5); break; case 6: P512(6); break; case 7: P512(7); break; default: P512(8); break;
	}
#undef P512
}
TBF static void dpbf_group(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			   uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			   enum h16_kind kind)
{
#define PBF(n) (nv == 3 ? H16_CALL(dpbf_panel, n, 3) : H16_CALL(dpbf_panel, n, 1))
	switch (nr) {
	case 1: PBF(1); break; case 2: PBF(2); break; case 3: PBF(3); break; case 4: PBF(4); break;
	case 5: PBF(5); break; case 6: PBF(6); break; case 7: PBF(7); break; default: PBF(8); break;
	}
#undef PBF
}
T256 static void h16_group256(float *Y, size_t ldy, const float *xt, size_t xs, const uint16_t *blk, uint32_t bw,
			      uint32_t K, uint32_t nr, uint32_t nv, const float *bias, int acc, const char *pf, uint32_t pfs,
			      enum h16_kind kind)
{
	const int f = kind == H16_F16;
	if (nv == 2) {                 /* BF16 only */
		switch (nr) {
		case 1: bf16_pair256(H16_ARGS, 1, bias, acc, pf, pfs); break;
		case 2: bf16_pair256(H16_ARGS, 2, bias, acc, pf, pfs); break;
		case 3: bf16_pair256(H16_ARGS, 3, bias, acc, pf, pfs); break;
		default: bf16_pair256(H16_ARGS, 4, bias, acc, pf, pfs); break;
		}
		return;
	}
	if (nr == 1 && nv == 6) {
		f ? H16_CALL(h16_panel256, 1, 6) : H16_CALL(bf16_panel256, 1, 6);
		return;
	}
	if (nv == 6) {                 /* BF16, a whole 48-row block */
		switch (nr) {
		case 2: bf16_tri256(H16_ARGS, 2, bias, acc, pf, pfs); break;
		case 3: bf16_tri256(H16_ARGS, 3, bias, acc, pf, pfs); break;
		default: bf16_tri256(H16_ARGS, 4, bias, acc, pf, pfs); break;
		}
		return;
	}
#define P256(n) (f ? (nv == 3 ? H16_CALL(h16_panel256, n, 3) : H16_CALL(h16_panel256, n, 1)) \
		   : (nv == 3 ? H16_CALL(bf16_panel256, n, 3) : H16_CALL(bf16_panel256, n, 1)))
	switch (nr) {
	case 1: P256(1); break; case 2: P256(2); break; case 3: P256(3); break; default: P256(4); break;
	}
#undef P256
}
#undef H16_CALL
#undef H16_ARGS

/* t[k * ng + r] = src[r * ld + k] for r < ng, k < n: ng rows of 32-bit elements, interleaved
 * for the panel kernels' broadcasts. Four or eight rows eight columns at a time in registers
 * (an element-wise loop is a visible share of a small decode step). */
T256 static void xpose32(float *t, const float *src, size_t ld, uint32_t ng, uint32_t n)
{
	uint32_t k = 0;
	if (ng == 4 || ng == 8)
		for (; k + 8 <= n; k += 8) {
			__m256 a[8], u[8];
#pragma GCC unroll 8
			for (uint32_t r = 0; r < ng; r++)
				a[r] = _mm256_loadu_ps(src + r * ld + k);
#pragma GCC unroll 2
			for (uint32_t h = 0; h < ng; h += 4) {     /* u[h + j]: columns j, j + 4 of rows h..h+3 */
				const __m256 t0 = _mm256_unpacklo_ps(a[h], a[h + 1]), t1 = _mm256_unpackhi_ps(a[h], a[h + 1]);
				const __m256 t2 = _mm256_unpacklo_ps(a[h + 2], a[h + 3]), t3 = _mm256_unpackhi_ps(a[h + 2], a[h + 3]);
				u[h] = _mm256_shuffle_ps(t0, t2, 0x44);
				u[h + 1] = _mm256_shuffle_ps(t0, t2, 0xee);
				u[h + 2] = _mm256_shuffle_ps(t1, t3, 0x44);
				u[h + 3] = _mm256_shuffle_ps(t1, t3, 0xee);
			}
			float *o = t + (size_t)k * ng;
			if (ng == 8)
#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					_mm256_storeu_ps(o + 8 * j, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
					_mm256_storeu_ps(o + 8 * (j + 4), _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
				}
			else
#pragma GCC unroll 2
				for (int j = 0; j < 2; j++) {           /* columns 2j, 2j + 1; then + 4 */
					_mm256_storeu_ps(o + 8 * j, _mm256_permute2f128_ps(u[2 * j], u[2 * j + 1], 0x20));
					_mm256_storeu_ps(o + 16 + 8 * j, _mm256_permute2f128_ps(u[2 * j], u[2 * j + 1], 0x31));
				}
		}
	for (; k < n; k++)
		for (uint32_t r = 0; r < ng; r++)
			t[(size_t)k * ng + r] = src[r * ld + k];
}

/* Y[r, o] for r < n_rows and the outputs o in [o0, o1) of a packed F16 or BF16 matrix.
 * Activation rows in chunks of 64, each transposed once into scratch as groups of G rows
 * ([in][G] floats each; bf16 pairs for vdpbf16ps; one fp32 row is read where it is); then
 * for each run of outputs, every group, so that the run's weights (48 rows x in halfs: 72 KB
 * at 768) are read from DRAM once per chunk and from L2 for the other groups. A vector may start at any
 * output of a block; the outputs short of one at a block's or the range's end are gathered
 * row by row. scratch: rl_cpu_qmatmul_scratch's. */
static void h16_panels(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		       const float *bias, uint32_t n_rows, uint32_t o0, uint32_t o1, int accumulate,
		       void *scratch)
{
	const int z = rl_cpu_isa() == RL_CPU_AVX512;
	const enum h16_kind kind = W->dtype == RL_DT_F16 ? H16_F16 :
				   rl_cpu_qmatmul_bf16_acts(W, n_rows) ? H16_DPBF : H16_BF16;
	void (*group)(float *, size_t, const float *, size_t, const uint16_t *, uint32_t, uint32_t, uint32_t,
		      uint32_t, const float *, int, const char *, uint32_t, enum h16_kind) =
		kind == H16_DPBF ? dpbf_group : z ? h16_group512 : h16_group256;
	const uint32_t in = W->cols, vw = z ? 16 : 8, G = z ? 8 : 4;
	float *xt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);   /* [64 * in] */
	float *row = xt + (size_t)64 * in;                                     /* [in] */
	for (uint32_t c0 = 0; c0 < n_rows; c0 += 64) {
		const uint32_t nc = n_rows - c0 < 64 ? n_rows - c0 : 64;
		const float *Xc = X + (size_t)c0 * ldx;
		float *Yc = Y + (size_t)c0 * ldy;
		const int direct = nc == 1 && kind != H16_DPBF;   /* one fp32 row is read where it is */
		if (!direct)
			for (uint32_t g = 0; g < nc; g += G) {
				const uint32_t ng = nc - g < G ? nc - g : G;
				float *t = xt + (size_t)g * in;
				if (kind == H16_DPBF) {
					/* bf16 pairs (k, k + 1): the rows rounded to bf16 (in the free
					 * upper half of this group's in * G floats), read as dwords */
					uint16_t *hb = (uint16_t *)(t + (size_t)in * G / 2);
					for (uint32_t r = 0; r < ng; r++)
						to_bf16_avx512(hb + (size_t)r * in, Xc + (size_t)(g + r) * ldx, in);
					xpose32(t, (const float *)hb, in / 2, ng, in / 2);
				} else {
					xpose32(t, Xc + (size_t)g * ldx, ldx, ng, in);
				}
			}
		for (uint32_t o = o0; o < o1;) {
			uint32_t b0, bw = h16_block(W, o, &b0);
			const uint32_t left = (b0 + bw < o1 ? b0 + bw : o1) - o;   /* in this block and range */
			if (left < vw) {               /* short of a vector: this output alone */
				rl_cpu_wmat_row(W, o, row);
				for (uint32_t r = 0; r < nc; r++) {
					float s = dot_f32_scalar(row, Xc + (size_t)r * ldx, in) + (bias ? bias[o] : 0);
					float *y = Yc + (size_t)r * ldy + o;
					*y = accumulate ? *y + s : s;
				}
				o++;
				continue;
			}
			uint32_t nv = left / vw >= 3 ? 3 : 1;
			if (!z && nc == 1 && left / vw >= 6)
				nv = 6;
			else if (!z && kind == H16_BF16 && !direct)   /* bf16_tri256, else bf16_pair256 */
				nv = left / vw >= 6 ? 6 : left / vw >= 2 ? 2 : 1;
			const uint16_t *blk = (const uint16_t *)W->data + (size_t)b0 * in + (o - b0);
			const float *b = bias ? bias + o : NULL;
			if (direct) {
				group(Yc + o, ldy, Xc, 1, blk, bw, in, 1, nv, b, accumulate, NULL, 0, kind);
				o += nv * vw;
				continue;
			}
			/* Several passes over a block (AVX2's two halves, or more groups): only the
			 * first reads DRAM, so the hardware prefetcher idles through the rest. Each
			 * pass prefetches its share of the next 48-row block. One pass needs none: a block is one
			 * stream. bf16_tri256 makes two passes a call (a one-row group's
			 * kernel one, over both shares). */
			const uint32_t per = nv == 6 && kind == H16_BF16 ? 2 : 1;
			const uint32_t groups = (nc + G - 1) / G, passes = bw / (nv * vw) * groups * per;
			const int pf_next = passes > 1 && b0 + 2 * bw <= W->rows / H16_BW * H16_BW;
			const uint32_t pfs = pf_next ? (2 * bw + passes - 1) / passes : 0;   /* bytes per input k */
			const char *next = (const char *)((const uint16_t *)W->data + (size_t)(b0 + bw) * in);
			for (uint32_t g = 0; g < nc; g += G) {
				const uint32_t ng = nc - g < G ? nc - g : G;
				const uint32_t pass = ((o - b0) / (nv * vw) * groups + g / G) * per;
				group(Yc + (size_t)g * ldy + o, ldy, xt + (size_t)g * in, ng, blk, bw, in, ng, nv, b, accumulate,
				      pf_next ? next + (size_t)pass * pfs * in : NULL, ng == 1 ? pfs * per : pfs, kind);
			}
			o += nv * vw;
		}
	}
}

/* ------------------------ rl_cpu_wmat_pack; the AVX-512 lane-per-row kernels ---- */

/* rl_cpu_wmat_pack over F16 and BF16: each block's rows transposed to [cols][width] in place */
static int h16_pack(struct rl_wmat *W)
{
	const uint32_t in = W->cols;
	uint16_t *tmp = malloc((size_t)H16_BW * in * 2);
	if (!tmp)
		return -ENOMEM;
	W->packed_rows = W->rows;
	for (uint32_t o = 0; o < W->packed_rows;) {
		uint32_t b0, bw = h16_block(W, o, &b0);
		uint16_t *blk = (uint16_t *)(uintptr_t)W->data + (size_t)o * in;
		memcpy(tmp, blk, (size_t)bw * in * 2);
		for (uint32_t j = 0; j < bw; j++)
			for (uint32_t k = 0; k < in; k++)
				blk[(size_t)k * bw + j] = tmp[(size_t)j * in + k];
		o += bw;
	}
	free(tmp);
	return 1;
}

uint32_t rl_cpu_wmat_grain(const struct rl_wmat *W)
{
	return !W->packed_rows ? 4 : h16_packed(W) ? H16_BW : 16;
}

int rl_cpu_wmat_pack(struct rl_wmat *W)
{
	if ((W->dtype == RL_DT_BF16 || (W->dtype == RL_DT_F16 && rl_cpu_has_f16c())) && W->rows >= 16 &&
	    !W->packed_rows && rl_cpu_isa() != RL_CPU_SCALAR)
		return h16_pack(W);
	const uint32_t ndw = pack_dwords(W->dtype);
	if (!ndw || W->rows < 16 || W->packed_rows || rl_cpu_isa() == RL_CPU_SCALAR || !rl_cpu_has_f16c())
		return 0;
	const size_t rb = W->row_bytes, bb = W->blk_bytes, tail = bb - 4 * ndw, hd = pack_head(W->dtype);
	const uint32_t nb = W->cols / W->blk_elems;
	uint8_t *src = malloc(16 * rb);
	if (!src)
		return -ENOMEM;
	for (uint32_t g = 0; g + 16 <= W->rows; g += 16) {
		uint8_t *grp = (uint8_t *)(uintptr_t)W->data + (size_t)g * rb;
		memcpy(src, grp, 16 * rb);
		for (uint32_t b = 0; b < nb; b++) {
			uint8_t *dst = grp + (size_t)b * 16 * bb;
			for (uint32_t L = 0; L < 16; L++) {
				const uint8_t *blk = src + L * rb + (size_t)b * bb;
				uint8_t *t = dst + 64 * ndw + L * tail;
				for (uint32_t j = 0; j < ndw; j++)
					memcpy(dst + 64 * pack_pos(W->dtype, j) + 4 * L, blk + hd + 4 * j, 4);
				memcpy(t, blk, hd);
				memcpy(t + hd, blk + hd + 4 * ndw, tail - hd);
			}
		}
	}
	free(src);
	W->packed_rows = W->rows / 16 * 16;
	return 1;
}

/* A 16-row group of the K-quant lane-per-row kernels. Packed (PK: rows o .. o+15 below
 * W->packed_rows, o % 16 == 0): dword j of the 16 rows' block b is the vector at
 * pk + b * 16 * blk_bytes + 64 j, loaded as it is. Else rows rp[] (t16_rows) whose blocks are
 * transposed in registers (t16_load) and gathered (vidx). */
struct t16g {
	const uint8_t *rp[16];
	const uint8_t *pk;
	__m512i vidx;
};

/* T[k], lane L = dword off/4 + k (k < 8) of row L's block of type dt at byte blk of a row
 * (b * blk_bytes) */
TVNNI AI void t16_run(const struct t16g *G, const int PK, const int dt, size_t blk, size_t off, __m512i *T)
{
	if (PK) {
		const uint8_t *p = G->pk + 16 * blk + 64 * (size_t)pack_pos(dt, (uint32_t)off / 4);
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			T[k] = _mm512_loadu_si512((const void *)(p + 64 * k));
	} else {
		t16_load(G->rp, blk + off, T);
	}
}

/* lane L = the dword at byte off of row L's block at blk (off % 4 == 0 when packed) */
TVNNI AI __m512i t16_dword(const struct t16g *G, const int PK, const int dt, size_t blk, size_t off)
{
	return PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk + 64 * (size_t)pack_pos(dt, (uint32_t)off / 4)))
		  : _mm512_i32gather_epi32(G->vidx, (const void *)(G->rp[0] + blk + off), 1);
}

/* The lines of [p, p + len), a slice of the next group's rows: one contiguous run in either
 * layout, fetched a quarter block at a time between the loads of this one (all of a block's
 * prefetches at once stalled the loads behind them: Q6_K one row from DRAM 14 -> 17-20 GB/s
 * spread, on the Zen 4 VM). */
TVNNI AI void t16_prefetch(const char *p, size_t len, int l1)
{
	for (const char *q = (const char *)((uintptr_t)p & ~(uintptr_t)63); q < p + len; q += 64)
		T16_PREFETCH(q, l1);
}

/* The groups covering [o0, o1): packed ones whole (lanes outside the range computed, not
 * stored), the rest as runs of 16 rows. GROUP(PK, G, o, m) does one: its first row o, the
 * lanes m to store. */
#define T16_GROUPS(GROUP) do {                                                                     \
	for (uint32_t o = o0; o < o1;) {                                                           \
		struct t16g G;                                                                     \
		if (o < W->packed_rows) {                                                          \
			const uint32_t g = o & ~15u, l1 = o1 - g < 16 ? o1 - g : 16;               \
			G.pk = (const uint8_t *)W->data + (size_t)g * W->row_bytes;                \
			GROUP(1, &G, g, t16_lanes(o - g, l1));                                     \
			o = g + l1;                                                                \
		} else {                                                                           \
			const uint32_t n = o1 - o < 16 ? o1 - o : 16;                              \
			G.vidx = t16_rows(W, o, o + n, G.rp);                                      \
			GROUP(0, &G, o, t16_lanes(0, n));                                          \
			o += n;                                                                    \
		}                                                                                  \
	}                                                                                          \
} while (0)

/* Decode steps over Q8_0 on AVX512-VNNI: see the comment at TVNNI. A group's vectors are
 * loaded as packed, else transposed in registers (t16_run); its 16 block scales are one run of
 * f16 when packed, else gathered. */
TVNNI AI void q8_0_t16_group(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
			     const struct rl_wmat *W, const float *bias, const int NR, const int PK,
			     const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	const size_t next = (size_t)(o + 16) * W->row_bytes;
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t blk = (size_t)b * 34;
		/* the next group's rows, one contiguous run, into L2 a slice per block: sixteen
		 * streams of 34 bytes a step leave the prefetchers behind */
		for (size_t pf = next + 16 * blk; pf < next + 16 * (blk + 34); pf += 64)
			T16_PREFETCH((const char *)base + pf, 0);
		__m512i T[8];
		t16_run(G, PK, RL_DT_Q8_0, blk, 2, T);
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			T[k] = _mm512_xor_si512(flip, T[k]);
		/* the 16 rows' block scales: f16 in the low half of each gathered dword */
		const __m512 dw = PK ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G->pk + 16 * blk + 512)))
				     : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
					_mm512_i32gather_epi32(G->vidx, (const void *)(G->rp[0] + blk), 1)));
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			const struct q8x *xb = &xq[r][b];
			const i32u *q4 = (const i32u *)xb->q;      /* broadcast from memory */
			__m512i s = _mm512_set1_epi32(seed[(size_t)r * nb + b]);
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++)
				s = _mm512_dpbusd_epi32(s, T[k], _mm512_set1_epi32(q4[k]));
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[r]);
		}
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

TVNNI AI void q8_0_t16_body(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
			    const struct rl_wmat *W, const float *bias, const int NR, uint32_t o0, uint32_t o1,
			    int accumulate)
{
#define Q8_0_T16(PK, G, o, m) q8_0_t16_group(Y, ldy, xq, seed, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q8_0_T16);
#undef Q8_0_T16
}

/* seed[r * nb + b]: -128 times the sum of activation row r's block b (vpdpbusd's w + 128) */
TVNNI static void q8_0_rows_vnni_seeded(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
					const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0,
					uint32_t o1, int accumulate)
{
	switch (nr) {
	case 1: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 1, o0, o1, accumulate); break;
	case 2: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 2, o0, o1, accumulate); break;
	case 3: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 3, o0, o1, accumulate); break;
	case 4: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 4, o0, o1, accumulate); break;
	case 5: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 5, o0, o1, accumulate); break;
	case 6: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 6, o0, o1, accumulate); break;
	case 7: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 7, o0, o1, accumulate); break;
	default: q8_0_t16_body(Y, ldy, xq, seed, W, bias, 8, o0, o1, accumulate); break;
	}
}

/* seed[b] of one activation row: -128 times the sum of its block b (from its q8 sums) */
static void q8_0_seeds(const struct q8x *x, uint32_t nb, int32_t *seed)
{
	for (uint32_t b = 0; b < nb; b++)
		seed[b] = -128 * ((int32_t)x[b].s[0] + x[b].s[1]);
}

/* seed: room for the rows' seeds, [nr][nb] */
TVNNI static void q8_0_rows_vnni(float *Y, size_t ldy, const struct q8x *const *xq, int32_t *seed,
				 const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
				 int accumulate)
{
	uint32_t nb = W->cols / 32;
	for (uint32_t r = 0; r < nr; r++)
		q8_0_seeds(xq[r], nb, seed + (size_t)r * nb);
	q8_0_rows_vnni_seeded(Y, ldy, xq, seed, W, bias, nr, o0, o1, accumulate);
}

/* Decode steps of 1..8 rows over Q4_K on AVX512-VNNI, a group of sixteen weight rows at a
 * time, one output row per lane, as q8_0_t16_body: each 32-byte run of a super-block's 4-bit
 * q is 8 vectors of the 16 rows' dwords (t16_run), and its low and high nibbles are the two
 * sub-blocks of 32 that the run holds (ggml's order), both unsigned as vpdpbusd wants. Per
 * activation row and sub-block: 8 vpdpbusd (broadcast activations from memory) into two sums
 * of 16 products, then the 16 rows' 6-bit scales (one vpdpwssd on the two sums as int16) into
 * the super-block's integer sum; the mins term,
 * dmin * sum_j m_j xsum_j, is 4 vpdpwssd of the rows' mins in word pairs against the
 * activation row's 8 sums of 32 (bp, made once per call). The scale unpacking is shared by all
 * the activation rows. */
TVNNI AI void q4k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			    const struct rl_wmat *W, const float *bias, const int NR, const int PK,
			    const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const int l1 = NR <= 2 && rb <= 512;   /* T16_PREFETCH: L1 unless the groups outgrow it */
	const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
	const __m512i mff = _mm512_set1_epi32(0x00FF00FF), lowb = _mm512_set1_epi32(0xFF);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 144;
		const char *pf = (const char *)W->data + (size_t)(o + 16) * rb + 16 * off;
		/* the 16 rows' header: d | dmin, then the scale words u0, u1, u2 (q4_k_scales) */
		const __m512i g = t16_dword(G, PK, RL_DT_Q4_K, off, 0);
		const __m512i u0 = t16_dword(G, PK, RL_DT_Q4_K, off, 4), u1 = t16_dword(G, PK, RL_DT_Q4_K, off, 8), u2 = t16_dword(G, PK, RL_DT_Q4_K, off, 12);
		const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
		const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
		/* byte j of s03: scale j; of s47: scale 4 + j (4 low bits from u2, 2 high from u0) */
		const __m512i s03 = _mm512_and_si512(u0, m6);
		const __m512i s47 = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_and_si512(_mm512_srli_epi32(u0, 2), m30));
		/* the mins first, so that their vectors are dead before the sums' loop needs the
		 * registers: as word pairs (m0, m2), (m1, m3), (m4, m6), (m5, m7), as bp pairs the
		 * activations' sums; acc -= dmin * dx * sum_j m_j xsum_j */
		{
			const __m512i m03 = _mm512_and_si512(u1, m6);
			const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
							    _mm512_and_si512(_mm512_srli_epi32(u1, 2), m30));
			const __m512i P[4] = { _mm512_and_si512(m03, mff), _mm512_and_si512(_mm512_srli_epi32(m03, 8), mff),
					       _mm512_and_si512(m47, mff), _mm512_and_si512(_mm512_srli_epi32(m47, 8), mff) };
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++) {
				const int32_t *bq = bp + ((size_t)r * nb + b) * 4;
				__m512i mi = _mm512_setzero_si512();
#pragma GCC unroll 4
				for (int k = 0; k < 4; k++)
					mi = _mm512_dpwssd_epi32(mi, P[k], _mm512_set1_epi32(bq[k]));
				acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(xk[r][b].d)), _mm512_cvtepi32_ps(mi), acc[r]);
			}
		}
		__m512i M[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
		for (int p = 0; p < 4; p++) {
			__m512i T[8], L[8];
			/* packed groups stream front to back, and at one or two rows the hardware
			 * prefetcher keeps up (one row from DRAM 25-28 GB/s prefetched, 29-31 not); from
			 * three rows, where each block takes longer, prefetching into L2 pays again
			 * (eight rows 110 -> 127-132 GMAC/s) */
			if (!PK || NR > 2)
				t16_prefetch(pf + 576 * p, 576, PK ? 0 : l1);
			t16_run(G, PK, RL_DT_Q4_K, off, 16 + 32 * (size_t)p, T);
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++)
				L[k] = _mm512_and_si512(T[k], m4);
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {                  /* sub-block 2p + h */
				if (h)
#pragma GCC unroll 8
					for (int k = 0; k < 8; k++)
						L[k] = _mm512_and_si512(_mm512_srli_epi16(T[k], 4), m4);
				const int j = 2 * p + h;
				const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? s03 : s47, 8 * (j & 3)), lowb);
				const __m512i scw = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));   /* as words */
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					const i32u *q4 = (const i32u *)(xk[r][b].q + 32 * j);
					__m512i Sa = _mm512_setzero_si512(), Sb = Sa;
#pragma GCC unroll 4
					for (int k = 0; k < 4; k++) {
						Sa = _mm512_dpbusd_epi32(Sa, L[k], _mm512_set1_epi32(q4[k]));
						Sb = _mm512_dpbusd_epi32(Sb, L[k + 4], _mm512_set1_epi32(q4[k + 4]));
					}
					/* each half of the sub-block <= 16 * 15 * 127: the two as int16 in a dword,
					 * against the scale as words, where vpmulld took the whole (one
					 * vpdpwssd, a shift and a blend: 768 x 768, 8 rows in L2, 155 -> 162
					 * GMAC/s; exact) */
					const __m512i pr = _mm512_mask_blend_epi16(0xAAAAAAAAu, Sa, _mm512_slli_epi32(Sb, 16));
					M[r] = _mm512_dpwssd_epi32(M[r], pr, scw);
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(M[r])), _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

TVNNI AI void q4k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			   const struct rl_wmat *W, const float *bias, const int NR, uint32_t o0, uint32_t o1,
			   int accumulate)
{
#define Q4K_GROUP(PK, G, o, m) q4k_t16_group(Y, ldy, xk, bp, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q4K_GROUP);
#undef Q4K_GROUP
}

/* bp: kq_aux's */
TVNNI static void q4k_rows_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			       const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
			       int accumulate)
{
	switch (nr) {
	case 1: q4k_t16_body(Y, ldy, xk, bp, W, bias, 1, o0, o1, accumulate); break;
	case 2: q4k_t16_body(Y, ldy, xk, bp, W, bias, 2, o0, o1, accumulate); break;
	case 3: q4k_t16_body(Y, ldy, xk, bp, W, bias, 3, o0, o1, accumulate); break;
	case 4: q4k_t16_body(Y, ldy, xk, bp, W, bias, 4, o0, o1, accumulate); break;
	case 5: q4k_t16_body(Y, ldy, xk, bp, W, bias, 5, o0, o1, accumulate); break;
	case 6: q4k_t16_body(Y, ldy, xk, bp, W, bias, 6, o0, o1, accumulate); break;
	case 7: q4k_t16_body(Y, ldy, xk, bp, W, bias, 7, o0, o1, accumulate); break;
	default: q4k_t16_body(Y, ldy, xk, bp, W, bias, 8, o0, o1, accumulate); break;
	}
}

/* Decode steps of 1..8 rows over Q6_K on AVX512-VNNI, as q4k_t16_group. A half super-block
 * (128 weights) is three 32-byte runs per row, the low nibbles of weights 0-31 and 64-95
 * (ql), of 32-63 and 96-127 (ql + 32) and their 2-bit tops (qh), each 8 vectors of the 16
 * rows' dwords (t16_run), recombined into unsigned 6-bit q (ggml's order). Per activation row
 * and sub-block of 16: 4 vpdpbusd seeded with -32 * the activations' sum (the q - 32 offset,
 * seed made once per call), then the 16 rows' int8 scales (vpmulld) into the super-block's
 * integer sum, which meets d and the activations' scale once. */
TVNNI AI void q6k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			    const struct rl_wmat *W, const float *bias, const int NR, const int PK,
			    const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 210;
		const char *pf = (const char *)W->data + (size_t)(o + 16) * rb + 16 * off;
		/* the 16 rows' int8 scales as dwords (sc[j], lane L: scale j of row L), and d: packed,
		 * the 16 f16 after the vectors; else the high half of the dword at 206, which ends at
		 * the block's last byte */
		__m512i sc[16];
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			__m512i g = t16_dword(G, PK, RL_DT_Q6_K, off, 192 + 4 * (size_t)i);
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				sc[4 * i + c] = _mm512_srai_epi32(_mm512_slli_epi32(g, 24 - 8 * c), 24);
		}
		const __m512 d = PK ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G->pk + 16 * off + 64 * 52)))
				    : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t16_dword(G, 0, RL_DT_Q6_K, off, 206), 16)));
		__m512i M[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
		for (int h = 0; h < 2; h++) {
			__m512i TH[8], TL[8], Q[8];
			t16_run(G, PK, RL_DT_Q6_K, off, 128 + 32 * (size_t)h, TH);
#pragma GCC unroll 1
			for (int run = 0; run < 2; run++) {    /* ql + 64h + 32 run: m = run, run + 2 */
				t16_prefetch(pf + 840 * (2 * h + run), 840, 0);
				t16_run(G, PK, RL_DT_Q6_K, off, 64 * (size_t)h + 32 * (size_t)run, TL);
#pragma GCC unroll 2
				for (int hi = 0; hi < 2; hi++) {
					const int m = run + 2 * hi;     /* weights 128h + 32m .. + 31 */
#pragma GCC unroll 8
					for (int k = 0; k < 8; k++) {
						__m512i lo = hi ? _mm512_srli_epi16(TL[k], 4) : TL[k];
						__m512i top = m == 0 ? _mm512_slli_epi16(TH[k], 4) : m == 1 ? _mm512_slli_epi16(TH[k], 2) :
							      m == 2 ? TH[k] : _mm512_srli_epi16(TH[k], 2);
						/* (lo & 0x0f) | (top & 0x30) */
						Q[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(lo, m4), top, m30, 0xF8);
					}
					const int j = 8 * h + 2 * m;         /* sub-blocks j, j + 1 */
#pragma GCC unroll 8
					for (int r = 0; r < NR; r++) {
						const i32u *q4 = (const i32u *)(xk[r][b].q + 16 * j);
						const int32_t *sd = seed + ((size_t)r * nb + b) * 16 + j;
						__m512i S0 = _mm512_set1_epi32(sd[0]), S1 = _mm512_set1_epi32(sd[1]);
#pragma GCC unroll 4
						for (int k = 0; k < 4; k++) {
							S0 = _mm512_dpbusd_epi32(S0, Q[k], _mm512_set1_epi32(q4[k]));
							S1 = _mm512_dpbusd_epi32(S1, Q[k + 4], _mm512_set1_epi32(q4[k + 4]));
						}
						M[r] = _mm512_add_epi32(M[r], _mm512_add_epi32(_mm512_mullo_epi32(S0, sc[j]),
											       _mm512_mullo_epi32(S1, sc[j + 1])));
					}
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(M[r])), _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

TVNNI AI void q6k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			   const struct rl_wmat *W, const float *bias, const int NR, uint32_t o0, uint32_t o1,
			   int accumulate)
{
#define Q6K_GROUP(PK, G, o, m) q6k_t16_group(Y, ldy, xk, seed, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q6K_GROUP);
#undef Q6K_GROUP
}

/* seed: kq_aux's */
TVNNI static void q6k_rows_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			       const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
			       int accumulate)
{
	switch (nr) {
	case 1: q6k_t16_body(Y, ldy, xk, seed, W, bias, 1, o0, o1, accumulate); break;
	case 2: q6k_t16_body(Y, ldy, xk, seed, W, bias, 2, o0, o1, accumulate); break;
	case 3: q6k_t16_body(Y, ldy, xk, seed, W, bias, 3, o0, o1, accumulate); break;
	case 4: q6k_t16_body(Y, ldy, xk, seed, W, bias, 4, o0, o1, accumulate); break;
	case 5: q6k_t16_body(Y, ldy, xk, seed, W, bias, 5, o0, o1, accumulate); break;
	case 6: q6k_t16_body(Y, ldy, xk, seed, W, bias, 6, o0, o1, accumulate); break;
	case 7: q6k_t16_body(Y, ldy, xk, seed, W, bias, 7, o0, o1, accumulate); break;
	default: q6k_t16_body(Y, ldy, xk, seed, W, bias, 8, o0, o1, accumulate); break;
	}
}

/* ------------------------------------------------------------ rows --------------- */

/* Row decoders for the tile path, 8 weights per instruction: the same values as the
 * table's scalar decoders (products of the same two floats, or exact conversions). */
T256 static int row_avx2(const struct rl_wmat *W, const uint8_t *row, float *out)
{
	uint32_t n = W->cols;
	switch (W->dtype) {
	case RL_DT_F16:
		if (n % 8)
			return 0;
		for (uint32_t i = 0; i < n; i += 8)
			_mm256_storeu_ps(out + i, ld8_f16((const uint16_t *)row + i));
		return 1;
	case RL_DT_BF16:
		if (n % 8)
			return 0;
		for (uint32_t i = 0; i < n; i += 8)
			_mm256_storeu_ps(out + i, ld8_bf16((const uint16_t *)row + i));
		return 1;
	case RL_DT_Q8_0:
		for (uint32_t b = 0; b < n / 32; b++, row += 34, out += 32) {
			__m256 d = _mm256_set1_ps(H2F(row));
			for (int k = 0; k < 4; k++) {
				__m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + 2 + 8 * k)));
				_mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
			}
		}
		return 1;
	case RL_DT_Q4_K:
		for (uint32_t b = 0; b < n / 256; b++, row += 144, out += 256) {
			float d = H2F(row), dmin = H2F(row + 2);
			uint8_t sc[8], mn[8];
			q4_k_scales(row + 4, sc, mn);
			for (int p = 0; p < 4; p++) {
				const uint8_t *q = row + 16 + 32 * p;
				__m256 d0 = _mm256_set1_ps(d * sc[2 * p]), m0 = _mm256_set1_ps(dmin * mn[2 * p]);
				__m256 d1 = _mm256_set1_ps(d * sc[2 * p + 1]), m1 = _mm256_set1_ps(dmin * mn[2 * p + 1]);
				for (int k = 0; k < 4; k++) {
					__m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * k)));
					__m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
					__m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
					/* d*sc*q - dmin*m, rounded as the scalar decoder's two products */
					_mm256_storeu_ps(out + 64 * p + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d0, lo), m0));
					_mm256_storeu_ps(out + 64 * p + 32 + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, hi), m1));
				}
			}
		}
		return 1;
	case RL_DT_Q6_K:
		for (uint32_t b = 0; b < n / 256; b++, row += 210, out += 256) {
			const int8_t *sc = (const int8_t *)(row + 192);
			float d = H2F(row + 208);
			for (int h = 0; h < 2; h++) {
				const uint8_t *ql = row + 64 * h, *qh = row + 128 + 32 * h;
				for (int k = 0; k < 4; k++) {      /* sub-block k of the half: 32 weights */
					for (int e = 0; e < 32; e += 8) {
						const uint8_t *lq = ql + (k & 1) * 32 + e;
						__m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)lq));
						__m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + e)));
						lo = k < 2 ? _mm256_and_si256(lo, _mm256_set1_epi32(15)) : _mm256_srli_epi32(lo, 4);
						hb = _mm256_and_si256(_mm256_srli_epi32(hb, 2 * k), _mm256_set1_epi32(3));
						__m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hb, 4)),
									     _mm256_set1_epi32(32));
						/* d * sc, then times q: the scalar decoder's two products */
						__m256 ds = _mm256_set1_ps(d * sc[8 * h + 2 * k + e / 16]);
						_mm256_storeu_ps(out + 128 * h + 32 * k + e, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)));
					}
				}
			}
		}
		return 1;
	}
	return 0;
}

void rl_cpu_wmat_row(const struct rl_wmat *W, uint32_t r, float *out)
{
	if (r < W->packed_rows && h16_packed(W)) {
		/* a row of a 16-bit panel: one lane of each input's run */
		uint32_t b0, bw = h16_block(W, r, &b0);
		const uint16_t *p = (const uint16_t *)W->data + (size_t)b0 * W->cols + (r - b0);
		for (uint32_t k = 0; k < W->cols; k++)
			out[k] = W->dtype == RL_DT_F16 ? rl_f16_to_f32(p[(size_t)k * bw]) : rl_bf16_to_f32(p[(size_t)k * bw]);
		return;
	}
	if (r < W->packed_rows) {
		/* a packed row: block by block, each gathered back to the file's layout */
		uint8_t blk[256];
		struct rl_wmat one = *W;
		one.rows = 1;
		one.cols = W->blk_elems;
		one.row_bytes = W->blk_bytes;
		one.packed_rows = 0;
		for (uint32_t b = 0; b < W->cols / W->blk_elems; b++) {
			one.data = wmat_block(W, r, b, blk);
			rl_cpu_wmat_row(&one, 0, out + (size_t)b * W->blk_elems);
		}
		return;
	}
	const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
	if (rl_cpu_isa() != RL_CPU_SCALAR && rl_cpu_has_f16c() && row_avx2(W, row, out))
		return;
	switch (W->dtype) {
	case RL_DT_F32:
		memcpy(out, row, (size_t)W->cols * 4);
		return;
	case RL_DT_F16:
		for (uint32_t i = 0; i < W->cols; i++)
			out[i] = rl_f16_to_f32(ld16(row + 2 * i));
		return;
	case RL_DT_BF16:
		for (uint32_t i = 0; i < W->cols; i++)
			out[i] = rl_bf16_to_f32(ld16(row + 2 * i));
		return;
	}
	for (uint32_t b = 0; b < W->cols / W->blk_elems; b++)
		W->decode(out + (size_t)b * W->blk_elems, row + (size_t)b * W->blk_bytes);
}

size_t rl_cpu_qmatmul_scratch(uint32_t in, uint32_t max_rows)
{
	/* one path per call, so the largest of their layouts; the bf16 path's (rl_cpu_qmatmul):
	 * bf16 activation rows, an fp32 row, a bf16 tile, each 64-byte aligned */
	size_t bf = 0;
	if (rl_cpu_isa_best() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_BF16))
		bf = (size_t)max_rows * in * 2 + 64 + (size_t)in * 4 + (size_t)TILE * in * 2 + 64;
	/* the q8 blocks, then their seeds (VNNI) or int16 pairs (AVX2), 64-byte aligned */
	size_t q8 = (size_t)Q8_ROWS * (in / 32 + 1) * (sizeof(struct q8x) + 32 * sizeof(int16_t)) + 192 +
		    (size_t)(in / 32) * sizeof(struct q8r);
	/* the q8k blocks, then their kq_aux sums */
	size_t q8k = (size_t)Q8_ROWS * (in / 256 + 1) * (sizeof(struct q8k) + KQ_AUX * 4) + 128 +
		     (size_t)(in / 256) * sizeof(struct q8kr);
	q8 = q8 > q8k ? q8 : q8k;
	size_t tile = (size_t)TILE * in * sizeof(float);
	size_t panels = (size_t)(64 + 1) * in * sizeof(float) + 64;   /* h16_panels: 64 rows, a row */
	tile = tile > panels ? tile : panels;
	q8 = q8 > tile ? q8 : tile;
	/* kq_packed_many: every row's q8k blocks, then their kq_aux sums; q8_0_packed_many: every
	 * row's q8 blocks, then their int16 pairs or seeds */
	size_t many = (size_t)max_rows * (in / 256 + 1) * (sizeof(struct q8k) + KQ_AUX * 4) + 192 +
		      (size_t)(max_rows / Q8_ROWS) * (in / 256) * sizeof(struct q8kr);
	size_t many0 = (size_t)max_rows * (in / 32 + 1) * (sizeof(struct q8x) + 32 * sizeof(int16_t)) + 192 +
		       (size_t)(max_rows / Q8_ROWS) * (in / 32) * sizeof(struct q8r);
	many = many > many0 ? many : many0;
	q8 = q8 > many ? q8 : many;
	return (q8 > bf ? q8 : bf) + 64;
}


/* Y[r, o] for o in [o0, o1) by the dot paths (nr <= Q8_ROWS rows) */
T256 static void dots_avx2(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate,
			   void *scratch)
{
	const uint8_t *base = W->data;
	uint32_t in = W->cols, nb = in / W->blk_elems;
	int dt = W->dtype;
	const struct q8x *xq[Q8_ROWS];
	const struct q8k *xk[Q8_ROWS];
	const float *xf[Q8_ROWS];
	if (dt == RL_DT_Q8_0) {
		struct q8x *q = (struct q8x *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
		for (uint32_t r = 0; r < nr; r++) {
			quantize_avx2(X + (size_t)r * ldx, in, q + (size_t)r * (in / 32));
			xq[r] = q + (size_t)r * (in / 32);
		}
	} else if (dt == RL_DT_Q4_K || dt == RL_DT_Q6_K) {
		struct q8k *q = (struct q8k *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
		for (uint32_t r = 0; r < nr; r++) {
			quantize_k_avx2(X + (size_t)r * ldx, in, q + (size_t)r * (in / 256));
			xk[r] = q + (size_t)r * (in / 256);
		}
	}
	for (uint32_t r = 0; r < nr; r++)
		xf[r] = X + (size_t)r * ldx;
	float res[8];
	uint32_t o = o0;
	if (h16_packed(W) && o0 < W->packed_rows) {   /* packed panels, then any rows below */
		uint32_t pe = o1 < W->packed_rows ? o1 : W->packed_rows;
		h16_panels(Y, ldy, X, ldx, W, bias, nr, o0, pe, accumulate, scratch);
		if ((o = o0 = pe) == o1)
			return;
	}
	if (dt == RL_DT_Q8_0 && (nr > 1 || o0 < W->packed_rows)) {
		/* lane-per-row groups: 2..8 rows, or packed rows (a group's 16 rows are one run).
		 * One row takes the AVX2 kernel on every ISA: bound by the bytes, it streams them
		 * faster than the VNNI one, whose 8 chained vpdpbusd a block leave less in flight
		 * (110M Q8_0 batch-1 decode, Zen 4 VM: ~215 tok/s the rows unpacked, ~185 packed
		 * with VNNI, ~237 packed with AVX2) */
		uint32_t pe = nr > 1 ? o1 : o1 < W->packed_rows ? o1 : W->packed_rows;
		if (nr > 1 && rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI)) {
			int32_t *seed = (int32_t *)(xq[0] + (size_t)nr * nb);
			q8_0_rows_vnni(Y, ldy, xq, seed, W, bias, nr, o0, pe, accumulate);
		} else {
			/* the rows' int16 pairs, after the q8 blocks */
			int16_t *p = (int16_t *)(((uintptr_t)(xq[0] + (size_t)nr * nb) + 63) & ~(uintptr_t)63);
			const int16_t *xp[Q8_ROWS] = { 0 };   /* rows past nr unread (GCC cannot tell) */
			for (uint32_t r = 0; r < nr; r++) {
				xp[r] = p + (size_t)r * nb * 32;
				q8_0_pairs(xq[r], nb, p + (size_t)r * nb * 32);
			}
			struct q8r *xr = NULL;
			if (nr == Q8_ROWS && o0 < W->packed_rows) {   /* 8 rows: rotated, after the pairs */
				xr = (struct q8r *)(((uintptr_t)(p + (size_t)nr * nb * 32) + 63) & ~(uintptr_t)63);
				q8r_make(xq, xp, nb, xr);
			}
			q8_0_rows_t8(Y, ldy, xq, xp, xr, W, bias, nr, o0, pe, accumulate);
		}
		if ((o = pe) == o1)
			return;
	}
	/* One activation row over unpacked Q8_0: row after row, each with four accumulators of
	 * its own, so the matrix streams as one sequential run that the hardware prefetcher
	 * follows. (Four rows interleaved, as below, left short rows as four short streams: 110M
	 * Q8_0 batch-1 decode on a Zen 5 VM went 92 -> ~260 tok/s this way.) */
	if (nr == 1 && dt == RL_DT_Q8_0) {
		for (; o < o1; o++) {
			float v = q8_0_row1(base + (size_t)o * W->row_bytes, xq[0], nb);
			v += bias ? bias[o] : 0;
			Y[o] = accumulate ? Y[o] + v : v;
		}
		return;
	}
	if (dt == RL_DT_Q4_K || dt == RL_DT_Q6_K) {
		/* the lane-per-row kernels' per-call sums, after the q8k blocks */
		int32_t *aux = (int32_t *)(((uintptr_t)(xk[0] + (size_t)nr * nb) + 63) & ~(uintptr_t)63);
		const int vnni = rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI);
		kq_aux(dt, vnni, xk, nr, nb, aux);
		if (vnni) {
			(dt == RL_DT_Q4_K ? q4k_rows_t16 : q6k_rows_t16)(Y, ldy, xk, aux, W, bias, nr, o0, o1, accumulate);
			return;
		}
		struct q8kr *xr = NULL;
		if (nr == Q8_ROWS && o0 < W->packed_rows) {   /* 8 rows: rotated, after the sums */
			xr = (struct q8kr *)(((uintptr_t)(aux + (size_t)nr * nb * KQ_AUX) + 63) & ~(uintptr_t)63);
			q8kr_make(xk, dt == RL_DT_Q4_K ? aux : NULL, nb, xr);
		}
		if (dt == RL_DT_Q4_K && (nr > 1 || o0 < W->packed_rows)) {
			q4k_rows_t8(Y, ldy, xk, aux, xr, W, bias, nr, o0, o1, accumulate);
			return;
		}
		if (o0 < W->packed_rows) {     /* Q6_K: packed groups here, the rest row-wise below */
			uint32_t pe = o1 < W->packed_rows ? o1 : W->packed_rows;
			q6k_rows_t8p(Y, ldy, xk, xr, W, bias, nr, o0, pe, accumulate);
			o = o0 = pe;
			if (o0 == o1)
				return;
		}
	}
	if (nr == 1 && (dt == RL_DT_Q4_K || dt == RL_DT_Q6_K) && rl_cpu_isa() == RL_CPU_AVX512) {
		(dt == RL_DT_Q4_K ? q4k_rows512 : q6k_rows512)(Y, xk[0], W, bias, o0, o1, accumulate);
		return;
	}
	/* one activation row: four weight rows at a time; else one weight row, every activation row
	 * (Q8_0 returned above, in lane-per-row groups or row by row) */
	int tiled = dt == RL_DT_Q4_K || dt == RL_DT_Q6_K;
	int nw = nr == 1 && tiled ? 4 : 1;
	for (; o < o1; o += (uint32_t)nw) {
		if (o + (uint32_t)nw > o1)
			nw = 1;
		const uint8_t *w[4];
		for (int j = 0; j < nw; j++)
			w[j] = base + (size_t)(o + j) * W->row_bytes;
		int n = (int)nr;
/* K-quants take more than 4 rows as groups of 4 (their integer sums and accumulators for 4
 * rows fit the 16 vector registers; 8 would spill); the weight block is decoded again per
 * group, from L1. */
#define TILE_CALL(fn, xs, len) do { if (nw == 4) { fn(w, 4, xs, 1, len, res); break; }           \
	if (n > 4) {                                                                               \
		fn(w, 1, xs, 4, len, res);                                                         \
		switch (n - 4) { case 1: fn(w, 1, xs + 4, 1, len, res + 4); break;                 \
		case 2: fn(w, 1, xs + 4, 2, len, res + 4); break;                                  \
		case 3: fn(w, 1, xs + 4, 3, len, res + 4); break;                                  \
		default: fn(w, 1, xs + 4, 4, len, res + 4); break; }                               \
		break;                                                                             \
	}                                                                                          \
	switch (n) { case 1: fn(w, 1, xs, 1, len, res); break; case 2: fn(w, 1, xs, 2, len, res); break; \
	case 3: fn(w, 1, xs, 3, len, res); break; default: fn(w, 1, xs, 4, len, res); break; } } while (0)
		switch (dt) {
		case RL_DT_Q4_K: TILE_CALL(q4_k_tile, xk, nb); break;
		case RL_DT_Q6_K: TILE_CALL(q6_k_tile, xk, nb); break;
		default: {     /* decode the row, then fp32 dots */
			float *row = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
			rl_cpu_wmat_row(W, o, row);
			for (uint32_t r = 0; r < nr; r++)
				res[r] = dot_f32_avx2(row, xf[r], in);
		}
		}
#undef TILE_CALL
		put_dots(Y, ldy, res, nw, nr, o, bias, accumulate);
	}
}

/* the plain path: each weight row decoded to fp32, dotted with each activation row */
static void dots_scalar(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate,
			void *scratch)
{
	float *row = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	for (uint32_t o = o0; o < o1; o++) {
		rl_cpu_wmat_row(W, o, row);
		for (uint32_t r = 0; r < nr; r++) {
			float s = dot_f32_scalar(row, X + (size_t)r * ldx, W->cols) + (bias ? bias[o] : 0);
			float *y = Y + (size_t)r * ldy + o;
			*y = accumulate ? *y + s : s;
		}
	}
}

/* Many activation rows (prefill) over the packed groups [o0, o1) of a Q4_K or Q6_K matrix
 * with the decode steps' lane-per-row kernels (VNNI's 16-lane ones, else AVX2's 8-lane
 * ones): every row quantized once (q8k), then for each group of 16 weight rows, still in
 * L1/L2, the rows 8 at a time. Against decoding tiles for a float GEMM (Zen 4 VM, 110M
 * Q4_K_M, one core): prefill 800-817 -> 1086-1121 tok/s against the AVX512-BF16 one, ~510 ->
 * ~615 with --isa avx2 against the fp32 one, whose decode came on top of an FMA that does 8
 * (AVX2) or 32 (vdpbf16ps) products where vpdpbusd does 64. The activations are 8-bit here,
 * as in ggml's K-quant GEMMs. scratch: rl_cpu_qmatmul_scratch's. */
static void kq_packed_many(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t n_rows, uint32_t o0, uint32_t o1, int accumulate,
			   void *scratch)
{
	const uint32_t in = W->cols, nb = in / 256;
	const int vnni = rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI);
	struct q8k *q = (struct q8k *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	int32_t *aux = (int32_t *)(((uintptr_t)(q + (size_t)n_rows * nb) + 63) & ~(uintptr_t)63);
	/* AVX2: each whole chunk of 8 rows rotated, after the sums */
	struct q8kr *xr = (struct q8kr *)(((uintptr_t)(aux + (size_t)n_rows * nb * KQ_AUX) + 63) & ~(uintptr_t)63);
	const struct q8k *xa[Q8_ROWS];
	for (uint32_t r = 0; r < n_rows; r++) {
		quantize_k_avx2(X + (size_t)r * ldx, in, q + (size_t)r * nb);
		xa[r % Q8_ROWS] = q + (size_t)r * nb;
		if (r % Q8_ROWS == Q8_ROWS - 1 || r == n_rows - 1) {   /* a chunk's sums, once */
			int32_t *a = aux + (size_t)(r - r % Q8_ROWS) * nb * KQ_AUX;
			kq_aux(W->dtype, vnni, xa, r % Q8_ROWS + 1, nb, a);
			if (!vnni && r % Q8_ROWS == Q8_ROWS - 1)
				q8kr_make(xa, W->dtype == RL_DT_Q4_K ? a : NULL, nb, xr + (size_t)r / Q8_ROWS * nb);
		}
	}
	for (uint32_t o = o0; o < o1;) {
		const uint32_t g1 = (o & ~15u) + 16 < o1 ? (o & ~15u) + 16 : o1;   /* to the group's end */
		for (uint32_t r0 = 0; r0 < n_rows; r0 += Q8_ROWS) {
			const uint32_t nr = n_rows - r0 < Q8_ROWS ? n_rows - r0 : Q8_ROWS;
			const struct q8k *xk[Q8_ROWS];
			const int32_t *bp = aux + (size_t)r0 * nb * KQ_AUX;
			const struct q8kr *x8 = nr == Q8_ROWS ? xr + (size_t)r0 / Q8_ROWS * nb : NULL;   /* rotated */
			for (uint32_t r = 0; r < nr; r++)
				xk[r] = q + (size_t)(r0 + r) * nb;
			if (vnni)
				(W->dtype == RL_DT_Q4_K ? q4k_rows_t16 : q6k_rows_t16)(Y + (size_t)r0 * ldy, ldy, xk, bp, W,
										      bias, nr, o, g1, accumulate);
			else if (W->dtype == RL_DT_Q4_K)
				q4k_rows_t8(Y + (size_t)r0 * ldy, ldy, xk, bp, x8, W, bias, nr, o, g1, accumulate);
			else
				q6k_rows_t8p(Y + (size_t)r0 * ldy, ldy, xk, x8, W, bias, nr, o, g1, accumulate);
		}
		o = g1;
	}
}

/* kq_packed_many's counterpart for packed Q8_0: every row quantized once (q8x, with its int16
 * pairs on AVX2 or its seeds on VNNI), then for each group of 16 weight rows the rows 8 at a
 * time. */
static void q8_0_packed_many(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			     const float *bias, uint32_t n_rows, uint32_t o0, uint32_t o1, int accumulate,
			     void *scratch)
{
	const uint32_t in = W->cols, nb = in / 32;
	const int vnni = rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI);
	struct q8x *q = (struct q8x *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
	void *aux = (void *)(((uintptr_t)(q + (size_t)n_rows * nb) + 63) & ~(uintptr_t)63);
	int16_t *pairs = aux;          /* AVX2: [n_rows][nb][32], then each whole chunk of 8 rotated */
	int32_t *seed = aux;           /* VNNI: [n_rows][nb] */
	struct q8r *rot = (struct q8r *)(((uintptr_t)(pairs + (size_t)n_rows * nb * 32) + 63) & ~(uintptr_t)63);
	for (uint32_t r = 0; r < n_rows; r++) {
		struct q8x *xr = q + (size_t)r * nb;
		quantize_avx2(X + (size_t)r * ldx, in, xr);
		if (!vnni)
			q8_0_pairs(xr, nb, pairs + (size_t)r * nb * 32);
		else
			q8_0_seeds(xr, nb, seed + (size_t)r * nb);
		if (!vnni && r % Q8_ROWS == Q8_ROWS - 1) {
			const struct q8x *xq[Q8_ROWS];
			const int16_t *xp[Q8_ROWS];
			for (uint32_t i = 0; i < Q8_ROWS; i++) {
				xq[i] = q + (size_t)(r - 7 + i) * nb;
				xp[i] = pairs + (size_t)(r - 7 + i) * nb * 32;
			}
			q8r_make(xq, xp, nb, rot + (size_t)r / Q8_ROWS * nb);
		}
	}
	for (uint32_t o = o0; o < o1;) {
		const uint32_t g1 = (o & ~15u) + 16 < o1 ? (o & ~15u) + 16 : o1;   /* to the group's end */
		for (uint32_t r0 = 0; r0 < n_rows; r0 += Q8_ROWS) {
			const uint32_t nr = n_rows - r0 < Q8_ROWS ? n_rows - r0 : Q8_ROWS;
			const struct q8x *xq[Q8_ROWS];
			const int16_t *xp[Q8_ROWS];
			for (uint32_t r = 0; r < nr; r++) {
				xq[r] = q + (size_t)(r0 + r) * nb;
				xp[r] = pairs + (size_t)(r0 + r) * nb * 32;
			}
			if (vnni)
				q8_0_rows_vnni_seeded(Y + (size_t)r0 * ldy, ldy, xq, seed + (size_t)r0 * nb, W, bias, nr, o, g1,
						      accumulate);
			else
				q8_0_rows_t8(Y + (size_t)r0 * ldy, ldy, xq, xp, nr == Q8_ROWS ? rot + (size_t)r0 / Q8_ROWS * nb : NULL, W,
					     bias, nr, o, g1, accumulate);
		}
		o = g1;
	}
}

int rl_cpu_qmatmul_bf16_acts(const struct rl_wmat *W, uint32_t n_rows)
{
	/* F32 and F16 weights keep fp32 arithmetic (their precision is the point of them); packed
	 * BF16 from two rows (h16_panels' vdpbf16ps kernel), unpacked BF16 and the block types
	 * from nine (prefill; their decode steps take q8 activations); one row keeps fp32
	 * (batch-1 decode streams the weights at memory speed either way); packed Q8_0 and
	 * K-quant rows take 8-bit activations instead (q8_0_packed_many, kq_packed_many), so such
	 * a matrix never rounds to bf16 */
	if (W->cols % 32 || rl_cpu_isa() != RL_CPU_AVX512 || !(rl_cpu_features() & RL_CPUF_BF16))
		return 0;
	if (W->dtype == RL_DT_BF16 && W->packed_rows)
		return n_rows > 1;
	return n_rows > Q8_ROWS && W->dtype != RL_DT_F32 && W->dtype != RL_DT_F16 && W->packed_rows < W->rows;
}

void rl_cpu_qmatmul(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		    const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
		    int accumulate, void *scratch)
{
	uint32_t in = W->cols;
	if (!n_rows)                   /* e.g. the LM head of a step that samples nothing */
		return;
	if (W->dtype == RL_DT_F32) {
		rl_cpu_matmul(Y, ldy, X, ldx, W->data, bias, n_rows, in, o_begin, o_end, accumulate);
		return;
	}
	if (n_rows > Q8_ROWS && o_begin < W->packed_rows && !h16_packed(W) && rl_cpu_isa() != RL_CPU_SCALAR) {
		/* packed Q8_0 and K-quants: the int8 kernels, then any unpacked rows below */
		uint32_t pe = o_end < W->packed_rows ? o_end : W->packed_rows;
		(W->dtype == RL_DT_Q8_0 ? q8_0_packed_many : kq_packed_many)(Y, ldy, X, ldx, W, bias, n_rows, o_begin, pe,
									     accumulate, scratch);
		if ((o_begin = pe) == o_end)
			return;
	}
	if (n_rows > Q8_ROWS && h16_packed(W) && o_begin < W->packed_rows && rl_cpu_isa() != RL_CPU_SCALAR) {
		uint32_t pe = o_end < W->packed_rows ? o_end : W->packed_rows;
		h16_panels(Y, ldy, X, ldx, W, bias, n_rows, o_begin, pe, accumulate, scratch);
		if ((o_begin = pe) == o_end)
			return;
	}
	if (n_rows > Q8_ROWS && rl_cpu_qmatmul_bf16_acts(W, n_rows)) {
		/* scratch: the activation rows as bf16 [n_rows, in], then for block types an fp32 row
		 * [in] and a tile of TILE weight rows as bf16 [TILE, in] */
		uint16_t *xb = (uint16_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
		for (uint32_t r = 0; r < n_rows; r++)
			to_bf16_avx512(xb + (size_t)r * in, X + (size_t)r * ldx, in);
		if (W->dtype == RL_DT_BF16) {          /* the file's rows are the operand */
			gemm_dpbf(Y, ldy, xb, in, W->data, bias, n_rows, in, o_begin, o_end, accumulate);
			return;
		}
		float *row = (float *)(((uintptr_t)(xb + (size_t)n_rows * in) + 63) & ~(uintptr_t)63);
		uint16_t *tile = (uint16_t *)(row + in);
		for (uint32_t o = o_begin; o < o_end; o += TILE) {
			uint32_t n = o_end - o < TILE ? o_end - o : TILE;
			for (uint32_t j = 0; j < n; j++) {
				rl_cpu_wmat_row(W, o + j, row);
				to_bf16_avx512(tile + (size_t)j * in, row, in);
			}
			gemm_dpbf(Y + o, ldy, xb, in, tile, bias ? bias + o : NULL, n_rows, in, 0, n, accumulate);
		}
		return;
	}
	if (n_rows > Q8_ROWS) {
		/* many rows: decode TILE weight rows to fp32, then the fp32 matmul over all rows */
		float *tile = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
		for (uint32_t o = o_begin; o < o_end; o += TILE) {
			uint32_t n = o_end - o < TILE ? o_end - o : TILE;
			for (uint32_t j = 0; j < n; j++)
				rl_cpu_wmat_row(W, o + j, tile + (size_t)j * in);
			rl_cpu_matmul(Y + o, ldy, X, ldx, tile, bias ? bias + o : NULL, n_rows, in, 0, n, accumulate);
		}
		return;
	}
	int fast = rl_cpu_isa() != RL_CPU_SCALAR && (W->dtype != RL_DT_F16 || rl_cpu_has_f16c()) &&
		   (W->blk_elems == 1 || in % 32 == 0);
	(fast ? dots_avx2 : dots_scalar)(Y, ldy, X, ldx, W, bias, n_rows, o_begin, o_end, accumulate, scratch);
}
