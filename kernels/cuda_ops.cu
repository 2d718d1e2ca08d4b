// cuda_ops.cu — the element-wise and row-wise CUDA kernels of the forward pass: embedding
// gather, residual add fused with RMSNorm, RoPE fused with the paged KV-cache write, SwiGLU,
// and the device-side random fill for synthetic weights. Their CPU counterparts are in
// cpu_ops.c / rl_backend_cpu.c (named in rl_cuda_ops.h); tests/gpu compares each pair.
//
// Every kernel that touches 2-byte storage is a template on its type T (bf16 or fp16,
// cuda_storage.h); the launchers at the bottom pick the instantiation for their dtype.
//
// Thread mappings are simple: one block per row, as many threads as the row has items up to
// 1024, striding the rest. These kernels move a few MB per step, next to the GB of weights the
// GEMMs stream, so what costs is latency: a decode step has a few rows, and each strided
// iteration is a serial memory round trip (add+RMSNorm holds its row in registers instead).
#include <math.h>
#include "kernels/rl_cuda_ops.h"
#include "kernels/cuda_storage.h"

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
static __device__ float block_sum(float v)
{
	__shared__ float part[32];
	__shared__ float total;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	if (lane == 0)
		part[w] = v;
	__syncthreads();
	if (w == 0) {
		float s = lane < nw ? part[lane] : 0.0f;
		s = warp_sum(s);
		if (lane == 0)
			total = s;
	}
	__syncthreads();
	float r = total;
	__syncthreads();               // part/total reusable by a later call
	return r;
}

template <typename T>
__global__ void embed_kernel(float *x, const T *emb, rl_cuda_meta m, uint32_t dim)
{
	uint32_t r = blockIdx.x;
	const T *e = emb + (size_t)m.tokens[r] * dim;          // [dim]
	float *xr = x + (size_t)r * dim;
	for (uint32_t d = threadIdx.x; d < dim; d += blockDim.x)
		xr[d] = rl_f32(e[d]);
}

// One block per output row; the row is kept in shared memory between the two passes.
template <typename T>
__global__ void add_rmsnorm_kernel(T *out, float *x, const float *delta, const float *w,
				   const int32_t *row_map, uint32_t dim, float eps, int write_x)
{
	extern __shared__ float v[];                            // [dim]
	uint32_t i = blockIdx.x;
	int r = row_map ? row_map[i] : (int)i;
	T *o = out + (size_t)i * dim;                           // [dim]
	if (r < 0) {
		for (uint32_t d = threadIdx.x; d < dim; d += blockDim.x)
			o[d] = rl_store<T>(0.0f);
		return;
	}
	float *xr = x + (size_t)r * dim;
	const float *dr = delta ? delta + (size_t)r * dim : NULL;
	float ss = 0.0f;
	for (uint32_t d = threadIdx.x; d < dim; d += blockDim.x) {
		float a = xr[d] + (dr ? dr[d] : 0.0f);
		v[d] = a;
		ss += a * a;
		if (write_x)
			xr[d] = a;
	}
	ss = block_sum(ss);
	float s = 1.0f / sqrtf(ss / (float)dim + eps);         // as rl_cpu_rmsnorm
	for (uint32_t d = threadIdx.x; d < dim; d += blockDim.x)
		o[d] = rl_store<T>(v[d] * s * w[d]);
}

// The same for dim % 4 == 0 and dim <= 4 * 4 * blockDim: each thread holds its float4s of the
// row, and of w, in registers, and every load is issued before any store (the pointers may
// alias as far as the compiler knows). The row then costs two memory latencies, where the
// strided loop above pays one per iteration, twice (16 each for a 4096-wide row at 256
// threads). No shared row, so no 48 KiB limit on dim.
#define RMS_V 4                        // float4s per thread at most
template <typename T>
__global__ void __launch_bounds__(1024) add_rmsnorm_v4_kernel(T *out, float *x, const float *delta, const float *w,
							      const int32_t *row_map, uint32_t dim, float eps,
							      int write_x)
{
	uint32_t i = blockIdx.x, n4 = dim / 4;
	int r = row_map ? row_map[i] : (int)i;
	T *o = out + (size_t)i * dim;                           // [dim]
	if (r < 0) {
		for (uint32_t d = threadIdx.x; d < dim; d += blockDim.x)
			o[d] = rl_store<T>(0.0f);
		return;
	}
	float4 *x4 = (float4 *)(x + (size_t)r * dim);           // [n4]
	const float4 *d4 = delta ? (const float4 *)(delta + (size_t)r * dim) : NULL;
	const float4 *w4 = (const float4 *)w;
	float4 a[RMS_V], g[RMS_V];
	float ss = 0.0f;
#pragma unroll
	for (int k = 0; k < RMS_V; k++) {
		uint32_t j = threadIdx.x + k * blockDim.x;
		if (j < n4) {
			a[k] = x4[j];
			g[k] = w4[j];
			if (d4) {
				float4 e = d4[j];
				a[k].x += e.x; a[k].y += e.y; a[k].z += e.z; a[k].w += e.w;
			}
			ss += a[k].x * a[k].x + a[k].y * a[k].y + a[k].z * a[k].z + a[k].w * a[k].w;
		}
	}
	if (write_x) {
#pragma unroll
		for (int k = 0; k < RMS_V; k++) {
			uint32_t j = threadIdx.x + k * blockDim.x;
			if (j < n4)
				x4[j] = a[k];
		}
	}
	ss = block_sum(ss);
	float s = 1.0f / sqrtf(ss / (float)dim + eps);         // as rl_cpu_rmsnorm
#pragma unroll
	for (int k = 0; k < RMS_V; k++) {
		uint32_t j = threadIdx.x + k * blockDim.x;
		if (j < n4) {
			T *oj = o + 4 * (size_t)j;
			oj[0] = rl_store<T>(a[k].x * s * g[k].x);
			oj[1] = rl_store<T>(a[k].y * s * g[k].y);
			oj[2] = rl_store<T>(a[k].z * s * g[k].z);
			oj[3] = rl_store<T>(a[k].w * s * g[k].w);
		}
	}
}

