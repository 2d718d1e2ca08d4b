/* cpu_qmm_avx512.c — the integer kernels for AVX-512.
 *   - AVX-512 F/BW (rl_qmm_q4k_row512, rl_qmm_q6k_row512): one activation row over unpacked
 *     Q4_K/Q6_K rows, q4_k_tile's arithmetic 64 weights per instruction, four rows at a time.
 *   - AVX512-VNNI (q8_0_t16_group, q4k_t16_group, q6k_t16_group, q45_t16_group): sixteen weight rows at a
 *     time, one output row per lane, vpdpbusd doing 64 multiply-adds of 16 rows against 4
 *     broadcast activations; the block and sub-block scales meet whole lanes. Packed groups
 *     (rl_cpu_wmat_pack) are loaded as they lie; unpacked rows are transposed in registers
 *     (t16_load) and their scales gathered. They serve 2..8 rows over Q8_0 and 1..8 over the
 *     K-quants and Q4_0/Q4_1/Q5_0/Q5_1, and prefill over packed groups 8 rows at a time (the
 *     driver's *_many).
 * One row over packed Q8_0 takes the AVX2 kernel on every ISA (the table in cpu_qmm.c says
 * why). Accuracy: as the AVX2 integer kernels (8-bit activations, exact integer sums).
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

/* One activation row over Q4_K weights on AVX-512BW: q4_k_tile's arithmetic 64 weights per
 * instruction (a super-block's two sub-blocks of one 32-byte load side by side in a zmm, their
 * two scales as the halves of one word vector), four weight rows at a time. */
RL_TGT_AVX512 void rl_qmm_q4k_row512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
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
RL_TGT_AVX512 void rl_qmm_q6k_row512(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
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
RL_TGT_AVX512_VNNI AI __m512i t16_rows(const struct rl_wmat *W, uint32_t o, uint32_t o1, const uint8_t **rp)
{
	int32_t idx[16];
	for (uint32_t l = 0; l < 16; l++) {
		uint32_t row = o + l < o1 ? o + l : o1 - 1;
		rp[l] = (const uint8_t *)W->data + (size_t)row * W->row_bytes;
		idx[l] = (int32_t)((size_t)(row - o) * W->row_bytes);
	}
	return _mm512_loadu_si512((const void *)idx);
}

/* lanes [l0, l1) of a group */
static inline __mmask16 t16_lanes(uint32_t l0, uint32_t l1)
{
	return (__mmask16)(((1u << l1) - 1) & ~((1u << l0) - 1));
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
RL_TGT_AVX512_VNNI AI void t16_run(const struct t16g *G, const int PK, const int dt, size_t blk, size_t off, __m512i *T)
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
RL_TGT_AVX512_VNNI AI __m512i t16_dword(const struct t16g *G, const int PK, const int dt, size_t blk, size_t off)
{
	return PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk + 64 * (size_t)pack_pos(dt, (uint32_t)off / 4)))
		  : _mm512_i32gather_epi32(G->vidx, (const void *)(G->rp[0] + blk + off), 1);
}

/* The lines of [p, p + len), a slice of the next group's rows: one contiguous run in either
 * layout, fetched a quarter block at a time between the loads of this one: all of a block's
 * prefetches at once stall the loads behind them (measured in
 * bench/results/cpu-kernel-decisions-2026-11.md). */
RL_TGT_AVX512_VNNI AI void t16_prefetch(const char *p, size_t len, int l1)
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

/* sc[j], lane L: d * (ls_j - 32), the scales of the 8 sub-blocks of an IQ4_XS super-block whose
 * header dwords are lane L of g (f16 d | scales_h << 16) and sl (scales_l), as iq4xs_scales8 */
RL_TGT_AVX512_VNNI AI void iq4xs_scales16(__m512i g, __m512i sl, __m512 *sc)
{
	const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(15));
		const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(g, 12 + 2 * j), _mm512_set1_epi32(0x30));
		sc[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(32))));
	}
}

/* Decode steps over Q8_0 (and IQ4_NL and IQ4_XS, DT: their nibbles looked up to levels + 128,
 * each 32 of IQ4_XS a block with its scale d * (ls - 32)) on
 * AVX512-VNNI: see the comment at RL_TGT_AVX512_VNNI. A group's vectors are
 * loaded as packed, else transposed in registers (t16_run); its 16 block scales are one run of
 * f16 when packed, else gathered. */
