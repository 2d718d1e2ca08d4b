// cuda_sample.cu — token sampling on the device: greedy, temperature, top-k, top-p, with the
// same (seed, position) draw as the CPU (rl_sample_uniform from rl_sample.h). CPU counterpart:
// rl_sample (rl_sample.c). One block of 1024 threads per sampling row, after a split argmax
// (AM_SPLIT blocks a row) when the vocabulary is large.
//
// rl_sample ranks candidates by (probability desc, id asc) and cuts and draws in that order
// (or, with neither cut, draws in id order). A sort of 128k candidates per row is costly on
// the device, so the ranked order is reached by bisection on the probabilities' bit patterns
// instead (p >= 0, so the bit pattern orders like the value): "the rank-order prefix whose sum
// first exceeds x" is the smallest pattern K whose strictly-greater mass is <= x, then a walk in
// id order over the ties at K. Every sum is a fixed-order reduction (each thread sums a
// contiguous chunk, then a fixed tree), so a row's result never depends on timing; it equals
// rl_sample's except where rounding of the sums moves a draw across a boundary.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include "kernels/rl_cuda_ops.h"
#include "kernels/rl_sample.h"

#define ST 1024
#define PMAX_BITS 0x3f800000u          // bits of 1.0f, the largest probability (exp(0))

struct sset {                          // the candidate set: bits > K, or bits == K and id <= idc
	uint32_t K, idc;
};

static __device__ __forceinline__ bool in_set(sset s, uint32_t bits, uint32_t id)
{
	return bits > s.K || (bits == s.K && id <= s.idc);
}

template <typename T> static __device__ T block_sum(T v)
{
	__shared__ T part[32];
	__shared__ T total;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		part[w] = v;
	__syncthreads();
	if (w == 0) {
		T s = part[lane];
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0)
			total = s;
	}
	__syncthreads();
	T r = total;
	__syncthreads();
	return r;
}

// Exclusive prefix of v over the threads in index order (so over the chunks in id order).
template <typename T> static __device__ T block_exscan(T v)
{
	__shared__ T wsum[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	T inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		T n = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += n;
	}
	if (lane == 31)
		wsum[w] = inc;
	__syncthreads();
	if (w == 0) {
		T s = wsum[lane], si = s;
		for (int o = 1; o < 32; o <<= 1) {
			T n = __shfl_up_sync(0xffffffffu, si, o);
			if (lane >= o)
				si += n;
		}
		wsum[lane] = si - s;           // exclusive over warps
	}
	__syncthreads();
	T r = wsum[w] + inc - v;
	__syncthreads();
	return r;
}

struct chunk { uint32_t lo, hi; };

static __device__ __forceinline__ chunk my_chunk(uint32_t vocab)
{
	uint32_t c = (vocab + ST - 1) / ST, lo = threadIdx.x * c;
	return { lo < vocab ? lo : vocab, lo + c < vocab ? lo + c : vocab };
}

static __device__ __forceinline__ uint32_t fbits(float f) { return __float_as_uint(f); }

// Mass (or count) of set members whose bits > K.
static __device__ float mass_gt(const float *p, uint32_t vocab, sset s, uint32_t K)
{
	chunk c = my_chunk(vocab);
	float a = 0.0f;
	for (uint32_t i = c.lo; i < c.hi; i++) {
		uint32_t b = fbits(p[i]);
		if (b > K && in_set(s, b, i))
			a += p[i];
	}
	return block_sum(a);
}

static __device__ uint32_t count_gt(const float *p, uint32_t vocab, sset s, uint32_t K)
{
	chunk c = my_chunk(vocab);
	uint32_t a = 0;
	for (uint32_t i = c.lo; i < c.hi; i++) {
		uint32_t b = fbits(p[i]);
		a += b > K && in_set(s, b, i);
	}
	return block_sum(a);
}

