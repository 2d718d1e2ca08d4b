/* cudasim_device.h — what CUDA C++ device code sees, for kernels compiled as plain C++ to run
 * on the CPU emulator (tests/cudasim/cudasim.cc). It is force-included (-include) into every
 * .cu file of kernels/ once tests/cudasim/cu2cc.sh has translated it.
 *
 * Model: a block runs its threads as cooperative fibers on one CPU thread, blocks run one
 * after another. __syncthreads() is a barrier of every thread of the block (call sites must
 * match, and no thread may have exited: both are checked); warp shuffles are exchanges among
 * the lanes named in the mask (all must be live and arrive with the same mask). A thread only
 * gives up the CPU at those points, so the order threads run between two barriers is chosen
 * by the emulator (forward in even blocks, reverse in odd ones, or CUDASIM_ORDER) to expose a
 * missing barrier either way. `__shared__` variables become function statics (one instance,
 * blocks are serial); dynamic shared memory is a per-launch buffer poisoned with 0xff before
 * every block. Atomics are plain read-modify-writes (nothing runs concurrently).
 * Conversions follow the CUDA intrinsics: __float2bfloat16 / __float2half round to nearest
 * even; NaN becomes the canonical NaN.
 */
#ifndef CUDASIM_DEVICE_H
#define CUDASIM_DEVICE_H
#ifndef __cplusplus
#error "cudasim_device.h is C++ (kernels compiled for the emulator)"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <functional>
#include <tuple>
#include <utility>
#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __shared__ static
#define __constant__ static

struct uint3 { unsigned x, y, z; };
struct dim3 {
	unsigned x, y, z;
	constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
static inline float2 make_float2(float x, float y) { return { x, y }; }
static inline float4 make_float4(float x, float y, float z, float w) { return { x, y, z, w }; }

extern "C" {
extern uint3 cudasim_threadIdx, cudasim_blockIdx;
extern dim3 cudasim_blockDim, cudasim_gridDim;
void cudasim_syncthreads(const char *file, int line);
/* Lane exchange: every lane of mask publishes 8 bytes and reads lane src's (its own when src
 * is outside the mask or the warp). */
uint64_t cudasim_shfl(unsigned mask, uint64_t v, int src, const char *what);
void cudasim_syncwarp(unsigned mask);
void *cudasim_dyn_smem(void);
int cudasim_lane_id(void);
}
#define threadIdx cudasim_threadIdx
#define blockIdx cudasim_blockIdx
#define blockDim cudasim_blockDim
#define gridDim cudasim_gridDim
static constexpr int warpSize = 32;
#define __syncthreads() cudasim_syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) cudasim_syncwarp(0xffffffffu)

/* ---- shuffles (width 32 only) ---- */
template <typename T> static inline uint64_t cudasim_bits(T v)
{
	static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	return b;
}
template <typename T> static inline T cudasim_from_bits(uint64_t b)
{
	T v;
	memcpy(&v, &b, sizeof v);
	return v;
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	(void)width;
	return cudasim_from_bits<T>(cudasim_shfl(mask, cudasim_bits(v), src & 31, "__shfl_sync"));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32)
{
	(void)width;
	return cudasim_from_bits<T>(cudasim_shfl(mask, cudasim_bits(v), (cudasim_lane_id() ^ lm) & 31, "__shfl_xor_sync"));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	(void)width;
	int l = cudasim_lane_id();
	return cudasim_from_bits<T>(cudasim_shfl(mask, cudasim_bits(v), l >= (int)d ? l - (int)d : l, "__shfl_up_sync"));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	(void)width;
	int l = cudasim_lane_id();
	return cudasim_from_bits<T>(cudasim_shfl(mask, cudasim_bits(v), l + (int)d < 32 ? l + (int)d : l, "__shfl_down_sync"));
}

/* ---- atomics (no concurrency: plain read-modify-write, returning the old value) ---- */
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <typename T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <typename T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

/* ---- float intrinsics ---- */
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

/* ---- bf16 / fp16 (storage types; arithmetic is done in float as in our kernels) ---- */
struct __attribute__((aligned(2))) __nv_bfloat16 { uint16_t x; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __attribute__((aligned(2))) __half { uint16_t x; };
struct __attribute__((aligned(4))) __half2 { __half x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
typedef __half half;
typedef __half2 half2;

static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((uint32_t)h.x << 16); }
static inline __nv_bfloat16 __float2bfloat16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return { 0x7fff };                     /* canonical NaN, as the CUDA intrinsic */
	u += 0x7fffu + ((u >> 16) & 1);            /* round to nearest even */
	return { (uint16_t)(u >> 16) };
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return { __float2bfloat16(a), __float2bfloat16(b) }; }
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) { return { __bfloat162float(v.x), __bfloat162float(v.y) }; }
static inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
static inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }

static inline float __half2float(__half h)
{
	uint32_t s = (uint32_t)(h.x >> 15) << 31, e = (h.x >> 10) & 0x1f, m = h.x & 0x3ff;
	if (e == 0x1f)
		return __uint_as_float(s | 0x7f800000u | (m << 13));
	if (e == 0) {
		float v = ldexpf((float)m, -24);
		return s ? -v : v;
	}
	return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
}
static inline __half __float2half(float f)
{
	uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return { 0x7fff };                     /* canonical NaN */
	if (a >= 0x477ff000u)                          /* rounds to >= 65520: inf */
		return { (uint16_t)(sign | 0x7c00) };
	if (a < 0x38800000u) {                         /* below 2^-14: subnormal or zero */
		if (a < 0x33000000u)                   /* below 2^-25: rounds to zero */
			return { (uint16_t)sign };
		uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return { (uint16_t)(sign | r) };
	}
	uint32_t r = a - 0x38000000u;
	r = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
	return { (uint16_t)(sign | r) };
}
static inline __half __float2half_rn(float f) { return __float2half(f); }
static inline __half2 __floats2half2_rn(float a, float b) { return { __float2half(a), __float2half(b) }; }
static inline float2 __half22float2(__half2 v) { return { __half2float(v.x), __half2float(v.y) }; }

/* ---- launches: `k<<<g, b, smem, st>>>(args)` is rewritten by cu2cc.sh to
 * `cudasim::launch(k, "k", cudasim::cfg(g, b, smem, st))(args)` ---- */
namespace cudasim {
struct cfg {
	dim3 g, b;
	size_t smem;
	cudaStream_t st;
	cfg(dim3 g_, dim3 b_, size_t smem_ = 0, cudaStream_t st_ = 0) : g(g_), b(b_), smem(smem_), st(st_) {}
};
}
extern "C++" void cudasim_submit_kernel(const char *name, const void *fn, const cudasim::cfg &c,
					std::function<void()> body, const void *const *ptrs, int nptrs);
namespace cudasim {
template <typename T> static inline void collect(const void **out, int *n, const T &) {}
template <typename T> static inline void collect(const void **out, int *n, T *const &p) { out[(*n)++] = (const void *)p; }
template <typename... P> struct launcher {
	void (*k)(P...);
	const char *name;
	cfg c;
	template <typename... A> void operator()(A &&...a)
	{
		std::tuple<P...> args(std::forward<A>(a)...);    /* converted to the parameter types */
		const void *ptrs[sizeof...(P) + 1];
		int n = 0;
		std::apply([&](const P &...x) { (collect(ptrs, &n, x), ...); }, args);
		void (*kk)(P...) = k;
		cudasim_submit_kernel(name, (const void *)k, c, [kk, args]() { std::apply(kk, args); }, ptrs, n);
	}
};
template <typename... P> static inline launcher<P...> launch(void (*k)(P...), const char *name, cfg c)
{
	return { k, name, c };
}
}
#endif