RL_TGT_AVX512_VNNI AI void q8_0_t16_group(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
			     const struct rl_wmat *W, const float *bias, const int DT, const int NR, const int PK,
			     const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	/* bytes a row per 32 weights (IQ4_XS: 136 a super-block of 8 of them) */
	const size_t bb = DT == RL_DT_Q8_0 ? 34 : DT == RL_DT_IQ4_NL ? 18 : 17, ndw = DT == RL_DT_Q8_0 ? 8 : 4;
	const size_t next = (size_t)(o + 16) * W->row_bytes;
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	__m512 acc[8], xs[8];              /* xs: IQ4_XS's sub-block scales, a super-block's */
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		/* the block at byte blk of a row (IQ4_XS: the super-block, and its sub-block j) */
		const size_t blk = DT == RL_DT_IQ4_XS ? (size_t)(b / 8) * 136 : (size_t)b * bb;
		const uint32_t j = b % 8;
		if (DT == RL_DT_IQ4_XS && j == 0)
			iq4xs_scales16(t16_dword(G, PK, DT, blk, 0), t16_dword(G, PK, DT, blk, 4), xs);
		/* the next group's rows, one contiguous run, into L2 a slice per block: sixteen
		 * streams of 34 bytes a step leave the prefetchers behind */
		for (size_t pf = next + 16 * b * bb; pf < next + 16 * (b + 1) * bb; pf += 64)
			T16_PREFETCH((const char *)base + pf, 0);
		__m512i T[8];
		if (DT == RL_DT_Q8_0) {
			t16_run(G, PK, RL_DT_Q8_0, blk, 2, T);
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++)
				T[k] = _mm512_xor_si512(flip, T[k]);
		} else {
			/* IQ4_NL, IQ4_XS: the nibbles looked up to their levels + 128; IQ4_XS's 16
			 * bytes of qs at 8 + 16 j, its packed vectors after the header's two */
			const __m512i m4 = _mm512_set1_epi8(0x0F);
			const __m512i lv = _mm512_xor_si512(flip, _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)iq4nl_levels)));
			const size_t qs = DT == RL_DT_IQ4_XS ? 8 + 16 * (size_t)j : 2;
			const size_t pq = DT == RL_DT_IQ4_XS ? 64 * (2 + 4 * (size_t)j) : 0;
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				const __m512i v = PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk + pq + 64 * (size_t)k))
						     : t16_dword(G, 0, DT, blk, qs + 4 * (size_t)k);
				T[k] = _mm512_shuffle_epi8(lv, _mm512_and_si512(v, m4));
				T[4 + k] = _mm512_shuffle_epi8(lv, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
			}
		}
		/* the 16 rows' block scales: f16 in the low half of each gathered dword; IQ4_XS's
		 * from its header */
		const __m512 dw = DT == RL_DT_IQ4_XS ? xs[j]
				: PK ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G->pk + 16 * blk + 64 * ndw)))
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

RL_TGT_AVX512_VNNI AI void q8_0_t16_body(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
			    const struct rl_wmat *W, const float *bias, const int DT, const int NR, uint32_t o0,
			    uint32_t o1, int accumulate)
{
#define Q8_0_T16(PK, G, o, m) q8_0_t16_group(Y, ldy, xq, seed, W, bias, DT, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q8_0_T16);
#undef Q8_0_T16
}

/* seed[r * nb + b]: -128 times the sum of activation row r's block b (vpdpbusd's w + 128) */
RL_TGT_AVX512_VNNI void rl_qmm_q8_0_t16(float *Y, size_t ldy, const struct q8x *const *xq, const int32_t *seed,
					const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0,
					uint32_t o1, int accumulate)
{
#define Q8_0_T16_N(n) do {                                                                         \
	if (W->dtype == RL_DT_IQ4_NL)                                                              \
		q8_0_t16_body(Y, ldy, xq, seed, W, bias, RL_DT_IQ4_NL, n, o0, o1, accumulate);     \
	else if (W->dtype == RL_DT_IQ4_XS)                                                         \
		q8_0_t16_body(Y, ldy, xq, seed, W, bias, RL_DT_IQ4_XS, n, o0, o1, accumulate);     \
	else                                                                                       \
		q8_0_t16_body(Y, ldy, xq, seed, W, bias, RL_DT_Q8_0, n, o0, o1, accumulate);       \
} while (0)
	RL_CASES_1_TO_8(nr, Q8_0_T16_N);
