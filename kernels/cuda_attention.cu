// cuda_attention.cu — paged causal attention over the packed mixed batch (prefill chunks over
// their cached prefix plus the causal chunk, decode rows over their whole context), with a
// split-KV variant for long decode contexts. CPU counterpart: rl_cpu_attention (cpu_ops.c).
//
// Grid: (work item, KV head). An item is up to qt consecutive query rows of one sequence; its
// query vectors (row, query head of this KV head), at most QV = 32, are dealt to the 8 warps,
// vector v to warp v % 8, so each K/V tile loaded into shared memory serves up to 32 query
// vectors: every head that shares it (GQA) and several rows of a prefill chunk, which cuts the
// K/V a long prefill re-reads by 4x against one vector per warp. A decode item has `group`
// vectors: warps 0..group-1 take one each.
// Per tile of 32 keys: lane k scores key k against each of its warp's vectors (one load of a
// key pair serves all of them; dot products over hd from shared memory), the warp takes each
// tile max and updates its online softmax (running max mx, sum l), then each lane accumulates
// its own output dims d = lane + 32 i over the tile's values (one load per value, all vectors).
// Keys are fetched through the block table one at a time (key p: block bt[p / bs], slot
// p % bs), so any block size works and tiles may straddle blocks.
// Split items (part >= 0) cover a key range of one decode row and write (o unnormalised, mx,
// l); reduce_kernel merges them. All counts come from m.hdr, so the launch is graph-safe.
// Both kernels are templates on the storage type T of q, out and the cache (bf16 or fp16,
// cuda_storage.h); keys and values move as T pairs, scores and sums are fp32.
// The deterministic mode (rl_cuda_attention_det, issue 51) instantiates them with DET: one of
// the two serves every item (picked by head_dim), and each query vector reduces its keys in
// fixed chunks merged in position order, so its bits depend on its position alone (below).
#include <math.h>
#include "kernels/rl_cuda_ops.h"
#include "kernels/cuda_storage.h"
#include <mma.h>
#define WARPS 8
#define QV RL_CUDA_ATTN_QV             /* query vectors per block */
#define QPW (QV / WARPS)              /* per warp */
#define TILE RL_CUDA_KV_TILE
#define MAX_HD 256

// The query vectors v = w + WARPS j of warp w in an item (row v / group, head v % group of
// KV head kh) and their causal key limits; a decode item (one row) uses j = 0 of group warps.
struct qvecs {
	bool act[QPW];
	int lim[QPW];
	int wlim;                  // the warp's largest limit: rows are in position order, so its
				   // last live vector's (0 when it has none)
};

static __device__ __forceinline__ qvecs item_qvecs(const rl_cuda_item &it, const rl_cuda_meta &m,
						   uint32_t w, uint32_t group, uint32_t kh)
{
	qvecs qv;
	qv.wlim = 0;
#pragma unroll
	for (int j = 0; j < QPW; j++) {
		uint32_t v = w + WARPS * j;
		qv.act[j] = v < (uint32_t)it.nrows * group;
		qv.lim[j] = 0;
		if (qv.act[j]) {
			int p = m.pos[it.row0 + v / group];
			qv.lim[j] = it.kv1 < p + 1 ? it.kv1 : p + 1;
			qv.wlim = qv.lim[j];
		}
	}
	return qv;
}

// Live vector v's packed row and query head (recomputed where needed: keeping them for the
// whole loop costs registers the accumulators need).
#define QV_ROW(v) (c.it.row0 + (v) / c.group)
#define QV_HEAD(v) (c.kh * c.group + (v) % c.group)

// What a thread of an item's block starts from, in both kernels: the item, its KV head, this
// thread's warp and lane, the sequence's block table, the warp's query vectors and the key
// range (which ends at the item's last row's limit).
struct item_ctx {
	rl_cuda_item it;
	uint32_t kh, group, lane, w, qd;
	const int32_t *bt;
	float scale;
	qvecs qv;
	int kv_end;
};

