/* cpu_qmm.c — rl_cpu_qmatmul, the matmul over weights kept as the file stores them (struct
 * rl_wmat): which kernel serves a call, as one table, and the scratch each kernel carves.
 *
 * A call is split at W->packed_rows into the packed rows and the rows left as the file has
 * them; each part is served by the kernel the table names for (stored type, layout, rows,
 * ISA). Rows: ONE activation row, FEW (2..8: decode steps, bounded by the weight bytes
 * streamed, so they compute on the stored form) or MANY (prefill chunks, bounded by
 * arithmetic). ISA: the table's columns, from plain C to AVX-512 with VNNI or BF16; a call
 * takes the rightmost non-empty column the CPU allows (kernels/cpu_features.h), so an empty
 * cell means "as the column to its left". kernels/README.md explains each kernel.
 */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu_qmm.h"

/* One call's operands; each kernel computes the outputs [o0, o1) of it. */
struct qmm_call {
	float *Y;
	size_t ldy;
	const float *X;
	size_t ldx;
	const struct rl_wmat *W;
	const float *bias;
	uint32_t nr;
	int acc;
	uint8_t *scratch;              /* 64-byte aligned; laid out by qmm_layout */
};

enum qmm_acts { ACTS_F32, ACTS_Q8, ACTS_BF16 };   /* what the activations are rounded to */

struct qmm_kernel {
	void (*run)(const struct qmm_call *c, uint32_t o0, uint32_t o1);
	const char *name;
	enum qmm_acts acts;
};

/* part i of layout k for this call */
static void *part(const struct qmm_call *c, enum qmm_layout_kind k, int i)
{
	size_t off[3];
	qmm_layout(k, c->W->cols, c->nr, off);
	return c->scratch + off[i];
}

/* ------------------------------------------------------------ float ---------------- */

static void run_f32(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	rl_cpu_matmul(c->Y, c->ldy, c->X, c->ldx, c->W->data, c->bias, c->nr, c->W->cols, o0, o1, c->acc);
}

/* the plain path: each weight row decoded to fp32, dotted with each activation row */
static void run_rows_scalar(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	float *row = part(c, QMM_L_TILE, 0);
	for (uint32_t o = o0; o < o1; o++) {
		rl_cpu_wmat_row(c->W, o, row);
		for (uint32_t r = 0; r < c->nr; r++) {
			float s = dot_f32_scalar(row, c->X + (size_t)r * c->ldx, c->W->cols) + (c->bias ? c->bias[o] : 0);
			float *y = c->Y + (size_t)r * c->ldy + o;
			*y = c->acc ? *y + s : s;
		}
	}
}

static void run_rows_avx2(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	rl_qmm_rows_f32(c->Y, c->ldy, c->X, c->ldx, c->W, c->bias, c->nr, o0, o1, c->acc, part(c, QMM_L_TILE, 0));
}

/* many rows: TILE weight rows decoded to fp32, then the fp32 matmul over all rows */
static void run_tiles_f32(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const uint32_t in = c->W->cols;
	float *tile = part(c, QMM_L_TILE, 0);
	for (uint32_t o = o0; o < o1; o += TILE) {
		const uint32_t n = o1 - o < TILE ? o1 - o : TILE;
		for (uint32_t j = 0; j < n; j++)
			rl_cpu_wmat_row(c->W, o + j, tile + (size_t)j * in);
		rl_cpu_matmul(c->Y + o, c->ldy, c->X, c->ldx, tile, c->bias ? c->bias + o : NULL, c->nr, in, 0, n, c->acc);
	}
}

/* ------------------------------------------------------------ 16-bit and bf16 ------ */

static void h16(const struct qmm_call *c, uint32_t o0, uint32_t o1, int dpbf)
{
	rl_qmm_h16_panels(c->Y, c->ldy, c->X, c->ldx, c->W, c->bias, c->nr, o0, o1, c->acc, dpbf,
			  part(c, QMM_L_PANELS, 0), part(c, QMM_L_PANELS, 1));
}
static void run_h16(const struct qmm_call *c, uint32_t o0, uint32_t o1) { h16(c, o0, o1, 0); }
static void run_h16_dpbf(const struct qmm_call *c, uint32_t o0, uint32_t o1) { h16(c, o0, o1, 1); }

/* the activation rows rounded to bf16, [nr][in] */
static uint16_t *bf16_acts(const struct qmm_call *c)
{
	uint16_t *xb = part(c, QMM_L_BF16, 0);
	for (uint32_t r = 0; r < c->nr; r++)
		rl_qmm_to_bf16(xb + (size_t)r * c->W->cols, c->X + (size_t)r * c->ldx, c->W->cols);
	return xb;
}

/* unpacked BF16: the file's rows are the operand */
static void run_bf16_direct(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	rl_qmm_gemm_dpbf(c->Y, c->ldy, bf16_acts(c), c->W->cols, c->W->data, c->bias, c->nr, c->W->cols, o0, o1, c->acc);
}

/* block types: TILE weight rows decoded to bf16 (rl_qmm_tile_bf16), then the bf16 GEMM */
static void run_tiles_bf16(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const uint32_t in = c->W->cols;
	const uint16_t *xb = bf16_acts(c);
	float *row = part(c, QMM_L_BF16, 1);
	uint16_t *tile = part(c, QMM_L_BF16, 2);
	for (uint32_t o = o0; o < o1; o += TILE) {
		const uint32_t n = o1 - o < TILE ? o1 - o : TILE;
		rl_qmm_tile_bf16(c->W, o, n, tile, row);
		rl_qmm_gemm_dpbf(c->Y + o, c->ldy, xb, in, tile, c->bias ? c->bias + o : NULL, c->nr, in, 0, n, c->acc);
	}
}