#undef Q8_0_T16_N
}

/* q5_qh_perm on each lane (the qh of unpacked rows; ternary logic: x ^ t ^ (t << n)) */
RL_TGT_AVX512_VNNI AI __m512i q5_qh_perm16(__m512i x)
{
	__m512i t = _mm512_and_si512(_mm512_xor_si512(x, _mm512_srli_epi32(x, 7)), _mm512_set1_epi32(0x00AA00AA));
	x = _mm512_ternarylogic_epi32(x, t, _mm512_slli_epi32(t, 7), 0x96);
	t = _mm512_and_si512(_mm512_xor_si512(x, _mm512_srli_epi32(x, 14)), _mm512_set1_epi32(0x0000CCCC));
	return _mm512_ternarylogic_epi32(x, t, _mm512_slli_epi32(t, 14), 0x96);
}

/* Decode steps of 1..8 rows over the 32-weight 4/5-bit types (q45_type) on AVX512-VNNI,
 * sixteen weight rows at a time, one output row per lane: q45_t8_group's weights 16 lanes
 * wide (packed: loads; else gathers, t16_dword), and per activation row and block 8 vpdpbusd
 * (the unsigned q as vpdpbusd wants them, against broadcast activations) in two chains, the
 * low nibbles' seeded with -off * the activation block's sum. The same integer sum and the
 * same float operations as q45_t8_group, so a row's result does not depend on the ISA column
 * either. */
RL_TGT_AVX512_VNNI AI void q45_t16_group(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			    const float *bias, const int DT, const int NR, const int PK, const struct t16g *G,
			    uint32_t o, __mmask16 lanes, int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	const int B5 = q45_bits5(DT), MIN = q45_min(DT), OFF = q45_off(DT);
	const size_t bb = W->blk_bytes, hd = pack_head(DT), qs = hd + (B5 ? 4 : 0), ndw = B5 ? 5 : 4;
	const size_t next = (size_t)(o + 16) * W->row_bytes;
	const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t blk = (size_t)b * bb;
		t16_prefetch((const char *)base + next + 16 * blk, 16 * bb, 0);
		__m512i T[4], Q[8];
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
			T[k] = PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk + 64 * (size_t)(k + B5)))
				  : t16_dword(G, 0, DT, blk, qs + 4 * (size_t)k);
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			Q[k] = _mm512_and_si512(T[k], m4);
			Q[4 + k] = _mm512_and_si512(_mm512_srli_epi16(T[k], 4), m4);
		}
		if (B5) {
			const __m512i qh = PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk))
					      : q5_qh_perm16(t16_dword(G, 0, DT, blk, hd));
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
#pragma GCC unroll 2
				for (int h = 0; h < 2; h++) {
					const int sh = q45_hshift(k, h);
					const __m512i v = sh > 0 ? _mm512_slli_epi32(qh, sh) : sh < 0 ? _mm512_srli_epi32(qh, -sh) : qh;
					/* Q | (v & 0x10) */
					Q[4 * h + k] = _mm512_ternarylogic_epi32(Q[4 * h + k], v, m10, 0xF8);
				}
		}
		/* the 16 rows' d (and m): packed, the tails as one run (f16 d, or d | m dwords);
		 * else the block's first dword, gathered */
		__m512 d, m = _mm512_setzero_ps();
		if (MIN || !PK) {
			const __m512i g = PK ? _mm512_loadu_si512((const void *)(G->pk + 16 * blk + 64 * ndw))
					     : t16_dword(G, 0, DT, blk, 0);
			d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
			if (MIN)
				m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
		} else {
			d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G->pk + 16 * blk + 64 * ndw)));
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			const struct q8x *x = &xq[r][b];
			const i32u *q4 = (const i32u *)x->q;      /* broadcast from memory */
			const int32_t sx = (int32_t)x->s[0] + x->s[1];
			__m512i s = _mm512_set1_epi32(MIN ? 0 : -OFF * sx), s2 = _mm512_setzero_si512();
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				s = _mm512_dpbusd_epi32(s, Q[k], _mm512_set1_epi32(q4[k]));
				s2 = _mm512_dpbusd_epi32(s2, Q[4 + k], _mm512_set1_epi32(q4[4 + k]));
			}
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s, s2)), _mm512_mul_ps(d, _mm512_set1_ps(x->d)),
						 acc[r]);
			if (MIN)
				acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(x->d * (float)sx), acc[r]);
		}
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