static __device__ __forceinline__ item_ctx item_begin(const rl_cuda_meta &m, uint32_t nh, uint32_t nkv,
						      uint32_t hd)
{
	item_ctx c;
	c.it = m.items[blockIdx.x];
	c.kh = blockIdx.y;
	c.group = nh / nkv;
	c.lane = threadIdx.x & 31;
	c.w = threadIdx.x >> 5;
	c.qd = nh * hd;
	c.bt = m.bt + m.seq_bt[c.it.seq];
	c.scale = 1.0f / sqrtf((float)hd);
	c.qv = item_qvecs(c.it, m, c.w, c.group, c.kh);
	const int last_pos = m.pos[c.it.row0 + c.it.nrows - 1];
	c.kv_end = c.it.kv1 < last_pos + 1 ? c.it.kv1 : last_pos + 1;
	return c;
}

// The online softmax's state of a warp's QPW query vectors before the first key: running
// max -inf, sum 0, accumulators 0.
static __device__ __forceinline__ void softmax_begin(float (&mx)[QPW], float (&l)[QPW],
						     float (&acc)[QPW][MAX_HD / 32])
{
#pragma unroll
	for (int j = 0; j < QPW; j++) {
		mx[j] = -INFINITY;
		l[j] = 0.0f;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			acc[j][i] = 0.0f;
	}
}

// Keys and values [t0, t0 + TILE) of KV head kh, through the block table, into rows of Ks and
// Vs (strides ks, vs elements; zeros past kv_end), by the whole block.
template <typename T>
static __device__ __forceinline__ void load_kv_tile(T *Ks, uint32_t ks, T *Vs, uint32_t vs, const T *kc,
						    const T *vc, const int32_t *bt, int t0, int kv_end,
						    uint32_t nkv, uint32_t kh, uint32_t bs, uint32_t hd)
{
	typedef typename rl_pair<T>::type T2;
	const uint32_t hpairs = hd / 2;
	for (uint32_t idx = threadIdx.x; idx < TILE * hpairs; idx += blockDim.x) {
		uint32_t jk = idx / hpairs, d = 2 * (idx % hpairs);
		int p = t0 + (int)jk;
		T2 kv2 = rl_store2<T>(0.0f, 0.0f), vv2 = kv2;
		if (p < kv_end) {
			size_t b = (size_t)bt[p / (int)bs];
			size_t o = ((b * nkv + kh) * bs + (size_t)(p % (int)bs)) * hd + d;
			kv2 = *(const T2 *)(kc + o);
			vv2 = *(const T2 *)(vc + o);
		}
		*(T2 *)(Ks + jk * ks + d) = kv2;
		*(T2 *)(Vs + jk * vs + d) = vv2;
	}
}

// One tile of one query vector's online softmax, by its warp (call it warp-uniformly): s is
// lane k's score for key t0 + k, valid whether that key is within the limit (at least key t0
// is). Updates the running max mx and sum l, rescales the accumulators, returns lane k's
// unnormalised probability (0 for invalid keys).
static __device__ __forceinline__ float softmax_tile(float s, bool valid, float &mx, float &l,
						     float (&acc)[MAX_HD / 32])
{
	s = valid ? s : -INFINITY;
	float tm = s;
	for (int o = 16; o > 0; o >>= 1)
		tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
	float nm = fmaxf(mx, tm);                       // finite: key t0 < lim is valid
	float corr = expf(mx - nm);                     // 0 on the first tile (mx = -inf)
	float e = valid ? expf(s - nm) : 0.0f;
	float es = e;
	for (int o = 16; o > 0; o >>= 1)
		es += __shfl_xor_sync(0xffffffffu, es, o);
	l = l * corr + es;
	mx = nm;
#pragma unroll
	for (int i = 0; i < MAX_HD / 32; i++)
		acc[i] *= corr;
	return e;
}