/* ------------------------------------------------------------ Q8_0 ----------------- */

/* the rows quantized to q8 blocks: xq[r] = row r's, in part 0 of QMM_L_Q8 */
static void q8_rows(const struct qmm_call *c, uint32_t r0, uint32_t nr, const struct q8x **xq)
{
	const uint32_t nb = c->W->cols / 32;
	struct q8x *q = part(c, QMM_L_Q8, 0);
	for (uint32_t r = 0; r < nr; r++) {
		xq[r] = q + (size_t)(r0 + r) * nb;
		rl_qmm_quantize_q8(c->X + (size_t)(r0 + r) * c->ldx, c->W->cols, q + (size_t)(r0 + r) * nb);
	}
}

static void run_q8_0_row1(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8x *xq[1];
	q8_rows(c, 0, 1, xq);
	rl_qmm_q8_0_row1(c->Y, xq[0], c->W, c->bias, o0, o1, c->acc);
}

/* AVX2, 1..8 rows: the rows' int16 pairs; eight rows over packed groups also rotated */
static void run_q8_0_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const uint32_t nb = c->W->cols / 32, nr = c->nr;
	const struct q8x *xq[Q8_ROWS];
	const int16_t *xp[Q8_ROWS] = { 0 };   /* rows past nr unread (GCC cannot tell) */
	int16_t *p = part(c, QMM_L_Q8, 1);
	q8_rows(c, 0, nr, xq);
	for (uint32_t r = 0; r < nr; r++) {
		xp[r] = p + (size_t)r * nb * 32;
		rl_qmm_q8_0_pairs(xq[r], nb, p + (size_t)r * nb * 32);
	}
	struct q8r *xr = NULL;
	if (nr == Q8_ROWS && o0 < c->W->packed_rows) {
		xr = part(c, QMM_L_Q8, 2);
		rl_qmm_q8r_make(xq, xp, nb, xr);
	}
	rl_qmm_q8_0_t8(c->Y, c->ldy, xq, xp, xr, c->W, c->bias, nr, o0, o1, c->acc);
}

/* VNNI, 2..8 rows: the rows' seeds */
static void run_q8_0_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const uint32_t nb = c->W->cols / 32;
	const struct q8x *xq[Q8_ROWS];
	int32_t *seed = part(c, QMM_L_Q8, 1);
	q8_rows(c, 0, c->nr, xq);
	for (uint32_t r = 0; r < c->nr; r++)
		rl_qmm_q8_0_seeds(xq[r], nb, seed + (size_t)r * nb);
	rl_qmm_q8_0_t16(c->Y, c->ldy, xq, seed, c->W, c->bias, c->nr, o0, o1, c->acc);
}

/* Many rows over packed Q8_0: every row quantized once (with its int16 pairs on AVX2, each
 * whole 8 rows rotated; its seeds on VNNI), then for each group of 16 weight rows, still in
 * L1/L2, the rows 8 at a time through the decode steps' kernels. */
static void q8_0_many(const struct qmm_call *c, uint32_t o0, uint32_t o1, int vnni)
{
	const uint32_t nb = c->W->cols / 32, n_rows = c->nr;
	const struct q8x *xall[Q8_ROWS];
	const struct q8x *q = part(c, QMM_L_Q8, 0);
	int16_t *pairs = part(c, QMM_L_Q8, 1);        /* AVX2: [n_rows][nb][32] */
	int32_t *seed = part(c, QMM_L_Q8, 1);         /* VNNI: [n_rows][nb] */
	struct q8r *rot = part(c, QMM_L_Q8, 2);
	for (uint32_t r = 0; r < n_rows; r++) {
		q8_rows(c, r, 1, xall);
		if (vnni) {
			rl_qmm_q8_0_seeds(xall[0], nb, seed + (size_t)r * nb);
			continue;
		}
		rl_qmm_q8_0_pairs(xall[0], nb, pairs + (size_t)r * nb * 32);
		if (r % Q8_ROWS == Q8_ROWS - 1) {
			const struct q8x *xq[Q8_ROWS];
			const int16_t *xp[Q8_ROWS];
			for (uint32_t i = 0; i < Q8_ROWS; i++) {
				xq[i] = q + (size_t)(r - 7 + i) * nb;
				xp[i] = pairs + (size_t)(r - 7 + i) * nb * 32;
			}
			rl_qmm_q8r_make(xq, xp, nb, rot + (size_t)r / Q8_ROWS * nb);
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
			float *Y = c->Y + (size_t)r0 * c->ldy;
			if (vnni)
				rl_qmm_q8_0_t16(Y, c->ldy, xq, seed + (size_t)r0 * nb, c->W, c->bias, nr, o, g1, c->acc);
			else
				rl_qmm_q8_0_t8(Y, c->ldy, xq, xp, nr == Q8_ROWS ? rot + (size_t)r0 / Q8_ROWS * nb : NULL,
					       c->W, c->bias, nr, o, g1, c->acc);
		}
		o = g1;
	}
}
static void run_q8_0_many_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1) { q8_0_many(c, o0, o1, 0); }
static void run_q8_0_many_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1) { q8_0_many(c, o0, o1, 1); }

/* ------------------------------------------------------------ Q4_0, Q4_1, Q5_0, Q5_1 */

