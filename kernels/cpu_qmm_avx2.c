/* cpu_qmm_avx2.c — the integer kernels for AVX2 (+FMA, F16C), and the decoded-row path.
 *
 * Decode steps (1..8 activation rows) are bounded by the bytes of weights streamed, so they
 * compute on the stored form: the activation rows quantized to 8 bits once per call
 * (cpu_qmm_act.c), each weight block dotted in integers and scaled to float once per block of
 * 32, each block loaded once for all the rows.
 *   - lane-per-row (q8_0_t8_group, q4k_t8_group, q4k_t8k_half, q6k_t8p_half, q6k_t8k_half,
 *     q45_t8_group for Q4_0/Q4_1/Q5_0/Q5_1):
 *     eight weight rows at a time, one output row per lane, so that block and sub-block scales
 *     meet whole lanes; over packed groups (rl_cpu_wmat_pack) the lanes are loads, over
 *     unpacked rows an 8x8 dword transpose in registers (t8_load). Q8_0 multiplies in 16-bit
 *     pairs (q8_0_pairs); eight rows over a packed half read rotated activations (struct q8r,
 *     q8kr), loads instead of broadcasts.
 *   - row at a time (q8_0_row1): one activation row over unpacked Q8_0, four accumulators a
 *     row, so that the matrix streams as one sequential run the prefetcher follows.
 *   - tiles (q4_k_tile, q6_k_tile): four weight rows against up to four activation rows, dots
 *     along the row, for unpacked K-quant rows.
 * Prefill over packed groups runs the same lane-per-row kernels 8 rows at a time (the
 * driver's *_many). The decoded-row path (rl_qmm_rows_f32) serves every other type: a weight
 * row decoded to fp32 (rl_qmm_row_avx2, else the type table's decoder) and dotted in fp32.
 * Accuracy: the 8-bit activations' rounding, about 0.3% of a row's dot magnitude (as ggml);
 * tests/test_qmatmul.c holds the tolerances.
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

/* One Q8_0 weight row against one activation row: four accumulators over consecutive blocks,
 * so the FMA latency is hidden inside the row and the row streams alone (cpu_qmm.c's table says why). */
RL_TGT_AVX2 AI float q8_0_row1(const uint8_t *w, const struct q8x *x, uint32_t nb)
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

/* The 8-row groups of the AVX2 lane-per-row kernels (q8_0_t8_body, q4k_t8_group): rp[l] =
 * row o + l, a group past o1 repeating its last row (whose lanes t8_store leaves alone). */
RL_TGT_AVX2 AI void t8_rows(const struct rl_wmat *W, uint32_t o, uint32_t o1, const uint8_t **rp)
{
	for (uint32_t l = 0; l < 8; l++)
		rp[l] = (const uint8_t *)W->data + (size_t)(o + l < o1 ? o + l : o1 - 1) * W->row_bytes;
}

/* T[k], lane L = bytes off+4k .. off+4k+3 of row rp[L] (32 bytes of each of 8 rows, an 8x8
 * dword transpose in registers). */
RL_TGT_AVX2 AI void t8_load(const uint8_t *const *rp, size_t off, __m256i *T)
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
RL_TGT_AVX2 AI void t8_store(float *Y, size_t ldy, const __m256 *acc, const int NR, uint32_t o, uint32_t l0, uint32_t n,
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

/* sum_i w_i x_i over a Q4_K super-block against a q8k block:
 * d*dx * sum_s sc_s (q_s . xq_s) - dmin*dx * sum_s m_s bsum32_s, both sums in integers */
RL_TGT_AVX2 AI void q4_k_tile(const uint8_t *const *w, int nw, const struct q8k *const *x, int nr,
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



/* The 8 rows rp[] from dword 0 to n_dw (a multiple of 8), rotated: dst[t] = dword t of the
 * 8 rows, twice over (the layout of struct q8kr and q8r) */
RL_TGT_AVX2 static void rot_rows(const uint8_t *const *rp, uint32_t n_dw, int32_t (*dst)[16])
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
RL_TGT_AVX2 void rl_qmm_q8kr_make(const struct q8k *const *xk, const int32_t *bp, uint32_t nb, struct q8kr *xr)
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
RL_TGT_AVX2 AI void t8r_unrotate(const __m256 *acc, __m256 *out)
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
RL_TGT_AVX2 AI void t8_store_rows(float *Y, size_t ldy, const __m256 *acc, const int ROT, const int NR, uint32_t o,
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
RL_TGT_AVX2 AI __m256 f16_lo8(__m256i g)
{
	return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packs_epi32(
		_mm256_srai_epi32(_mm256_slli_epi32(g, 16), 16), _mm256_setzero_si256()), 0x08)));
}