RL_TGT_AVX512_VNNI AI void q45_t16_body(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			   const float *bias, const int DT, const int NR, uint32_t o0, uint32_t o1, int accumulate)
{
#define Q45_T16(PK, G, o, m) q45_t16_group(Y, ldy, xq, W, bias, DT, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q45_T16);
#undef Q45_T16
}

RL_TGT_AVX512_VNNI AI void q45_t16_rows(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			   const float *bias, const int NR, uint32_t o0, uint32_t o1, int accumulate)
{
	switch (W->dtype) {
	case RL_DT_Q4_0: q45_t16_body(Y, ldy, xq, W, bias, RL_DT_Q4_0, NR, o0, o1, accumulate); break;
	case RL_DT_Q4_1: q45_t16_body(Y, ldy, xq, W, bias, RL_DT_Q4_1, NR, o0, o1, accumulate); break;
	case RL_DT_Q5_0: q45_t16_body(Y, ldy, xq, W, bias, RL_DT_Q5_0, NR, o0, o1, accumulate); break;
	default: q45_t16_body(Y, ldy, xq, W, bias, RL_DT_Q5_1, NR, o0, o1, accumulate); break;
	}
}

RL_TGT_AVX512_VNNI void rl_qmm_q45_t16(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			       const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate)
{
#define Q45_T16_N(n) q45_t16_rows(Y, ldy, xq, W, bias, n, o0, o1, accumulate)
	RL_CASES_1_TO_8(nr, Q45_T16_N);
#undef Q45_T16_N
}

/* M + a 32's two half-sums (L[0..3], L[4..7] against the activations' 8 dwords x, from the
 * seeds sa, sb) as an int16 pair by the scale words scw: one vpdpwssd, a shift and a blend
 * instead of a vpmulld of the whole, exact while each half is an int16 (the callers' bounds) */
