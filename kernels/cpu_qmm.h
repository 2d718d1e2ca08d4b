/* cpu_qmm.h — private to the matmul over stored weights (kernels/cpu_qmm*.c): the shapes of
 * the quantized activations, the packed layouts' geometry, the scratch layout, small helpers
 * every kernel file inlines, and the kernel files' entry points. kernels/README.md is the map:
 * which kernel serves which (stored type, rows, layout, ISA), drawn as the table in cpu_qmm.c.
 */
#ifndef RL_CPU_QMM_H
#define RL_CPU_QMM_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
#include "kernels/cpu_ops.h"
#include "kernels/cpu_simd.h"
#include "kernels/rl_model.h"

#define AI   RL_INLINE
#define T256 RL_TGT_AVX2

#define Q8_ROWS RL_CPU_FEW_ROWS         /* rows at most on the decode-step (lane-per-row) kernels */
#define TILE 16                        /* weight rows decoded at once on the tile paths */
/* Software prefetch distance in a weight row, bytes: the Q8_0 row-at-a-time dot (the hardware
 * prefetcher alone left batch-1 decode at ~70% of llama.cpp's speed on a Zen 3 VM; sweep in
 * bench/results/cpu-kernel-decisions-2026-11.md) ... */
#define PF_DIST 4096
/* ... and the K-quant dots (four interleaved rows of 144/210-byte blocks), which want it
 * further (the same sweep). */
#define PF_DIST_K 16384

/* ------------------------------------------------------------ activations -------- */

/* One activation block of Q8_0's steps: x[i] ~ d * q[i]; s[h] = sum of q over elements
 * 16h .. 16h+15. */
struct q8x {
	float   d;
	int16_t s[2];
	int8_t  q[32];
};

/* K-quant activations: one scale per 256 (the super-block), so that a super-block's
 * sub-block products add up in integers and meet a float once (ggml's Q8_K). */
struct q8k {
	float   d;
	int16_t bsums[16];             /* sums of q over each 16 */
	int8_t  q[256];
};

/* The per-call sums the K-quant lane-per-row kernels take (rl_qmm_kq_aux), per row and
 * super-block */
#define KQ_AUX 16

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

/* Eight activation rows' Q8_0 block as rotated int16 pairs (as struct q8kr): dword row t
 * holds dword t of the 8 rows' q8_0_pairs twice over; d the rows' scales twice over. */
struct q8r {
	int32_t p[16][16];
	float   d[16];
};

/* ------------------------------------------------------------ scratch ------------ */

/* The scratch of one call, with one owner: rl_cpu_qmatmul_scratch sizes it and the driver
 * carves it, both from qmm_layout. Up to three parts, each 64-byte aligned from a 64-byte
 * aligned base, for nr activation rows of `in` inputs:
 *   QMM_L_Q8     q8x [nr][in/32]; int16 pairs [nr][in/32][32] (AVX2) or int32 seeds
 *                [nr][in/32] (VNNI); rotated q8r [nr/8][in/32] (AVX2, whole groups of 8)
 *   QMM_L_Q8K    q8k [nr][in/256]; int32 aux [nr][in/256][KQ_AUX]; q8kr [nr/8][in/256]
 *   QMM_L_BF16   bf16 activations [nr][in]; an fp32 row [in]; a bf16 tile [TILE][in]
 *   QMM_L_TILE   fp32 [TILE][in] (a decoded tile, or one decoded row)
 *   QMM_L_PANELS fp32 [64][in] (activations transposed for the 16-bit panels); a row [in] */
enum qmm_layout_kind { QMM_L_Q8, QMM_L_Q8K, QMM_L_BF16, QMM_L_TILE, QMM_L_PANELS, QMM_L_COUNT };