// A finished vector's output row: acc / l, lane k writing dims k + 32 i.
template <typename T>
static __device__ __forceinline__ void store_out(T *out, uint32_t row, uint32_t h, uint32_t qd,
						 uint32_t hd, float l, const float (&acc)[MAX_HD / 32])
{
	float inv = 1.0f / l;
#pragma unroll
	for (int i = 0; i < MAX_HD / 32; i++) {
		uint32_t d = (threadIdx.x & 31) + 32 * i;
		if (d < hd)
			out[(size_t)row * qd + h * hd + d] = rl_store<T>(acc[i] * inv);
	}
}

// ---- the deterministic mode's fixed KV split (DET instantiations, rl_cuda_attention_det) ----
// A query vector's keys are cut at the fixed boundaries DCH, 2 DCH, ...: each chunk runs the
// online softmax above from a fresh state, and the finished chunks' (mx, l, o) are merged in
// position order by det_merge from (-inf, 0, 0). A split item (a decode row's run of whole
// chunks) writes each of its chunks' states as a partial and det_reduce_kernel merges them in
// the same order with the same det_merge; an unsplit item merges them itself as it goes. The
// two give the same bits (fmaf and separate products leave the compiler no contraction to
// choose), so whether a row is split, which follows the batch, never shows in its output.
#define DCH RL_CUDA_DET_CHUNK

struct det_w {
	float a, b;                // the running state's weight and the chunk's
};

// Merges a chunk's max and sum into the running (M, L); returns the weights for the outputs.
static __device__ __forceinline__ det_w det_merge(float &M, float &L, float mx, float l)
{
	const float nm = fmaxf(M, mx);
	const det_w w = { expf(M - nm), expf(mx - nm) };   // a = 0 on the first chunk (M = -inf)
	L = fmaf(L, w.a, l * w.b);
	M = nm;
	return w;
}

static __device__ __forceinline__ float det_mix(float O, float o, det_w w) { return fmaf(O, w.a, o * w.b); }

// A query vector's chunk ends after the tile at t0 (lim: its key limit within the item): at a
// fixed boundary or at its last key.
static __device__ __forceinline__ bool det_chunk_ends(int t0, int lim)
{
	return (t0 + TILE) % DCH == 0 || t0 + TILE >= lim;
}

// The end of a vector's chunk: unsplit items merge the state into (M, L, O), split ones write it
// as partial part + chunk of the item; then the chunk state restarts.
static __device__ __forceinline__ void det_chunk_end(const rl_cuda_item &it, int t0, uint32_t h, uint32_t nh,
						     uint32_t hd, float *part_o, float *part_ml, float &mx, float &l,
						     float (&acc)[MAX_HD / 32], float &M, float &L,
						     float (&O)[MAX_HD / 32])
{
	const uint32_t lane = threadIdx.x & 31;
	if (it.part < 0) {
		const det_w w = det_merge(M, L, mx, l);
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			O[i] = det_mix(O[i], acc[i], w);
	} else {
		const size_t k = (size_t)(it.part + (t0 - it.kv0) / DCH) * nh + h;
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++)
			if (lane + 32 * i < hd)
				part_o[k * hd + lane + 32 * i] = acc[i];
		if (lane == 0) {
			part_ml[k * 2] = mx;
			part_ml[k * 2 + 1] = l;
		}
	}
	mx = -INFINITY;
	l = 0.0f;
#pragma unroll
	for (int i = 0; i < MAX_HD / 32; i++)
		acc[i] = 0.0f;
}

// A finished vector's output row in the deterministic mode: O / L (a division, as
// det_reduce_kernel's), lane k writing dims k + 32 i.
template <typename T>
static __device__ __forceinline__ void det_store_out(T *out, uint32_t row, uint32_t h, uint32_t qd, uint32_t hd,
						     float L, const float (&O)[MAX_HD / 32])
{
#pragma unroll
	for (int i = 0; i < MAX_HD / 32; i++) {
		uint32_t d = (threadIdx.x & 31) + 32 * i;
		if (d < hd)
			out[(size_t)row * qd + h * hd + d] = rl_store<T>(O[i] / L);
	}
}

