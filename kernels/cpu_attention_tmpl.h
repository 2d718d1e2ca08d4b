/* cpu_attention_tmpl.h — the vector attention kernels, written once for both widths:
 * cpu_attention.c includes this file twice, with
 *   VW      lanes (16: AVX-512, 8: AVX2)
 *   V(op)   the width's primitive (kernels/cpu_simd.h: rl_v16_op / rl_v8_op)
 *   VT      the vector type
 *   TGT     the width's target attribute
 *   W_(x)   x with the width appended (attn_tile16, attn_tile8, ...)
 * Not a header of its own: nothing else includes it. */

/* ---------------------------------------------------------------- the key-by-key kernel's ops */

TGT RL_INLINE float W_(dot)(const float *a, const float *b, uint32_t n)
{
	VT s = V(zero)();
	uint32_t i = 0;
	for (; i + VW <= n; i += VW)
		s = V(fma)(V(load)(a + i), V(load)(b + i), s);
	if (i < n)
		s = V(fma)(V(load_n)(a + i, n - i), V(load_n)(b + i, n - i), s);
	return V(sum)(s);
}

TGT RL_INLINE void W_(scale)(float *a, float f, uint32_t n)
{
	const VT F = V(set1)(f);
	for (uint32_t i = 0; i < n; i += VW) {
		const uint32_t k = n - i < VW ? n - i : VW;
		V(store_n)(a + i, V(mul)(V(load_n)(a + i, k), F), k);
	}
}

TGT RL_INLINE void W_(axpy)(float *y, float a, const float *x, uint32_t n)
{
	const VT A = V(set1)(a);
	for (uint32_t i = 0; i < n; i += VW) {
		const uint32_t k = n - i < VW ? n - i : VW;
		V(store_n)(y + i, V(fma)(A, V(load_n)(x + i, k), V(load_n)(y + i, k)), k);
	}
}

/* s[j] = exp(s[j] - mx) for j < n: the key-by-key kernel's weights of one key block */
TGT RL_INLINE void W_(expb)(float *s, uint32_t n, float mx)
{
	const VT m = V(set1)(mx);
	for (uint32_t j = 0; j < n; j += VW) {
		const uint32_t k = n - j < VW ? n - j : VW;
		V(store_n)(s + j, V(exp)(V(sub)(V(load_n)(s + j, k), m)), k);
	}
}

/* ---------------------------------------------------------------- the many-row key kernel */
/* The key-by-key kernel (DEFINE_ROW_ATTN) over KR_ROWS rows at a time (a call's rows r =
 * i * n_qh + g in order: the GQA heads of a position, then the next positions): each key
 * block is widened once for all of them (not once a row), and its keys and values are loaded
 * once for several rows. Each row's arithmetic is DEFINE_ROW_ATTN's, op for op: its scores
 * are W_(dot)'s lane chains over hd in order, one horizontal sum, times scale; the same block
 * max, correction, expb and key-ordered l; o scaled by the correction (by 1: exact where the
 * max held), then o += p_j v_j element-wise in key order. Only the interleaving across rows
 * and keys changes, so a row's bits never depend on the rows beside it (nor on the old
 * kernel: bit for bit). */