// One block per row. Pairs (i0, i1) of every q and k head are rotated by thread-strided loops;
// v is copied. Rows past n_tokens are padding: nothing reads their q, and they own no slot.
template <typename T>
__global__ void rope_kv_kernel(T *q_out, T *kc, T *vc, const T *qkv, const float *bias,
			       const float *inv_freq, rl_cuda_meta m, uint32_t nh, uint32_t nkv,
			       uint32_t hd, uint32_t bs, float rope_scale, int halves, const float *qk_norm,
			       float eps)
{
	__shared__ float inv_rms[RL_CUDA_QK_NORM_HEADS];       // per q, then k, head (qk_norm)
	uint32_t r = blockIdx.x;
	if (r >= m.hdr->n_tokens)
		return;
	uint32_t qd = nh * hd, kvd = nkv * hd, half = hd / 2;
	const T *row = qkv + (size_t)r * (qd + 2 * kvd);       // [q | k | v]
	if (qk_norm) {                                          // uniform over the block
		for (uint32_t h = threadIdx.x; h < nh + nkv; h += blockDim.x) {
			float ss = 0.0f;
			for (uint32_t i = 0; i < hd; i++) {
				float v = rl_f32(row[h * hd + i]) + (bias ? bias[h * hd + i] : 0.0f);
				ss += v * v;
			}
			inv_rms[h] = 1.0f / sqrtf(ss / hd + eps);   // as rl_cpu_rmsnorm
		}
		__syncthreads();
	}
	int slot = m.slot[r];
	float ps = (float)m.pos[r] / rope_scale;
	size_t blk = slot >= 0 ? (size_t)(slot / (int)bs) : 0, off = slot >= 0 ? (size_t)(slot % (int)bs) : 0;
	for (uint32_t t = threadIdx.x; t < (nh + nkv) * half; t += blockDim.x) {
		uint32_t h = t / half, i = t % half;
		uint32_t i0 = halves ? i : 2 * i, i1 = halves ? i + half : 2 * i + 1;
		uint32_t base = h * hd;                         // q heads, then k heads
		float v0 = rl_f32(row[base + i0]), v1 = rl_f32(row[base + i1]);
		if (bias) {
			v0 += bias[base + i0];
			v1 += bias[base + i1];
		}
		if (qk_norm) {
			const float *w = qk_norm + (h < nh ? 0 : hd);
			v0 = v0 * inv_rms[h] * w[i0];
			v1 = v1 * inv_rms[h] * w[i1];
		}
		float sn, cs;
		sincosf(ps * inv_freq[i], &sn, &cs);
		float r0 = v0 * cs - v1 * sn, r1 = v0 * sn + v1 * cs;
		if (h < nh) {
			q_out[(size_t)r * qd + base + i0] = rl_store<T>(r0);
			q_out[(size_t)r * qd + base + i1] = rl_store<T>(r1);
		} else if (slot >= 0) {
			uint32_t kh = h - nh;
			T *dst = kc + ((blk * nkv + kh) * bs + off) * hd;   // [hd]
			dst[i0] = rl_store<T>(r0);
			dst[i1] = rl_store<T>(r1);
		}
	}
	if (slot < 0)
		return;
	for (uint32_t t = threadIdx.x; t < kvd; t += blockDim.x) {
		uint32_t kh = t / hd, d = t % hd;
		float a = rl_f32(row[qd + kvd + t]) + (bias ? bias[qd + kvd + t] : 0.0f);
		vc[((blk * nkv + kh) * bs + off) * hd + d] = rl_store<T>(a);
	}
}

template <typename T>
__global__ void swiglu_kernel(T *h, const T *gu, uint32_t rows, uint32_t hid)
{
	size_t n = (size_t)rows * hid;
	for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (size_t)gridDim.x * blockDim.x) {
		size_t r = t / hid, c = t % hid;
		float g = rl_f32(gu[r * 2 * hid + c]), u = rl_f32(gu[r * 2 * hid + hid + c]);
		h[t] = rl_store<T>(g / (1.0f + expf(-g)) * u);        // as rl_cpu_silu_mul
	}
}

