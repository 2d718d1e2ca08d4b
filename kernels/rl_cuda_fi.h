/* rl_cuda_fi.h — FlashInfer's batch decode attention over ringlm's paged KV cache, callable
 * from C (kernels/flashinfer/fi_decode.cu; built only when the dependency step fetched the
 * FlashInfer headers, see .ci/flashinfer; otherwise rl_cuda_fi_available() is 0 and the in-house
 * attention of rl_cuda_ops.h is the only path).
 *
 * The cache is ours, unchanged: one layer's kc, vc [n_blocks, nkv, bs, hd] st is FlashInfer's
 * HND page layout. A decode step's sequences are described in FlashInfer's CSR form, which
 * rl_cuda_host_fi_csr (runtime/cuda/host/cuda_host.h) derives from the packed step image:
 *   kv_indptr [batch + 1]   first block-table entry of each sequence (the packed seq_bt),
 *   kv_indices [...]        the flat block tables (the packed bt),
 *   kv_last_len [batch]     keys in each sequence's last block (1..bs).
 * Plan on the host before each step (its int workspace is copied to the device on `st`), then
 * run, which only enqueues kernels and may be captured in a CUDA graph: in graph mode
 * (graph = 1) the launch geometry depends only on `batch`, so a graph captured once per
 * batch size replays under any later plan of that size.
 *
 * Instantiated for head dim 64 and 128, bf16 and fp16 (q, cache and output in the same type),
 * GQA group sizes 1, 2, 3, 4, 6, 8, 16. Functions return 0, -EINVAL for an unsupported
 * shape, -ENOSYS when FlashInfer was not built in, or -EIO after a CUDA or FlashInfer error
 * (the message through rl_cuda_fi_last_error()).
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

/* FlashInfer's DecodePlanInfo, as its ToVector() lists it (scheduler.cuh): padded batch,
 * six workspace offsets, enable_cuda_graph, split_kv */
struct rl_cuda_fi_plan {
	int64_t v[10];
};
#define RL_CUDA_FI_PLAN_PADDED_BATCH 0
#define RL_CUDA_FI_PLAN_SPLIT_KV 9

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

/* The last error of this thread's FlashInfer call, one line. */
const char *rl_cuda_fi_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