/* s_r[j + c] = dot(q_r, k_{j + c}) * scale, c < KJ, for RQ rows: W_(dot)'s chains */
TGT RL_INLINE void W_(kr_dots)(float *const *sr, const float *const *qr, const float *kb, uint32_t j, uint32_t hd,
			       float scale, const int RQ, const int KJ)
{
	VT a[2][4];
#pragma GCC unroll 2
	for (int r = 0; r < RQ; r++)
#pragma GCC unroll 4
		for (int c = 0; c < KJ; c++)
			a[r][c] = V(zero)();
	const float *k0 = kb + (size_t)j * hd;
	uint32_t i = 0;
	for (; i + VW <= hd; i += VW) {
		VT kv[4];
#pragma GCC unroll 4
		for (int c = 0; c < KJ; c++)
			kv[c] = V(load)(k0 + (size_t)c * hd + i);
#pragma GCC unroll 2
		for (int r = 0; r < RQ; r++) {
			const VT qv = V(load)(qr[r] + i);
#pragma GCC unroll 4
			for (int c = 0; c < KJ; c++)
				a[r][c] = V(fma)(qv, kv[c], a[r][c]);
		}
	}
	if (i < hd) {
		const uint32_t t = hd - i;
#pragma GCC unroll 2
		for (int r = 0; r < RQ; r++) {
			const VT qv = V(load_n)(qr[r] + i, t);
#pragma GCC unroll 4
			for (int c = 0; c < KJ; c++)
				a[r][c] = V(fma)(qv, V(load_n)(k0 + (size_t)c * hd + i, t), a[r][c]);
		}
	}
#pragma GCC unroll 2
	for (int r = 0; r < RQ; r++)
#pragma GCC unroll 4
		for (int c = 0; c < KJ; c++)
			sr[r][j + c] = V(sum)(a[r][c]) * scale;
}

/* o_r = o_r * corr_r + sum_{j0 <= j < n} p_r[j] v_j for PR rows, hd a vector at a time, in
 * registers: the same element-wise ops as W_(scale) then W_(axpy) key by key */
TGT RL_INLINE void W_(kr_pv)(float *const *orow, const float *const *pr, const float *corr, const float *vb, uint32_t j0,
			     uint32_t n, uint32_t hd, const int PR)
{
	VT acc[8], cr[8];
#pragma GCC unroll 8
	for (int r = 0; r < PR; r++)
		cr[r] = V(set1)(corr[r]);
	for (uint32_t c = 0; c < hd; c += VW) {
		const uint32_t k = hd - c < VW ? hd - c : VW;
		if (k == VW) {
#pragma GCC unroll 8
			for (int r = 0; r < PR; r++)
				acc[r] = V(mul)(V(load)(orow[r] + c), cr[r]);
			for (uint32_t j = j0; j < n; j++) {
				const VT vj = V(load)(vb + (size_t)j * hd + c);
#pragma GCC unroll 8
				for (int r = 0; r < PR; r++)
					acc[r] = V(fma)(V(set1)(pr[r][j]), vj, acc[r]);
			}
#pragma GCC unroll 8
			for (int r = 0; r < PR; r++)
				V(store)(orow[r] + c, acc[r]);
		} else {
#pragma GCC unroll 8
			for (int r = 0; r < PR; r++)
				acc[r] = V(mul)(V(load_n)(orow[r] + c, k), cr[r]);
			for (uint32_t j = j0; j < n; j++) {
				const VT vj = V(load_n)(vb + (size_t)j * hd + c, k);
#pragma GCC unroll 8
				for (int r = 0; r < PR; r++)
					acc[r] = V(fma)(V(set1)(pr[r][j]), vj, acc[r]);
			}
#pragma GCC unroll 8
			for (int r = 0; r < PR; r++)
				V(store_n)(orow[r] + c, acc[r], k);
		}
	}
}

/* rows whose o += P V share a pass over a value vector (registers: PR accumulators) */
#define KR_PR (VW == 16 ? 8 : 4)

/* One block's keys [j0, n) for rows R (all seeing exactly those keys): or[], qr[] their
 * outputs and queries, sr[] their scores [bs], mx[], l[] their states */
