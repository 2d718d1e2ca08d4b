/* rl_cuda_ops.h — launchers of the CUDA kernels (kernels/cuda_*.cu), callable from C.
 *
 * Storage (weights, activations, KV cache) is 2-byte, bf16 or fp16 as `dt` says (passed as
 * uint16_t *; "st" below), arithmetic fp32. Each launcher runs the kernel's instantiation for
 * dt. Every launcher enqueues on `st` and returns at once; the caller checks
 * cudaGetLastError(). Row counts are the padded bucket size (a graph's fixed grid); kernels
 * read the live counts from the metadata (m.hdr) and skip padding, so the same launch serves
 * any step of that bucket. Each kernel's CPU counterpart is named beside it; tests/gpu
 * compares the two.
 */
#ifndef RL_CUDA_OPS_H
#define RL_CUDA_OPS_H
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "kernels/rl_cuda_meta.h"
#include "kernels/rl_cuda_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x[rows, dim] fp32 = emb[tokens[r]] (st [vocab, dim]); padding rows gather token 0.
 * CPU: the memcpy of tok_emb rows in rl_backend_cpu.c forward(). */
void rl_cuda_embed(float *x, const uint16_t *emb, struct rl_cuda_meta m, uint32_t rows,
		   uint32_t dim, enum rl_cuda_dtype dt, cudaStream_t st);

/* For i < rows: r = row_map ? row_map[i] : i; r < 0 writes out[i] = 0. Else
 * v = x[r] + (delta ? delta[r] : 0); x[r] = v when write_x; out[i] = st(rmsnorm(v) * w).
 * x, delta: [*, dim] fp32; w: [dim] fp32; out: [rows, dim] st. CPU: rl_cpu_rmsnorm after
 * the residual accumulate of rl_cpu_matmul. */
void rl_cuda_add_rmsnorm(uint16_t *out, float *x, const float *delta, const float *w,
			 const int32_t *row_map, uint32_t rows, uint32_t dim, float eps,
			 int write_x, enum rl_cuda_dtype dt, cudaStream_t st);

/* Live rows r of qkv [rows, (nh + 2 nkv) hd] st (+ bias [(nh + 2 nkv) hd] fp32 or NULL): q
 * rotated to q_out [rows, nh hd] st; k rotated and v written to slot m.slot[r] (none when -1)
 * of the layer's caches kc, vc [n_blocks, nkv, bs, hd] st. inv_freq [hd/2]; angle =
 * (pos / rope_scale) inv_freq. qk_norm [2 hd] (q's weights, then k's) or NULL: each q and k
 * head RMS-normed (eps) before the rotation (Qwen3); at most RL_CUDA_QK_NORM_HEADS heads.
 * CPU: rl_cpu_rmsnorm, rl_cpu_rope and the KV memcpy in rl_backend_cpu.c forward(). */
#define RL_CUDA_QK_NORM_HEADS 256
void rl_cuda_rope_kv(uint16_t *q_out, uint16_t *kc, uint16_t *vc, const uint16_t *qkv,
		     const float *bias, const float *inv_freq, struct rl_cuda_meta m, uint32_t rows,
		     uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, float rope_scale,
		     int halves, const float *qk_norm, float eps, enum rl_cuda_dtype dt, cudaStream_t st);

/* h[rows, hid] st = silu(gu[r, 0:hid]) * gu[r, hid:2 hid] (gu [rows, 2 hid] st).
 * CPU: rl_cpu_silu_mul. */
void rl_cuda_swiglu(uint16_t *h, const uint16_t *gu, uint32_t rows, uint32_t hid,
		    enum rl_cuda_dtype dt, cudaStream_t st);

/* Paged causal attention over the packed batch: every item of m (grid items_cap x nkv) then
 * the split-KV reduce (grid rows x nh). q, out: [rows, nh hd] st; kc, vc: one layer's cache
 * (st); part_o [parts, nh, hd], part_ml [parts, nh, 2] fp32 scratch. hd even, <= 256;
 * qt x group <= RL_CUDA_ATTN_QV. Items of several rows run on tensor cores when hd % 16 == 0
 * (rl_cuda_attention_use_tc). Call rl_cuda_attention_prepare first. CPU: rl_cpu_attention. */
void rl_cuda_attention(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q,
		       const uint16_t *kc, const uint16_t *vc, struct rl_cuda_meta m,
		       uint32_t items_cap, uint32_t rows, uint32_t nh, uint32_t nkv, uint32_t hd,
		       uint32_t bs, enum rl_cuda_dtype dt, cudaStream_t st);
/* The deterministic mode's attention (rl_batch.deterministic; the step packed with it): every
 * item on one kernel picked by hd alone, each query row's keys in fixed chunks of
 * RL_CUDA_DET_CHUNK merged in position order, in the kernel or (rows the packer split, at chunk
 * boundaries) by a merge of the same arithmetic: a row's bits depend on its position alone,
 * not on the batch, the chunking, the split or rl_cuda_attention_use_tc. Shapes as above. */
void rl_cuda_attention_det(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q,
			   const uint16_t *kc, const uint16_t *vc, struct rl_cuda_meta m, uint32_t items_cap,
			   uint32_t rows, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs,
			   enum rl_cuda_dtype dt, cudaStream_t st);
/* Raises attention's dynamic shared memory limit where head_dim needs it (> 48 KiB); once per
 * dtype, before the first launch or capture. 0, or the cudaError_t as an int. */
int rl_cuda_attention_prepare(uint32_t hd, enum rl_cuda_dtype dt);
/* 0: prefill items run on the CUDA-core kernel too (a benchmark's A/B); 1 (default): on tensor
 * cores where head_dim % 16 == 0. Affects launches made afterwards, not captured graphs. */
void rl_cuda_attention_use_tc(int on);

/* The deterministic mode's GEMM (kernels/cuda_gemm_det.cu), in place of cuBLAS when
 * rl_batch.deterministic: Y[rows, out] (fp32 when y_f32, else st) = X[rows, in] W[out, in]^T
 * (X, W st), fp32 accumulation. Each output's sum over K runs in one order fixed by K alone
 * (16-wide tensor-core slices in increasing k, no split-K), so a row's bits never depend on
 * rows. CPU: gemm_det_ref in tests/gpu/test_gpu.c (rl_cpu_matmul's operation). */
void rl_cuda_gemm_det(void *Y, int y_f32, const uint16_t *X, const uint16_t *W, uint32_t rows,
		      uint32_t in, uint32_t out, enum rl_cuda_dtype dt, cudaStream_t st);

/* Samples each row j < samp_cap of logits [samp_cap, vocab] with m.samp[j] into ids[j]
 * (-1 for rows past m.hdr->n_samp). A row with a constraint mask (m.samp[j].mask >= 0, when
 * m.masks is set) first has its disallowed logits set to -inf, in place. probs
 * [samp_cap, vocab] fp32 scratch. CPU: rl_sample_mask, rl_sample. */
void rl_cuda_sample(int32_t *ids, float *probs, float *logits, struct rl_cuda_meta m,
		    uint32_t samp_cap, uint32_t vocab, cudaStream_t st);

/* p[n] = st(center + a * u), u uniform in [-1, 1) from a hash of (seed, index): synthetic
 * weights made on the device (the same u for either dtype). The f32 variant fills norms. */
void rl_cuda_fill_uniform(uint16_t *p, size_t n, float a, float center, uint64_t seed,
			  enum rl_cuda_dtype dt, cudaStream_t st);
void rl_cuda_fill_uniform_f32(float *p, size_t n, float a, float center, uint64_t seed,
			      cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
