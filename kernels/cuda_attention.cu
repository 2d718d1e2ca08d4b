// cuda_attention.cu — paged causal attention over the packed mixed batch (prefill chunks over
// their cached prefix plus the causal chunk, decode rows over their whole context), with a
// split-KV variant for long decode contexts. CPU counterpart: rl_cpu_attention (cpu_ops.c).
//
// Grid: (work item, KV head). An item is up to qt consecutive query rows of one sequence;
// the block gives one warp to each (row, query head of this KV head) pair, at most 8 warps, so
// each KV tile loaded into shared memory serves every query head that shares it (GQA).
// Per tile of 32 keys: lane j scores key j (a dot product over hd, from shared memory), the warp
// takes the tile max and updates the online softmax (running max mx, sum l), then each lane
// accumulates its own output dims d = lane + 32 i over the tile's 32 values.
// Keys are fetched through the block table one at a time (key p: block bt[p / bs], slot
// p % bs), so any block size works and tiles may straddle blocks.
// Split items (part >= 0) cover a key range of one decode row and write (o unnormalised, mx,
// l); reduce_kernel merges them. All counts come from m.hdr, so the launch is graph-safe.
// Both kernels are templates on the storage type T of q, out and the cache (bf16 or fp16,
// cuda_storage.h); keys and values move as T pairs, scores and sums are fp32.
#include <math.h>
#include "rl_cuda_ops.h"
#include "cuda_storage.h"
#define WARPS 8
#define TILE RL_CUDA_KV_TILE
#define MAX_HD 256

template <typename T>
__global__ void __launch_bounds__(WARPS * 32)
attn_kernel(T *out, float *part_o, float *part_ml, const T *q, const T *kc, const T *vc,
	    rl_cuda_meta m, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs)
{
	typedef typename rl_pair<T>::type T2;
	if (blockIdx.x >= m.hdr->n_items)
		return;                                 // uniform across the block: no barrier skipped
	extern __shared__ __align__(16) unsigned char smem[];
	const uint32_t kstride = hd + 2;                // elements; +2 keeps lane j's row on bank j
	T *Ks = (T *)smem;                              // [TILE, hd + 2]
	T *Vs = Ks + TILE * kstride;                    // [TILE, hd]
	float *Qs = (float *)(Vs + TILE * hd);          // [WARPS, hd]

	const rl_cuda_item it = m.items[blockIdx.x];
	const uint32_t kh = blockIdx.y, group = nh / nkv, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const uint32_t nq = (uint32_t)it.nrows * group, qd = nh * hd;
	const int32_t *bt = m.bt + m.seq_bt[it.seq];
	const float scale = 1.0f / sqrtf((float)hd);

	// this warp's query vector and its causal key limit
	const bool active = w < nq;
	const uint32_t row = it.row0 + (active ? w / group : 0), h = kh * group + (active ? w % group : 0);
	int lim = 0;
	if (active) {
		int p = m.pos[row];
		lim = it.kv1 < p + 1 ? it.kv1 : p + 1;
		for (uint32_t d = lane; d < hd; d += 32)
			Qs[w * hd + d] = rl_f32(q[(size_t)row * qd + h * hd + d]);
	}
	// the block's key range ends at its last row's limit (rows are in position order)
	int last_pos = m.pos[it.row0 + it.nrows - 1];
	int kv_end = it.kv1 < last_pos + 1 ? it.kv1 : last_pos + 1;

	float mx = -INFINITY, l = 0.0f, acc[MAX_HD / 32];
#pragma unroll
	for (int i = 0; i < MAX_HD / 32; i++)
		acc[i] = 0.0f;

	const uint32_t hpairs = hd / 2;
	for (int t0 = it.kv0; t0 < kv_end; t0 += TILE) {
		__syncthreads();                        // the previous tile is consumed
		for (uint32_t idx = threadIdx.x; idx < TILE * hpairs; idx += blockDim.x) {
			uint32_t j = idx / hpairs, d = 2 * (idx % hpairs);
			int p = t0 + (int)j;
			T2 kv2 = rl_store2<T>(0.0f, 0.0f), vv2 = kv2;
			if (p < kv_end) {
				size_t b = (size_t)bt[p / (int)bs];
				size_t o = ((b * nkv + kh) * bs + (size_t)(p % (int)bs)) * hd + d;
				kv2 = *(const T2 *)(kc + o);
				vv2 = *(const T2 *)(vc + o);
			}
			*(T2 *)(Ks + j * kstride + d) = kv2;
			*(T2 *)(Vs + j * hd + d) = vv2;
		}
		__syncthreads();
		if (!active || t0 >= lim)
			continue;
		int p = t0 + (int)lane;
		float s = -INFINITY;
		if (p < lim) {
			const float *qw = Qs + w * hd;
			const T *kr = Ks + lane * kstride;
			float dot = 0.0f;
			for (uint32_t d = 0; d < hd; d += 2) {
				float2 kf = rl_f32(*(const T2 *)(kr + d));
				dot += qw[d] * kf.x + qw[d + 1] * kf.y;
			}
			s = dot * scale;
		}
		float tm = s;
		for (int o = 16; o > 0; o >>= 1)
			tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
		float nm = fmaxf(mx, tm);               // finite: key t0 < lim is valid
		float corr = expf(mx - nm);             // 0 on the first tile (mx = -inf)
		float e = p < lim ? expf(s - nm) : 0.0f;
		float es = e;
		for (int o = 16; o > 0; o >>= 1)
			es += __shfl_xor_sync(0xffffffffu, es, o);
		l = l * corr + es;
		mx = nm;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			acc[i] *= corr;
		int nkeys = lim - t0 < TILE ? lim - t0 : TILE;
		for (int j = 0; j < nkeys; j++) {
			float pj = __shfl_sync(0xffffffffu, e, j);
#pragma unroll
			for (int i = 0; i < MAX_HD / 32; i++) {
				uint32_t d = lane + 32 * i;
				if (d < hd)
					acc[i] += pj * rl_f32(Vs[j * hd + d]);
			}
		}
	}
	if (!active)
		return;
	if (it.part < 0) {
		float inv = 1.0f / l;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++) {
			uint32_t d = lane + 32 * i;
			if (d < hd)
				out[(size_t)row * qd + h * hd + d] = rl_store<T>(acc[i] * inv);
		}
	} else {
		float *po = part_o + ((size_t)it.part * nh + h) * hd;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++) {
			uint32_t d = lane + 32 * i;
			if (d < hd)
				po[d] = acc[i];
		}
		if (lane == 0) {
			part_ml[((size_t)it.part * nh + h) * 2] = mx;
			part_ml[((size_t)it.part * nh + h) * 2 + 1] = l;
		}
	}
}

