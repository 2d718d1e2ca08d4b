// fi_prefill.cu — one instantiation of FlashInfer's batch prefill over ringlm's paged KV cache
// (kernels/rl_cuda_fi.h): every step that carries a prefill chunk, its decode rows included as
// one-row requests. Compiled once per storage type and head dim, like fi_decode.cu (see the
// Makefile); fi_dispatch.cu picks the instantiation at run time. No C++ exception crosses into
// C: every entry catches and returns -EIO with the message.
//
// What is instantiated, and why only that: the FA2 kernel (sm_80 and later, the one FlashInfer
// runs on Hopper for paged KV with a page size under 16 too), causal mask only (a chunk attends
// to its cached prefix and to itself causally), no positional encoding in the kernel (RoPE is
// applied before the cache), one stride for K and V (our caches are twins), and the three query
// tiles FA2DetermineCtaTileQ picks below head dim 512: 16, 64, 128.
#include <errno.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>
#include "kernels/flashinfer/fi_inst.h"

using namespace flashinfer;

namespace RL_FI_CAT(rl_fip_ns, RL_FI_NAME) {
typedef RL_FI_T T;
constexpr uint32_t HD = RL_FI_HD;
typedef BatchPrefillPagedParams<T, T, T, int32_t> Params;
typedef DefaultAttention<false, false, false, false> Variant;   // no custom mask, window, cap, ALiBi
constexpr PosEncodingMode PE = PosEncodingMode::kNone;
constexpr MaskMode MASK = MaskMode::kCausal;
constexpr int N_PLAN = 15;                                        // PrefillPlanInfo::ToVector()

void to_c(const PrefillPlanInfo &p, rl_cuda_fi_plan *out)
{
	std::vector<int64_t> v = p.ToVector();
	for (size_t i = 0; i < sizeof out->v / sizeof *out->v; i++)   // zero past its end: plans compare whole
		out->v[i] = i < v.size() ? v[i] : 0;
}
PrefillPlanInfo from_c(const rl_cuda_fi_plan *in)
{
	PrefillPlanInfo p;
	p.FromVector(std::vector<int64_t>(in->v, in->v + N_PLAN));
	return p;
}

int fail(std::string what)
{
	rl_cuda_fi_set_error(what.c_str());
	return -EIO;
}

template <uint32_t CTA> cudaError_t run_cta(Params &p, T *tmp_v, float *tmp_s, cudaStream_t st)
{
	return BatchPrefillWithPagedKVCacheDispatched</*SAME_KV_STRIDES=*/true, CTA, HD, HD, PE,
						      /*USE_FP16_QK_REDUCTION=*/false, MASK, Variant, Params>(
		p, tmp_v, tmp_s, /*enable_pdl=*/false, st);
}
}  // namespace
using namespace RL_FI_CAT(rl_fip_ns, RL_FI_NAME);

