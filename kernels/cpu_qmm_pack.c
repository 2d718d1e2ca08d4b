/* cpu_qmm_pack.c — the stored layouts of struct rl_wmat: repacking at load
 * (rl_cpu_wmat_pack; the layouts are drawn in cpu_ops.h and kernels/README.md), the row grain
 * a thread's share keeps whole, and reading any row or block back as the file laid it out.
 * Plain C: the kernels read the layouts, this file writes them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu_qmm.h"
#include "kernels/rl_half.h"

/* Q5_0/Q5_1's qh at p turned by q5_qh_perm (to the packed order, and back) */
static void qh_perm_at(uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	v = q5_qh_perm(v);
	memcpy(p, &v, 4);
}

/* Row r's block b as the file lays it out: in place, or gathered from its packed group into
 * tmp[blk_bytes]. */
const uint8_t *rl_qmm_block(const struct rl_wmat *W, uint32_t r, uint32_t b, uint8_t *tmp)
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
	if (q45_bits5(W->dtype))
		qh_perm_at(tmp + hd);
	memcpy(tmp, t, hd);
	memcpy(tmp + hd + 4 * ndw, t + hd, tail - hd);
	return tmp;
}

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
	if (pack_vnni(W->dtype) && !(rl_cpu_isa() == RL_CPU_AVX512 && (rl_cpu_features() & RL_CPUF_VNNI)))
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
				if (q45_bits5(W->dtype))
					qh_perm_at(dst + 4 * L);       /* dword 0 */
				memcpy(t, blk, hd);
				memcpy(t + hd, blk + hd + 4 * ndw, tail - hd);
			}
		}
	}
	free(src);
	W->packed_rows = W->rows / 16 * 16;
	return 1;
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
			one.data = rl_qmm_block(W, r, b, blk);
			rl_cpu_wmat_row(&one, 0, out + (size_t)b * W->blk_elems);
		}
		return;
	}
	const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
	if (rl_cpu_isa() != RL_CPU_SCALAR && rl_cpu_has_f16c() && rl_qmm_row_avx2(W, row, out))
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