RL_TGT_AVX512_VNNI AI __m512i t16_pair_dot(__m512i M, const __m512i *L, const i32u *x, __m512i sa, __m512i sb, __m512i scw)
{
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		sa = _mm512_dpbusd_epi32(sa, L[k], _mm512_set1_epi32(x[k]));
		sb = _mm512_dpbusd_epi32(sb, L[k + 4], _mm512_set1_epi32(x[k + 4]));
	}
	return _mm512_dpwssd_epi32(M, _mm512_mask_blend_epi16(0xAAAAAAAAu, sa, _mm512_slli_epi32(sb, 16)), scw);
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
 * the activation rows.
 * Q5_K (DT; 176 bytes: Q4_K's head, then qh[32] and qs[128]) is the same with a fifth bit a
 * weight: bit c of qh[l] for weight 32c + l, so each qs run's sub-blocks 2p and 2p + 1 take
 * bits 2p and 2p + 1 of the qh run, one shift and mask a vector each. A half sub-block's sum
 * (16 x 31 x 128) does not fit int16, so its sub-block's exact int32 sum is converted and
 * meets its scale in one FMA into a float sum per super-block, which d meets once: 11
 * instructions a row and sub-block where int16 quarters took 14 (110M Q5_K_M prefill 128 at
 * one thread, Xeon VM, interleaved: 774-864 tok/s against 738-775). Each product is exact in
 * float (< 2^24) and so is the sum while it stays below 2^24: nearly always the integer sum's
 * bits. (With d inside each term instead, 1e-7 rounding differences flip 8-bit activations
 * downstream: Gemma 3's log-probs took another, no closer, path.) */
RL_TGT_AVX512_VNNI AI void q4k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			    const struct rl_wmat *W, const float *bias, const int DT, const int NR, const int PK,
			    const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const size_t rb = W->row_bytes, bb = DT == RL_DT_Q5_K ? 176 : 144, qs0 = DT == RL_DT_Q5_K ? 48 : 16;
	const uint32_t nb = W->cols / 256;
	const int l1 = NR <= 2 && rb <= 512;   /* T16_PREFETCH: L1 unless the groups outgrow it */
	const int amd = rl_cpu_is_amd();
	const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30), b4 = _mm512_set1_epi8(0x10);
	const __m512i mff = _mm512_set1_epi32(0x00FF00FF), lowb = _mm512_set1_epi32(0xFF);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * bb;
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
		__m512 F[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			M[r] = _mm512_setzero_si512();
			F[r] = _mm512_setzero_ps();
		}
#pragma GCC unroll 1
		for (int p = 0; p < 4; p++) {
			__m512i T[8], L[8], H[8];
			/* packed groups stream front to back, and at one or two rows AMD's hardware
			 * prefetcher keeps up (Zen 4: software prefetch cost 10%); Intel's does not
			 * (Xeon VM, 1B Q4_K_M one row: 1.23x with it); from three rows, where each
			 * block takes longer, prefetching into L2 pays on both */
			if (!PK || NR > 2 || !amd)
				t16_prefetch(pf + 4 * bb * p, 4 * bb, PK ? 0 : l1);
			t16_run(G, PK, RL_DT_Q4_K, off, qs0 + 32 * (size_t)p, T);
			if (DT == RL_DT_Q5_K) {
				/* the qh run, bits 2p and 2p + 1 of each byte moved to bits 0 and 1 */
				t16_run(G, PK, DT, off, 16, H);
				const __m128i n = _mm_cvtsi32_si128(2 * p);
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++)
					H[k] = _mm512_srl_epi16(H[k], n);
			}
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {                  /* sub-block 2p + h */
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++) {
					L[k] = _mm512_and_si512(h ? _mm512_srli_epi16(T[k], 4) : T[k], m4);
					if (DT == RL_DT_Q5_K)   /* bit h of the moved qh to bit 4 */
						L[k] = _mm512_or_si512(L[k], _mm512_and_si512(h ? _mm512_slli_epi16(H[k], 3)
												: _mm512_slli_epi16(H[k], 4), b4));
				}
				const int j = 2 * p + h;
				const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? s03 : s47, 8 * (j & 3)), lowb);
				const __m512i scw = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));   /* as words */
				const __m512 scf = _mm512_cvtepi32_ps(sc);
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					const i32u *q4 = (const i32u *)(xk[r][b].q + 32 * j);
					if (DT == RL_DT_Q5_K) {
						/* the sub-block's int32 sum, then in float by its scale (d at the end) */
						__m512i S0 = _mm512_setzero_si512(), S1 = _mm512_setzero_si512();
#pragma GCC unroll 4
						for (int k = 0; k < 4; k++) {
							S0 = _mm512_dpbusd_epi32(S0, L[k], _mm512_set1_epi32(q4[k]));
							S1 = _mm512_dpbusd_epi32(S1, L[k + 4], _mm512_set1_epi32(q4[k + 4]));
						}
						F[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(S0, S1)), scf, F[r]);
						continue;
					}
					/* each half of the sub-block <= 16 * 15 * 128 */
					M[r] = t16_pair_dot(M[r], L, q4, _mm512_setzero_si512(), _mm512_setzero_si512(), scw);
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, DT == RL_DT_Q5_K ? F[r] : _mm512_cvtepi32_ps(M[r])),
						 _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

RL_TGT_AVX512_VNNI AI void q4k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			   const struct rl_wmat *W, const float *bias, const int DT, const int NR, uint32_t o0, uint32_t o1,
			   int accumulate)
{
#define Q4K_GROUP(PK, G, o, m) q4k_t16_group(Y, ldy, xk, bp, W, bias, DT, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q4K_GROUP);
#undef Q4K_GROUP
}

/* Decode steps of 1..8 rows over Q2_K on AVX512-VNNI (packed groups, or rows as the file
 * has them transposed in registers), as q4k_t16_group. A super-block is 84 bytes: scales[16] (per 16
 * weights a 4-bit scale, and above it a 4-bit min), qs[64], f16 d, f16 dmin; weight 32c + l is
 * bits 2 (c % 4) of qs[32 (c / 4) + l]. Each 32-byte qs run (8 vectors of the 16 rows' dwords)
 * holds four 32s, each one shift and mask away; a 32's halves (sub-blocks 2c, 2c + 1) sum to at
 * most 16 x 3 x 128, so they go to int16 in a pair for one vpdpwssd by their scales as words,
 * the super-block's sum staying an integer. The mins: dmin x sum_i m_i bsum_i, 8 vpdpwssd of the
 * rows' min pairs against the activations' sums of 16 in pairs. */