/* dword off of each of the 8 rows */
RL_TGT_AVX2 AI __m256i ld32x8(const uint8_t *const *rp, size_t off)
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
RL_TGT_AVX2 AI uint32_t t8_half(const struct rl_wmat *W, uint32_t o, struct t8g *G)
{
	const uint32_t g = o & ~15u, h = (o - g) / 8, ndw = pack_dwords(W->dtype);
	G->pk = (const uint8_t *)W->data + (size_t)g * W->row_bytes + 32 * h;
	G->tl = (const uint8_t *)W->data + (size_t)g * W->row_bytes + 64 * ndw + 8 * h * (W->blk_bytes - 4 * ndw);
	return g + 8 * h;
}

/* T[k], lane L = dword off/4 + k (k < 8) of row L's block of type dt at byte blk of a row */
RL_TGT_AVX2 AI void t8_run(const struct t8g *G, const int PK, const int dt, size_t blk, size_t off, __m256i *T)
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
RL_TGT_AVX2 AI __m256i t8_dword(const struct t8g *G, const int PK, const int dt, size_t blk, size_t off)
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

/* T[k], lane L = dword k of bytes off .. off + 15 of row rp[L] (a 4x4 dword transpose in each
 * 128-bit half; 16 bytes a row, so a row's last block reads nothing past it) */
RL_TGT_AVX2 AI void t8_load16(const uint8_t *const *rp, size_t off, __m256i *T)
{
	__m256i z[4];
#pragma GCC unroll 4
	for (int l = 0; l < 4; l++)
		z[l] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rp[l] + off))),
					       _mm_loadu_si128((const __m128i *)(rp[l + 4] + off)), 1);
	const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
	const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
	T[0] = _mm256_unpacklo_epi64(t0, t2);
	T[1] = _mm256_unpackhi_epi64(t0, t2);
	T[2] = _mm256_unpacklo_epi64(t1, t3);
	T[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* T[k], lane L = dword k of row L's 32 weights of IQ4_NL (its block at blk) or IQ4_XS (sub-block
 * j of its super-block at blk) looked up to Q8_0's layout: weights 4k..4k+3 (the low nibbles
 * of qs dword k, k < 4) and 16+4(k-4).. (the high ones) */
RL_TGT_AVX2 AI void iq4_t8_run(const struct t8g *G, const int PK, const int DT, size_t blk, uint32_t j, __m256i *T)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	const __m256i lv = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)iq4nl_levels));
	const size_t qs = DT == RL_DT_IQ4_XS ? 8 + 16 * (size_t)j : 2;   /* the 16 bytes' offset in the block */
	__m256i V[4];
	if (PK) {
		/* IQ4_XS: its header's two dwords, then qs (pack_dwords) */
		const uint8_t *p = G->pk + 16 * blk + 64 * (DT == RL_DT_IQ4_XS ? 2 + 4 * (size_t)j : 0);
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
			V[k] = _mm256_loadu_si256((const __m256i *)(p + 64 * k));
	} else {
		t8_load16(G->rp, blk + qs, V);
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		T[k] = _mm256_shuffle_epi8(lv, _mm256_and_si256(V[k], m4));
		T[4 + k] = _mm256_shuffle_epi8(lv, _mm256_and_si256(_mm256_srli_epi16(V[k], 4), m4));
	}
}