// 3 blocks per SM: 80 registers without spills at sm_90 (more unbounded, i.e. 2 blocks); 4
// would spill the 4 x 8 accumulators. DET (the deterministic mode, above) adds the merged
// state, 4 x 8 more: 2 blocks.
template <typename T, bool DET = false>
__global__ void __launch_bounds__(WARPS * 32, DET ? 2 : 3)
attn_kernel(T *out, float *part_o, float *part_ml, const T *q, const T *kc, const T *vc,
	    rl_cuda_meta m, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, int only_single)
{
	typedef typename rl_pair<T>::type T2;
	if (blockIdx.x >= m.hdr->n_items || (only_single && m.items[blockIdx.x].nrows > 1))
		return;                                 // uniform across the block: no barrier skipped
	extern __shared__ __align__(16) unsigned char smem[];
	const uint32_t kstride = hd + 2;                // elements; +2 keeps lane j's row on bank j
	T *Ks = (T *)smem;                              // [TILE, hd + 2]
	T *Vs = Ks + TILE * kstride;                    // [TILE, hd]
	float *Qs = (float *)(Vs + TILE * hd);          // [QV, hd]

	const item_ctx c = item_begin(m, nh, nkv, hd);
	const rl_cuda_item &it = c.it;
	const uint32_t kh = c.kh, lane = c.lane, w = c.w, qd = c.qd;
	const bool (&act)[QPW] = c.qv.act;
	const int (&lim)[QPW] = c.qv.lim;
	const int wlim = c.qv.wlim, kv_end = c.kv_end;
#pragma unroll
	for (int j = 0; j < QPW; j++)
		if (act[j])
			for (uint32_t d = lane; d < hd; d += 32)
				Qs[(w + WARPS * j) * hd + d] = rl_f32(q[(size_t)QV_ROW(w + WARPS * j) * qd + QV_HEAD(w + WARPS * j) * hd + d]);

	float mx[QPW], l[QPW], acc[QPW][MAX_HD / 32];
	softmax_begin(mx, l, acc);
	float M[QPW], L[QPW], O[QPW][MAX_HD / 32];   // DET: the merged chunks (else unused, dropped)
	if (DET)
		softmax_begin(M, L, O);

	for (int t0 = it.kv0; t0 < kv_end; t0 += TILE) {
		__syncthreads();                        // the previous tile is consumed
		load_kv_tile(Ks, kstride, Vs, hd, kc, vc, c.bt, t0, kv_end, nkv, kh, bs, hd);
		__syncthreads();
		if (t0 >= wlim)
			continue;                       // no live query vector of this warp needs the tile
		// scores: lane k scores key t0 + k against each live query vector; one load of a key
		// pair serves all QPW of them
		int p = t0 + (int)lane;
		float dot[QPW];
#pragma unroll
		for (int j = 0; j < QPW; j++)
			dot[j] = 0.0f;
		const T *kr = Ks + lane * kstride;
		for (uint32_t d = 0; d < hd; d += 2) {
			float2 kf = rl_f32(*(const T2 *)(kr + d));
#pragma unroll
			for (int j = 0; j < QPW; j++)
				if (act[j] && t0 < lim[j]) {
					const float *qw = Qs + (w + WARPS * j) * hd;
					dot[j] += qw[d] * kf.x + qw[d + 1] * kf.y;
				}
		}
		// online softmax per query vector (warp-uniform conditions: shuffles are safe)
		float e[QPW];
#pragma unroll
		for (int j = 0; j < QPW; j++)
			e[j] = act[j] && t0 < lim[j] ? softmax_tile(dot[j] * c.scale, p < lim[j], mx[j], l[j], acc[j]) : 0.0f;
		// values: one load of a value serves all QPW query vectors (e is 0 past each limit)
		int nkeys = wlim - t0 < TILE ? wlim - t0 : TILE;
		for (int jk = 0; jk < nkeys; jk++) {
			float pj[QPW];
#pragma unroll
			for (int j = 0; j < QPW; j++)     // warp-uniform: a decode warp shuffles once
				pj[j] = act[j] && t0 < lim[j] ? __shfl_sync(0xffffffffu, e[j], jk) : 0.0f;
#pragma unroll
			for (int i = 0; i < MAX_HD / 32; i++) {
				uint32_t d = lane + 32 * i;
				if (d < hd) {
					float vv = rl_f32(Vs[jk * hd + d]);
#pragma unroll
					for (int j = 0; j < QPW; j++)
						acc[j][i] += pj[j] * vv;
				}
			}
		}
		if (DET)
#pragma unroll
			for (int j = 0; j < QPW; j++)
				if (act[j] && t0 < lim[j] && det_chunk_ends(t0, lim[j]))
					det_chunk_end(it, t0, QV_HEAD(w + WARPS * j), nh, hd, part_o, part_ml, mx[j], l[j],
						      acc[j], M[j], L[j], O[j]);
	}
#pragma unroll
	for (int j = 0; j < QPW; j++) {
		if (!act[j] || (DET && it.part >= 0))   // DET partials are written chunk by chunk
			continue;
		if (DET) {
			det_store_out(out, QV_ROW(w + WARPS * j), QV_HEAD(w + WARPS * j), qd, hd, L[j], O[j]);
		} else if (it.part < 0) {
			store_out(out, QV_ROW(w + WARPS * j), QV_HEAD(w + WARPS * j), qd, hd, l[j], acc[j]);
		} else {
			float *po = part_o + ((size_t)it.part * nh + QV_HEAD(w + WARPS * j)) * hd;
#pragma unroll
			for (int i = 0; i < MAX_HD / 32; i++) {
				uint32_t d = lane + 32 * i;
				if (d < hd)
					po[d] = acc[j][i];
			}
			if (lane == 0) {
				part_ml[((size_t)it.part * nh + QV_HEAD(w + WARPS * j)) * 2] = mx[j];
				part_ml[((size_t)it.part * nh + QV_HEAD(w + WARPS * j)) * 2 + 1] = l[j];
			}
		}
	}
}

