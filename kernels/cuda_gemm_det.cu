// cuda_gemm_det.cu — the batch-invariant GEMM of the deterministic mode (rl_batch.deterministic,
// issue 51): Y[rows, out] = X[rows, in] W[out, in]^T, X and W in the storage type T (bf16 or
// fp16), fp32 accumulation, Y fp32 or T. CPU reference: gemm_det_ref in tests/gpu/test_gpu.c
// (test_gemm_det checks the two agree and that a row's bits never depend on the row count).
//
// Why not cuBLAS: cublasGemmEx picks its algorithm, tile and split-K from the shape, so a row
// computed in a step of 3 rows and in a step of 40 may be summed in different orders and
// differ in the last bits. Here every output element is one accumulator that starts at 0 and
// takes the K dimension in 16-wide slices in increasing order, each slice one tensor-core
// 16x16x16 product (WMMA, fp32 accumulate): the order depends on K alone. Rows are
// independent (a row's outputs read only that row of X), so neither the row count, nor the
// tile shape, nor where a row sits in its tile changes its bits: the launcher is free to pick
// a smaller tile for small steps. There is no split-K at all.
//
// Block: WR x WO warps, each owning FR x FO 16x16 accumulator fragments, so a block covers
// BR = 16 WR FR rows and BO = 16 WO FO outputs. Per BK-wide step of K the block stages X's
// [BR, BK] and W's [BO, BK] tiles in shared memory (zeros past the edges: zero products leave
// a sum unchanged, and the slices wholly past K are skipped), then each warp runs its
// products, slice after slice. BK only sets how much is staged at once (the slices and their
// order stay the same): decode-sized steps stage long K runs, so each block keeps many bytes
// of W in flight (a GEMV is bound by memory latency x bytes in flight). The accumulators go
// through shared memory to be converted and written with bounds checks.
#include <stdint.h>
#include "kernels/rl_cuda_ops.h"
#include "kernels/cuda_storage.h"
#include <mma.h>


struct __align__(16) gd_pack {        // 8 two-byte elements, moved as raw bits
	uint32_t w[4];
};

// S[n][k] (stride BK + 8: 16 rows are 32 (BK + 8) bytes, keeping WMMA's 32-byte alignment) =
// G[g0 + n][k0 + k] for n < N, k < BK (G row-major, `in` columns), by the block's NT threads;
// zeros past gn rows or past `in`. vec: in % 8 == 0 and G 16-byte aligned (8 elements a load).
template <typename T, int N, int BK, int NT>
static __device__ __forceinline__ void gd_load(T *S, const T *G, uint32_t g0, uint32_t gn, uint32_t k0,
					       uint32_t in, int vec)
{
	if (vec) {
		for (uint32_t idx = threadIdx.x; idx < N * BK / 8; idx += NT) {
			const uint32_t n = idx / (BK / 8), k = idx % (BK / 8) * 8;
			gd_pack v = { { 0, 0, 0, 0 } };
			if (g0 + n < gn && k0 + k < in)
				v = *(const gd_pack *)(G + (size_t)(g0 + n) * in + k0 + k);
			*(gd_pack *)(S + n * (BK + 8) + k) = v;
		}
	} else {
		for (uint32_t idx = threadIdx.x; idx < N * BK; idx += NT) {
			const uint32_t n = idx / BK, k = idx % BK;
			S[n * (BK + 8) + k] = g0 + n < gn && k0 + k < in ? G[(size_t)(g0 + n) * in + k0 + k] : rl_store<T>(0.0f);
		}
	}
}

template <typename TO> static __device__ __forceinline__ TO gd_out(float v) { return rl_store<TO>(v); }
template <> __device__ __forceinline__ float gd_out<float>(float v) { return v; }

template <typename T, typename TO, int WR, int WO, int FR, int FO, int BK>
__global__ void __launch_bounds__(32 * WR * WO)
gemm_det_kernel(TO *Y, const T *X, const T *W, uint32_t rows, uint32_t in, uint32_t out, int vec)
{
	using namespace nvcuda;
	constexpr int BR = 16 * WR * FR, BO = 16 * WO * FO, CS = BO + 4, KS = BK + 8, NT = 32 * WR * WO;
	static_assert(BK % 16 == 0, "whole WMMA slices");
	__shared__ __align__(32) T Xs[BR * KS];          // [BR rows, BK]: row-major A tiles
	__shared__ __align__(32) T Ws[BO * KS];          // [BO outputs, BK]: W^T's [BK, BO], column-major
	__shared__ __align__(32) float Cs[BR * CS];      // [BR, BO + 4] the block's results
	const uint32_t r0 = blockIdx.y * BR, o0 = blockIdx.x * BO;
	const uint32_t w = threadIdx.x >> 5, wr = w / WO, wo = w % WO;

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FR][FO];
#pragma unroll
	for (int i = 0; i < FR; i++)
