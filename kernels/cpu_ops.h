/* cpu_ops.h — the fast CPU kernels behind the cpu backend: batched matmul (the hot spot),
 * RMSNorm, RoPE, SwiGLU and attention over the paged KV cache. Each kernel works on a slice
 * its caller chooses (rows or output columns) so a thread pool can split the work.
 *
 * SIMD: AVX-512 or AVX2+FMA with a scalar fallback, by the ISA of kernels/cpu_features.h
 * (rl_cpu_set_isa lets tests run every implementation against the reference).
 */
#ifndef RL_CPU_OPS_H
#define RL_CPU_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu_features.h"

/* Y[r, o] (=, or += when accumulate) sum_i X[r, i] * W[o, i] (+ bias[o]) for r < n_rows and
 * o in [o_begin, o_end).  X: [n_rows, in] row stride ldx; W: [out, in] dense; Y: row stride
 * ldy; bias: [out] or NULL. Each weight tile is read once for all rows, so a step's weights
 * stream from memory once whatever the batch. */
void rl_cpu_matmul(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
		   const float *bias, uint32_t n_rows, uint32_t in, uint32_t o_begin,
		   uint32_t o_end, int accumulate);

/* The same product over a weight matrix kept as the file stores it (kernels/cpu_qmm.c, whose
 * table names the kernel for each stored type, layout, row count and ISA):
 * Y[r, o] (=, or +=) sum_i X[r, i] * W[o, i] (+ bias[o]), r < n_rows, o in [o_begin, o_end),
 * in = W->cols. F32 is rl_cpu_matmul; up to 8 rows compute on the stored form (16-bit floats
 * widened in registers; Q8_0, Q4_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS as integer dots against
 * activations quantized to 8 bits; other block types decoded a row at a time); more rows decode
 * tiles of weight rows to fp32 for rl_cpu_matmul (or to bf16 for bf16 dot products where the CPU
 * has AVX512-BF16), except packed groups of those block types (rl_cpu_wmat_pack), which take the decode steps' 8-bit
 * integer dots 8 rows at a time. W may be packed or not.
 * scratch: rl_cpu_qmatmul_scratch(in, n_rows at most) bytes, the caller's thread's own. */
struct rl_wmat;
void rl_cpu_qmatmul(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
		    const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
		    int accumulate, void *scratch);
/* The same product, row-invariant (the deterministic mode, issue 51): row r's outputs are the
 * same bits whatever n_rows, whichever rows share the call, and however [o_begin, o_end) is
 * cut at rl_cpu_wmat_grain(W) boundaries. Every row count takes one kernel: the one-row
 * kernel where it takes several rows too, else the 2..8-row one (past 8 rows, the many-row
 * kernel that is it 8 rows at a time, or chunks of 8); never the decoded tiles. */
void rl_cpu_qmatmul_det(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			int accumulate, void *scratch);
/* The same product for a step with prompt rows: as rl_cpu_qmatmul, except that the types whose
 * many-row kernel keeps the activations wider than 8 bits (Q4_1 and Q5_1 over decoded tiles,
 * unpacked rows) take it at every row count, so a prompt's rows compute the same whatever its
 * chunks and whatever shares its steps (a chunk of 8 rows or fewer had taken the 8-bit
 * kernels: SmolLM2-135M Q4_1's answers then changed with the budget). */
void rl_cpu_qmatmul_prompt(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			   int accumulate, void *scratch);
const char *rl_cpu_qmatmul_kernel_prompt(const struct rl_wmat *W, uint32_t n_rows, int packed);
/* The same product for a step without prompt rows (decode tokens and drafts only): as
 * rl_cpu_qmatmul, except that packed Q4_1 and Q5_1 groups take their 8-bit integer kernels at
 * every row count, as a decode step of 1..8 rows does (their prefill keeps the decoded tiles
 * for the prompt's log-probabilities; a decode batch of 9-64 would pay 4-5x for them). */
void rl_cpu_qmatmul_decode(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W,
			   const float *bias, uint32_t n_rows, uint32_t o_begin, uint32_t o_end,
			   int accumulate, void *scratch);