static __device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i)
{
	uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;   // [-1, 1)
}

template <typename T>
__global__ void fill_kernel(T *p, size_t n, float a, float center, uint64_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = rl_store<T>(center + a * hash_uniform(seed, i));
}

__global__ void fill_f32_kernel(float *p, size_t n, float a, float center, uint64_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = center + a * hash_uniform(seed, i);
}

// Launch templates, one per kernel, instantiated by the C launchers below (rl_by_dtype).
template <typename T>
static void embed(float *x, const uint16_t *emb, rl_cuda_meta m, uint32_t rows, uint32_t dim, cudaStream_t st)
{
	embed_kernel<T><<<rows, dim < 1024 ? (dim + 31) / 32 * 32 : 1024, 0, st>>>(x, (const T *)emb, m, dim);
}

template <typename T>
static void add_rmsnorm(uint16_t *out, float *x, const float *delta, const float *w, const int32_t *row_map,
			uint32_t rows, uint32_t dim, float eps, int write_x, cudaStream_t st)
{
	if (!rows)
		return;
	const uint32_t n4 = dim / 4;
	if (dim % 4 == 0 && n4 <= RMS_V * 1024) {
		const uint32_t t = n4 < 1024 ? (n4 + 31) / 32 * 32 : 1024;   // a float4 each, whole warps
		add_rmsnorm_v4_kernel<T><<<rows, t, 0, st>>>((T *)out, x, delta, w, row_map, dim, eps, write_x);
	} else {
		add_rmsnorm_kernel<T><<<rows, 256, dim * sizeof(float), st>>>((T *)out, x, delta, w, row_map,
									     dim, eps, write_x);
	}
}

template <typename T>
static void rope_kv(uint16_t *q_out, uint16_t *kc, uint16_t *vc, const uint16_t *qkv, const float *bias,
		    const float *inv_freq, rl_cuda_meta m, uint32_t rows, uint32_t nh, uint32_t nkv,
		    uint32_t hd, uint32_t bs, float rope_scale, int halves, const float *qk_norm, float eps,
		    cudaStream_t st)
{
	// a thread a rotated pair, up to 1024: each thread's loop iterations are serial memory
	// round trips (its stores may alias the next loads as far as the compiler knows)
	const uint32_t pairs = (nh + nkv) * (hd / 2);
	const unsigned t = pairs < 1024 ? (pairs + 31) / 32 * 32 : 1024;
	rope_kv_kernel<T><<<rows, t, 0, st>>>((T *)q_out, (T *)kc, (T *)vc, (const T *)qkv, bias,
						inv_freq, m, nh, nkv, hd, bs, rope_scale, halves, qk_norm, eps);
}

template <typename T>
static void swiglu(uint16_t *h, const uint16_t *gu, uint32_t rows, uint32_t hid, cudaStream_t st)
{
	size_t n = (size_t)rows * hid;
	unsigned grid = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
	swiglu_kernel<T><<<grid ? grid : 1, 256, 0, st>>>((T *)h, (const T *)gu, rows, hid);
}

template <typename T>
static void fill(uint16_t *p, size_t n, float a, float center, uint64_t seed, cudaStream_t st)
{
	fill_kernel<T><<<4096, 256, 0, st>>>((T *)p, n, a, center, seed);
}

extern "C" {

void rl_cuda_embed(float *x, const uint16_t *emb, rl_cuda_meta m, uint32_t rows, uint32_t dim,
		   rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, embed)(x, emb, m, rows, dim, st);
}

void rl_cuda_add_rmsnorm(uint16_t *out, float *x, const float *delta, const float *w,
			 const int32_t *row_map, uint32_t rows, uint32_t dim, float eps,
			 int write_x, rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, add_rmsnorm)(out, x, delta, w, row_map, rows, dim, eps, write_x, st);
}

void rl_cuda_rope_kv(uint16_t *q_out, uint16_t *kc, uint16_t *vc, const uint16_t *qkv,
		     const float *bias, const float *inv_freq, rl_cuda_meta m, uint32_t rows,
		     uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, float rope_scale,
		     int halves, const float *qk_norm, float eps, rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, rope_kv)(q_out, kc, vc, qkv, bias, inv_freq, m, rows, nh, nkv, hd, bs, rope_scale,
				 halves, qk_norm, eps, st);
}

void rl_cuda_swiglu(uint16_t *h, const uint16_t *gu, uint32_t rows, uint32_t hid, rl_cuda_dtype dt,
		    cudaStream_t st)
{
	rl_by_dtype(dt, swiglu)(h, gu, rows, hid, st);
}

void rl_cuda_fill_uniform(uint16_t *p, size_t n, float a, float center, uint64_t seed, rl_cuda_dtype dt,
			  cudaStream_t st)
{
	rl_by_dtype(dt, fill)(p, n, a, center, seed, st);
}

void rl_cuda_fill_uniform_f32(float *p, size_t n, float a, float center, uint64_t seed, cudaStream_t st)
{
	fill_f32_kernel<<<1024, 256, 0, st>>>(p, n, a, center, seed);
}

}