RL_TGT_AVX512_VNNI AI void q2k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const struct rl_wmat *W,
			    const float *bias, const int NR, const int PK, const struct t16g *G, uint32_t o,
			    __mmask16 lanes, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const __m512i m2 = _mm512_set1_epi8(3), w0 = _mm512_set1_epi32(0x0000000F), w1 = _mm512_set1_epi32(0x000F0000);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 84;
		const char *pf = (const char *)W->data + (size_t)(o + 16) * rb + 16 * off;
		/* the 16 rows' scale bytes (4 dwords; pair i = bytes 2i, 2i + 1: sub-blocks 2i, 2i + 1),
		 * and d | dmin */
		__m512i SC[8];
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			SC[2 * i] = t16_dword(G, PK, RL_DT_Q2_K, off, 4 * (size_t)i);
			SC[2 * i + 1] = _mm512_srli_epi32(SC[2 * i], 16);
		}
		const __m512i g = t16_dword(G, PK, RL_DT_Q2_K, off, 80);
		const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
		const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
		{
			/* the min pairs as words (the bytes' high nibbles), against the bsums pairs */
			__m512i P[8];
#pragma GCC unroll 8
			for (int i = 0; i < 8; i++)
				P[i] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(SC[i], 4), w0),
						       _mm512_and_si512(_mm512_slli_epi32(SC[i], 4), w1));
#pragma GCC unroll 8
			for (int r = 0; r < NR; r++) {
				const i32u *bs = (const i32u *)xk[r][b].bsums;
				__m512i mi = _mm512_setzero_si512();
#pragma GCC unroll 8
				for (int i = 0; i < 8; i++)
					mi = _mm512_dpwssd_epi32(mi, P[i], _mm512_set1_epi32(bs[i]));
				acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(xk[r][b].d)), _mm512_cvtepi32_ps(mi), acc[r]);
			}
		}
		__m512i M[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
		for (int n = 0; n < 2; n++) {
			__m512i T[8];
			t16_prefetch(pf + 672 * n, 672, 0);
			t16_run(G, PK, RL_DT_Q2_K, off, 16 + 32 * (size_t)n, T);
#pragma GCC unroll 1
			for (int j = 0; j < 4; j++) {
				const int c = 4 * n + j;
				const __m128i sh = _mm_cvtsi32_si128(2 * j);
				__m512i L[8];
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++)
					L[k] = _mm512_and_si512(_mm512_srl_epi16(T[k], sh), m2);
				/* the scales of sub-blocks 2c, 2c + 1 (low nibbles) as words */
				const __m512i scw = _mm512_or_si512(_mm512_and_si512(SC[c], w0),
								    _mm512_and_si512(_mm512_slli_epi32(SC[c], 8), w1));
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					M[r] = t16_pair_dot(M[r], L, (const i32u *)(xk[r][b].q + 32 * c), _mm512_setzero_si512(),
							    _mm512_setzero_si512(), scw);
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(M[r])), _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

RL_TGT_AVX512_VNNI AI void q2k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const struct rl_wmat *W,
			   const float *bias, const int NR, uint32_t o0, uint32_t o1, int accumulate)
{
#define Q2K_GROUP(PK, G, o, m) q2k_t16_group(Y, ldy, xk, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q2K_GROUP);
#undef Q2K_GROUP
}

/* Decode steps of 1..8 rows over Q3_K on AVX512-VNNI (packed groups or the file's rows), as
 * q2k_t16_group. A super-block is 110 bytes: hmask[32], qs[64], 12 bytes of 16 6-bit scales,
 * f16 d; w = d (s - 32) (q2 + 4h - 4), q2 bits 2 (c % 4) of qs[32 (c / 4) + l] and h bit c of
 * hmask[l] for weight 32c + l. Here q = q2 + 4h (0..7) unsigned, and each half-sum of 16
 * starts from -4 x its activations' sum (seed, rl_qmm_kq_aux), so it is the sum over q - 4,
 * at most 16 x 4 x 128: an int16 for the pair's vpdpwssd by the signed scales. */
