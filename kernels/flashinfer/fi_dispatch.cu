// fi_dispatch.cu — the C entry points of kernels/rl_cuda_fi.h: validate the shape, pick the
// instantiation of fi_decode.cu or fi_prefill.cu for (storage type, head dim), keep the last
// error per thread.
#include <errno.h>
#include <stdio.h>
#include "kernels/flashinfer/fi_inst.h"

RL_FI_DECLARE(bf16_64)
RL_FI_DECLARE(bf16_128)
RL_FI_DECLARE(fp16_64)
RL_FI_DECLARE(fp16_128)

static __thread char fi_err[256];

extern "C" void rl_cuda_fi_set_error(const char *msg)
{
	snprintf(fi_err, sizeof fi_err, "flashinfer: %s", msg);
}

extern "C" const char *rl_cuda_fi_last_error(void) { return fi_err; }

extern "C" int rl_cuda_fi_available(void) { return 1; }

extern "C" int rl_cuda_fi_supported(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv)
{
	if ((dt != RL_CUDA_BF16 && dt != RL_CUDA_FP16) || (hd != 64 && hd != 128) || !nkv || nh % nkv)
		return 0;
	uint32_t g = nh / nkv;
	return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}

/* prefill takes any group: its kernel divides by the group size at run time */
static int prefill_supported(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv)
{
	return (dt == RL_CUDA_BF16 || dt == RL_CUDA_FP16) && (hd == 64 || hd == 128) && nkv && nh % nkv == 0;
}

#define PICK(dt, hd, what) ((dt) == RL_CUDA_FP16 ? ((hd) == 64 ? rl_fi_##what##_fp16_64 : rl_fi_##what##_fp16_128) \
						  : ((hd) == 64 ? rl_fi_##what##_bf16_64 : rl_fi_##what##_bf16_128))

static int unsupported(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv)
{
	snprintf(fi_err, sizeof fi_err, "flashinfer: no decode kernel for %s, head dim %u, %u query heads per KV "
		 "head (built: bf16/fp16, head dim 64/128, groups 1,2,3,4,6,8,16); use --cuda-attn ringlm",
		 dt == RL_CUDA_FP16 ? "fp16" : "bf16", hd, nkv ? nh / nkv : 0);
	return -EINVAL;
}

extern "C" int rl_cuda_fi_decode_sizes(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
				       uint32_t page_size, uint32_t max_batch, uint32_t max_pages,
				       size_t *float_bytes, size_t *int_bytes)
{
	if (!rl_cuda_fi_supported(dt, hd, nh, nkv) || !max_batch)
		return unsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, sizes)(nh, nkv, page_size, max_batch, max_pages, float_bytes, int_bytes);
}

extern "C" int rl_cuda_fi_decode_plan(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
				      uint32_t page_size, const struct rl_cuda_fi_ws *ws,
				      const int32_t *kv_indptr_host, uint32_t batch, int graph,
				      struct rl_cuda_fi_plan *plan, void *st)
{
	if (!rl_cuda_fi_supported(dt, hd, nh, nkv) || !batch)
		return unsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, plan)(nh, nkv, page_size, ws, kv_indptr_host, batch, graph, plan, st);
}

extern "C" int rl_cuda_fi_decode_run(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
				     uint32_t page_size, const struct rl_cuda_fi_ws *ws,
				     const struct rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q,
				     uint32_t q_stride, const uint16_t *kc, const uint16_t *vc,
				     const int32_t *kv_indptr, const int32_t *kv_indices,
				     const int32_t *kv_last_len, uint32_t batch, float sm_scale, void *st)
{
	if (!rl_cuda_fi_supported(dt, hd, nh, nkv) || !batch)
		return unsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, run)(nh, nkv, page_size, ws, plan, out, q, q_stride, kc, vc, kv_indptr, kv_indices,
				 kv_last_len, batch, sm_scale, st);
}

static int punsupported(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv)
{
	snprintf(fi_err, sizeof fi_err, "flashinfer: no prefill kernel for %s, head dim %u, %u query heads over %u "
		 "KV heads (built: bf16/fp16, head dim 64/128); use --cuda-attn ringlm",
		 dt == RL_CUDA_FP16 ? "fp16" : "bf16", hd, nh, nkv);
	return -EINVAL;
}

extern "C" int rl_cuda_fi_prefill_sizes(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
					uint32_t page_size, uint32_t rows, uint32_t batch, size_t *float_bytes,
					size_t *int_bytes)
{
	if (!prefill_supported(dt, hd, nh, nkv) || !batch || rows < batch)
		return punsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, psizes)(nh, nkv, page_size, rows, batch, float_bytes, int_bytes);
}

extern "C" int rl_cuda_fi_prefill_plan(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
				       uint32_t page_size, const struct rl_cuda_fi_ws *ws,
				       const int32_t *qo_indptr_host, const int32_t *kv_indptr_host, uint32_t rows,
				       uint32_t batch, struct rl_cuda_fi_plan *plan, void *st)
{
	if (!prefill_supported(dt, hd, nh, nkv) || !batch || rows < batch)
		return punsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, pplan)(nh, nkv, page_size, ws, qo_indptr_host, kv_indptr_host, rows, batch, plan, st);
}

extern "C" int rl_cuda_fi_prefill_run(enum rl_cuda_dtype dt, uint32_t hd, uint32_t nh, uint32_t nkv,
				      uint32_t page_size, const struct rl_cuda_fi_ws *ws,
				      const struct rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q,
				      uint32_t q_stride, const uint16_t *kc, const uint16_t *vc,
				      const int32_t *qo_indptr, const int32_t *kv_indptr, const int32_t *kv_indices,
				      const int32_t *kv_last_len, uint32_t batch, float sm_scale, void *st)
{
	if (!prefill_supported(dt, hd, nh, nkv) || !batch)
		return punsupported(dt, hd, nh, nkv);
	return PICK(dt, hd, prun)(nh, nkv, page_size, ws, plan, out, q, q_stride, kc, vc, qo_indptr, kv_indptr,
				  kv_indices, kv_last_len, batch, sm_scale, st);
}
