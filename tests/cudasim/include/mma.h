/* mma.h (cudasim) — the WMMA subset (nvcuda::wmma: 16x16x16 fragments of bf16/fp16 with fp32
 * accumulators) for kernels compiled for the CPU emulator. Each lane keeps the whole tile and
 * computes the whole product (a fragment's element-to-lane mapping is unspecified in CUDA, so
 * code that uses only the documented operations cannot tell). Every operation first checks,
 * as a warp barrier, that the full warp calls it together, and checks CUDA's documented
 * constraints: 256-bit aligned pointers, ldm a multiple of 8 elements for 16-bit types and 4
 * for float. */
#ifndef CUDASIM_MMA_H
#define CUDASIM_MMA_H
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>
#include "cudasim_device.h"

extern "C" void cudasim_wmma_fault(const char *what);
extern "C" float *cudasim_warp_scratch(void);  /* 256 floats per warp of the running block */

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
	static constexpr int R = std::is_same<Use, matrix_b>::value ? K : M;   /* stored rows */
	static constexpr int C = std::is_same<Use, matrix_a>::value ? K : N;   /* stored columns */
	static constexpr int num_elements = R * C;
	T x[R * C];                    /* x[r * C + c]: the tile, row-major, whatever Layout */
};

static inline float cudasim_f(float v) { return v; }
static inline float cudasim_f(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float cudasim_f(__half v) { return __half2float(v); }

template <typename P> static inline void cudasim_check(const P *p, unsigned ldm, const char *what)
{
	cudasim_syncwarp(0xffffffffu);         /* the whole warp, together */
	if ((uintptr_t)p % 32)
		cudasim_wmma_fault(what);      /* pointers must be 256-bit aligned */
	if (ldm % (16 / sizeof(P)))
		cudasim_wmma_fault(what);      /* ldm: a multiple of 16 bytes */
}

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v)
{
	cudasim_syncwarp(0xffffffffu);
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

/* matrix_a / matrix_b with their layout in the type */
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm)
{
	static_assert(!std::is_void<L>::value, "matrix_a/matrix_b fragments carry their layout");
	cudasim_check(p, ldm, "wmma::load_matrix_sync");
	typedef fragment<Use, M, N, K, T, L> F;
	for (int r = 0; r < F::R; r++)
		for (int c = 0; c < F::C; c++)
			f.x[r * F::C + c] = std::is_same<L, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

/* accumulators: the layout is an argument */
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l)
{
	cudasim_check(p, ldm, "wmma::load_matrix_sync");
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++)
			f.x[r * N + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l)
{
	cudasim_check(p, ldm, "wmma::store_matrix_sync");
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++)
			(l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[r * N + c];
}

/* d = a b + c, products and sums in fp32 */
template <int M, int N, int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
			    const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c)
{
	static_assert(M * N <= 256, "cudasim_warp_scratch holds 256 floats");
	cudasim_syncwarp(0xffffffffu);
	/* every lane holds the same operands, so lane 0 computes for the warp (32x less work) */
	float *out = cudasim_warp_scratch();
	if (cudasim_lane_id() == 0)
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				float s = c.x[i * N + j];
				for (int k = 0; k < K; k++)
					s += cudasim_f(a.x[i * K + k]) * cudasim_f(b.x[k * N + j]);
				out[i * N + j] = s;
			}
	cudasim_syncwarp(0xffffffffu);
	for (int i = 0; i < M * N; i++)
		d.x[i] = out[i];
	cudasim_syncwarp(0xffffffffu);         /* all copied before lane 0's next product */
}
} // namespace wmma
} // namespace nvcuda
#endif