RL_TGT_AVX512_VNNI AI void q3k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			    const struct rl_wmat *W, const float *bias, const int NR, const int PK,
			    const struct t16g *G, uint32_t o, __mmask16 lanes, int accumulate)
{
	const size_t rb = W->row_bytes;
	const uint32_t nb = W->cols / 256;
	const __m512i m2 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4), k4 = _mm512_set1_epi8(0x0F);
	const __m512i k2 = _mm512_set1_epi8(0x03), lo16 = _mm512_set1_epi32(0xFFFF);
	__m512 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm512_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t off = (size_t)b * 110;
		const char *pf = (const char *)W->data + (size_t)(o + 16) * rb + 16 * off;
		/* the 16 scales (dec_q3_k's unpacking) as bytes s - 32, 4 to a dword: SC[i] holds
		 * scales 4i .. 4i + 3; then the pair c (scales 2c, 2c + 1) as signed words */
		const __m512i a0 = t16_dword(G, PK, RL_DT_Q3_K, off, 96), a1 = t16_dword(G, PK, RL_DT_Q3_K, off, 100);
		const __m512i a2 = t16_dword(G, PK, RL_DT_Q3_K, off, 104);
		const __m512i b32 = _mm512_set1_epi8(32);
		const __m512i SC[4] = {
			_mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(a0, k4), _mm512_slli_epi32(_mm512_and_si512(a2, k2), 4)), b32),
			_mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(a1, k4),
							_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 2), k2), 4)), b32),
			_mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a0, 4), k4),
							_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 4), k2), 4)), b32),
			_mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a1, 4), k4),
							_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, 6), k2), 4)), b32) };
		/* d: the f16 at byte 108; packed, the 16 rows' tails after the 27 vectors; else the
		 * high half of the dword at 106 (the dword at 108 would run past the row) */
		const __m512 d = PK ? _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(G->pk + 16 * off + 64 * 27)))
				    : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t16_dword(G, PK, RL_DT_Q3_K, off, 106), 16)));
		__m512i M[8], H[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			M[r] = _mm512_setzero_si512();
		t16_run(G, PK, RL_DT_Q3_K, off, 0, H);            /* hmask */
#pragma GCC unroll 1
		for (int n = 0; n < 2; n++) {
			__m512i T[8];
			t16_prefetch(pf + 880 * n, 880, 0);
			t16_run(G, PK, RL_DT_Q3_K, off, 32 + 32 * (size_t)n, T);
#pragma GCC unroll 1
			for (int j = 0; j < 4; j++) {
				const int c = 4 * n + j;
				const __m128i sh = _mm_cvtsi32_si128(2 * j), shc = _mm_cvtsi32_si128(c);
				__m512i L[8];
#pragma GCC unroll 8
				for (int k = 0; k < 8; k++)
					L[k] = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi16(T[k], sh), m2),
							       _mm512_and_si512(_mm512_slli_epi16(_mm512_srl_epi16(H[k], shc), 2), b2));
				/* scales 2c, 2c + 1 sign-extended to the words of each dword */
				const __m512i t = c & 1 ? _mm512_srli_epi32(SC[c / 2], 16) : SC[c / 2];
				const __m512i scw = _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(t, 24), 24), lo16),
								    _mm512_slli_epi32(_mm512_srai_epi32(_mm512_slli_epi32(t, 16), 24), 16));
#pragma GCC unroll 8
				for (int r = 0; r < NR; r++) {
					const int32_t *sd = seed + ((size_t)r * nb + b) * KQ_AUX + 2 * c;
					M[r] = t16_pair_dot(M[r], L, (const i32u *)(xk[r][b].q + 32 * c), _mm512_set1_epi32(sd[0]),
							    _mm512_set1_epi32(sd[1]), scw);
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(M[r])), _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

RL_TGT_AVX512_VNNI AI void q3k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			   const struct rl_wmat *W, const float *bias, const int NR, uint32_t o0, uint32_t o1,
			   int accumulate)
{
#define Q3K_GROUP(PK, G, o, m) q3k_t16_group(Y, ldy, xk, seed, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q3K_GROUP);
#undef Q3K_GROUP
}