static inline size_t qmm_align64(size_t n) { return (n + 63) & ~(size_t)63; }
static inline void *qmm_align64p(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* the parts' offsets from the aligned base (off[0..3)); returns the bytes from that base */
static inline size_t qmm_layout(enum qmm_layout_kind k, uint32_t in, uint32_t nr, size_t *off)
{
	const size_t b32 = (size_t)nr * (in / 32), b256 = (size_t)nr * (in / 256);
	size_t s[3] = { 0, 0, 0 };
	switch (k) {
	case QMM_L_Q8:
		s[0] = b32 * sizeof(struct q8x);
		s[1] = b32 * 32 * sizeof(int16_t);
		s[2] = (size_t)(nr / 8) * (in / 32) * sizeof(struct q8r);
		break;
	case QMM_L_Q8K:
		s[0] = b256 * sizeof(struct q8k);
		s[1] = b256 * KQ_AUX * sizeof(int32_t);
		s[2] = (size_t)(nr / 8) * (in / 256) * sizeof(struct q8kr);
		break;
	case QMM_L_BF16:
		s[0] = (size_t)nr * in * 2;
		s[1] = (size_t)in * 4;
		s[2] = (size_t)TILE * in * 2;
		break;
	case QMM_L_TILE:
		s[0] = (size_t)TILE * in * 4;
		break;
	case QMM_L_PANELS:
		s[0] = (size_t)64 * in * 4;
		s[1] = (size_t)in * 4;
		break;
	default:
		break;
	}
	size_t at = 0;
	for (int i = 0; i < 3; i++) {
		off[i] = at;
		at += qmm_align64(s[i]);
	}
	return at;
}

/* ------------------------------------------------------------ helpers ------------ */

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
/* a block's f16 scale, by the F16C instruction on the AVX2 paths */
#define H2F(p) _cvtsh_ss(ld16(p))


T256 AI int32_t hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

T256 AI float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Y[r, o + L] (=, or +=) lane L of acc[r] (+ bias[o + L]) for the lanes L in m */
RL_TGT_AVX512_VNNI AI void t16_store(float *Y, size_t ldy, const __m512 *acc, const int NR, uint32_t o, __mmask16 m,
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

/* T[k], lane L = bytes off+4k .. off+4k+3 of row rp[L] (32 bytes of each of 16 rows,
 * transposed in registers). */
RL_TGT_AVX512_VNNI AI void t16_load(const uint8_t *const *rp, size_t off, __m512i *T)
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

/* sum over 32 of u[i] * s[i] (u unsigned bytes < 128 or |w|, s signed) as 8 int32 lanes */
T256 AI __m256i dot_us(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* an unaligned, aliasing dword (4 activations broadcast from memory) */
typedef int32_t __attribute__((may_alias, aligned(1))) i32u;

/* 8 weights of a 16-bit row at element i, widened to fp32 */
T256 AI __m256 ld8_f16(const uint16_t *w) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w)); }
T256 AI __m256 ld8_bf16(const uint16_t *w)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w)), 16));
}