// Graph-mode plans (split_kv always on, the padded batch fixed by the counts) size their
// workspaces by (rows, batch) only, so any indptr of those counts gives the bound.
extern "C" int RL_FI_FN(psizes)(uint32_t nh, uint32_t nkv, uint32_t page_size, uint32_t rows, uint32_t batch,
				size_t *float_bytes, size_t *int_bytes)
{
	try {
		// one request of rows - batch + 1 rows and the others of one, a block each
		std::vector<int32_t> qo(batch + 1), kv(batch + 1);
		for (uint32_t i = 0; i <= batch; i++) {
			qo[i] = (int32_t)(i == 0 ? 0 : rows - batch + i);
			kv[i] = (int32_t)i;
		}
		cudaError_t e = PrefillPlanWorkspaceSize<int32_t>(*float_bytes, *int_bytes, qo.data(), kv.data(), rows,
								  batch, nh, nkv, HD, HD, page_size, /*graph=*/true,
								  sizeof(T), /*window_left=*/-1, /*fixed_split_size=*/-1,
								  /*disable_split_kv=*/false, 0, 0, nullptr, sizeof(T));
		return e == cudaSuccess ? 0 : fail(std::string("prefill workspace size: ") + cudaGetErrorString(e));
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}

extern "C" int RL_FI_FN(pplan)(uint32_t nh, uint32_t nkv, uint32_t page_size, const rl_cuda_fi_ws *ws,
			       const int32_t *qo_indptr_host, const int32_t *kv_indptr_host, uint32_t rows,
			       uint32_t batch, rl_cuda_fi_plan *plan, void *st)
{
	try {
		PrefillPlanInfo info;
		cudaError_t e = PrefillPlan<int32_t>(ws->float_ws, ws->float_bytes, ws->int_ws, ws->int_host, ws->int_bytes,
						     info, const_cast<int32_t *>(qo_indptr_host),
						     const_cast<int32_t *>(kv_indptr_host), rows, batch, nh, nkv, HD, HD,
						     page_size, /*graph=*/true, sizeof(T), -1, -1, false, 0, 0,
						     (cudaStream_t)st, sizeof(T));
		if (e != cudaSuccess)
			return fail(std::string("prefill plan: ") + cudaGetErrorString(e));
		to_c(info, plan);
		return 0;
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}

extern "C" int RL_FI_FN(prun)(uint32_t nh, uint32_t nkv, uint32_t page_size, const rl_cuda_fi_ws *ws,
			      const rl_cuda_fi_plan *plan, uint16_t *out, const uint16_t *q, uint32_t q_stride,
			      const uint16_t *kc, const uint16_t *vc, const int32_t *qo_indptr,
			      const int32_t *kv_indptr, const int32_t *kv_indices, const int32_t *kv_last_len,
			      uint32_t batch, float sm_scale, void *st)
{
	try {
		PrefillPlanInfo info = from_c(plan);
		paged_kv_t<T, int32_t> kv(nkv, page_size, HD, batch, QKVLayout::kHND, (T *)kc, (T *)vc,
					  const_cast<int32_t *>(kv_indices), const_cast<int32_t *>(kv_indptr),
					  const_cast<int32_t *>(kv_last_len));
		Params p(const_cast<T *>((const T *)q), kv, /*custom mask=*/nullptr, const_cast<int32_t *>(qo_indptr),
			 nullptr, nullptr, (T *)out, /*lse=*/nullptr, nullptr, nh, (int32_t)q_stride, HD,
			 /*window_left=*/-1, /*soft cap=*/0.0f, sm_scale, 1.0f, 1.0f);
		p.request_indices = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.request_indices_offset);
		p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.qo_tile_indices_offset);
		p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.kv_tile_indices_offset);
		p.o_indptr = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.o_indptr_offset);
		p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.kv_chunk_size_ptr_offset);
		T *tmp_v = nullptr;
		float *tmp_s = nullptr;
		if (info.split_kv) {
			p.merge_indptr = GetPtrFromBaseOffset<int32_t>(ws->int_ws, info.merge_indptr_offset);
			tmp_v = GetPtrFromBaseOffset<T>(ws->float_ws, info.v_offset);
			tmp_s = GetPtrFromBaseOffset<float>(ws->float_ws, info.s_offset);
		}
		p.padded_batch_size = (uint32_t)info.padded_batch_size;
		p.max_total_num_rows = (uint32_t)info.total_num_rows;
		if (info.enable_cuda_graph) {
			p.block_valid_mask = GetPtrFromBaseOffset<bool>(ws->int_ws, info.block_valid_mask_offset);
			p.total_num_rows = GetPtrFromBaseOffset<uint32_t>(ws->int_ws, info.total_num_rows_offset);
		}
		cudaError_t e;
		switch (info.cta_tile_q) {
		case 16: e = run_cta<16>(p, tmp_v, tmp_s, (cudaStream_t)st); break;
		case 64: e = run_cta<64>(p, tmp_v, tmp_s, (cudaStream_t)st); break;
		case 128: e = run_cta<128>(p, tmp_v, tmp_s, (cudaStream_t)st); break;
		default: return fail("prefill plan with query tile " + std::to_string(info.cta_tile_q));
		}
		return e == cudaSuccess ? 0 : fail(std::string("prefill run: ") + cudaGetErrorString(e));
	} catch (const std::exception &x) {
		return fail(x.what());
	}
}