/* Q4_K, Q5_K, Q2_K and Q3_K; bp: rl_qmm_kq_aux's (unread for Q2_K) */
RL_TGT_AVX512_VNNI void rl_qmm_q4k_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			       const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
			       int accumulate)
{
#define Q4K_T16_N(n) do {                                                                          \
	if (W->dtype == RL_DT_Q3_K)                                                                \
		q3k_t16_body(Y, ldy, xk, bp, W, bias, n, o0, o1, accumulate);                      \
	else if (W->dtype == RL_DT_Q2_K)                                                           \
		q2k_t16_body(Y, ldy, xk, W, bias, n, o0, o1, accumulate);                          \
	else if (W->dtype == RL_DT_Q5_K)                                                           \
		q4k_t16_body(Y, ldy, xk, bp, W, bias, RL_DT_Q5_K, n, o0, o1, accumulate);          \
	else                                                                                       \
		q4k_t16_body(Y, ldy, xk, bp, W, bias, RL_DT_Q4_K, n, o0, o1, accumulate);          \
} while (0)
	RL_CASES_1_TO_8(nr, Q4K_T16_N);
#undef Q4K_T16_N
}

/* Decode steps of 1..8 rows over Q6_K on AVX512-VNNI, as q4k_t16_group. A half super-block
 * (128 weights) is three 32-byte runs per row, the low nibbles of weights 0-31 and 64-95
 * (ql), of 32-63 and 96-127 (ql + 32) and their 2-bit tops (qh), each 8 vectors of the 16
 * rows' dwords (t16_run), recombined into unsigned 6-bit q (ggml's order). Per activation row
 * and sub-block of 16: 4 vpdpbusd seeded with -32 * the activations' sum (the q - 32 offset,
 * seed made once per call) into an exact int32 (up to 16 x 32 x 128: no int16 pair), then one
 * convert and one FMA by the 16 rows' int8 scales into a float sum per super-block (exact
 * while below 2^24, as q4k_t16_group's Q5_K), which meets d and the activations' scale once.
 * Two vpmulld by the integer scales instead (2 uops each on the port of the 512-bit
 * multiplies) made prefill 128 x 2048 x 2048 84 GMAC/s against 114 (medians of 8 interleaved
 * `bench split` runs, Xeon VM). */
RL_TGT_AVX512_VNNI AI void q6k_t16_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
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
		const __m512 d = PK ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G->pk + 16 * off + 64 * 52)))
				    : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t16_dword(G, 0, RL_DT_Q6_K, off, 206), 16)));
		__m512 sc[16];                 /* the int8 scales as floats, lane L: row L's */
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			__m512i g = t16_dword(G, PK, RL_DT_Q6_K, off, 192 + 4 * (size_t)i);
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				sc[4 * i + c] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(g, 24 - 8 * c), 24));
		}
		__m512 F[8];
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			F[r] = _mm512_setzero_ps();
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
						F[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S0), sc[j], F[r]);
						F[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S1), sc[j + 1], F[r]);
					}
				}
			}
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++)
			acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, F[r]), _mm512_set1_ps(xk[r][b].d), acc[r]);
	}
	t16_store(Y, ldy, acc, NR, o, lanes, bias, accumulate);
}

RL_TGT_AVX512_VNNI AI void q6k_t16_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			   const struct rl_wmat *W, const float *bias, const int NR, uint32_t o0, uint32_t o1,
			   int accumulate)
{
#define Q6K_GROUP(PK, G, o, m) q6k_t16_group(Y, ldy, xk, seed, W, bias, NR, PK, G, o, m, accumulate)
	T16_GROUPS(Q6K_GROUP);
#undef Q6K_GROUP
}

/* seed: rl_qmm_kq_aux's */
RL_TGT_AVX512_VNNI void rl_qmm_q6k_t16(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *seed,
			       const struct rl_wmat *W, const float *bias, uint32_t nr, uint32_t o0, uint32_t o1,
			       int accumulate)
{
#define Q6K_T16_N(n) q6k_t16_body(Y, ldy, xk, seed, W, bias, n, o0, o1, accumulate)
	RL_CASES_1_TO_8(nr, Q6K_T16_N);
#undef Q6K_T16_N
}