static inline float dot_f32_scalar(const float *a, const float *b, uint32_t n)
{
	float s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
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

/* ------------------------------------------------------------ layouts ------------ */

/* ------------------------------------------------------------ per-type facts ------ */

/* The route table's rows (cpu_qmm.c): T_Q45 is Q4_1 and Q5_1, T_Q45S Q4_0 and Q5_0 (the same
 * kernels; prefill differs, see the table's notes); T_IQ4 IQ4_NL and IQ4_XS (the Q8_0
 * kernels); T_KX Q2_K, Q3_K and Q5_K (kq_t16 on VNNI, over packed groups; cpu_qmm_kx.c's
 * kernels over the file's rows elsewhere); T_BLOCK every other block type (decoded rows).
 * T_BLOCK is 0, so a type the table below leaves out takes it. */
enum qmm_route_row { T_BLOCK, T_F32, T_F16, T_BF16, T_Q8_0, T_Q4_K, T_Q6_K, T_Q45, T_Q45S, T_IQ4, T_KX, T_COUNT };

/* What the CPU matmul knows of each stored type, one row a type (ggml's type_traits_cpu
 * shape); the one owner of these facts, read through the accessors below.
 *   route        its row of the route table
 *   pack_dwords  the dwords of a block a packed group keeps as 16-lane vectors: Q8_0's 32
 *                quants, all of Q4_K's (d|dmin, the 12 scale bytes, qs) and IQ4_XS's (d|
 *                scales_h, scales_l, qs), Q6_K's but the trailing f16 d (ql, qh, the scales),
 *                the 32-weight 4/5-bit types' qs (IQ4_NL's too; Q5_0/Q5_1: qh first,
 *                q5_qh_perm'd), all of Q2_K's and Q5_K's and Q3_K's but its trailing f16 d
 *                (each in the file's order); 0: not packed
 *   pack_head    bytes of the block before them; those and the bytes after them (Q8_0's,
 *                Q4_0's, Q5_0's and IQ4_NL's f16 d, Q4_1's and Q5_1's d|m, Q6_K's and Q3_K's
 *                d) follow the vectors as each row's tail (with pack_pos, q5_qh_perm,
 *                rl_cpu_wmat_pack and qmm_block, cpu_qmm_pack.c, the packed layout)
 *   pack_vnni    packed only where the AVX512-VNNI kernels run (kq_t16 reads the groups; the
 *                AVX2 kernels of these types, kx_rows, read the file's rows)
 *   q45, bits5, has_min, off  the 32-weight 4- and 5-bit types (ggml's Q4_0, Q4_1, Q5_0,
 *                Q5_1; model_dtype.c draws the blocks): an unsigned q of 4 or 5 (bits5) bits a
 *                weight, w = d * (q - off) (Q4_0: 8, Q5_0: 16) or w = d * q + m (has_min).
 *                The integer kernels dot q unsigned against the 8-bit activations and take
 *                the offset or the min through the activation block's sum. */
struct qmm_type {
	uint8_t route, pack_dwords, pack_head, pack_vnni;
	uint8_t q45, bits5, has_min, off;
};
static const struct qmm_type qmm_types[RL_DT_COUNT] = {
	/*                route     dwords head vnni  q45 bits5 min off */
	[RL_DT_F32]    = { T_F32,    0,     0 },
	[RL_DT_F16]    = { T_F16,    0,     0 },
	[RL_DT_BF16]   = { T_BF16,   0,     0 },
	[RL_DT_Q8_0]   = { T_Q8_0,   8,     2 },
	[RL_DT_Q4_0]   = { T_Q45S,   4,     2,   0,   1,  0,    0,  8 },
	[RL_DT_Q4_1]   = { T_Q45,    4,     4,   0,   1,  0,    1,  0 },
	[RL_DT_Q5_0]   = { T_Q45S,   5,     2,   0,   1,  1,    0, 16 },
	[RL_DT_Q5_1]   = { T_Q45,    5,     4,   0,   1,  1,    1,  0 },
	[RL_DT_Q4_K]   = { T_Q4_K,  36,     0 },
	[RL_DT_Q6_K]   = { T_Q6_K,  52,     0 },
	[RL_DT_IQ4_NL] = { T_IQ4,    4,     2 },
	[RL_DT_Q2_K]   = { T_KX,    21,     0,   1 },
	[RL_DT_Q3_K]   = { T_KX,    27,     0,   1 },
	[RL_DT_Q5_K]   = { T_KX,    44,     0,   1 },
	[RL_DT_IQ4_XS] = { T_IQ4,   34,     0 },
};
static inline const struct qmm_type *qmm_type(int dt)
{
	static const struct qmm_type none = { T_BLOCK, 0, 0, 0, 0, 0, 0, 0 };
	return dt >= 0 && dt < RL_DT_COUNT ? &qmm_types[dt] : &none;
}
static inline uint32_t pack_dwords(int dt) { return qmm_type(dt)->pack_dwords; }
static inline uint32_t pack_head(int dt) { return qmm_type(dt)->pack_head; }
static inline int pack_vnni(int dt) { return qmm_type(dt)->pack_vnni; }
static inline int q45_type(int dt) { return qmm_type(dt)->q45; }
static inline int q45_bits5(int dt) { return qmm_type(dt)->bits5; }
static inline int q45_min(int dt) { return qmm_type(dt)->has_min; }
static inline int q45_off(int dt) { return qmm_type(dt)->off; }

/* IQ4_NL (32 weights, 18 bytes: f16 d, 16 bytes of nibbles; w = d * level[nibble]) looked up
 * to its int8 levels is a Q8_0 block: the Q8_0 kernels take it (iq4nl_levels, as
 * model_dtype.c's kvalues_iq4nl and ggml's). So is each 32 of IQ4_XS (136 bytes a 256: f16 d,
 * u16 scales_h, 4 bytes scales_l, qs[128]; w = d * (ls - 32) * level[nibble], ls the 32's
 * 6-bit scale), its scale d * (ls - 32): the 16 bytes of qs at 16 j are its sub-block j's
 * nibbles as an IQ4_NL block's (low nibbles weights 0-15, high 16-31). */
static const int8_t iq4nl_levels[16] __attribute__((aligned(16))) = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* Q5_0/Q5_1's qh (bit j: the fifth bit of weight j; weight j < 16 is byte j's low nibble of
 * qs, j + 16 its high one) with the bit-index bits 0, 1 swapped with 3, 4: bit 16h + 4k + i
 * (dword k of qs, byte i, nibble h) moves to 8i + s with s = 4 (k & 1) + 2h + k / 2, so that
 * the fifth bits of a qs dword's 4 bytes are one shift of the whole dword away from bit 4 of
 * each byte (q45_hbit). Its own inverse. Packed rows keep qh this way; the kernels turn
 * unpacked rows' qh in registers. */
static inline uint32_t q5_qh_perm(uint32_t x)
{
	uint32_t t = (x ^ (x >> 7)) & 0x00AA00AAu;     /* index bits 0 <-> 3 */
	x ^= t ^ (t << 7);
	t = (x ^ (x >> 14)) & 0x0000CCCCu;             /* index bits 1 <-> 4 */
	return x ^ t ^ (t << 14);
}

/* where q5_qh_perm puts the fifth bit of byte 0 of qs dword k's nibble h, less 4: the shift
 * left (negative: right) that brings it to bit 4 */
static inline int q45_hshift(int k, int h) { return 4 - (4 * (k & 1) + 2 * h + k / 2); }

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