TGT RL_INLINE void W_(kr_block)(float *const *orow, const float *const *qr, float *const *sr, float *mx, float *l,
				float *corr, uint32_t R, const float *kb, const float *vb, uint32_t j0, uint32_t n,
				uint32_t hd, float scale)
{
	uint32_t r = 0;
	for (; r + 2 <= R; r += 2) {
		uint32_t j = j0;
		for (; j + 4 <= n; j += 4)
			W_(kr_dots)(sr + r, qr + r, kb, j, hd, scale, 2, 4);
		for (; j < n; j++)
			W_(kr_dots)(sr + r, qr + r, kb, j, hd, scale, 2, 1);
	}
	if (r < R) {
		uint32_t j = j0;
		for (; j + 4 <= n; j += 4)
			W_(kr_dots)(sr + r, qr + r, kb, j, hd, scale, 1, 4);
		for (; j < n; j++)
			W_(kr_dots)(sr + r, qr + r, kb, j, hd, scale, 1, 1);
	}
	for (r = 0; r < R; r++) {
		float *s = sr[r];
		float bm = mx[r];
		for (uint32_t j = j0; j < n; j++)
			bm = s[j] > bm ? s[j] : bm;
		corr[r] = 1.0f;
		if (bm > mx[r]) {
			const float cf = expf(mx[r] - bm);
			corr[r] = cf;
			l[r] *= cf;
			mx[r] = bm;
		}
		W_(expb)(s + j0, n - j0, mx[r]);
		float lr = l[r];
		for (uint32_t j = j0; j < n; j++)
			lr += s[j];
		l[r] = lr;
	}
	for (r = 0; r < R; r += KR_PR) {
		const uint32_t m = R - r < KR_PR ? R - r : KR_PR;
#define PV_N(pr) W_(kr_pv)(orow + r, (const float *const *)sr + r, corr + r, vb, j0, n, hd, pr)
		switch (m) {
		case 1: PV_N(1); break;
		case 2: PV_N(2); break;
		case 3: PV_N(3); break;
#if KR_PR > 4
		case 4: PV_N(4); break;
		case 5: PV_N(5); break;
		case 6: PV_N(6); break;
		case 7: PV_N(7); break;
#endif
		default: PV_N(KR_PR); break;
		}
#undef PV_N
	}
}

/* Every row of the call, KR_ROWS at a time (scratch: kr_scratch floats, then kv->wide) */
TGT static void W_(attn_krows)(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len, uint32_t n_qh,
			       uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *scratch)
{
	const float scale = 1.0f / sqrtf((float)hd);
	const uint32_t bs = kv->block_size, bsp = (bs + 15) & ~15u, rows = q_len * n_qh;
	float *mx = scratch, *l = mx + KR_ROWS, *corr = l + KR_ROWS, *s0 = corr + KR_ROWS;   /* s0: [KR_ROWS, bsp] */
	for (uint32_t r0 = 0; r0 < rows; r0 += KR_ROWS) {
		const uint32_t R = rows - r0 < KR_ROWS ? rows - r0 : KR_ROWS;
		float *orow[KR_ROWS], *sr[KR_ROWS];
		const float *qr[KR_ROWS];
		for (uint32_t r = 0; r < R; r++) {
			const uint32_t i = (r0 + r) / n_qh, g = (r0 + r) % n_qh;
			qr[r] = q + i * ldq + g * hd;
			orow[r] = out + i * ldo + g * hd;
			sr[r] = s0 + (size_t)r * bsp;
			mx[r] = -INFINITY;
			l[r] = 0;
			memset(orow[r], 0, hd * sizeof(float));
		}
		const uint32_t i_lo = r0 / n_qh, i_hi = (r0 + R - 1) / n_qh;   /* the set's first and last positions */
		const uint32_t end = pos0 + i_hi + 1;                            /* the last row's keys */
		for (uint32_t p0 = kv_first_key(kv, pos0 + i_lo + 1) / bs * bs; p0 < end; p0 += bs) {
			const uint32_t nb = end - p0 < bs ? end - p0 : bs;
			const float *kb, *vb;                                    /* [nb, hd] */
			kv_prefetch_ahead(kv, p0 / bs, end, hd);
			kv_block(kv, p0 / bs, nb, hd, &kb, &vb);
			/* runs of rows seeing the same keys [j0, n) of the block */
			for (uint32_t r = 0; r < R;) {
				const uint32_t i = (r0 + r) / n_qh, n_keys = pos0 + i + 1, lo = kv_first_key(kv, n_keys);
				uint32_t e = r + 1;
				while (e < R && (r0 + e) / n_qh == i)
					e++;
				if (n_keys <= p0 || lo >= p0 + bs) {      /* the block is outside this position's keys */
					r = e;
					continue;
				}
				const uint32_t n = n_keys - p0 < bs ? n_keys - p0 : bs, j0 = lo > p0 ? lo - p0 : 0;
				/* later positions seeing the same keys: past the block's end and its window start */
				while (e < R) {
					const uint32_t i2 = (r0 + e) / n_qh, nk2 = pos0 + i2 + 1, lo2 = kv_first_key(kv, nk2);
					if ((nk2 - p0 < bs ? nk2 - p0 : bs) != n || (lo2 > p0 ? lo2 - p0 : 0) != j0 || lo2 >= p0 + bs)
						break;
					e++;
				}
				W_(kr_block)(orow + r, qr + r, sr + r, mx + r, l + r, corr + r, e - r, kb, vb, j0, n, hd, scale);
				r = e;
			}
		}
		for (uint32_t r = 0; r < R; r++)
			W_(scale)(orow[r], 1.0f / l[r], hd);
	}
}