// Tensor-core variant for items of several rows (prefill chunks), head_dim a multiple of 16:
// the same item, tile and online-softmax structure, with S = Q K^T and the tile's P V computed
// by WMMA 16x16x16 (T in, fp32 out) into shared memory.
// Per tile: warps 0-3 each compute one 16x16 block of S [32 vectors, 32 keys]; then every warp
// runs the online softmax of its vectors over their S rows (as attn_kernel), writing P (as T)
// and rescaling its accumulators; then the warps share the 2 x hd/16 blocks of P V [32, hd];
// then each warp adds its vectors' rows to its accumulators. P is rounded to T for the MMA
// (as flash attention does), the sums stay fp32.
// DET (the deterministic mode): every item, one-row and split ones too, with the fixed chunks
// of attn_kernel's DET (the merged state: 1 block per SM).
template <typename T, bool DET = false>
__global__ void __launch_bounds__(WARPS * 32, DET ? 1 : 2)
attn_tc_kernel(T *out, float *part_o, float *part_ml, const T *q, const T *kc, const T *vc, rl_cuda_meta m,
	       uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs)
{
	using namespace nvcuda;
	if (blockIdx.x >= m.hdr->n_items || (!DET && m.items[blockIdx.x].nrows < 2))
		return;                                 // uniform across the block: no barrier skipped
	extern __shared__ __align__(128) unsigned char smem_tc[];   // WMMA wants 256-bit alignment
	const uint32_t ks = hd + 8, ss = TILE + 4, ps = TILE + 8, os = hd + 4;   // row strides
	T *Ks = (T *)smem_tc;                           // [TILE, hd + 8]: K^T, column-major
	T *Vs = Ks + TILE * ks;                         // [TILE, hd + 8]
	T *Qh = Vs + TILE * ks;                         // [QV, hd + 8]
	T *Ps = Qh + QV * ks;                           // [QV, TILE + 8]
	float *Ss = (float *)(Ps + QV * ps);            // [QV, TILE + 4]
	float *Os = Ss + QV * ss;                       // [QV, hd + 4]

	const item_ctx c = item_begin(m, nh, nkv, hd);
	const uint32_t kh = c.kh, lane = c.lane, w = c.w, qd = c.qd;
	// query vectors as in attn_kernel; rows of absent vectors are zeros
	const bool (&act)[QPW] = c.qv.act;
	const int (&lim)[QPW] = c.qv.lim;
	const int kv_end = c.kv_end;
#pragma unroll
	for (int j = 0; j < QPW; j++)
		for (uint32_t d = lane; d < hd; d += 32)
			Qh[(w + WARPS * j) * ks + d] = act[j] ? q[(size_t)QV_ROW(w + WARPS * j) * qd + QV_HEAD(w + WARPS * j) * hd + d] : rl_store<T>(0.0f);

	float mx[QPW], l[QPW], acc[QPW][MAX_HD / 32];
	softmax_begin(mx, l, acc);
	float M[QPW], L[QPW], O[QPW][MAX_HD / 32];   // DET: the merged chunks (else unused, dropped)
	if (DET)
		softmax_begin(M, L, O);

	const uint32_t nblk_o = 2 * (hd / 16);
	for (int t0 = c.it.kv0; t0 < kv_end; t0 += TILE) {
		__syncthreads();                        // the previous tile's K, V, P and O are consumed
		load_kv_tile(Ks, ks, Vs, ks, kc, vc, c.bt, t0, kv_end, nkv, kh, bs, hd);
		__syncthreads();
		if (w < 4) {                            // S block (w / 2, w % 2) = Q[16 rows] K^T[16 keys]
			uint32_t mi = w >> 1, ni = w & 1;
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf;
			wmma::fill_fragment(sf, 0.0f);
			for (uint32_t k = 0; k < hd; k += 16) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af;
				wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
				wmma::load_matrix_sync(af, Qh + mi * 16 * ks + k, ks);
				wmma::load_matrix_sync(bf, Ks + ni * 16 * ks + k, ks);
				wmma::mma_sync(sf, af, bf, sf);
			}
			wmma::store_matrix_sync(Ss + mi * 16 * ss + ni * 16, sf, ss, wmma::mem_row_major);
		}
		__syncthreads();
		int p = t0 + (int)lane;
#pragma unroll
		for (int j = 0; j < QPW; j++) {
			uint32_t v = w + WARPS * j;
			float e = act[j] && t0 < lim[j]    // warp-uniform: the shuffles are safe
				? softmax_tile(Ss[v * ss + lane] * c.scale, p < lim[j], mx[j], l[j], acc[j]) : 0.0f;
			Ps[v * ps + lane] = rl_store<T>(e);
		}
		__syncthreads();
		for (uint32_t ob = w; ob < nblk_o; ob += WARPS) {   // O block (ob % 2, ob / 2) = P V
			uint32_t mi = ob & 1, ni = ob >> 1;
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
			wmma::fill_fragment(of, 0.0f);
			for (uint32_t k = 0; k < TILE; k += 16) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af;
				wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
				wmma::load_matrix_sync(af, Ps + mi * 16 * ps + k, ps);
				wmma::load_matrix_sync(bf, Vs + k * ks + ni * 16, ks);
				wmma::mma_sync(of, af, bf, of);
			}
			wmma::store_matrix_sync(Os + mi * 16 * os + ni * 16, of, os, wmma::mem_row_major);
		}
		__syncthreads();