#pragma unroll
		for (int j = 0; j < FO; j++)
			wmma::fill_fragment(acc[i][j], 0.0f);

	for (uint32_t k0 = 0; k0 < in; k0 += BK) {
		__syncthreads();                        // the previous step's tiles are consumed
		gd_load<T, BR, BK, NT>(Xs, X, r0, rows, k0, in, vec);
		gd_load<T, BO, BK, NT>(Ws, W, o0, out, k0, in, vec);
		__syncthreads();
#pragma unroll
		for (uint32_t kk = 0; kk < BK; kk += 16) {
			if (k0 + kk >= in)              // uniform: a slice wholly past K adds nothing
				break;
			wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[FR];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[FO];
#pragma unroll
			for (int i = 0; i < FR; i++)
				wmma::load_matrix_sync(a[i], Xs + (wr * FR + i) * 16 * KS + kk, KS);
#pragma unroll
			for (int j = 0; j < FO; j++)
				wmma::load_matrix_sync(b[j], Ws + (wo * FO + j) * 16 * KS + kk, KS);
#pragma unroll
			for (int i = 0; i < FR; i++)
#pragma unroll
				for (int j = 0; j < FO; j++)
					wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
	}
#pragma unroll
	for (int i = 0; i < FR; i++)
#pragma unroll
		for (int j = 0; j < FO; j++)
			wmma::store_matrix_sync(Cs + (wr * FR + i) * 16 * CS + (wo * FO + j) * 16, acc[i][j], CS,
						wmma::mem_row_major);
	__syncthreads();
	for (uint32_t idx = threadIdx.x; idx < BR * BO; idx += NT) {
		const uint32_t r = idx / BO, o = idx % BO;
		if (r0 + r < rows && o0 + o < out)
			Y[(size_t)(r0 + r) * out + o0 + o] = gd_out<TO>(Cs[r * CS + o]);
	}
}

// Tile by row count (the bits do not depend on it, see above): a step of up to 16 rows
// (decode: bound by streaming W) takes 16 x 32 tiles on 2 warps, 256 of K staged at once, so
// there are many blocks and each has 24 KiB in flight; larger steps take 64 x 64 tiles on 4
// warps with 2 x 2 fragments each, which halves the operand traffic per product.
template <typename T, typename TO>
static void gemm_det_typed(TO *Y, const T *X, const T *W, uint32_t rows, uint32_t in, uint32_t out,
			   cudaStream_t st)
{
	const int vec = in % 8 == 0 && (uintptr_t)X % 16 == 0 && (uintptr_t)W % 16 == 0;
	if (rows <= 16)
		gemm_det_kernel<T, TO, 1, 2, 1, 1, 256><<<dim3((out + 31) / 32, 1), 64, 0, st>>>(Y, X, W, rows, in, out, vec);
	else
		gemm_det_kernel<T, TO, 2, 2, 2, 2, 64><<<dim3((out + 63) / 64, (rows + 63) / 64), 128, 0, st>>>(Y, X, W, rows, in, out, vec);
}

template <typename T>
static void gemm_det(void *Y, int y_f32, const uint16_t *X, const uint16_t *W, uint32_t rows, uint32_t in,
		     uint32_t out, cudaStream_t st)
{
	if (!rows || !out)
		return;
	if (y_f32)
		gemm_det_typed<T, float>((float *)Y, (const T *)X, (const T *)W, rows, in, out, st);
	else
		gemm_det_typed<T, T>((T *)Y, (const T *)X, (const T *)W, rows, in, out, st);
}

extern "C" void rl_cuda_gemm_det(void *Y, int y_f32, const uint16_t *X, const uint16_t *W, uint32_t rows,
				 uint32_t in, uint32_t out, rl_cuda_dtype dt, cudaStream_t st)
{
	rl_by_dtype(dt, gemm_det)(Y, y_f32, X, W, rows, in, out, st);
}