/* ---------------------------------------------------------------- the vector row kernels */
/* (head_dim a multiple of the lane count, up to 8 vectors): the same online softmax as
 * DEFINE_ROW_ATTN, but the row's query and output stay in registers, and a block's keys are
 * taken a vector's width at a time: each key's hd/VW lane-wise products with q are summed to
 * one vector t[j], and a transpose-and-add tree turns VW of those into one vector of VW scores
 * (~3 shuffles and adds a key, against a full horizontal reduce each). The scores get one
 * vector exp; o += p_j v_j is NV FMAs a key into registers. */

/* VW fp32 lanes at element e of a block: from the fp32 pool, or halves widened */
#define LDW(f, h, e) (F16 ? V(load_h)((h) + (e)) : V(load)((f) + (e)))

/* One row's online softmax over keys [jlo, n) of one block's tile (kb/hkb, vb/hvb: [bs, hd],
 * the pool's type; jlo > 0 where a sliding window starts inside the block): the query qv, the
 * running output ov, max *pmx and sum *pl in and out. The one body of the row kernel and of
 * the heads kernel, so the two agree bit for bit. */
TGT RL_INLINE void W_(attn_tile)(const VT *qv, VT *ov, float *pmx, float *pl, const float *kb, const uint16_t *hkb,
				 const float *vb, const uint16_t *hvb, uint32_t jlo, uint32_t n, float scale, const int NV,
				 const int F16, float *s)
{
	const uint32_t hd = VW * (uint32_t)NV;
	float mx = *pmx, l = *pl;
	for (uint32_t j0 = jlo / VW * VW; j0 < n; j0 += VW) {
		const uint32_t m = n - j0 < VW ? n - j0 : VW;
		const size_t e0 = (size_t)j0 * hd;
		VT u[VW / 4];
#pragma GCC unroll 4
		for (int g = 0; g < VW / 4; g++) {
			VT t[4];
#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				const uint32_t j = 4 * (uint32_t)g + (uint32_t)c;
				t[c] = V(zero)();
				if (j < m)      /* slots past the context are never read */
#pragma GCC unroll 8
					for (int v = 0; v < NV; v++)
						t[c] = V(fma)(qv[v], LDW(kb, hkb, e0 + (size_t)j * hd + VW * v), t[c]);
			}
			u[g] = V(tree4)(t);
		}
		const uint32_t below = jlo > j0 ? jlo - j0 : 0;     /* lanes before the window */
		VT sv = V(mul)(V(join)(u), V(set1)(scale));         /* lane j: key j */
		if (below)
			sv = V(fill_lo)(sv, below, -INFINITY);
		const float bm = V(max)(V(fill_n)(sv, m, -INFINITY));
		if (bm > mx) {
			const float corr = expf(mx - bm);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = V(mul)(ov[v], V(set1)(corr));
			l *= corr;
			mx = bm;
		}
		VT pv = V(keep_n)(V(exp)(V(sub)(sv, V(set1)(mx))), m);
		if (below)
			pv = V(fill_lo)(pv, below, 0.0f);
		l += V(sum)(pv);
		V(store)(s, pv);
		for (uint32_t j = 0; j < m; j++) {
			const VT pj = V(set1)(s[j]);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				ov[v] = V(fma)(pj, LDW(vb, hvb, e0 + (size_t)j * hd + VW * v), ov[v]);
		}
	}
	*pmx = mx;
	*pl = l;
}