/* 1..8 rows: the rows' q8 blocks alone (their sums of 16 carry the offsets and mins) */
static void run_q45_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8x *xq[Q8_ROWS];
	q8_rows(c, 0, c->nr, xq);
	rl_qmm_q45_t8(c->Y, c->ldy, xq, c->W, c->bias, c->nr, o0, o1, c->acc);
}

static void run_q45_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8x *xq[Q8_ROWS];
	q8_rows(c, 0, c->nr, xq);
	rl_qmm_q45_t16(c->Y, c->ldy, xq, c->W, c->bias, c->nr, o0, o1, c->acc);
}

/* Many rows over packed groups, as q8_0_many: every row quantized once, then for each group
 * of 16 weight rows (still in cache) the rows 8 at a time through the decode kernels, so that
 * a row computes as it would in a decode step. */
static void q45_many(const struct qmm_call *c, uint32_t o0, uint32_t o1, int vnni)
{
	const uint32_t nb = c->W->cols / 32, n_rows = c->nr;
	const struct q8x *q = part(c, QMM_L_Q8, 0), *xall[1];
	for (uint32_t r = 0; r < n_rows; r++)
		q8_rows(c, r, 1, xall);
	for (uint32_t o = o0; o < o1;) {
		const uint32_t g1 = (o & ~15u) + 16 < o1 ? (o & ~15u) + 16 : o1;   /* to the group's end */
		for (uint32_t r0 = 0; r0 < n_rows; r0 += Q8_ROWS) {
			const uint32_t nr = n_rows - r0 < Q8_ROWS ? n_rows - r0 : Q8_ROWS;
			const struct q8x *xq[Q8_ROWS];
			for (uint32_t r = 0; r < nr; r++)
				xq[r] = q + (size_t)(r0 + r) * nb;
			(vnni ? rl_qmm_q45_t16 : rl_qmm_q45_t8)(c->Y + (size_t)r0 * c->ldy, c->ldy, xq, c->W, c->bias, nr, o, g1,
							     c->acc);
		}
		o = g1;
	}
}
static void run_q45_many_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1) { q45_many(c, o0, o1, 0); }
static void run_q45_many_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1) { q45_many(c, o0, o1, 1); }


/* ------------------------------------------------------------ Q4_K, Q6_K ----------- */

/* rows [r0, r0 + nr) quantized to q8k blocks (xk[r]), and their kq_aux sums */
static const int32_t *q8k_rows(const struct qmm_call *c, uint32_t r0, uint32_t nr, const struct q8k **xk, int vnni)
{
	const uint32_t nb = c->W->cols / 256;
	struct q8k *q = part(c, QMM_L_Q8K, 0);
	int32_t *aux = (int32_t *)part(c, QMM_L_Q8K, 1) + (size_t)r0 * nb * KQ_AUX;
	for (uint32_t r = 0; r < nr; r++) {
		xk[r] = q + (size_t)(r0 + r) * nb;
		rl_qmm_quantize_q8k(c->X + (size_t)(r0 + r) * c->ldx, c->W->cols, q + (size_t)(r0 + r) * nb);
	}
	rl_qmm_kq_aux(c->W->dtype, vnni, xk, nr, nb, aux);
	return aux;
}

/* eight rows over packed groups on AVX2: rotated (Q4_K with its min pairs bp) */
static const struct q8kr *q8k_rot(const struct qmm_call *c, const struct q8k *const *xk, const int32_t *bp,
				  uint32_t nr, uint32_t o0, uint32_t r0)
{
	if (nr != Q8_ROWS || o0 >= c->W->packed_rows)
		return NULL;
	struct q8kr *xr = (struct q8kr *)part(c, QMM_L_Q8K, 2) + (size_t)r0 / Q8_ROWS * (c->W->cols / 256);
	rl_qmm_q8kr_make(xk, c->W->dtype == RL_DT_Q4_K ? bp : NULL, c->W->cols / 256, xr);
	return xr;
}

static void run_q4k_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8k *xk[Q8_ROWS];
	const int32_t *bp = q8k_rows(c, 0, c->nr, xk, 0);
	rl_qmm_q4k_t8(c->Y, c->ldy, xk, bp, q8k_rot(c, xk, bp, c->nr, o0, 0), c->W, c->bias, c->nr, o0, o1, c->acc);
}

static void run_q6k_t8p(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8k *xk[Q8_ROWS];
	const int32_t *bp = q8k_rows(c, 0, c->nr, xk, 0);
	rl_qmm_q6k_t8p(c->Y, c->ldy, xk, q8k_rot(c, xk, bp, c->nr, o0, 0), c->W, c->bias, c->nr, o0, o1, c->acc);
}

static void run_kq_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8k *xk[Q8_ROWS];
	const int32_t *aux = q8k_rows(c, 0, c->nr, xk, 1);
	(c->W->dtype == RL_DT_Q6_K ? rl_qmm_q6k_t16 : rl_qmm_q4k_t16)(c->Y, c->ldy, xk, aux, c->W, c->bias, c->nr,
								      o0, o1, c->acc);
}

static void run_kq_tiles(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8k *xk[Q8_ROWS];
	q8k_rows(c, 0, c->nr, xk, 0);
	rl_qmm_kq_tiles(c->Y, c->ldy, xk, c->W, c->bias, c->nr, o0, o1, c->acc);
}