/* scratch bytes for rows of `in` inputs and calls of at most max_rows activation rows */
size_t rl_cpu_qmatmul_scratch(uint32_t in, uint32_t max_rows);
/* 1 when rl_cpu_qmatmul over W with n_rows rows rounds the activations to bf16 (AVX512-BF16
 * dot products over BF16 from 2 rows, and for prefill over block-quantized weights but for
 * the rows of them that are packed, as ggml does); the tests hold such calls to the 8-bit
 * activation paths' tolerance. */
int rl_cpu_qmatmul_bf16_acts(const struct rl_wmat *W, uint32_t n_rows);
/* Steps of at most this many activation rows take the decode-step kernels (lane per row,
 * 8-bit activations) */
#define RL_CPU_FEW_ROWS 8
/* The name of the kernel that serves W's packed rows (packed) or its others at n_rows
 * activation rows on this CPU, as cpu_qmm.c's table and kernels/README.md name it. */
const char *rl_cpu_qmatmul_kernel(const struct rl_wmat *W, uint32_t n_rows, int packed);
/* The same for rl_cpu_qmatmul_det (past 8 rows, where it runs chunks of 8: the 8-row kernel) */
const char *rl_cpu_qmatmul_kernel_det(const struct rl_wmat *W, uint32_t n_rows, int packed);
/* Row r of W as fp32: out[W->cols]. */
void rl_cpu_wmat_row(const struct rl_wmat *W, uint32_t r, float *out);
/* Repacks W in place, once at load, into the layout the kernels stream best, where that pays
 * (the ISA selected now decides). W->packed_rows says how many rows are packed; every path of
 * rl_cpu_qmatmul and rl_cpu_wmat_row reads either layout.
 * - F16 (with F16C) and BF16 of 16 rows or more, on AVX2 or AVX-512: all rows, as blocks of
 *   48 rows over [0, 48 * floor(rows / 48)), then blocks of 16, then one of the last
 *   rows % 16. The block of rows [o, o + w) stays at data + o * row_bytes and holds [cols][w]
 *   halfs: weight (o + j, k) at element k * w + j (the outer-product kernels broadcast an
 *   activation into whole vectors of outputs; cpu_qmm_h16.c's panels).
 * - Q8_0, Q4_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS, on AVX2 or AVX-512: each whole group of 16
 *   rows (rows [16g, 16g + 16), 16g + 16 <= rows) keeps its bytes where they were, reordered so
 *   that for each block b the 16 rows' block dwords j (4 * ndw bytes from byte head of a block;
 *   Q8_0 the 8 after its f16 d, Q4_K all 36, IQ4_XS all 34, Q6_K the first 52, Q4_0/Q4_1/IQ4_NL the 4 of qs, Q5_0/Q5_1
 *   qh and qs, qh bit-permuted: cpu_qmm.h's q5_qh_perm) are one 64-byte vector at
 *   group + b * 16 * blk_bytes + 64 j, lane L = row L, and the rest of each row's block
 *   (the f16 d, or d and m) follows row after row. The lane-per-row kernels then load what
 *   they used to transpose in registers. Rows past the last whole group stay as they were.
 * W->data must be writable memory the caller owns. Returns 1 when packed, 0 when left as is,
 * -ENOMEM. */
int rl_cpu_wmat_pack(struct rl_wmat *W);
/* The row count that the threads' shares of W's output rows are multiples of: whole packed
 * groups or blocks (48 for packed F16 and BF16, 16 for packed block types), else 4. */
uint32_t rl_cpu_wmat_grain(const struct rl_wmat *W);

/* o[n] = x[n] * w[n] / sqrt(mean(x^2) + eps); o may be x. */
void rl_cpu_rmsnorm(float *o, const float *x, const float *w, uint32_t n, float eps);

/* cs[rot/2][2] = mscale times cos, sin of pos_scaled * inv_freq[i] (pos_scaled = position /
 * rope_scale, inv_freq[rot/2] = theta^(-2i/rot); mscale: LongRoPE's attention factor, which
 * scales the rotated dims only, else 1): made once per row and step, used by every layer. */
