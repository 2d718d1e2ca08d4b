// cuda_storage.h — the 2-byte storage types of the CUDA kernels (CUDA C++ only, included by
// kernels/cuda_*.cu): bf16 is __nv_bfloat16, fp16 is __half. A kernel templated on the storage
// type T loads with rl_f32() (T -> float, or T's pair -> float2) and stores with
// rl_store<T>(float) / rl_store2<T>(float, float) (round to nearest even, as the host's
// rl_f32_to_bf16/_f16); arithmetic is fp32 in between. rl_pair<T>::type is the
// 4-byte pair (__nv_bfloat162 / __half2) for paired loads. The launchers dispatch on
// enum rl_cuda_dtype with rl_by_dtype.
#ifndef RL_CUDA_STORAGE_H
#define RL_CUDA_STORAGE_H
#ifndef __cplusplus
#error "cuda_storage.h is CUDA C++ (kernels/*.cu)"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "kernels/rl_cuda_dtype.h"

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float rl_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ float rl_f32(__half v) { return __half2float(v); }
static __device__ __forceinline__ float2 rl_f32(__nv_bfloat162 v) { return __bfloat1622float2(v); }
static __device__ __forceinline__ float2 rl_f32(__half2 v) { return __half22float2(v); }

template <typename T> struct rl_pair;
template <> struct rl_pair<__nv_bfloat16> { typedef __nv_bfloat162 type; };
template <> struct rl_pair<__half> { typedef __half2 type; };

template <typename T> static __device__ __forceinline__ T rl_store(float f);
template <> __device__ __forceinline__ __nv_bfloat16 rl_store<__nv_bfloat16>(float f) { return __float2bfloat16(f); }
template <> __device__ __forceinline__ __half rl_store<__half>(float f) { return __float2half(f); }

template <typename T> static __device__ __forceinline__ typename rl_pair<T>::type rl_store2(float a, float b);
template <> __device__ __forceinline__ __nv_bfloat162 rl_store2<__nv_bfloat16>(float a, float b)
{
	return __floats2bfloat162_rn(a, b);
}
template <> __device__ __forceinline__ __half2 rl_store2<__half>(float a, float b) { return __floats2half2_rn(a, b); }

// The instantiation of a host-side launch template for dt: rl_by_dtype(dt, f)(args...).
#define rl_by_dtype(dt, f) ((dt) == RL_CUDA_FP16 ? f<__half> : f<bf16>)

#endif