static void run_kq_row512(const struct qmm_call *c, uint32_t o0, uint32_t o1)
{
	const struct q8k *xk[1];
	q8k_rows(c, 0, 1, xk, 0);
	(c->W->dtype == RL_DT_Q4_K ? rl_qmm_q4k_row512 : rl_qmm_q6k_row512)(c->Y, xk[0], c->W, c->bias, o0, o1, c->acc);
}

/* Many rows over packed K-quant groups, as q8_0_many: every row quantized once (its sums
 * once per 8 rows; on AVX2 each whole 8 rotated), then for each group of 16 weight rows the
 * rows 8 at a time. Against decoding tiles for a float GEMM the integer kernels do 64
 * products an instruction (vpdpbusd) where vdpbf16ps does 32 and an FMA 8; 8-bit activations
 * as in ggml's K-quant GEMMs (figures in bench/results/cpu-kernel-decisions-2026-11.md). */
static void kq_many(const struct qmm_call *c, uint32_t o0, uint32_t o1, int vnni)
{
	const uint32_t nb = c->W->cols / 256, n_rows = c->nr;
	const struct q8k *q = part(c, QMM_L_Q8K, 0);
	const int32_t *aux = part(c, QMM_L_Q8K, 1);
	const struct q8kr *rot[(n_rows + Q8_ROWS - 1) / Q8_ROWS];
	for (uint32_t r0 = 0; r0 < n_rows; r0 += Q8_ROWS) {   /* a chunk's sums, once */
		const uint32_t nr = n_rows - r0 < Q8_ROWS ? n_rows - r0 : Q8_ROWS;
		const struct q8k *xk[Q8_ROWS];
		const int32_t *bp = q8k_rows(c, r0, nr, xk, vnni);
		rot[r0 / Q8_ROWS] = vnni ? NULL : q8k_rot(c, xk, bp, nr, o0, r0);
	}
	for (uint32_t o = o0; o < o1;) {
		const uint32_t g1 = (o & ~15u) + 16 < o1 ? (o & ~15u) + 16 : o1;   /* to the group's end */
		for (uint32_t r0 = 0; r0 < n_rows; r0 += Q8_ROWS) {
			const uint32_t nr = n_rows - r0 < Q8_ROWS ? n_rows - r0 : Q8_ROWS;
			const struct q8k *xk[Q8_ROWS];
			const int32_t *bp = aux + (size_t)r0 * nb * KQ_AUX;
			for (uint32_t r = 0; r < nr; r++)
				xk[r] = q + (size_t)(r0 + r) * nb;
			float *Y = c->Y + (size_t)r0 * c->ldy;
			if (vnni)
				(c->W->dtype == RL_DT_Q6_K ? rl_qmm_q6k_t16 : rl_qmm_q4k_t16)(Y, c->ldy, xk, bp, c->W, c->bias,
											      nr, o, g1, c->acc);
			else if (c->W->dtype == RL_DT_Q4_K)
				rl_qmm_q4k_t8(Y, c->ldy, xk, bp, rot[r0 / Q8_ROWS], c->W, c->bias, nr, o, g1, c->acc);
			else
				rl_qmm_q6k_t8p(Y, c->ldy, xk, rot[r0 / Q8_ROWS], c->W, c->bias, nr, o, g1, c->acc);
		}
		o = g1;
	}
}
static void run_kq_many_t8(const struct qmm_call *c, uint32_t o0, uint32_t o1) { kq_many(c, o0, o1, 0); }
static void run_kq_many_t16(const struct qmm_call *c, uint32_t o0, uint32_t o1) { kq_many(c, o0, o1, 1); }

/* ------------------------------------------------------------ Q2_K, Q3_K, Q5_K ------- */

/* every row quantized to q8k blocks once */
static const struct q8k *q8k_all(const struct qmm_call *c)
{
	const uint32_t nb = c->W->cols / 256;
	struct q8k *q = part(c, QMM_L_Q8K, 0);
	for (uint32_t r = 0; r < c->nr; r++)
		rl_qmm_quantize_q8k(c->X + (size_t)r * c->ldx, c->W->cols, q + (size_t)r * nb);
	return q;
}

/* any number of rows: each quantized once, then a weight row at a time */
static void kx(const struct qmm_call *c, uint32_t o0, uint32_t o1,
	       void (*fn)(float *, size_t, const struct q8k *, const struct rl_wmat *, const float *, uint32_t, uint32_t,
			  uint32_t, int))
{
	fn(c->Y, c->ldy, q8k_all(c), c->W, c->bias, c->nr, o0, o1, c->acc);
}
static void run_kx_rows(const struct qmm_call *c, uint32_t o0, uint32_t o1) { kx(c, o0, o1, rl_qmm_kx_avx2); }
static void run_kx_rows512(const struct qmm_call *c, uint32_t o0, uint32_t o1) { kx(c, o0, o1, rl_qmm_kx_512); }

/* ------------------------------------------------------------ the table ------------ */