TGT RL_INLINE void W_(attn_row)(float *o, const float *qi, uint32_t n_keys, float scale, const int NV, const int F16,
				const struct rl_cpu_kv_view *kv, float *s)
{
	const uint32_t bs = kv->block_size, hd = VW * (uint32_t)NV;
	VT qv[8], ov[8];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++) {
		qv[v] = V(load)(qi + VW * v);
		ov[v] = V(zero)();
	}
	float mx = -INFINITY, l = 0;
	const uint32_t lo = kv_first_key(kv, n_keys);
	for (uint32_t p0 = lo / bs * bs; p0 < n_keys; p0 += bs) {
		kv_prefetch_ahead(kv, p0 / bs, n_keys, hd);
		const size_t blk = (size_t)kv->block_table[p0 / bs] * kv->block_stride;
		const float *kb = F16 ? NULL : kv->k + blk, *vb = F16 ? NULL : kv->v + blk;  /* [bs, hd] */
		const uint16_t *hkb = F16 ? kv->hk + blk : NULL, *hvb = F16 ? kv->hv + blk : NULL;
		W_(attn_tile)(qv, ov, &mx, &l, kb, hkb, vb, hvb, lo > p0 ? lo - p0 : 0, n_keys - p0 < bs ? n_keys - p0 : bs,
			      scale, NV, F16, s);
	}
	const VT inv = V(set1)(1.0f / l);
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		V(store)(o + VW * v, V(mul)(ov[v], inv));
}

/* One decode row's query heads over the view's n_kv KV heads (adjacent in every block, bs * hd
 * elements apart; KV head kh serves query heads kh * group .. + group - 1, at q + r * hd and
 * out + r * hd), a block at a time: all the heads' tiles of a block, one contiguous run per
 * pool, before the next block. Walking head by head instead reads 2 KB tiles (bs 16, hd 64,
 * half) scattered a block's width apart, which the hardware prefetcher cannot follow; whole
 * blocks it can, on into the next when that lies right after, so only a jump (to a block
 * elsewhere, or past the heads of the block that another call takes) is prefetched by hand,
 * head by head a block ahead. st: [n_kv * group][HEAD_STATE(hd)], the rows' states between
 * blocks. */
TGT RL_INLINE void W_(attn_heads)(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys,
				  float scale, const int NV, const int F16, const struct rl_cpu_kv_view *kv, float *s,
				  float *st)
{
	const uint32_t bs = kv->block_size, hd = VW * (uint32_t)NV;
	const size_t sl = HEAD_STATE(hd), tile = (size_t)bs * hd;
	for (uint32_t r = 0; r < n_kv * group; r++) {
		float *sr = st + (size_t)r * sl;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			V(store)(sr + VW * v, V(zero)());
		sr[hd] = -INFINITY;
		sr[hd + 1] = 0;
	}
	const uint32_t lo = kv_first_key(kv, n_keys);
	for (uint32_t p0 = lo / bs * bs; p0 < n_keys; p0 += bs) {
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
				VT qv[8], ov[8];
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++) {
					qv[v] = V(load)(q + (size_t)r * hd + VW * v);
					ov[v] = V(load)(sr + VW * v);
				}
				W_(attn_tile)(qv, ov, sr + hd, sr + hd + 1, kb, hkb, vb, hvb, lo > p0 ? lo - p0 : 0, n, scale,
					      NV, F16, s);
#pragma GCC unroll 8
				for (int v = 0; v < NV; v++)
					V(store)(sr + VW * v, ov[v]);
			}
		}
	}
	for (uint32_t r = 0; r < n_kv * group; r++) {
		const float *sr = st + (size_t)r * sl;
		const VT inv = V(set1)(1.0f / sr[hd + 1]);
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			V(store)(out + (size_t)r * hd + VW * v, V(mul)(V(load)(sr + VW * v), inv));
	}
}
#undef LDW