/* sc[j], lane L: d * (ls_j - 32), the scales of the 8 sub-blocks of an IQ4_XS super-block whose
 * header dwords are lane L of g (f16 d | scales_h << 16) and sl (scales_l): ls_j's low 4 bits
 * are bits 4j.. of sl, its top 2 bits 2j.. of scales_h. Once a super-block, for its 8 blocks. */
RL_TGT_AVX2 AI void iq4xs_scales8(__m256i g, __m256i sl, __m256 *sc)
{
	const __m256 d = f16_lo8(g);
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++) {
		const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(15));
		const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(g, 12 + 2 * j), _mm256_set1_epi32(0x30));
		sc[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32))));
	}
}

/* Activation block b of a row as int16 pairs, in the order q8_0_t8_group's even/odd weight
 * vectors take them: dword 2k = (x[4k], x[4k+2]), dword 2k+1 = (x[4k+1], x[4k+3]). */
RL_TGT_AVX2 void rl_qmm_q8_0_pairs(const struct q8x *x, uint32_t nb, int16_t *p /* [nb][32] */)
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

/* xr[b] for the blocks b < nb of the 8 rows xq[] with their pairs xp[] */
RL_TGT_AVX2 void rl_qmm_q8r_make(const struct q8x *const *xq, const int16_t *const *xp, uint32_t nb, struct q8r *xr)
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

/* Decode steps over Q8_0 (and IQ4_NL and IQ4_XS, DT: their nibbles looked up to the levels,
 * iq4_t8_run, a block of 32 each 32 of IQ4_XS with its scale d * (ls - 32)) on AVX2 (no VNNI), eight weight rows at a time, one output row per
 * lane, as q8_0_t16_group: vector k of a block holds bytes 4k..4k+3 of each row (loaded as
 * packed, else transposed in registers, t8_run), and is split into its even and odd bytes
 * sign-extended to int16 (E = (w[4k], w[4k+2]), O = (w[4k+1], w[4k+3]) per lane, three
 * shifts); then for every activation row, vpmaddwd of E and O against the row's broadcast
 * int16 pairs (rl_qmm_q8_0_pairs), added into that row's int32 lanes. k runs outside and the rows
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
RL_TGT_AVX2 AI void q8_0_t8_group(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			   const struct q8r *xr, const int ROT, const struct rl_wmat *W, const float *bias,
			   const int DT, const int NR, const int PK, const struct t8g *G, uint32_t o, uint32_t l0,
			   uint32_t n, int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	/* bytes a row per 32 weights (IQ4_XS: 136 a super-block of 8 of them) */
	const size_t bb = DT == RL_DT_Q8_0 ? 34 : DT == RL_DT_IQ4_NL ? 18 : 17;
	/* the next 16 (packed: the half's share of them) or 8 rows, one contiguous run */
	const size_t ahead = PK ? (size_t)((o & ~15u) + 16) * W->row_bytes + (o & 8) * bb : (size_t)(o + 8) * W->row_bytes;
	__m256 acc[8], xs[8];              /* xs: IQ4_XS's sub-block scales, a super-block's */
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		/* the block at byte blk of a row (IQ4_XS: the super-block, and its sub-block j) */
		const size_t blk = DT == RL_DT_IQ4_XS ? (size_t)(b / 8) * 136 : (size_t)b * bb;
		const uint32_t j = b % 8;
		if (DT == RL_DT_IQ4_XS && j == 0)
			iq4xs_scales8(t8_dword(G, PK, DT, blk, 0), t8_dword(G, PK, DT, blk, 4), xs);
		/* into L2, a slice per block: 8 rows' blocks are 272 bytes, five lines (a loop
		 * over them mispredicted); IQ4_NL's 144 and IQ4_XS's 136, three */
		const char *pf = (const char *)base + ahead + (PK ? 16 : 8) * (size_t)b * bb;