#define K(fn, acts) { run_##fn, #fn, acts }
static const struct qmm_kernel
	f32 = K(f32, ACTS_F32), rows_scalar = K(rows_scalar, ACTS_F32), rows_avx2 = K(rows_avx2, ACTS_F32),
	tiles_f32 = K(tiles_f32, ACTS_F32), h16p = K(h16, ACTS_F32), h16p_dpbf = K(h16_dpbf, ACTS_BF16),
	bf16_direct = K(bf16_direct, ACTS_BF16), tiles_bf16 = K(tiles_bf16, ACTS_BF16),
	q8_0_row1 = K(q8_0_row1, ACTS_Q8), q8_0_t8 = K(q8_0_t8, ACTS_Q8), q8_0_t16 = K(q8_0_t16, ACTS_Q8),
	q8_0_many_t8 = K(q8_0_many_t8, ACTS_Q8), q8_0_many_t16 = K(q8_0_many_t16, ACTS_Q8),
	q4k_t8 = K(q4k_t8, ACTS_Q8), q6k_t8p = K(q6k_t8p, ACTS_Q8), kq_t16 = K(kq_t16, ACTS_Q8),
	kq_tiles = K(kq_tiles, ACTS_Q8), kq_row512 = K(kq_row512, ACTS_Q8),
	kq_many_t8 = K(kq_many_t8, ACTS_Q8), kq_many_t16 = K(kq_many_t16, ACTS_Q8),
	q45_t8 = K(q45_t8, ACTS_Q8), q45_t16 = K(q45_t16, ACTS_Q8),
	q45_many_t8 = K(q45_many_t8, ACTS_Q8), q45_many_t16 = K(q45_many_t16, ACTS_Q8),
	kx_rows = K(kx_rows, ACTS_Q8), kx_rows512 = K(kx_rows512, ACTS_Q8);
#undef K

enum { ROWS_LAYOUT, PACKED_LAYOUT };
enum { ONE, FEW, MANY };
enum { C_SCALAR, C_AVX2, C_AVX512, C_VNNI, C_BF16, C_COUNT };

/* [stored type][layout][rows][ISA column]. Notes on the choices (measurements in
 * bench/results/cpu-kernel-decisions-2026-11.md):
 *  - one row over packed Q8_0 keeps the AVX2 kernel on VNNI CPUs: bound by the bytes, it
 *    streams them faster than the VNNI one, whose 8 chained vpdpbusd a block leave less in
 *    flight; over unpacked Q8_0 a row at a time, one sequential stream (q8_0_row1);
 *  - AVX-512 without VNNI has its own kernel only for one row over unpacked K-quants;
 *  - Q4_0/Q4_1/Q5_0/Q5_1 take one kernel per ISA for 1..8 rows and both layouts (q45_t8,
 *    q45_t16), which compute a row the same way in any batch and on either column; IQ4_NL
 *    and IQ4_XS the Q8_0 lane-per-row kernels (their nibbles looked up; each 32 of IQ4_XS
 *    an IQ4_NL block with its own scale, on Q8_0's activations of 8 bits per 32), alike in
 *    any batch, one row too on VNNI (where Q8_0 keeps AVX2's: the lookups make IQ4_NL's work
 *    a block count more than its bytes, ~1.2x Q4_0's one-row rate against ~0.4-0.9x on
 *    AVX2's, Xeon VM). IQ4_XS had taken kx_rows: 11.4 GMAC/s at one row in cache against
 *    34.4 here (bench kernels 768x768, Xeon VM);
 *  - Q2_K, Q3_K and Q5_K on VNNI lane per row (kq_t16: Q5_K through Q4_K's kernel with the
 *    fifth bits or'd in, q2k_/q3k_t16_group), over groups packed at load on VNNI CPUs only
 *    (pack_vnni; AVX2's kx_rows reads the file's rows), against kx_rows on VNNI (bench kernels
 *    2048x2048, Xeon VM, GMAC/s at 8 rows): Q5_K 121-134 (transposing the file's rows in
 *    registers instead: 78-99) against 47-55, Q2_K 130-134 against 53-55, Q3_K 105-117
 *    against 51-54; one row from the packed groups 1.1-1.4x the transposed rows' rate, 1B
 *    Q2_K batch 1 at one thread 90-93% of the stream (77-81% transposed). Their prefill runs
 *    the same kernel 8 rows at a time (kq_many_t16: a row computes as alone, so the
 *    deterministic mode costs nothing there): 110M Q5_K_M prefill 128 at one thread 774-864
 *    tok/s against 738-928 on its old transpose-once kernel (kx_many_vnni, removed), Q2_K
 *    798-1007 against 613-846;
 *  - prefill over packed Q8_0, K-quant, IQ4_NL, IQ4_XS, Q4_0 and Q5_0 groups takes the integer decode
 *    kernels 8 rows at a time (never rounded to bf16); over unpacked block types, and Q4_1 and
 *    Q5_1, tiles decoded to bf16 (AVX512-BF16) or fp32: the 4/5-bit kernels 8 rows at a time
 *    made SmolLM2-135M Q4_1's prompt log-probs 0.051 from float64's (mean |delta|) where
 *    llama.cpp's are 0.038 and the tiles' 0.019 (tests/test_real_models.c allows llama.cpp's +
 *    0.01), for 2.7x its prefill; on Gemma 3 270M's Q5_0 matrices they were as close as the
 *    tiles (0.057 against 0.059; llama.cpp 0.061) for 2.3x (Xeon VM). F32 and F16 keep fp32
 *    arithmetic (their precision is the point of them). */