void rl_cpu_rope_angles(float *cs, uint32_t rot, float pos_scaled, const float *inv_freq, float mscale);

/* Rotates the first rot dims of n_heads heads v[n_heads, hd] by the angles cs
 * (rl_cpu_rope_angles of rot); the others stay. halves: pairs (i, i+rot/2), else (2i, 2i+1). */
void rl_cpu_rope(float *v, uint32_t n_heads, uint32_t hd, uint32_t rot, const float *cs, int halves);

/* g[n] = silu(g[n]) * u[n] */
void rl_cpu_silu_mul(float *g, const float *u, uint32_t n);
/* g[n] = gelu(g[n]) * u[n], GELU's tanh approximation (Gemma's gelu_pytorch_tanh) */
void rl_cpu_gelu_mul(float *g, const float *u, uint32_t n);

/* Paged KV cache of one layer and one KV head, as attention reads it: the key of position p
 * is at k + block_table[p / block_size] * block_stride + (p % block_size) * hd (v alike). */
struct rl_cpu_kv_view {
	const float *k, *v;            /* fp32 pool, or NULL when hk, hv are set */
	const uint16_t *hk, *hv;       /* IEEE half pool (rl_cpu_f32_to_f16 wrote it), else NULL */
	const uint32_t *block_table;
	uint32_t block_size;
	size_t block_stride;           /* elements between consecutive physical blocks */
	uint32_t window;               /* sliding window: the query at position p sees keys [p + 1 - window, p]; 0: [0, p] */
	float *wide;                   /* rl_cpu_attention's own: [2, bs, hd] widened half blocks */
};

/* Causal attention of the n_qh query heads that share one KV head (GQA), for q_len
 * consecutive query rows at positions pos0 .. pos0+q_len-1: row i attends to positions
 * [0, pos0 + i]. Query head g of row i: q + i*ldq + g*hd, [hd]; its output at
 * out + i*ldo + g*hd, [hd]. scratch: rl_cpu_attention_scratch(q_len * n_qh, hd, block_size)
 * floats. Softmax is computed online block by block (nothing sized by the context); prefill
 * chunks read each key block once for all their rows and heads. */
void rl_cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, uint32_t q_len,
		      uint32_t n_qh, uint32_t pos0, uint32_t hd, const struct rl_cpu_kv_view *kv,
		      float *scratch);
/* One decode row (the last position of n_keys) of a sequence over the view's n_kv KV heads
 * at once: the view's pools point at the first one's tile, the others follow it in each block
 * (bs * hd elements apart, the backend's [block, KV head, bs, hd] layout); KV head kh serves
 * query heads kh * group .. + group - 1, whose rows are q + r * hd and out + r * hd. The same
 * results, bit for bit, as rl_cpu_attention head by head, which it is on the scalar ISA, but
 * a block's heads are read as one run (see attn_heads in cpu_attention_tmpl.h). scratch:
 * rl_cpu_attention_scratch(n_kv * group, hd, block_size) floats. */
void rl_cpu_attention_heads(float *out, const float *q, uint32_t n_kv, uint32_t group, uint32_t n_keys, uint32_t hd,
			    const struct rl_cpu_kv_view *kv, float *scratch);
/* Start bringing into L2 the first blocks of the n_keys positions an rl_cpu_attention call
 * over kv will read (its own loop prefetches the later ones), at most max_blocks of them (0:
 * as many as that loop runs ahead): a caller with several calls to make names the next while
 * this one runs, or the first block of every call well before them. */
void rl_cpu_attention_prefetch(const struct rl_cpu_kv_view *kv, uint32_t n_keys, uint32_t hd, uint32_t max_blocks);
/* Floats of scratch rl_cpu_attention needs for rows = q_len * n_qh (either pool type). */
size_t rl_cpu_attention_scratch(uint32_t rows, uint32_t hd, uint32_t block_size);

/* dst[n] = src[n] rounded to IEEE half (F16C where the CPU has it, else rl_f32_to_f16:
 * the same bits). The half KV cache's writer. */
void rl_cpu_f32_to_f16(uint16_t *dst, const float *src, uint32_t n);

#endif