#pragma GCC unroll 5
		for (int l = 0; l < 5; l++)
			if (DT == RL_DT_Q8_0 || l < 3)
				_mm_prefetch(pf + 64 * l, _MM_HINT_T1);
		__m256i T[8];                  /* stored by the compiler: the rows' sums keep the registers */
		if (DT == RL_DT_Q8_0)
			t8_run(G, PK, RL_DT_Q8_0, blk, 2, T);
		else
			iq4_t8_run(G, PK, DT, blk, j, T);
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
		const __m256 dw = DT == RL_DT_IQ4_XS ? xs[j]
				: PK ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G->tl + 16 * blk)))
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

RL_TGT_AVX2 AI void q8_0_t8_body(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			  const struct q8r *xr, const struct rl_wmat *W, const float *bias, const int DT, const int NR,
			  uint32_t o0, uint32_t o1, int accumulate)
{
#define Q8_0_T8(PK, G, o, l0, n) do {                                                              \
	if (PK && NR == 8 && xr)   /* packed halves of 8 rows: rotated */                          \
		q8_0_t8_group(Y, ldy, xq, xp, xr, 1, W, bias, DT, NR, 1, G, o, l0, n, accumulate); \
	else                                                                                       \
		q8_0_t8_group(Y, ldy, xq, xp, NULL, 0, W, bias, DT, NR, PK, G, o, l0, n, accumulate); \
} while (0)
	T8_GROUPS(Q8_0_T8);
#undef Q8_0_T8
}

/* xp: the rows' rl_qmm_q8_0_pairs */
RL_TGT_AVX2 void rl_qmm_q8_0_t8(float *Y, size_t ldy, const struct q8x *const *xq, const int16_t *const *xp,
			      const struct q8r *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
			      uint32_t o0, uint32_t o1, int accumulate)
{
#define Q8_0_T8_N(n) do {                                                                          \
	if (W->dtype == RL_DT_IQ4_NL)                                                              \
		q8_0_t8_body(Y, ldy, xq, xp, n == 8 ? xr : NULL, W, bias, RL_DT_IQ4_NL, n, o0, o1, accumulate); \
	else if (W->dtype == RL_DT_IQ4_XS)                                                         \
		q8_0_t8_body(Y, ldy, xq, xp, n == 8 ? xr : NULL, W, bias, RL_DT_IQ4_XS, n, o0, o1, accumulate); \
	else                                                                                       \
		q8_0_t8_body(Y, ldy, xq, xp, n == 8 ? xr : NULL, W, bias, RL_DT_Q8_0, n, o0, o1, accumulate); \
} while (0)
	RL_CASES_1_TO_8(nr, Q8_0_T8_N);
#undef Q8_0_T8_N
}

/* ------------------------------------------------------------ Q4_0, Q4_1, Q5_0, Q5_1 */

/* q5_qh_perm on each lane (the qh of unpacked rows) */
RL_TGT_AVX2 AI __m256i q5_qh_perm8(__m256i x)
{
	__m256i t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi32(x, 7)), _mm256_set1_epi32(0x00AA00AA));
	x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi32(t, 7)));
	t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi32(x, 14)), _mm256_set1_epi32(0x0000CCCC));
	return _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi32(t, 14)));
}

/* bit 4 of each byte: the fifth bit of the weight in nibble h of that byte of qs dword k,
 * from a q5_qh_perm'd qh */
