/* cpu_qmm_kx_tmpl.h — the dot and row loop of cpu_qmm_kx.c, written once and included there
 * per ISA with KX_TGT (its target attribute), KX_FN(name) (the name with its ISA suffix) and
 * KX_MADD(s, p, sc) (s + the word pairs p times the scales sc, as int32 lanes). Both ISAs reach
 * the same integers, so the same bits. */

/* A super-block's integer sums against one activation row's block xb: isum = sum over
 * weights of q x times their scale (less Q3_K's offset), msum = m16 . bsums (the mins' term) */
KX_TGT AI void KX_FN(kx_dot)(const struct kx_sb *S, const int dt, const struct q8k *xb, int32_t *isum,
			     int32_t *msum)
{
	__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++) {
		const __m256i x = _mm256_loadu_si256((const __m256i *)(xb->q + 32 * c));
		/* IQ4_XS's levels are signed: |q| against x with q's sign (|x| <= 127, so no overflow) */
		const __m256i p = dt == RL_DT_IQ4_XS
			? _mm256_maddubs_epi16(_mm256_sign_epi8(S->q[c], S->q[c]), _mm256_sign_epi8(x, S->q[c]))
			: _mm256_maddubs_epi16(S->q[c], x);
		s = KX_MADD(s, p, S->sc[c]);
	}
	*msum = 0;
	if (dt != RL_DT_IQ4_XS) {
		const __m256i m = _mm256_madd_epi16(S->m16, _mm256_loadu_si256((const __m256i *)xb->bsums));
		if (dt == RL_DT_Q3_K)
			s = _mm256_sub_epi32(s, m);
		else
			*msum = hsum_i32(m);
	}
	*isum = hsum_i32(s);
}

/* Y[r, o] for the rows r < nr, outputs [o0, o1): weight row o's super-blocks decoded once a
 * pass, each against up to KX_ROWS activation rows (x: row r's blocks at x + r * nb) */
KX_TGT AI void KX_FN(kx_rows)(float *Y, size_t ldy, const struct q8k *x, const struct rl_wmat *W, const float *bias,
			      const uint32_t nr, uint32_t o0, uint32_t o1, int accumulate, const int dt)
{
	const uint32_t nb = W->cols / 256, bb = W->blk_bytes;
	for (uint32_t r0 = 0; r0 < nr; r0 += KX_ROWS) {
		const uint32_t n = nr - r0 < KX_ROWS ? nr - r0 : KX_ROWS;
		for (uint32_t o = o0; o < o1; o++) {
			const uint8_t *row = (const uint8_t *)W->data + (size_t)o * W->row_bytes;
			float acc[KX_ROWS];
			for (uint32_t r = 0; r < n; r++)
				acc[r] = 0;
			for (uint32_t b = 0; b < nb; b++) {
				const uint8_t *blk = row + (size_t)b * bb;
				for (uint32_t l = 0; l < bb; l += 64)
					_mm_prefetch((const char *)blk + PF_DIST_K + l, _MM_HINT_T0);
				struct kx_sb S;
				kx_decode(dt, blk, &S);
				for (uint32_t r = 0; r < n; r++) {
					const struct q8k *xb = x + (size_t)(r0 + r) * nb + b;
					int32_t isum, msum;
					KX_FN(kx_dot)(&S, dt, xb, &isum, &msum);
					acc[r] = kx_term(acc[r], &S, xb->d, isum, msum);
				}
			}
			for (uint32_t r = 0; r < n; r++) {
				float *y = Y + (size_t)(r0 + r) * ldy + o;
				const float v = acc[r] + (bias ? bias[o] : 0);
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
	case RL_DT_Q3_K:
		KX_FN(kx_type)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, RL_DT_Q3_K);
		break;
	default:
		KX_FN(kx_type)(Y, ldy, x, W, bias, nr, o0, o1, accumulate, RL_DT_IQ4_XS);
		break;
	}
}