/* Every row of the call through attn_row with NV = hd / VW as a constant; head dims that are
 * not 1..8 whole vectors take the key-by-key kernel (the choice depends on hd alone, so a
 * row's arithmetic never depends on its batch). */
TGT static void W_(attn_rows)(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len, uint32_t n_qh,
			      uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *s)
{
	const int f16 = kv->hk != NULL;
	if (hd % VW || hd / VW > 8 || (f16 && !rl_cpu_has_f16c())) {
		W_(attn_krows)(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, s);
		return;
	}
	const float scale = 1.0f / sqrtf((float)hd);
	for (uint32_t r = 0; r < q_len * n_qh; r++) {
		const uint32_t i = r / n_qh, g = r % n_qh;
		const float *qi = q + i * ldq + g * hd;        /* [hd] */
		float *o = out + i * ldo + g * hd;             /* [hd] */
#define ROW_NV(nv) (f16 ? W_(attn_row)(o, qi, pos0 + i + 1, scale, nv, 1, kv, s) \
			: W_(attn_row)(o, qi, pos0 + i + 1, scale, nv, 0, kv, s))
		RL_CASES_1_TO_8(hd / VW, ROW_NV);
#undef ROW_NV
	}
}

/* A decode row's heads through attn_heads, NV = hd / VW and the pool type as constants;
 * -ENOTSUP where the row kernels would fall back (the caller then goes head by head, through
 * rl_cpu_attention). */
TGT static int W_(attn_heads_all)(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys,
				  uint32_t hd, const struct rl_cpu_kv_view *kv, float *s, float *st)
{
	const int f16 = kv->hk != NULL;
	if (hd % VW || hd / VW > 8 || (f16 && !rl_cpu_has_f16c()))
		return -ENOTSUP;
	const float scale = 1.0f / sqrtf((float)hd);
#define HEADS_NV(nv) (f16 ? W_(attn_heads)(out, q, n_kv, group, n_keys, scale, nv, 1, kv, s, st) \
			  : W_(attn_heads)(out, q, n_kv, group, n_keys, scale, nv, 0, kv, s, st))
	RL_CASES_1_TO_8(hd / VW, HEADS_NV);
#undef HEADS_NV
	return 0;
}

/* ---------------------------------------------------------------- the tiled kernel (prefill) */
/* VW keys per score vector. HD is a compile-time 8 (AVX-512's packed o += P V below) or 0 for
 * any hd (o in VW-float chunks, the last masked). */
