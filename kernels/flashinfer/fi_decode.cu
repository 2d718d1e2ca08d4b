// fi_decode.cu — one instantiation of FlashInfer's batch decode over ringlm's paged KV cache
// (kernels/rl_cuda_fi.h): compiled once per storage type and head dim, with
// -DRL_FI_T=__nv_bfloat16|__half -DRL_FI_HD=64|128 -DRL_FI_NAME=bf16_128 ... (see the
// Makefile); fi_dispatch.cu picks the instantiation at run time. FlashInfer reports errors by
// C++ exceptions; none crosses into C: every entry catches and returns -EIO with the message.
//
// The FlashInfer headers come from the pinned flashinfer-python wheel (.ci/flashinfer), never
// from this repository; their own CCCL must come before the toolkit's on the include path.
#include <errno.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>
#include "kernels/flashinfer/fi_inst.h"

using namespace flashinfer;

// a namespace of this instantiation's own (not an anonymous one: nvcc's kernel stubs cannot
// name types in it), so the templates below do not collide across the four objects
namespace RL_FI_CAT(rl_fi_ns, RL_FI_NAME) {
typedef RL_FI_T T;
constexpr uint32_t HD = RL_FI_HD;
typedef BatchDecodeParams<T, T, T, int32_t> Params;
// plain softmax attention: no custom mask, sliding window, soft cap or ALiBi
typedef DefaultAttention<false, false, false, false> Variant;
constexpr PosEncodingMode PE = PosEncodingMode::kNone;   // RoPE is applied before the cache

// DecodePlanInfo <-> the C struct
void to_c(const DecodePlanInfo &p, rl_cuda_fi_plan *out)
{
	std::vector<int64_t> v = p.ToVector();
	for (size_t i = 0; i < sizeof out->v / sizeof *out->v; i++)   // zero past its end: plans compare whole
		out->v[i] = i < v.size() ? v[i] : 0;
}
DecodePlanInfo from_c(const rl_cuda_fi_plan *in)
{
	DecodePlanInfo p;
	p.FromVector(std::vector<int64_t>(in->v, in->v + 10));
	return p;
}

template <uint32_t G> cudaError_t plan_g(void *fws, size_t fbytes, void *iws, void *ih, size_t ibytes,
					 DecodePlanInfo &info, int32_t *indptr, uint32_t batch, uint32_t nh,
					 uint32_t page_size, bool graph, cudaStream_t st)
{
	auto est = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<G, HD, PE, Variant, Params>;
	return DecodePlan<HD, PE, Variant, Params>(fws, fbytes, iws, ih, ibytes, info, indptr, batch, nh,
						   page_size, graph, st, est);
}

template <uint32_t G> cudaError_t sizes_g(size_t &fb, size_t &ib, int32_t *indptr, uint32_t batch,
					  uint32_t nh, uint32_t page_size)
{
	auto est = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<G, HD, PE, Variant, Params>;
	return DecodePlanWorkspaceSize<HD, PE, Variant, Params>(fb, ib, indptr, batch, nh, page_size, true,
								nullptr, est);
}

int fail(std::string what)
{
	rl_cuda_fi_set_error(what.c_str());
	return -EIO;
}
}  // namespace
using namespace RL_FI_CAT(rl_fi_ns, RL_FI_NAME);

#define RL_FI_GROUPS(nh, nkv, CALL) do { switch ((nh) / (nkv)) {                             \
	case 1: e = CALL(1); break; case 2: e = CALL(2); break; case 3: e = CALL(3); break;        \
	case 4: e = CALL(4); break; case 6: e = CALL(6); break; case 8: e = CALL(8); break;        \
	case 16: e = CALL(16); break; default: return -EINVAL; } } while (0)