// Merges the partials of each split row: o = sum_p e^(mx_p - M) o_p / sum_p e^(mx_p - M) l_p.
template <typename T>
__global__ void reduce_kernel(T *out, const float *part_o, const float *part_ml, rl_cuda_meta m,
			      uint32_t nh, uint32_t hd)
{
	uint32_t r = blockIdx.x, h = blockIdx.y;
	if (r >= m.hdr->n_tokens || m.row_nparts[r] < 2)
		return;
	int p0 = m.row_part[r], np = m.row_nparts[r];
	float M = -INFINITY;
	for (int p = 0; p < np; p++)
		M = fmaxf(M, part_ml[((size_t)(p0 + p) * nh + h) * 2]);
	float L = 0.0f;
	for (int p = 0; p < np; p++) {
		const float *ml = part_ml + ((size_t)(p0 + p) * nh + h) * 2;
		L += expf(ml[0] - M) * ml[1];
	}
	for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
		float o = 0.0f;
		for (int p = 0; p < np; p++) {
			size_t k = (size_t)(p0 + p) * nh + h;
			o += expf(part_ml[k * 2] - M) * part_o[k * hd + d];
		}
		out[(size_t)r * nh * hd + h * hd + d] = rl_store<T>(o / L);
	}
}

template <typename T>
static void attention(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q, const uint16_t *kc,
		      const uint16_t *vc, rl_cuda_meta m, uint32_t items_cap, uint32_t rows, uint32_t nh,
		      uint32_t nkv, uint32_t hd, uint32_t bs, cudaStream_t st)
{
	size_t smem = (size_t)TILE * (hd + 2) * sizeof(T) + (size_t)TILE * hd * sizeof(T) + (size_t)WARPS * hd * 4;
	attn_kernel<T><<<dim3(items_cap, nkv), WARPS * 32, smem, st>>>((T *)out, part_o, part_ml,
		(const T *)q, (const T *)kc, (const T *)vc, m, nh, nkv, hd, bs);
	reduce_kernel<T><<<dim3(rows, nh), 128, 0, st>>>((T *)out, part_o, part_ml, m, nh, hd);
}

extern "C" void rl_cuda_attention(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q,
				  const uint16_t *kc, const uint16_t *vc, rl_cuda_meta m,
				  uint32_t items_cap, uint32_t rows, uint32_t nh, uint32_t nkv,
				  uint32_t hd, uint32_t bs, rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, attention)(out, part_o, part_ml, q, kc, vc, m, items_cap, rows, nh, nkv, hd, bs, st);
}