static const struct qmm_kernel *const route[T_COUNT][2][3][C_COUNT] = {
	/*                                    scalar        AVX2           AVX-512      +VNNI           +BF16 */
	[T_F32][ROWS_LAYOUT][ONE]       = { &f32 },
	[T_F32][ROWS_LAYOUT][FEW]       = { &f32 },
	[T_F32][ROWS_LAYOUT][MANY]      = { &f32 },

	[T_F16][ROWS_LAYOUT][ONE]       = { &rows_scalar, &rows_avx2 },
	[T_F16][ROWS_LAYOUT][FEW]       = { &rows_scalar, &rows_avx2 },
	[T_F16][ROWS_LAYOUT][MANY]      = { &tiles_f32 },
	[T_F16][PACKED_LAYOUT][ONE]     = { &rows_scalar, &h16p },
	[T_F16][PACKED_LAYOUT][FEW]     = { &rows_scalar, &h16p },
	[T_F16][PACKED_LAYOUT][MANY]    = { &tiles_f32,   &h16p },

	[T_BF16][ROWS_LAYOUT][ONE]      = { &rows_scalar, &rows_avx2 },
	[T_BF16][ROWS_LAYOUT][FEW]      = { &rows_scalar, &rows_avx2 },
	[T_BF16][ROWS_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        NULL,           &bf16_direct },
	[T_BF16][PACKED_LAYOUT][ONE]    = { &rows_scalar, &h16p },
	[T_BF16][PACKED_LAYOUT][FEW]    = { &rows_scalar, &h16p,         NULL,        NULL,           &h16p_dpbf },
	[T_BF16][PACKED_LAYOUT][MANY]   = { &tiles_f32,   &h16p,         NULL,        NULL,           &h16p_dpbf },

	[T_Q8_0][ROWS_LAYOUT][ONE]      = { &rows_scalar, &q8_0_row1 },
	[T_Q8_0][ROWS_LAYOUT][FEW]      = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_Q8_0][ROWS_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_Q8_0][PACKED_LAYOUT][ONE]    = { &rows_scalar, &q8_0_t8 },
	[T_Q8_0][PACKED_LAYOUT][FEW]    = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_Q8_0][PACKED_LAYOUT][MANY]   = { &tiles_f32,   &q8_0_many_t8, NULL,        &q8_0_many_t16 },

	[T_Q4_K][ROWS_LAYOUT][ONE]      = { &rows_scalar, &kq_tiles,     &kq_row512,  &kq_t16 },
	[T_Q4_K][ROWS_LAYOUT][FEW]      = { &rows_scalar, &q4k_t8,       NULL,        &kq_t16 },
	[T_Q4_K][ROWS_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_Q4_K][PACKED_LAYOUT][ONE]    = { &rows_scalar, &q4k_t8,       NULL,        &kq_t16 },
	[T_Q4_K][PACKED_LAYOUT][FEW]    = { &rows_scalar, &q4k_t8,       NULL,        &kq_t16 },
	[T_Q4_K][PACKED_LAYOUT][MANY]   = { &tiles_f32,   &kq_many_t8,   NULL,        &kq_many_t16 },

	[T_Q6_K][ROWS_LAYOUT][ONE]      = { &rows_scalar, &kq_tiles,     &kq_row512,  &kq_t16 },
	[T_Q6_K][ROWS_LAYOUT][FEW]      = { &rows_scalar, &kq_tiles,     NULL,        &kq_t16 },
	[T_Q6_K][ROWS_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_Q6_K][PACKED_LAYOUT][ONE]    = { &rows_scalar, &q6k_t8p,      NULL,        &kq_t16 },
	[T_Q6_K][PACKED_LAYOUT][FEW]    = { &rows_scalar, &q6k_t8p,      NULL,        &kq_t16 },
	[T_Q6_K][PACKED_LAYOUT][MANY]   = { &tiles_f32,   &kq_many_t8,   NULL,        &kq_many_t16 },

	[T_Q45][ROWS_LAYOUT][ONE]       = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45][ROWS_LAYOUT][FEW]       = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45][ROWS_LAYOUT][MANY]      = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_Q45][PACKED_LAYOUT][ONE]     = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45][PACKED_LAYOUT][FEW]     = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45][PACKED_LAYOUT][MANY]    = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },

	[T_Q45S][ROWS_LAYOUT][ONE]      = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45S][ROWS_LAYOUT][FEW]      = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45S][ROWS_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_Q45S][PACKED_LAYOUT][ONE]    = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45S][PACKED_LAYOUT][FEW]    = { &rows_scalar, &q45_t8,       NULL,        &q45_t16 },
	[T_Q45S][PACKED_LAYOUT][MANY]   = { &tiles_f32,   &q45_many_t8,  NULL,        &q45_many_t16 },

	[T_IQ4][ROWS_LAYOUT][ONE]       = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_IQ4][ROWS_LAYOUT][FEW]       = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_IQ4][ROWS_LAYOUT][MANY]      = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
	[T_IQ4][PACKED_LAYOUT][ONE]     = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_IQ4][PACKED_LAYOUT][FEW]     = { &rows_scalar, &q8_0_t8,      NULL,        &q8_0_t16 },
	[T_IQ4][PACKED_LAYOUT][MANY]    = { &tiles_f32,   &q8_0_many_t8, NULL,        &q8_0_many_t16 },

	[T_KX][ROWS_LAYOUT][ONE]        = { &rows_scalar, &kx_rows,      &kx_rows512, &kq_t16 },
	[T_KX][ROWS_LAYOUT][FEW]        = { &rows_scalar, &kx_rows,      &kx_rows512, &kq_t16 },
	[T_KX][ROWS_LAYOUT][MANY]       = { &tiles_f32,   &kx_rows,      &kx_rows512, &kq_many_t16 },
	[T_KX][PACKED_LAYOUT][ONE]      = { &rows_scalar, NULL,          NULL,        &kq_t16 },
	[T_KX][PACKED_LAYOUT][FEW]      = { &rows_scalar, NULL,          NULL,        &kq_t16 },
	[T_KX][PACKED_LAYOUT][MANY]     = { &tiles_f32,   NULL,          NULL,        &kq_many_t16 },

	[T_BLOCK][ROWS_LAYOUT][ONE]     = { &rows_scalar, &rows_avx2 },
	[T_BLOCK][ROWS_LAYOUT][FEW]     = { &rows_scalar, &rows_avx2 },
	[T_BLOCK][ROWS_LAYOUT][MANY]    = { &tiles_f32,   NULL,          NULL,        NULL,           &tiles_bf16 },
};