RL_TGT_AVX2 AI __m256i q45_hbit8(__m256i qh, int k, int h)
{
	const int s = q45_hshift(k, h);
	const __m256i v = s > 0 ? _mm256_slli_epi32(qh, s) : s < 0 ? _mm256_srli_epi32(qh, -s) : qh;
	return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Decode steps of 1..8 rows over the 32-weight 4/5-bit types (q45_type) on AVX2, eight weight
 * rows at a time, one output row per lane (as q8_0_t8_group): a block's 16 bytes of qs are 4
 * vectors of the 8 rows' dwords (packed: loads; else a 4x4 transpose per half, t8_load16),
 * whose low and high nibbles are the weights 4k..4k+3 and 16+4k..16+4k+3, the fifth bits or'd
 * in from qh (q45_hbit8). Per activation row and block: 8 vpmaddubsw (unsigned q against the
 * row's broadcast bytes) added in int16 (4 bits: 8 * 2 * 15 * 127 fits; 5 bits: 4 at a time),
 * one vpmaddwd by ones to int32; then Q4_0/Q5_0 subtract off * the activation block's sum (so
 * that the integer sum is exactly sum (q - off) x) and meet d * dx in one FMA, Q4_1/Q5_1 add
 * m * (dx * sum x) in a second. The weights are split once for all the rows (rows inside).
 * A lane's arithmetic is the same whatever NR, and the same as q45_t16_group's. */
RL_TGT_AVX2 AI void q45_t8_group(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			  const float *bias, const int DT, const int NR, const int PK, const struct t8g *G,
			  uint32_t o, uint32_t l0, uint32_t n, int accumulate)
{
	const uint8_t *base = W->data;
	const uint32_t nb = W->cols / 32;
	const int B5 = q45_bits5(DT), MIN = q45_min(DT), OFF = q45_off(DT);
	const size_t bb = W->blk_bytes, hd = pack_head(DT), qs = hd + (B5 ? 4 : 0);
	/* the next 16 (packed: the half's share of them) or 8 rows, one contiguous run */
	const size_t ahead = PK ? (size_t)((o & ~15u) + 16) * W->row_bytes + (o & 8) * bb : (size_t)(o + 8) * W->row_bytes;
	const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
	__m256 acc[8];
#pragma GCC unroll 8
	for (int r = 0; r < NR; r++)
		acc[r] = _mm256_setzero_ps();
	for (uint32_t b = 0; b < nb; b++) {
		const size_t blk = (size_t)b * bb;
		/* into L2, a slice per block */
		const char *pf = (const char *)base + ahead + (PK ? 16 : 8) * blk;
		for (const char *q = (const char *)((uintptr_t)pf & ~(uintptr_t)63); q < pf + 8 * bb; q += 64)
			_mm_prefetch(q, _MM_HINT_T1);
		__m256i T[4], Q[8];
		if (PK) {
			const uint8_t *p = G->pk + 16 * blk + (B5 ? 64 : 0);
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				T[k] = _mm256_loadu_si256((const __m256i *)(p + 64 * k));
		} else {
			t8_load16(G->rp, blk + qs, T);
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			Q[k] = _mm256_and_si256(T[k], m4);
			Q[4 + k] = _mm256_and_si256(_mm256_srli_epi16(T[k], 4), m4);
		}
		if (B5) {
			const __m256i qh = PK ? _mm256_loadu_si256((const __m256i *)(G->pk + 16 * blk))
					      : q5_qh_perm8(ld32x8(G->rp, blk + hd));
#pragma GCC unroll 4
			for (int k = 0; k < 4; k++) {
				Q[k] = _mm256_or_si256(Q[k], q45_hbit8(qh, k, 0));
				Q[4 + k] = _mm256_or_si256(Q[4 + k], q45_hbit8(qh, k, 1));
			}
		}
		/* the 8 rows' d (and m): packed, the tails (f16 d, or d | m dwords) as one run; else
		 * the block's first dword */
		__m256 d, m = _mm256_setzero_ps();
		if (MIN || !PK) {
			const __m256i g = PK ? _mm256_loadu_si256((const __m256i *)(G->tl + 16 * blk)) : ld32x8(G->rp, blk);
			d = f16_lo8(g);
			if (MIN)
				m = f16_lo8(_mm256_srli_epi32(g, 16));
		} else {
			d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G->tl + 16 * blk)));
		}