extern "C" int RL_FI_FN(sizes)(uint32_t nh, uint32_t nkv, uint32_t page_size, uint32_t max_batch,
			       uint32_t max_pages, size_t *float_bytes, size_t *int_bytes)
{
	try {
		// the largest plan: every sequence at max_pages (graph mode sizes by batch only, but
		// the split decision reads the lengths)
		std::vector<int32_t> indptr(max_batch + 1);
		for (uint32_t i = 0; i <= max_batch; i++)
			indptr[i] = (int32_t)(i * max_pages);
		cudaError_t e;
#define CALL(g) sizes_g<g>(*float_bytes, *int_bytes, indptr.data(), max_batch, nh, page_size)
		RL_FI_GROUPS(nh, nkv, CALL);
#undef CALL
		return e == cudaSuccess ? 0 : fail(std::string("decode workspace size: ") + cudaGetErrorString(e));
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}

extern "C" int RL_FI_FN(plan)(uint32_t nh, uint32_t nkv, uint32_t page_size, const rl_cuda_fi_ws *ws,
			      const int32_t *kv_indptr_host, uint32_t batch, int graph, rl_cuda_fi_plan *plan,
			      void *st)
{
	try {
		DecodePlanInfo info;
		int32_t *indptr = const_cast<int32_t *>(kv_indptr_host);   // read only by the planner
		cudaError_t e;
#define CALL(g) plan_g<g>(ws->float_ws, ws->float_bytes, ws->int_ws, ws->int_host, ws->int_bytes, info, \
			  indptr, batch, nh, page_size, graph != 0, (cudaStream_t)st)
		RL_FI_GROUPS(nh, nkv, CALL);
#undef CALL
		if (e != cudaSuccess)
			return fail(std::string("decode plan: ") + cudaGetErrorString(e));
		to_c(info, plan);
		return 0;
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}

extern "C" int RL_FI_FN(run)(uint32_t nh, uint32_t nkv, uint32_t page_size, const rl_cuda_fi_ws *ws,
			     const rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q, uint32_t q_stride,
			     const uint16_t *kc, const uint16_t *vc, const int32_t *kv_indptr,
			     const int32_t *kv_indices, const int32_t *kv_last_len, uint32_t batch,
			     float sm_scale, void *st)
{
	try {
		DecodePlanInfo info = from_c(plan);
		// ringlm's cache [n_blocks, nkv, bs, hd] is FlashInfer's HND page layout
		paged_kv_t<T, int32_t> kv(nkv, page_size, HD, batch, QKVLayout::kHND, (T *)kc, (T *)vc,
					  const_cast<int32_t *>(kv_indices), const_cast<int32_t *>(kv_indptr),
					  const_cast<int32_t *>(kv_last_len));
		Params p;
		p.q = (T *)q;
		p.paged_kv = kv;
		p.o = (T *)out;
		p.lse = nullptr;
		p.maybe_alibi_slopes = nullptr;
		p.num_qo_heads = nh;
		p.q_stride_n = (int32_t)q_stride;
		p.q_stride_h = HD;
		p.window_left = -1;
		p.logits_soft_cap = 0.0f;
		p.sm_scale = sm_scale;
		p.rope_rcp_scale = 1.0f;
		p.rope_rcp_theta = 1.0f;
		p.padded_batch_size = (uint32_t)info.padded_batch_size;
		p.request_indices = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.request_indices_offset);
		p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.kv_tile_indices_offset);
		p.o_indptr = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.o_indptr_offset);
		p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.kv_chunk_size_ptr_offset);
		p.block_valid_mask = nullptr;
		T *tmp_v = nullptr;
		float *tmp_s = nullptr;
		if (info.split_kv) {
			tmp_v = GetPtrFromBaseOffset<T>(ws->float_ws, info.v_offset);
			tmp_s = GetPtrFromBaseOffset<float>(ws->float_ws, info.s_offset);
			if (info.enable_cuda_graph)
				p.block_valid_mask = GetPtrFromBaseOffset<bool>(ws->int_ws, info.block_valid_mask_offset);
		}
		cudaError_t e = BatchDecodeWithPagedKVCacheDispatched<HD, PE, Variant, Params>(
			p, tmp_v, tmp_s, /*enable_pdl=*/false, (cudaStream_t)st);
		return e == cudaSuccess ? 0 : fail(std::string("decode run: ") + cudaGetErrorString(e));
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}