/* The kernel for W's packed rows (packed) or its other rows at n_rows activation rows: the
 * rightmost non-empty column the CPU allows. Besides the ISA, the SIMD columns need the
 * halves widened in hardware for F16 and rows of whole 32s for the q8 and bf16 kernels. */
static const struct qmm_kernel *qmm_pick_class(const struct rl_wmat *W, int rows_class, int packed)
{
	const enum rl_cpu_isa isa = rl_cpu_isa();
	const uint32_t f = rl_cpu_features();
	const int simd = isa != RL_CPU_SCALAR && (W->dtype != RL_DT_F16 || (f & RL_CPUF_F16C)) &&
			 (W->blk_elems == 1 || W->cols % 32 == 0);
	int allowed[C_COUNT] = {
		[C_SCALAR] = 1,
		[C_AVX2] = simd,
		[C_AVX512] = simd && isa == RL_CPU_AVX512,
		[C_VNNI] = simd && isa == RL_CPU_AVX512 && (f & RL_CPUF_VNNI),
		[C_BF16] = simd && isa == RL_CPU_AVX512 && (f & RL_CPUF_BF16) && W->cols % 32 == 0,
	};
	const struct qmm_kernel *const *cell =
		route[qmm_type(W->dtype)->route][packed ? PACKED_LAYOUT : ROWS_LAYOUT][rows_class];
	for (int col = C_COUNT - 1; col > C_SCALAR; col--)
		if (allowed[col] && cell[col])
			return cell[col];
	return cell[C_SCALAR] ? cell[C_SCALAR] : &rows_scalar;   /* a type never packed: as unpacked */
}

static const struct qmm_kernel *qmm_pick(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	return qmm_pick_class(W, n_rows == 1 ? ONE : n_rows <= Q8_ROWS ? FEW : MANY, packed);
}

/* The many-row kernel that runs k 8 rows at a time over packed groups, on the same 8-bit
 * activations (cpu_qmm.c's q8_0_many and kq_many), so a row computes in it as in k; NULL
 * when k has none */
static const struct qmm_kernel *many_of(const struct qmm_kernel *k, int dt)
{
	return k == &q8_0_t8 ? &q8_0_many_t8 : k == &q8_0_t16 ? &q8_0_many_t16 : k == &kq_t16 ? &kq_many_t16 :
	       k == &q45_t8 ? &q45_many_t8 : k == &q45_t16 ? &q45_many_t16 :
	       k == &q4k_t8 || k == &q6k_t8p ? (k == (dt == RL_DT_Q4_K ? &q4k_t8 : &q6k_t8p) ? &kq_many_t8 : NULL) : NULL;
}

/* The row-invariant choice (rl_cpu_qmatmul_det): one kernel for every row count, each of which
 * computes a row alone as among the others (its activations quantized per row, its sums in
 * one order per output). The one-row kernel where it takes several rows too (a batch-1 step,
 * what latency-bound users run, then costs nothing), else the 2..8-row one (q8_0_row1 and
 * kq_row512 take one row only); past 8 rows the many-row kernel where it is that kernel 8 rows
 * at a time, else NULL: the caller runs it on chunks of 8 (tiles_f32 and tiles_bf16 sum in
 * another order, or in bf16). test_qmatmul's rows_compute_alike_when_deterministic holds every
 * type and ISA column to it. */
static const struct qmm_kernel *qmm_det_kernel(const struct rl_wmat *W, int packed)
{
	const struct qmm_kernel *one = qmm_pick_class(W, ONE, packed);
	return one == &q8_0_row1 || one == &kq_row512 ? qmm_pick_class(W, FEW, packed) : one;
}

/* Kernels that compute a row to the same bits (the same 8-bit activations, exact integer
 * block sums, the same float operations in the same block order), whatever their ISA column
 * or row count: one family each (test_qmatmul's q45_rows_compute_alike), 0 for the others */
static int alike_family(const struct qmm_kernel *k)
{
	if (k == &q8_0_t8 || k == &q8_0_t16 || k == &q8_0_many_t8 || k == &q8_0_many_t16)
		return 1;
	if (k == &q45_t8 || k == &q45_t16 || k == &q45_many_t8 || k == &q45_many_t16)
		return 2;
	if (k == &kx_rows || k == &kx_rows512)
		return 3;
	return 0;
}

static const struct qmm_kernel *qmm_pick_det(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	const struct qmm_kernel *k = qmm_det_kernel(W, packed), *def = qmm_pick(W, n_rows, packed);
	if (alike_family(def) && alike_family(def) == alike_family(k))
		return def;                    /* the default's own kernel computes as k: no cost */
	if (n_rows <= Q8_ROWS)
		return k;
	if (qmm_pick_class(W, MANY, packed) == k)
		return k;
	return packed ? many_of(k, W->dtype) : NULL;
}

