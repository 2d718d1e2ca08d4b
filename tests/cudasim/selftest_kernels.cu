// selftest_kernels.cu — small kernels with deliberate faults, for tests/cudasim/test_cudasim.c:
// each shows that the emulator catches one kind of mistake a GPU would punish (a missing
// barrier, divergent barriers, a barrier after exits, a shuffle naming exited lanes, a
// misaligned vector load, too much dynamic shared memory), next to a correct twin.
// Plain CUDA: it compiles with nvcc too, though only the emulator build uses it.
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

// Thread 0 publishes a value through shared memory; every thread reads it. With barrier 0 a
// reader may run before the writer (as on a GPU), so some outputs are wrong.
__global__ void publish_kernel(int *out, int barrier)
{
	extern __shared__ int s[];
	if (threadIdx.x == 0)
		s[0] = 42;
	if (barrier)
		__syncthreads();
	out[blockIdx.x * blockDim.x + threadIdx.x] = s[0];
}

// Half the block waits at one __syncthreads, half at another.
__global__ void divergent_kernel(int *out)
{
	if (threadIdx.x < 16)
		__syncthreads();
	else
		__syncthreads();
	out[threadIdx.x] = 1;
}

// Thread 0 leaves, the rest wait at a barrier.
__global__ void exit_then_barrier_kernel(int *out)
{
	if (threadIdx.x == 0)
		return;
	__syncthreads();
	out[threadIdx.x] = 1;
}

// Warp sum; with `leave` lane 5 exits before the full-mask shuffle.
__global__ void warp_sum_kernel(float *out, int leave)
{
	if (leave && threadIdx.x == 5)
		return;
	float v = (float)threadIdx.x;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (threadIdx.x == 0)
		out[0] = v;
}

// Reads bf16 pairs starting at element `first` (odd: a misaligned 4-byte load).
__global__ void pair_load_kernel(float *out, const __nv_bfloat16 *in, int first)
{
	__nv_bfloat162 p = *(const __nv_bfloat162 *)(in + first);
	out[0] = __bfloat162float(p.x) + __bfloat162float(p.y);
}

__global__ void big_smem_kernel(int *out)
{
	extern __shared__ int s[];
	s[threadIdx.x] = threadIdx.x;
	__syncthreads();
	out[threadIdx.x] = s[31 - threadIdx.x];
}

// One 16x16x16 WMMA product: C = A B (A row-major, B column-major, ldm 16), A read from
// a + first (first = 1: a pointer that is not 256-bit aligned).
__global__ void wmma_kernel(float *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int first)
{
	using namespace nvcuda;
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> af;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> cf;
	wmma::fill_fragment(cf, 0.0f);
	wmma::load_matrix_sync(af, a + first, 16);
	wmma::load_matrix_sync(bf, b, 16);
	wmma::mma_sync(cf, af, bf, cf);
	wmma::store_matrix_sync(c, cf, 16, wmma::mem_row_major);
}

extern "C" {
void st_wmma(float *c, const uint16_t *a, const uint16_t *b, int first)
{
	wmma_kernel<<<1, 32>>>(c, (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, first);
}
void st_publish(int *out, int blocks, int barrier)
{
	publish_kernel<<<blocks, 64, sizeof(int)>>>(out, barrier);
}
void st_divergent(int *out) { divergent_kernel<<<1, 32>>>(out); }
void st_exit_then_barrier(int *out) { exit_then_barrier_kernel<<<1, 32>>>(out); }
void st_warp_sum(float *out, int leave) { warp_sum_kernel<<<1, 32>>>(out, leave); }
void st_pair_load(float *out, const uint16_t *in, int first)
{
	pair_load_kernel<<<1, 1>>>(out, (const __nv_bfloat16 *)in, first);
}
void st_big_smem(int *out, size_t smem) { big_smem_kernel<<<1, 32, smem>>>(out); }
int st_allow_big_smem(int bytes)
{
	return (int)cudaFuncSetAttribute((const void *)big_smem_kernel,
					 cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
}
