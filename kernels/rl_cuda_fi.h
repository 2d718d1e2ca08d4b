/* rl_cuda_fi.h — FlashInfer's batch attention over ringlm's paged KV cache, callable from C:
 * decode (kernels/flashinfer/fi_decode.cu) for decode-only steps, prefill
 * (kernels/flashinfer/fi_prefill.cu, causal) for every step with a prefill chunk, its decode
 * rows riding along as one-row requests. Built only when the dependency step fetched the
 * FlashInfer headers (.ci/flashinfer); otherwise rl_cuda_fi_available() is 0 and the in-house
 * attention of rl_cuda_ops.h is the only path.
 *
 * The cache is ours, unchanged: one layer's kc, vc [n_blocks, nkv, bs, hd] st is FlashInfer's
 * HND page layout. A step's sequences are described in FlashInfer's CSR form, which
 * rl_cuda_host_pack (runtime/cuda/host/cuda_host.h) writes into the packed step image:
 *   qo_indptr [batch + 1]   first query row of each request (prefill only; rows of request i
 *                           are q[qo_indptr[i] .. qo_indptr[i + 1]), the last ones aligned
 *                           with its last keys: causal),
 *   kv_indptr [batch + 1]   first block-table entry of each sequence (the packed seq_bt),
 *   kv_indices [...]        the flat block tables (the packed bt),
 *   kv_last_len [batch]     keys in each sequence's last block (1..bs; 0 for an empty request).
 * Plan on the host before each step (its int workspace is copied to the device on `st`), then
 * run, which only enqueues kernels and may be captured in a CUDA graph. In graph mode
 * (graph = 1) the launch geometry depends only on the counts: on `batch` for decode, on
 * (`rows`, `batch`) for prefill, so a graph captured once per count replays under any later
 * plan of those counts (padding requests are empty).
 *
 * Instantiated for head dim 64 and 128, bf16 and fp16 (q, cache and output in the same type),
 * GQA group sizes 1, 2, 3, 4, 6, 8, 16 (decode; prefill takes any group). Functions return 0,
 * -EINVAL for an unsupported shape, -ENOSYS when FlashInfer was not built in, or -EIO after a
 * CUDA or FlashInfer error (the message through rl_cuda_fi_last_error()).
 */
#ifndef RL_CUDA_FI_H
#define RL_CUDA_FI_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/rl_cuda_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RL_CUDA_FI_VERSION "0.7.2.post1"   /* the pinned flashinfer-python (.ci/flashinfer) */

/* A plan as FlashInfer's ToVector() lists it (scheduler.cuh), zero past its end.
 * DecodePlanInfo (10): padded batch, six workspace offsets, enable_cuda_graph, split_kv.
 * PrefillPlanInfo (15): padded batch, total rows and their offset, query tile, nine offsets,
 * enable_cuda_graph, split_kv. */
struct rl_cuda_fi_plan {
	int64_t v[16];
};
#define RL_CUDA_FI_PLAN_PADDED_BATCH 0
#define RL_CUDA_FI_PLAN_SPLIT_KV 9
#define RL_CUDA_FI_PPLAN_CTA_TILE_Q 3
#define RL_CUDA_FI_PPLAN_SPLIT_KV 14

/* Workspaces of one decode attention: device float and int buffers and a pinned host copy of
 * the int one, sized by rl_cuda_fi_decode_sizes for the largest batch. */
struct rl_cuda_fi_ws {
	void  *float_ws, *int_ws, *int_host;
	size_t float_bytes, int_bytes;
};

/* 1 when librlcuda.so carries FlashInfer's kernels. */
int rl_cuda_fi_available(void);
/* 1 when (dt, hd, nh / nkv) has an instantiation. */
int rl_cuda_fi_supported(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv);

/* Workspace bytes for decode batches up to max_batch with at most max_pages blocks each
 * (graph mode: the sizes of the largest plan). Needs the device (occupancy queries). */
int rl_cuda_fi_decode_sizes(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			    uint32_t page_size, uint32_t max_batch, uint32_t max_pages,
			    size_t *float_bytes, size_t *int_bytes);

/* Plans a decode step of `batch` sequences from the host copy of kv_indptr; copies the plan's
 * int workspace to the device on st (stream as void *: cudaStream_t). */
int rl_cuda_fi_decode_plan(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			   uint32_t page_size, const struct rl_cuda_fi_ws *ws, const int32_t *kv_indptr_host,
			   uint32_t batch, int graph, struct rl_cuda_fi_plan *plan, void *st);

/* out[batch, nh, hd] st = softmax(q k^T * sm_scale) v for q [batch, nh, hd] st (row stride
 * q_stride elements) over each sequence's keys; device CSR arrays as above. Enqueue only. */
int rl_cuda_fi_decode_run(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			  uint32_t page_size, const struct rl_cuda_fi_ws *ws,
			  const struct rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q,
			  uint32_t q_stride, const uint16_t *kc, const uint16_t *vc,
			  const int32_t *kv_indptr, const int32_t *kv_indices,
			  const int32_t *kv_last_len, uint32_t batch, float sm_scale, void *st);

/* Prefill workspace bytes for a graph-mode plan of `rows` query rows in `batch` requests (the
 * size depends on those two only). Needs the device. */
int rl_cuda_fi_prefill_sizes(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			     uint32_t page_size, uint32_t rows, uint32_t batch,
			     size_t *float_bytes, size_t *int_bytes);

/* Plans a step of `batch` requests over `rows` query rows (the padded rows; the live ones
 * are qo_indptr_host[batch]) from the host copies of qo_indptr and kv_indptr; copies the
 * plan's int workspace to the device on st. Always in graph mode, eager steps too: its
 * workspace is bounded by the counts alone, where an eager plan's grows with the lengths. */
int rl_cuda_fi_prefill_plan(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			    uint32_t page_size, const struct rl_cuda_fi_ws *ws,
			    const int32_t *qo_indptr_host, const int32_t *kv_indptr_host, uint32_t rows,
			    uint32_t batch, struct rl_cuda_fi_plan *plan, void *st);

/* out[rows, nh, hd] st = causal softmax(q k^T * sm_scale) v for q [rows, nh, hd] st (row
 * stride q_stride elements): row j of request i sees the keys up to its own position,
 * kv_len_i - qo_len_i + j. Rows outside every request are not written. Enqueue only. */
int rl_cuda_fi_prefill_run(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
			   uint32_t page_size, const struct rl_cuda_fi_ws *ws,
			   const struct rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q,
			   uint32_t q_stride, const uint16_t *kc, const uint16_t *vc,
			   const int32_t *qo_indptr, const int32_t *kv_indptr, const int32_t *kv_indices,
			   const int32_t *kv_last_len, uint32_t batch, float sm_scale, void *st);

/* The last error of this thread's FlashInfer call, one line. */
const char *rl_cuda_fi_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