#pragma GCC unroll 8
		for (int r = 0; r < NR; r++) {
			const struct q8x *x = &xq[r][b];
			const i32u *q4 = (const i32u *)x->q;
			__m256i s;
			if (B5) {
				__m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(Q[0], _mm256_set1_epi32(q4[0])),
							     _mm256_maddubs_epi16(Q[4], _mm256_set1_epi32(q4[4])));
				a = _mm256_add_epi16(a, _mm256_maddubs_epi16(Q[1], _mm256_set1_epi32(q4[1])));
				a = _mm256_add_epi16(a, _mm256_maddubs_epi16(Q[5], _mm256_set1_epi32(q4[5])));
				__m256i c = _mm256_add_epi16(_mm256_maddubs_epi16(Q[2], _mm256_set1_epi32(q4[2])),
							     _mm256_maddubs_epi16(Q[6], _mm256_set1_epi32(q4[6])));
				c = _mm256_add_epi16(c, _mm256_maddubs_epi16(Q[3], _mm256_set1_epi32(q4[3])));
				c = _mm256_add_epi16(c, _mm256_maddubs_epi16(Q[7], _mm256_set1_epi32(q4[7])));
				s = _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(c, ones));
			} else {
				__m256i a = _mm256_maddubs_epi16(Q[0], _mm256_set1_epi32(q4[0]));
#pragma GCC unroll 8
				for (int k = 1; k < 8; k++)
					a = _mm256_add_epi16(a, _mm256_maddubs_epi16(Q[k], _mm256_set1_epi32(q4[k])));
				s = _mm256_madd_epi16(a, ones);
			}
			const int32_t sx = (int32_t)x->s[0] + x->s[1];
			const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(x->d));
			if (MIN) {
				acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc[r]);
				acc[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(x->d * (float)sx), acc[r]);
			} else {
				s = _mm256_sub_epi32(s, _mm256_set1_epi32(OFF * sx));
				acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc[r]);
			}
		}
	}
	t8_store(Y, ldy, acc, NR, o, l0, n, bias, accumulate);
}

RL_TGT_AVX2 AI void q45_t8_body(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			 const float *bias, const int DT, const int NR, uint32_t o0, uint32_t o1, int accumulate)
{
#define Q45_T8(PK, G, o, l0, n) q45_t8_group(Y, ldy, xq, W, bias, DT, NR, PK, G, o, l0, n, accumulate)
	T8_GROUPS(Q45_T8);
#undef Q45_T8
}

RL_TGT_AVX2 AI void q45_t8_rows(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			 const float *bias, const int NR, uint32_t o0, uint32_t o1, int accumulate)
{
	switch (W->dtype) {
	case RL_DT_Q4_0: q45_t8_body(Y, ldy, xq, W, bias, RL_DT_Q4_0, NR, o0, o1, accumulate); break;
	case RL_DT_Q4_1: q45_t8_body(Y, ldy, xq, W, bias, RL_DT_Q4_1, NR, o0, o1, accumulate); break;
	case RL_DT_Q5_0: q45_t8_body(Y, ldy, xq, W, bias, RL_DT_Q5_0, NR, o0, o1, accumulate); break;
	default: q45_t8_body(Y, ldy, xq, W, bias, RL_DT_Q5_1, NR, o0, o1, accumulate); break;
	}
}

RL_TGT_AVX2 void rl_qmm_q45_t8(float *Y, size_t ldy, const struct q8x *const *xq, const struct rl_wmat *W,
			     const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate)
{
#define Q45_T8_N(n) q45_t8_rows(Y, ldy, xq, W, bias, n, o0, o1, accumulate)
	RL_CASES_1_TO_8(nr, Q45_T8_N);
#undef Q45_T8_N
}

/* A Q4_K super-block's header for the 8 rows of a lane set (at byte off of a row): d and
 * dmin; the 8 sub-block scales as words in both halves of each dword (scw, vpmaddwd's
 * operand); the mins as word pairs (m0, m2), (m1, m3), (m4, m6), (m5, m7) (P), as
 * q4k_min_pairs pairs the activations' sums. */
