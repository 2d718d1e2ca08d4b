/* cpu_qmm_kx_tmpl.h — the dot and row loop of cpu_qmm_kx.c, written once and included there
 * per ISA with KX_TGT (its target attribute), KX_FN(name) (the name with its ISA suffix), KX_W
 * (256: 32 weights a vector; 512: 64) and, at 512, KX_MADD(s, p, sc) (s + the word pairs p
 * times the scales sc, as int32 lanes). Every ISA reaches the same eight int32 lanes a
 * super-block (exact integers) and does the same float operations on them, so the same bits. */

#if KX_W == 256
/* what kx_dot takes beside the super-block: nothing at this width (S's vectors are its operands) */
struct KX_FN(kx_pb) {
	char none;
};

KX_TGT AI void KX_FN(kx_prep)(const struct kx_sb *S, struct KX_FN(kx_pb) *P)
{
}

/* a super-block's sums over q x times the scales against one activation row's block xb, as
 * eight int32 lanes (lane k: words 2k, 2k + 1 of each vector's vpmaddwd) */
KX_TGT AI __m256i KX_FN(kx_dot)(const struct kx_sb *S, const struct KX_FN(kx_pb) *P, const struct q8k *xb)
{
	__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++) {
		const __m256i x = _mm256_loadu_si256((const __m256i *)(xb->q + 32 * c));
		s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(S->q[c], x), S->sc[c]));
	}
	return s;
}
#else
/* the super-block two vectors to a zmm (chunks 2i, 2i + 1) */
struct KX_FN(kx_pb) {
	__m512i q[4], sc[4];
};

KX_TGT AI void KX_FN(kx_prep)(const struct kx_sb *S, struct KX_FN(kx_pb) *P)
{
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		P->q[i] = _mm512_inserti64x4(_mm512_castsi256_si512(S->q[2 * i]), S->q[2 * i + 1], 1);
		P->sc[i] = _mm512_inserti64x4(_mm512_castsi256_si512(S->sc[2 * i]), S->sc[2 * i + 1], 1);
	}
}

/* as the 256-bit kx_dot: the even chunks in the low half, the odd in the high, added */
KX_TGT AI __m256i KX_FN(kx_dot)(const struct kx_sb *S, const struct KX_FN(kx_pb) *P, const struct q8k *xb)
{
	__m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		s = KX_MADD(s, _mm512_maddubs_epi16(P->q[i], _mm512_loadu_si512((const void *)(xb->q + 64 * i))), P->sc[i]);
	return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}
#endif

/* Y[r, o] for the rows r < nr, outputs [o0, o1): weight row o's super-blocks decoded once a
 * pass, each against up to KX_ROWS activation rows (x: row r's blocks at x + r * nb). Per row
 * and super-block: acc + d dx * isum (- dmin dx * msum) in eight float lanes, one FMA each,
 * summed across lanes once at the end. */
KX_TGT AI void KX_FN(kx_rows)(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			      const uint32_t nr, uint32_t o0, uint32_t o1, int accumulate, const int dt)
{
	const uint32_t nb = W->cols / 256, bb = W->blk_bytes;
	for (uint32_t r0 = 0; r0 < nr; r0 += KX_ROWS) {
		const uint32_t n = nr - r0 < KX_ROWS ? nr - r0 : KX_ROWS;
		for (uint32_t o = o0; o < o1; o++) {
			const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->row_bytes;
			__m256 acc[KX_ROWS];
			for (uint32_t r = 0; r < n; r++)
				acc[r] = _mm256_setzero_ps();
			for (uint32_t b = 0; b < nb; b++) {
				const uint8_t *blk = row + (size_t)b * bb;
				for (uint32_t l = 0; l < bb; l += 64)
					_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
				struct kx_sb S;
				struct KX_FN(kx_pb) P;
				kx_decode(dt, blk, &S);
				KX_FN(kx_prep)(&S, &P);
				for (uint32_t r = 0; r < n; r++) {
					const struct q8k *xb = x + (size_t)(r0 + r) * nb + b;
					__m256i s = KX_FN(kx_dot)(&S, &P, xb);
					const __m256i m = _mm256_madd_epi16(S.m16, _mm256_loadu_si256((const __m256i *)xb->bsums));
					if (dt == RL_DT_Q3_K)
						s = _mm256_sub_epi32(s, m);
					acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(S.d * xb->d), acc[r]);
					if (dt == RL_DT_Q5_K || dt == RL_DT_Q2_K)
						acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(S.dmin * xb->d), acc[r]);
				}
			}
			for (uint32_t r = 0; r < n; r++) {
				float *y = Y + (size_t)(r0 + r) * ldy + o;
				const float v = hsum_ps(acc[r]) + (bias ? bias[o] : 0);
				*y = accumulate ? *y + v : v;
			}
		}
	}
}

/* one row (decode at batch 1) with the row count a constant, else any */
KX_TGT AI void KX_FN(kx_type)(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			      uint32_t nr, uint32_t o0, uint32_t o1, int accumulate, const int dt)
{
	if (nr == 1)
		KX_FN(kx_rows)(Y, ldy, x, W, bias, 1, o0, o1, accumulate, dt);
	else
		KX_FN(kx_rows)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, dt);
}

KX_TGT void KX_FN(rl_qmm_kx)(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			     uint32_t nr, uint32_t o0, uint32_t o1, int accumulate)
{
	switch (W->dtype) {
	case RL_DT_Q5_K:
		KX_FN(kx_type)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, RL_DT_Q5_K);
		break;
	case RL_DT_Q2_K:
		KX_FN(kx_type)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, RL_DT_Q2_K);
		break;
	default:                       /* Q3_K */
		KX_FN(kx_type)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, RL_DT_Q3_K);
		break;
	}
}