#pragma unroll
		for (int j = 0; j < QPW; j++) {
			if (!act[j] || t0 >= lim[j])
				continue;
			uint32_t v = w + WARPS * j;
#pragma unroll
			for (int i = 0; i < MAX_HD / 32; i++) {
				uint32_t d = lane + 32 * i;
				if (d < hd)
					acc[j][i] += Os[v * os + d];
			}
			if (DET && det_chunk_ends(t0, lim[j]))
				det_chunk_end(c.it, t0, QV_HEAD(v), nh, hd, part_o, part_ml, mx[j], l[j], acc[j], M[j], L[j],
					      O[j]);
		}
	}
#pragma unroll
	for (int j = 0; j < QPW; j++)
		if (act[j] && DET && c.it.part < 0)
			det_store_out(out, QV_ROW(w + WARPS * j), QV_HEAD(w + WARPS * j), qd, hd, L[j], O[j]);
		else if (act[j] && !DET)
			store_out(out, QV_ROW(w + WARPS * j), QV_HEAD(w + WARPS * j), qd, hd, l[j], acc[j]);
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

// The deterministic mode's merge of a split row's chunk partials: det_merge over the chunks in
// position order from (-inf, 0, 0), then O / L, exactly as an unsplit item merges in-kernel.
template <typename T>
__global__ void det_reduce_kernel(T *out, const float *part_o, const float *part_ml, rl_cuda_meta m,
				  uint32_t nh, uint32_t hd)
{
	uint32_t r = blockIdx.x, h = blockIdx.y;
	if (r >= m.hdr->n_tokens || m.row_nparts[r] < 1)
		return;
	const int p0 = m.row_part[r], np = m.row_nparts[r];
	for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
		float M = -INFINITY, L = 0.0f, O = 0.0f;
		for (int p = 0; p < np; p++) {
			const size_t k = (size_t)(p0 + p) * nh + h;
			const det_w w = det_merge(M, L, part_ml[k * 2], part_ml[k * 2 + 1]);
			O = det_mix(O, part_o[k * hd + d], w);
		}
		out[(size_t)r * nh * hd + h * hd + d] = rl_store<T>(O / L);
	}
}