RL_TGT_AVX2 AI void q4k_t8_head(const struct t8g *G, const int PK, size_t off, __m256 *d, __m256 *dmin, __m256i *scw,
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
RL_TGT_AVX2 AI __m256 q4k_t8_finish_v(__m256 acc, __m256i M, const __m256i *P, const __m256i *bq, __m256 d, __m256 dmin,
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
RL_TGT_AVX2 AI __m256 q4k_t8_finish(__m256 acc, __m256i M, const __m256i *P, const int32_t *bq, __m256 d, __m256 dmin,
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
RL_TGT_AVX2 AI void q4k_t8_group(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
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
RL_TGT_AVX2 AI __m256i kq_act(const struct q8k *const *xk, const struct q8kr *xr, const int ROT, int r, uint32_t b, int t)
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
RL_TGT_AVX2 AI void q4k_t8k_half(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
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

RL_TGT_AVX2 AI void q4k_t8_body(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
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

/* bp: rl_qmm_kq_aux's */
RL_TGT_AVX2 void rl_qmm_q4k_t8(float *Y, size_t ldy, const struct q8k *const *xk, const int32_t *bp,
			     const struct q8kr *xr, const struct rl_wmat *W, const float *bias, uint32_t nr,
			     uint32_t o0, uint32_t o1, int accumulate)
{
#define Q4K_T8_N(n) q4k_t8_body(Y, ldy, xk, bp, n == 8 ? xr : NULL, W, bias, n, o0, o1, accumulate)
	RL_CASES_1_TO_8(nr, Q4K_T8_N);
#undef Q4K_T8_N
}

/* A Q6_K super-block's scales for the 8 rows of a packed half (at byte off of a row): scale j
 * of each row as a word in both halves of its lane (scw[16]), scales 2i, 2i + 1 as a word
 * pair (pair[8]); returns the rows' d (the half's 8 of the group's 16 f16 after its 52
 * vectors). The one owner of these, with q6k_t8_finish, for q6k_t8p_half and q6k_t8k_half. */
RL_TGT_AVX2 AI __m256 q6k_t8_head(const struct t8g *G, size_t off, __m256i *scw, __m256i *pair)
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
RL_TGT_AVX2 AI __m256 q6k_t8_finish_v(__m256 acc, __m256i M, const __m256i *pair, const __m256i *bs, __m256 ddx)
{
	__m256i c = _mm256_madd_epi16(pair[0], bs[0]);
#pragma GCC unroll 7
	for (int i = 1; i < 8; i++)
		c = _mm256_add_epi32(c, _mm256_madd_epi16(pair[i], bs[i]));
	__m256i t = _mm256_sub_epi32(M, _mm256_slli_epi32(c, 5));
	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), ddx, acc);
}

/* q6k_t8_finish_v for one activation row's block xb */
RL_TGT_AVX2 AI __m256 q6k_t8_finish(__m256 acc, __m256i M, const __m256i *pair, const struct q8k *xb, __m256 d)
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
RL_TGT_AVX2 AI __m256i q6k_q8(__m256i TL, __m256i TH, const int m)
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
RL_TGT_AVX2 AI void q6k_t8p_half(float *Y, const struct q8k *x, const struct rl_wmat *W, const float *bias,
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
RL_TGT_AVX2 AI void q6k_t8_q(const uint8_t *tl, const uint8_t *th, const int m, __m256i *Q)
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
RL_TGT_AVX2 AI void q6k_t8k_half(float *Y, size_t ldy, const struct q8k *const *xk, const struct q8kr *xr, const int ROT,
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
RL_TGT_AVX2 void rl_qmm_q6k_t8p(float *Y, size_t ldy, const struct q8k *const *xk, const struct q8kr *xr,
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
	RL_CASES_1_TO_8(nr, Q6K_T8);
#undef Q6K_T8
}

/* Q6_K super-block (210 bytes, 256 weights): 128 bytes low 4 bits, 64 bytes high 2 bits,
 * 16 int8 scales (one per 16 weights), f16 d; w = d * sc * (q - 32). As ggml:
 * d*dx * (sum_j sc_j (q_j . xq_j) - 32 sum_j sc_j bsum_j), all in integers. */
RL_TGT_AVX2 AI void q6_k_tile(const uint8_t *const *w, int nw, const struct q8k *const *x, int nr,
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

RL_TGT_AVX2 static float dot_f32_avx2(const float *a, const float *b, uint32_t n)
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


/* Row decoders for the tile path, 8 weights per instruction: the same values as the
 * table's scalar decoders (products of the same two floats, or exact conversions). */
RL_TGT_AVX2 int rl_qmm_row_avx2(const struct rl_wmat *W, const uint8_t *row, float *out)
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

/* ------------------------------------------------------------ entry loops -------- */

RL_TGT_AVX2 void rl_qmm_q8_0_row1(float *Y, const struct q8x *x, const struct rl_wmat *W, const float *bias,
				 uint32_t o0, uint32_t o1, int accumulate)
{
	const uint32_t nb = W->cols / 32;
	for (uint32_t o = o0; o < o1; o++) {
		float v = q8_0_row1((const uint8_t *)W->data + (size_t)o * W->row_bytes, x, nb);
		v += bias ? bias[o] : 0;
		Y[o] = accumulate ? Y[o] + v : v;
	}
}

/* Unpacked K-quant rows: one activation row takes four weight rows at a time; more rows
 * take one weight row at a time against groups of 4 (their integer sums and accumulators for
 * 4 rows fit the 16 vector registers; 8 would spill; the weight block is decoded again per
 * group, from L1). */
RL_TGT_AVX2 void rl_qmm_kq_tiles(float *Y, size_t ldy, const struct q8k *const *xk, const struct rl_wmat *W,
				const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate)
{
	const uint32_t nb = W->cols / 256;
	float res[8];
	int nw = nr == 1 ? 4 : 1;
	for (uint32_t o = o0; o < o1; o += (uint32_t)nw) {
		if (o + (uint32_t)nw > o1)
			nw = 1;
		const uint8_t *w[4];
		for (int j = 0; j < nw; j++)
			w[j] = (const uint8_t *)W->data + (size_t)(o + j) * W->row_bytes;
		const int n = (int)nr;
#define TILE_CALL(fn) do { if (nw == 4) { fn(w, 4, xk, 1, nb, res); break; }                     \
	if (n > 4) {                                                                               \
		fn(w, 1, xk, 4, nb, res);                                                          \
		switch (n - 4) { case 1: fn(w, 1, xk + 4, 1, nb, res + 4); break;                  \
		case 2: fn(w, 1, xk + 4, 2, nb, res + 4); break;                                   \
		case 3: fn(w, 1, xk + 4, 3, nb, res + 4); break;                                   \
		default: fn(w, 1, xk + 4, 4, nb, res + 4); break; }                                \
		break;                                                                             \
	}                                                                                          \
	switch (n) { case 1: fn(w, 1, xk, 1, nb, res); break; case 2: fn(w, 1, xk, 2, nb, res); break; \
	case 3: fn(w, 1, xk, 3, nb, res); break; default: fn(w, 1, xk, 4, nb, res); break; } } while (0)
		if (W->dtype == RL_DT_Q4_K)
			TILE_CALL(q4_k_tile);
		else
			TILE_CALL(q6_k_tile);
#undef TILE_CALL
		put_dots(Y, ldy, res, nw, nr, o, bias, accumulate);
	}
}

/* Any type: each weight row decoded to fp32 (row: [W->cols]), dotted with each activation row */
RL_TGT_AVX2 void rl_qmm_rows_f32(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
				const float *bias, uint32_t nr, uint32_t o0, uint32_t o1, int accumulate, float *row)
{
	for (uint32_t o = o0; o < o1; o++) {
		rl_cpu_wmat_row(W, o, row);
		for (uint32_t r = 0; r < nr; r++) {
			float v = dot_f32_avx2(row, X + (size_t)r * ldx, W->cols) + (bias ? bias[o] : 0);
			float *y = Y + (size_t)r * ldy + o;
			*y = accumulate ? *y + v : v;
		}
	}
}