const char *rl_cpu_qmatmul_kernel(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	return qmm_pick(W, n_rows, packed)->name;
}

const char *rl_cpu_qmatmul_kernel_det(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	const struct qmm_kernel *k = qmm_pick_det(W, n_rows, packed);
	return k ? k->name : qmm_pick_det(W, Q8_ROWS, packed)->name;
}

int rl_cpu_qmatmul_bf16_acts(const struct rl_wmat *W, uint32_t n_rows)
{
	return (W->packed_rows && qmm_pick(W, n_rows, 1)->acts == ACTS_BF16) ||
	       (W->packed_rows < W->rows && qmm_pick(W, n_rows, 0)->acts == ACTS_BF16);
}

size_t rl_cpu_qmatmul_scratch(uint32_t in, uint32_t max_rows)
{
	size_t off[3], most = 0;
	for (int k = 0; k < QMM_L_COUNT; k++) {
		size_t n = qmm_layout((enum qmm_layout_kind)k, in, max_rows, off);
		most = n > most ? n : most;
	}
	return most + 64;              /* the base aligned up to 64 bytes */
}

typedef const struct qmm_kernel *qmm_pick_fn(const struct rl_wmat *W, uint32_t n_rows, int packed);

/* W's packed rows [o_begin, packed_rows), then the rest, each through the kernel pick chooses */
static void qmm_run(qmm_pick_fn *pick, float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		    const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end, int accumulate, void *scratch)
{
	if (!n_rows || o_begin >= o_end)       /* e.g. the LM head of a step that samples nothing */
		return;
	const struct qmm_call c = { Y, ldy, X, ldx, W, bias, n_rows, accumulate, qmm_align64p(scratch) };
	if (o_begin < W->packed_rows) {
		const uint32_t pe = o_end < W->packed_rows ? o_end : W->packed_rows;
		pick(W, n_rows, 1)->run(&c, o_begin, pe);
		o_begin = pe;
	}
	if (o_begin < o_end)
		pick(W, n_rows, 0)->run(&c, o_begin, o_end);
}

void rl_cpu_qmatmul(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		    const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
		    int accumulate, void *scratch)
{
	qmm_run(qmm_pick, Y, ldy, X, ldx, W, bias, n_rows, o_begin, o_end, accumulate, scratch);
}

/* A step with prompt rows: a type whose many-row kernel keeps the activations wider than the
 * few-row kernels' 8 bits (Q4_1, Q5_1 and unpacked rows: the bf16 or fp32 tiles) takes it at
 * every row count, so a prompt computes the same however it is chunked and whatever shares
 * its steps; the others as rl_cpu_qmatmul. */
static const struct qmm_kernel *qmm_pick_prompt(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	const struct qmm_kernel *k = qmm_pick(W, n_rows, packed), *many = qmm_pick_class(W, MANY, packed);
	return k->acts == ACTS_Q8 && many->acts != ACTS_Q8 ? many : k;
}

void rl_cpu_qmatmul_prompt(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			   int accumulate, void *scratch)
{
	qmm_run(qmm_pick_prompt, Y, ldy, X, ldx, W, bias, n_rows, o_begin, o_end, accumulate, scratch);
}

const char *rl_cpu_qmatmul_kernel_prompt(const struct rl_wmat *W, uint32_t n_rows, int packed)
{
	return qmm_pick_prompt(W, n_rows, packed)->name;
}

void rl_cpu_qmatmul_decode(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			   int accumulate, void *scratch)
{
	if (n_rows > Q8_ROWS && o_begin < W->packed_rows && qmm_type(W->dtype)->route == T_Q45) {
		/* the many-row kernel of the 2..8-row one: that one 8 rows at a time (q45_many) */
		const struct qmm_kernel *k = many_of(qmm_pick(W, Q8_ROWS, 1), W->dtype);
		if (k) {
			const uint32_t pe = o_end < W->packed_rows ? o_end : W->packed_rows;
			const struct qmm_call c = { Y, ldy, X, ldx, W, bias, n_rows, accumulate, qmm_align64p(scratch) };
			k->run(&c, o_begin, pe);
			o_begin = pe;
		}
	}
	if (o_begin < o_end)
		rl_cpu_qmatmul(Y, ldy, X, ldx, W, bias, n_rows, o_begin, o_end, accumulate, scratch);
}

void rl_cpu_qmatmul_det(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			int accumulate, void *scratch)
{
	if (!n_rows || o_begin >= o_end)
		return;
	for (int packed = 1; packed >= 0; packed--) {
		/* W's packed rows [0, packed_rows), then the rest, as rl_cpu_qmatmul splits them */
		const uint32_t a = packed ? o_begin : (o_begin > W->packed_rows ? o_begin : W->packed_rows);
		const uint32_t b = packed ? (o_end < W->packed_rows ? o_end : W->packed_rows) : o_end;
		if (a >= b)
			continue;
		const struct qmm_kernel *k = qmm_pick_det(W, n_rows, packed);
		const uint32_t step = k ? n_rows : Q8_ROWS;
		if (!k)
			k = qmm_pick_det(W, Q8_ROWS, packed);
		for (uint32_t r0 = 0; r0 < n_rows; r0 += step) {
			const uint32_t nr = n_rows - r0 < step ? n_rows - r0 : step;
			const struct qmm_call c = { Y + (size_t)r0 * ldy, ldy, X + (size_t)r0 * ldx, ldx, W, bias, nr,
						    accumulate, qmm_align64p(scratch) };
			k->run(&c, a, b);
		}
	}
}