// Dynamic shared memory of attn_kernel: K and V tiles plus the block's fp32 query vectors.
static size_t attn_smem(uint32_t hd, size_t elem)
{
	return (size_t)TILE * (hd + 2) * elem + (size_t)TILE * hd * elem + (size_t)QV * hd * 4;
}

// ... and of attn_tc_kernel: K, V, Q and P as T, S and O as fp32 (layout in the kernel).
static size_t attn_tc_smem(uint32_t hd, size_t elem)
{
	return ((size_t)2 * TILE * (hd + 8) + (size_t)QV * (hd + 8) + (size_t)QV * (TILE + 8)) * elem +
	       ((size_t)QV * (TILE + 4) + (size_t)QV * (hd + 4)) * 4;
}

static int tc_enabled = 1;          // rl_cuda_attention_use_tc: A/B against the CUDA-core kernel
static bool use_tc(uint32_t hd) { return tc_enabled && hd % 16 == 0; }

// Takes effect for launches made after it (graphs keep what they captured).
extern "C" void rl_cuda_attention_use_tc(int on) { tc_enabled = on != 0; }

static cudaError_t allow_smem(const void *fn, size_t smem)
{
	return smem <= 48 * 1024 ? cudaSuccess
		: cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename T>
static cudaError_t attention_prepare(uint32_t hd)
{
	cudaError_t e = allow_smem((const void *)attn_kernel<T>, attn_smem(hd, sizeof(T)));
	if (e == cudaSuccess)
		e = allow_smem((const void *)attn_kernel<T, true>, attn_smem(hd, sizeof(T)));
	if (e == cudaSuccess && use_tc(hd))
		e = allow_smem((const void *)attn_tc_kernel<T>, attn_tc_smem(hd, sizeof(T)));
	if (e == cudaSuccess && hd % 16 == 0)      // the deterministic mode's, whatever tc_enabled says
		e = allow_smem((const void *)attn_tc_kernel<T, true>, attn_tc_smem(hd, sizeof(T)));
	return e;
}

template <typename T>
static void attention(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q, const uint16_t *kc,
		      const uint16_t *vc, rl_cuda_meta m, uint32_t items_cap, uint32_t rows, uint32_t nh,
		      uint32_t nkv, uint32_t hd, uint32_t bs, cudaStream_t st)
{
	// prefill items (several rows) on tensor cores where head_dim allows; the rest here
	int tc = use_tc(hd);
	if (tc)
		attn_tc_kernel<T><<<dim3(items_cap, nkv), WARPS * 32, attn_tc_smem(hd, sizeof(T)), st>>>((T *)out, part_o,
			part_ml, (const T *)q, (const T *)kc, (const T *)vc, m, nh, nkv, hd, bs);
	attn_kernel<T><<<dim3(items_cap, nkv), WARPS * 32, attn_smem(hd, sizeof(T)), st>>>((T *)out, part_o, part_ml,
		(const T *)q, (const T *)kc, (const T *)vc, m, nh, nkv, hd, bs, tc);
	reduce_kernel<T><<<dim3(rows, nh), 128, 0, st>>>((T *)out, part_o, part_ml, m, nh, hd);
}

// The deterministic mode (rl_batch.deterministic): every item on one kernel chosen by head_dim
// alone (tensor cores where hd % 16 == 0, whatever rl_cuda_attention_use_tc says), so a row
// takes the same code whether it is a decode row, one row of a chunk or a one-row remainder
// item; each query vector's keys in the fixed chunks of DCH, merged in position order (above),
// in-kernel or by det_reduce_kernel for the rows the packer split (at chunk boundaries only).
template <typename T>
static void attention_det(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q, const uint16_t *kc,
			  const uint16_t *vc, rl_cuda_meta m, uint32_t items_cap, uint32_t rows, uint32_t nh,
			  uint32_t nkv, uint32_t hd, uint32_t bs, cudaStream_t st)
{
	if (hd % 16 == 0)
		attn_tc_kernel<T, true><<<dim3(items_cap, nkv), WARPS * 32, attn_tc_smem(hd, sizeof(T)), st>>>((T *)out,
			part_o, part_ml, (const T *)q, (const T *)kc, (const T *)vc, m, nh, nkv, hd, bs);
	else
		attn_kernel<T, true><<<dim3(items_cap, nkv), WARPS * 32, attn_smem(hd, sizeof(T)), st>>>((T *)out, part_o,
			part_ml, (const T *)q, (const T *)kc, (const T *)vc, m, nh, nkv, hd, bs, 0);
	det_reduce_kernel<T><<<dim3(rows, nh), 128, 0, st>>>((T *)out, part_o, part_ml, m, nh, hd);
}

extern "C" void rl_cuda_attention_det(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q,
				      const uint16_t *kc, const uint16_t *vc, rl_cuda_meta m, uint32_t items_cap,
				      uint32_t rows, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs,
				      rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, attention_det)(out, part_o, part_ml, q, kc, vc, m, items_cap, rows, nh, nkv, hd, bs, st);
}

extern "C" void rl_cuda_attention(uint16_t *out, float *part_o, float *part_ml, const uint16_t *q,
				  const uint16_t *kc, const uint16_t *vc, rl_cuda_meta m,
				  uint32_t items_cap, uint32_t rows, uint32_t nh, uint32_t nkv,
				  uint32_t hd, uint32_t bs, rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, attention)(out, part_o, part_ml, q, kc, vc, m, items_cap, rows, nh, nkv, hd, bs, st);
}

// Above 48 KiB (head_dim > 176 for attn_kernel, > 80 for attn_tc_kernel) a kernel needs the
// opt-in; call once per dtype before the first launch (and before graph capture). 0 or the CUDA error as an int.
extern "C" int rl_cuda_attention_prepare(uint32_t hd, rl_cuda_dtype dt)
{
	return (int)(dt == RL_CUDA_FP16 ? attention_prepare<__half>(hd) : attention_prepare<__nv_bfloat16>(hd));
}