TGT RL_INLINE void W_(tiled)(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len, uint32_t n_qh,
			     uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *scratch, const uint32_t HD)
{
	if (HD)
		hd = HD;
	const uint32_t bs = kv->block_size, bsp = (bs + VW - 1) & ~(uint32_t)(VW - 1), rows = q_len * n_qh;
	const uint32_t n_ctx = pos0 + q_len;
	float *m = scratch;                         /* [rows] running max */
	float *l = m + rows;                        /* [rows, 16] running sum, per lane */
	float *kt = l + (size_t)rows * 16;          /* [hd, bsp] the block's keys, transposed */
	const VT scale = V(set1)(1.0f / sqrtf((float)hd));
	for (uint32_t r = 0; r < rows; r++) {
		m[r] = -INFINITY;
		V(store)(l + (size_t)r * 16, V(zero)());
		memset(out + (r / n_qh) * ldo + (r % n_qh) * hd, 0, hd * sizeof(float));
	}
	for (uint32_t p0 = kv_first_key(kv, pos0 + 1) / bs * bs; p0 < n_ctx; p0 += bs) {
		const uint32_t nb = n_ctx - p0 < bs ? n_ctx - p0 : bs;
		const float *kb, *vb;                                    /* [nb, hd] */
		kv_prefetch_ahead(kv, p0 / bs, n_ctx, hd);
		kv_block(kv, p0 / bs, nb, hd, &kb, &vb);
		W_(transpose_keys)(kt, kb, nb, bsp, hd);
		for (uint32_t i = p0 > pos0 ? p0 - pos0 : 0; i < q_len; i++) {
			const uint32_t seen = keys_seen(pos0, i, p0, nb), lo = kv_first_key(kv, pos0 + i + 1);
			if (lo >= p0 + nb)       /* the block is behind this row's window (and the next rows') */
				continue;
			const uint32_t jlo = lo > p0 ? lo - p0 : 0;
			for (uint32_t g = 0; g < n_qh; g++) {
				const uint32_t r = i * n_qh + g;
				const float *qi = q + i * ldq + g * hd;   /* [hd] */
				float *o = out + i * ldo + g * hd;        /* [hd] */
				for (uint32_t t0 = jlo / VW * VW; t0 < seen; t0 += VW) {
					const uint32_t below = jlo > t0 ? jlo - t0 : 0;   /* lanes before the window */
					const uint32_t n = seen - t0 < VW ? seen - t0 : VW;
					/* s[j] = q . k[t0 + j], two accumulators for latency */
					VT a0 = V(zero)(), a1 = V(zero)();
					uint32_t d = 0;
					for (; d + 2 <= hd; d += 2) {
						a0 = V(fma)(V(set1)(qi[d]), V(load)(kt + (size_t)d * bsp + t0), a0);
						a1 = V(fma)(V(set1)(qi[d + 1]), V(load)(kt + (size_t)(d + 1) * bsp + t0), a1);
					}
					if (d < hd)
						a0 = V(fma)(V(set1)(qi[d]), V(load)(kt + (size_t)d * bsp + t0), a0);
					VT sc = V(fill_n)(V(mul)(V(add)(a0, a1), scale), n, -INFINITY);
					if (below)
						sc = V(fill_lo)(sc, below, -INFINITY);
					float corr = 1.0f;
					if (V(any_gt)(sc, m[r])) {
						const float bm = V(max)(sc);
						corr = expf(m[r] - bm);
						m[r] = bm;
					}
					VT p = V(keep_n)(V(exp)(V(sub)(sc, V(set1)(m[r]))), n);
					if (below)
						p = V(fill_lo)(p, below, 0.0f);
					const VT C = V(set1)(corr);
					float *lr = l + (size_t)r * 16;
					V(store)(lr, V(fma)(V(load)(lr), C, p));
					const float *v = vb + (size_t)t0 * hd;    /* [n, hd] */
#if VW == 16
					if (HD == 8) {
						tiled_pv8(o, v, p, C, n);
						continue;
					}
#endif
					float pj[VW];
					V(store)(pj, p);
					for (uint32_t c = 0; c < hd; c += VW) {
						const uint32_t k = hd - c < VW ? hd - c : VW;
						VT c0 = V(mul)(V(load_n)(o + c, k), C), c1 = V(zero)();
						uint32_t j = 0;
						for (; j + 2 <= n; j += 2) {
							c0 = V(fma)(V(set1)(pj[j]), V(load_n)(v + (size_t)j * hd + c, k), c0);
							c1 = V(fma)(V(set1)(pj[j + 1]), V(load_n)(v + (size_t)(j + 1) * hd + c, k), c1);
						}
						if (j < n)
							c0 = V(fma)(V(set1)(pj[j]), V(load_n)(v + (size_t)j * hd + c, k), c0);
						V(store_n)(o + c, V(add)(c0, c1), k);
					}
				}
			}
		}
	}
	for (uint32_t r = 0; r < rows; r++)
		W_(scale)(out + (r / n_qh) * ldo + (r % n_qh) * hd, 1.0f / V(sum)(V(load)(l + (size_t)r * 16)), hd);
}

TGT static void W_(attn_tiled)(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len, uint32_t n_qh,
			       uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv, float *scratch)
{
#if VW == 16
	if (hd == 8) {
		W_(tiled)(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, scratch, 8);
		return;
	}
#endif
	W_(tiled)(out, ldo, q, ldq, q_len, n_qh, pos0, hd, kv, scratch, 0);
}