/* ------------------------------------------------------------ entry points ------- */
/* Each computes Y[r, o] (=, or += when accumulate) for the activation rows r < nr and the
 * outputs o in [o0, o1), + bias[o] when bias; xq/xk/xp/xr/bp/seed: the prepared activations
 * (cpu_qmm_act.c, and the AVX2 kernels' pairs and rotations). The table in cpu_qmm.c says which
 * serves a call. */

/* cpu_qmm_act.c: activation rows quantized once per call (AVX2; also what the AVX-512 kernels read) */
void rl_qmm_quantize_q8(const float *x, uint32_t n, struct q8x *o);
void rl_qmm_quantize_q8k(const float *x, uint32_t n, struct q8k *o);
void rl_qmm_kq_aux(int dt, int vnni, const struct q8k *const *xk, uint32_t nr, uint32_t nb, int32_t *aux);
void rl_qmm_q8_0_seeds(const struct q8x *x, uint32_t nb, int32_t *seed);

/* cpu_qmm_avx2.c: AVX2 (+FMA, F16C) */
void rl_qmm_q8_0_pairs(const struct q8x *x, uint32_t nb, int16_t *p);
void rl_qmm_q8r_make(const struct q8x *const *xq, const int16_t *const *xp, uint32_t nb, struct q8r *xr);
void rl_qmm_q8kr_make(const struct q8k *const *xk, const int32_t *bp, uint32_t nb, struct q8kr *xr);
void rl_qmm_q8_0_row1(float *Y, const struct q8x *x, const struct rl_wmat *W, const float *bias,
		      uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_q8_0_t8(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
		    const struct q8r *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
		    uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_q4k_t8(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
		   const struct q8kr *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
		   uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_q6k_t8p(float *Y, size_t ldy, const struct q8k *const *xk, const struct q8kr *xr,
		    const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
		    int accumulate);
/* xq: the rows' q8 blocks (Q4_0, Q4_1, Q5_0, Q5_1: q45_type) */
void rl_qmm_q45_t8(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W, const float *bias,
		   uint32_t nr, uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_kq_tiles(float *Y, size_t ldy, const struct q8k *const *xk, const struct rl_wmat *W,
		     const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_rows_f32(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		     const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate, float *row);
int rl_qmm_row_avx2(const struct rl_wmat *W, const uint8_t *row, float *out);

/* cpu_qmm_avx512.c: AVX-512 F/BW/VL (one row over K-quants), and with VNNI */
void rl_qmm_q4k_row512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
		       uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_q6k_row512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
		       uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_q8_0_t16(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
		     const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
		     int accumulate);
void rl_qmm_q4k_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
		    const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
		    int accumulate);
void rl_qmm_q6k_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
		    const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
		    int accumulate);
void rl_qmm_q45_t16(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W, const float *bias,
		    uint32_t nr, uint32_t o0, uint32_t o1, int accumulate);

/* cpu_qmm_kx.c: Q2_K, Q3_K, Q5_K (unpacked rows) against any number of activation
 * rows, x: row r's q8k blocks at x + r * (W->cols / 256); the same bits on either ISA */
void rl_qmm_kx_avx2(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
		    uint32_t nr, uint32_t o0, uint32_t o1, int accumulate);
void rl_qmm_kx_512(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
		   uint32_t nr, uint32_t o0, uint32_t o1, int accumulate);

/* cpu_qmm_h16.c: the 16-bit engine (F16/BF16 panels at both widths; AVX512-BF16 products).
 * xt: [64 * in] floats, row: [in] (QMM_L_PANELS); dpbf: vdpbf16ps on activations rounded to bf16 */
void rl_qmm_h16_panels(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		       const float *bias, uint32_t n_rows, uint32_t o0, uint32_t o1, int accumulate,
		       int dpbf, float *xt, float *row);
void rl_qmm_gemm_dpbf(float *Y, size_t ldy, const uint16_t *X, size_t ldx, const uint16_t *W,
		      const float *bias, uint32_t n, uint32_t in, uint32_t o0, uint32_t o1, int acc);
void rl_qmm_to_bf16(uint16_t *o, const float *x, uint32_t n);
/* rows [o, o + n) of W decoded to bf16, tile [n][in] (row: fp32 scratch [in]), the bits of
 * rl_cpu_wmat_row then rl_qmm_to_bf16 */
void rl_qmm_tile_bf16(const struct rl_wmat *W, uint32_t o, uint32_t n, uint16_t *tile, float *row);

/* cpu_qmm_pack.c: row r's block b as the file lays it out (gathered into tmp when packed) */
const uint8_t *rl_qmm_block(const struct rl_wmat *W, uint32_t r, uint32_t b, uint8_t *tmp);

#endif