// Smallest K in [0, PMAX_BITS] with mass_gt(K) < x (strict) or <= x.
static __device__ uint32_t search_mass(const float *p, uint32_t vocab, sset s, float x, bool strict)
{
	uint32_t lo = 0, hi = PMAX_BITS;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		float g = mass_gt(p, vocab, s, mid);
		if (strict ? g < x : g <= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

// Walks the set members with bits == K in id order from acc0. Mode 0 (count): returns the id of
// the `target`-th one (1-based). Mode 1 (nucleus): the first where acc >= target. Mode 2 (draw):
// the first where target < acc. *acc_out: acc after the chosen member. When none qualifies, the
// last member (and the full acc).
static __device__ uint32_t walk_ties(const float *p, uint32_t vocab, sset s, uint32_t K, float acc0,
				     float target, int mode, float *acc_out)
{
	__shared__ uint32_t found, last;
	__shared__ float facc;
	chunk c = my_chunk(vocab);
	float own = 0.0f;
	uint32_t my_last = UINT32_MAX;
	for (uint32_t i = c.lo; i < c.hi; i++) {
		uint32_t b = fbits(p[i]);
		if (b == K && in_set(s, b, i)) {
			own += mode == 0 ? 1.0f : p[i];
			my_last = i;
		}
	}
	if (threadIdx.x == 0) {
		found = UINT32_MAX;
		last = 0;
	}
	float before = block_exscan(own);          // synchronises: found/last are initialised
	float acc = (mode == 0 ? 0.0f : acc0) + before;
	float end = acc + own;
	bool mine = mode == 0 ? (before < target && target <= before + own)
		  : mode == 1 ? (acc < target && target <= end)
			      : (acc <= target && target < end);
	if (own > 0.0f && mine) {
		for (uint32_t i = c.lo; i < c.hi; i++) {
			uint32_t b = fbits(p[i]);
			if (!(b == K && in_set(s, b, i)))
				continue;
			acc += mode == 0 ? 1.0f : p[i];
			if (mode == 0 ? acc >= target : mode == 1 ? acc >= target : target < acc) {
				found = i;                 // chunks are disjoint: one writer
				facc = acc;
				break;
			}
		}
	}
	if (my_last != UINT32_MAX)
		atomicMax(&last, my_last);
	__syncthreads();
	float tot = block_sum(own);
	uint32_t id = found != UINT32_MAX ? found : last;
	*acc_out = found != UINT32_MAX ? facc : (mode == 0 ? 0.0f : acc0) + tot;
	__syncthreads();
	return id;
}

// The argmax of a large vocabulary is split over AM_SPLIT blocks a row: one block reading a
// 128k-logit row is bound by one SM's share of the bandwidth, and a decode step has a few
// rows for 132 SMs. Each writes its part's (max, lowest id at it) into the row's probs scratch,
// which sample_kernel reads before it writes any probability there.
#define AM_SPLIT 32
#define AM_THREADS 256
#define AM_MIN_VOCAB 4096              // below, one block reads the row as fast
static __host__ __device__ __forceinline__ bool am_split(uint32_t vocab) { return vocab >= AM_MIN_VOCAB; }

// (v, i) beats (bv, bi): larger, or equal with the lower id (rl_sample_argmax)
static __device__ __forceinline__ bool am_better(float v, uint32_t i, float bv, uint32_t bi)
{
	return v > bv || (v == bv && i < bi);
}

// The block's best (bv, bi) by am_better, from each thread's: each warp's by shuffles, then
// thread 0 over the nw warps' through wv/wi (shared, [nw]); thread 0 ends with the block's.
static __device__ __forceinline__ void am_block_best(float &bv, uint32_t &bi, float *wv, uint32_t *wi, int nw)
{
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		uint32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (am_better(ov, oi, bv, bi)) {
			bv = ov;
			bi = oi;
		}
	}
	if ((threadIdx.x & 31) == 0) {
		wv[threadIdx.x >> 5] = bv;
		wi[threadIdx.x >> 5] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		for (int w = 1; w < nw; w++)
			if (am_better(wv[w], wi[w], bv, bi)) {
				bv = wv[w];
				bi = wi[w];
			}
}

__global__ void __launch_bounds__(AM_THREADS)
argmax_part_kernel(float *probs, const float *logits, rl_cuda_meta m, uint32_t vocab)
{
	const uint32_t j = blockIdx.y, part = blockIdx.x;
	if (j >= m.hdr->n_samp)
		return;
	const float *lg = logits + (size_t)j * vocab;        // [vocab]
	const uint32_t per = (vocab + AM_SPLIT - 1) / AM_SPLIT, lo = part * per;
	const uint32_t hi = lo + per < vocab ? lo + per : vocab;
	float bv = -INFINITY;
	uint32_t bi = UINT32_MAX;
	for (uint32_t i = lo + threadIdx.x; i < hi; i += AM_THREADS)
		if (am_better(lg[i], i, bv, bi)) {
			bv = lg[i];
			bi = i;
		}
	__shared__ float wv[AM_THREADS / 32];
	__shared__ uint32_t wi[AM_THREADS / 32];
	am_block_best(bv, bi, wv, wi, AM_THREADS / 32);
	if (threadIdx.x == 0) {
		float *out = probs + (size_t)j * vocab + 2 * part;   // [2]: max, id bits
		out[0] = bv;
		out[1] = __uint_as_float(bi);
	}
}

__global__ void __launch_bounds__(ST)
sample_kernel(int32_t *ids, float *probs, const float *logits, rl_cuda_meta m, uint32_t vocab)
{
	uint32_t j = blockIdx.x;
	if (j >= m.hdr->n_samp) {
		if (threadIdx.x == 0)
			ids[j] = -1;
		return;
	}
	const rl_cuda_samp sp = m.samp[j];
	const float *lg = logits + (size_t)j * vocab;        // [vocab]
	float *p = probs + (size_t)j * vocab;                // [vocab]

	// argmax, the lowest id winning ties (rl_sample_argmax)
	__shared__ float wv[32];
	__shared__ uint32_t wi[32];
	__shared__ uint32_t best_s;
	float bv = -INFINITY;
	uint32_t bi = UINT32_MAX;
	if (am_split(vocab)) {                               // the parts argmax_part_kernel left
		if (threadIdx.x < AM_SPLIT) {
			bv = p[2 * threadIdx.x];
			bi = __float_as_uint(p[2 * threadIdx.x + 1]);
		}
	} else {
		for (uint32_t i = threadIdx.x; i < vocab; i += ST)
			if (am_better(lg[i], i, bv, bi)) {
				bv = lg[i];
				bi = i;
			}
	}
	am_block_best(bv, bi, wv, wi, ST / 32);
	if (threadIdx.x == 0)
		best_s = bi == UINT32_MAX ? 0 : bi;
	__syncthreads();
	uint32_t best = best_s;
	if (!(sp.temperature > 0.0f)) {
		if (threadIdx.x == 0)
			ids[j] = (int32_t)best;
		return;
	}

	// unnormalised softmax(logits / T), the expression rl_sample uses
	float mx = lg[best], inv_t = 1.0f / sp.temperature;
	chunk c = my_chunk(vocab);
	float own = 0.0f;
	for (uint32_t i = c.lo; i < c.hi; i++) {
		p[i] = expf((lg[i] - mx) * inv_t);
		own += p[i];
	}
	float total = block_sum(own);
	sset s = { 0, UINT32_MAX };                          // everything
	bool ranked = false;
	float acc;
	if (sp.top_k > 0 && sp.top_k < vocab) {
		// smallest K with fewer than k members above it, then the first ties at K by id
		uint32_t lo = 0, hi = PMAX_BITS;
		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;
			if (count_gt(p, vocab, s, mid) < sp.top_k)
				hi = mid;
			else
				lo = mid + 1;
		}
		uint32_t above = count_gt(p, vocab, s, lo);
		uint32_t idc = walk_ties(p, vocab, s, lo, 0.0f, (float)(sp.top_k - above), 0, &acc);
		s = { lo, idc };
		total = mass_gt(p, vocab, s, 0);         // members with p == 0 add nothing
		ranked = true;
	}
	if (sp.top_p < 1.0f) {
		float want = sp.top_p * total;
		uint32_t K = search_mass(p, vocab, s, want, true);
		float base = mass_gt(p, vocab, s, K);
		uint32_t idc = walk_ties(p, vocab, s, K, base, want, 1, &acc);
		s = { K, idc };
		total = acc;
		ranked = true;
	}
	float r = rl_sample_uniform(sp.seed, sp.position) * total;
	uint32_t id;
	if (ranked) {
		uint32_t K = search_mass(p, vocab, s, r, false);
		float base = mass_gt(p, vocab, s, K);
		id = walk_ties(p, vocab, s, K, base, r, 2, &acc);
	} else {
		// no cut: rl_sample draws in id order
		__shared__ uint32_t pick;
		if (threadIdx.x == 0)
			pick = best;                         // rounding left r past the end (rl_sample)
		float before = block_exscan(own);
		if (before <= r && r < before + own) {
			float a = before;
			for (uint32_t i = c.lo; i < c.hi; i++) {
				a += p[i];
				if (r < a) {
					pick = i;
					break;
				}
			}
		}
		__syncthreads();
		id = pick;
	}
	if (threadIdx.x == 0)
		ids[j] = (int32_t)id;
}

// Constrained rows (m.samp[j].mask >= 0): every token the row's mask does not allow gets
// -inf before the argmax and the sampler read the row, as rl_sample_mask does on the CPU. A
// thread a mask word; words of all ones write nothing.
#define MK_THREADS 256
__global__ void __launch_bounds__(MK_THREADS)
mask_kernel(float *logits, rl_cuda_meta m, uint32_t vocab)
{
	const uint32_t j = blockIdx.y, w = blockIdx.x * MK_THREADS + threadIdx.x, nw = rl_sample_mask_words(vocab);
	if (j >= m.hdr->n_samp || m.samp[j].mask < 0 || w >= nw)
		return;
	const uint32_t bits = m.masks[(size_t)m.samp[j].mask * nw + w];
	if (bits == 0xffffffffu)
		return;
	float *lg = logits + (size_t)j * vocab + 32 * w;     // [32] (fewer in the last word)
	const uint32_t n = vocab - 32 * w < 32 ? vocab - 32 * w : 32;
	for (uint32_t k = 0; k < n; k++)
		if (!(bits >> k & 1))
			lg[k] = -INFINITY;
}

extern "C" void rl_cuda_sample(int32_t *ids, float *probs, float *logits, rl_cuda_meta m,
			       uint32_t samp_cap, uint32_t vocab, cudaStream_t st)
{
	if (!samp_cap)
		return;
	const dim3 mk_grid((rl_sample_mask_words(vocab) + MK_THREADS - 1) / MK_THREADS, samp_cap);
	if (m.masks)                   // a buffer exists: some step may constrain a row
		mask_kernel<<<mk_grid, MK_THREADS, 0, st>>>(logits, m, vocab);
	if (am_split(vocab))
		argmax_part_kernel<<<dim3(AM_SPLIT, samp_cap), AM_THREADS, 0, st>>>(probs, logits, m, vocab);
	sample_kernel<<<samp_cap, ST, 0, st>>>(ids, probs, logits, m, vocab);
}
