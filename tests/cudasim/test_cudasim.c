/* test_cudasim.c — checks the CPU emulator itself (tests/cudasim): that it catches what it
 * claims to catch (a missing barrier shows up as wrong results, divergent barriers, a barrier
 * after exits, shuffles naming exited lanes, host pointers handed to kernels, copies leaving
 * their allocation, too much dynamic shared memory, synchronising during capture, misaligned
 * vector loads), that async work is deferred until the host waits, and that cublasGemmEx
 * follows cuBLAS's column-major semantics for every transpose and type pair. Without this,
 * a pass of tests/gpu on the emulator would mean little.
 * Tests: tests/cudasim (the emulator itself).
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include "tests/rl_test.h"

void cudasim_reset(void);
void st_publish(int *out, int blocks, int barrier);
void st_divergent(int *out);
void st_exit_then_barrier(int *out);
void st_warp_sum(float *out, int leave);
void st_pair_load(float *out, const uint16_t *in, int first);
void st_big_smem(int *out, size_t smem);
int st_allow_big_smem(int bytes);
void st_wmma(float *c, const uint16_t *a, const uint16_t *b, int first);

/* Runs the queue and returns the launch's fate, then clears a sticky error for the next test. */
static cudaError_t settle(void)
{
	cudaError_t e = cudaGetLastError();
	cudaError_t s = cudaDeviceSynchronize();
	cudasim_reset();
	return e != cudaSuccess ? e : s;
}

static void test_missing_barrier_gives_wrong_results(void)
{
	int *d, h[128];
	REQUIRE(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
	for (int barrier = 1; barrier >= 0; barrier--) {
		st_publish(d, 2, barrier);
		REQUIRE(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
		int wrong = 0;
		for (int i = 0; i < 128; i++)
			wrong += h[i] != 42;
		if (barrier)
			CHECKF(wrong == 0, "%d wrong with the barrier", wrong);
		else   /* block 1 runs its threads in reverse: readers before the writer */
			CHECKF(wrong > 0, "a missing barrier went unnoticed");
	}
	cudaFree(d);
	CHECK(settle() == cudaSuccess);
}

static void test_barrier_faults(void)
{
	int *d;
	REQUIRE(cudaMalloc((void **)&d, 256) == cudaSuccess);
	st_divergent(d);
	CHECK(settle() == cudaErrorLaunchFailure);
	st_exit_then_barrier(d);
	CHECK(settle() == cudaErrorLaunchFailure);
	cudaFree(d);
}

static void test_shuffles(void)
{
	float *d, h = 0;
	REQUIRE(cudaMalloc((void **)&d, 4) == cudaSuccess);
	st_warp_sum(d, 0);
	REQUIRE(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
	CHECK(h == 496.0f);                        /* 0 + 1 + ... + 31 */
	st_warp_sum(d, 1);                         /* lane 5 exited: a full mask names it */
	CHECK(settle() == cudaErrorLaunchFailure);
	cudaFree(d);
}

static void test_pointer_and_copy_checks(void)
{
	int host[64];
	st_publish(host, 1, 1);                    /* a host pointer handed to a kernel */
	CHECK(settle() == cudaErrorInvalidValue);
	int *d;
	REQUIRE(cudaMalloc((void **)&d, 64) == cudaSuccess);
	CHECK(cudaMemcpy(d, host, 65, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  /* past the end */
	CHECK(cudaMemcpy(host, d, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  /* kind swapped */
	CHECK(cudaMemcpy(d, host, 64, cudaMemcpyHostToDevice) == cudaSuccess);
	/* fresh device memory reads as 0xff bytes (NaN), never as zeros */
	int *e;
	REQUIRE(cudaMalloc((void **)&e, 64) == cudaSuccess);
	CHECK(cudaMemcpy(host, e, 64, cudaMemcpyDeviceToHost) == cudaSuccess && host[0] == -1);
	cudaFree(d);
	cudaFree(e);
	settle();
}

static void test_dynamic_smem_limit(void)
{
	int *d, h[32];
	REQUIRE(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
	st_big_smem(d, 64 << 10);                  /* over 48 KiB without the opt-in */
	CHECK(settle() == cudaErrorInvalidConfiguration);
	CHECK(st_allow_big_smem(64 << 10) == 0);
	st_big_smem(d, 64 << 10);
	CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
	CHECK(h[0] == 31 && h[31] == 0);
	cudaFree(d);
	settle();
}

static void test_deferred_work_and_events(void)
{
	cudaStream_t st;
	cudaEvent_t ev;
	REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
	REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
	int *pin, *d, back = 0;
	REQUIRE(cudaMallocHost((void **)&pin, 4) == cudaSuccess);
	REQUIRE(cudaMalloc((void **)&d, 4) == cudaSuccess);
	*pin = 1;
	CHECK(cudaMemcpyAsync(d, pin, 4, cudaMemcpyHostToDevice, st) == cudaSuccess);
	CHECK(cudaEventRecord(ev, st) == cudaSuccess);
	*pin = 2;                                  /* reused before the copy ran: a host bug */
	CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
	CHECK(cudaEventQuery(ev) == cudaSuccess);
	CHECK(cudaMemcpy(&back, d, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
	CHECK(back == 2);                          /* the copy read the buffer when it ran */

	/* capture: a synchronising call inside fails the capture */
	cudaGraph_t g;
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
	CHECK(cudaStreamSynchronize(st) == cudaErrorStreamCaptureUnsupported);
	CHECK(cudaStreamEndCapture(st, &g) == cudaErrorStreamCaptureInvalidated);
	/* a clean capture replays its copy with the source read at replay */
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
	CHECK(cudaMemcpyAsync(d, pin, 4, cudaMemcpyHostToDevice, st) == cudaSuccess);
	CHECK(cudaStreamEndCapture(st, &g) == cudaSuccess);
	cudaGraphExec_t x;
	REQUIRE(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
	*pin = 7;
	CHECK(cudaGraphLaunch(x, st) == cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess);
	CHECK(cudaMemcpy(&back, d, 4, cudaMemcpyDeviceToHost) == cudaSuccess && back == 7);
	cudaGraphExecDestroy(x);
	cudaGraphDestroy(g);
	cudaEventDestroy(ev);
	cudaStreamDestroy(st);
	cudaFreeHost(pin);
	cudaFree(d);
	settle();
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* C = alpha op(A) op(B) + beta C, column-major, against a plain triple loop. */
static void test_gemm_semantics(void)
{
	cublasHandle_t h;
	REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
	enum { M = 5, N = 3, K = 7, LD = 9 };
	float A[LD * LD], B[LD * LD], C[LD * LD], R[LD * LD];
	uint16_t Ab[LD * LD], Bb[LD * LD];
	for (int i = 0; i < LD * LD; i++) {
		Ab[i] = to_bf16((float)((i * 7) % 11) - 5.0f);
		Bb[i] = to_bf16((float)((i * 5) % 13) - 6.0f);
		A[i] = from_bf16(Ab[i]);
		B[i] = from_bf16(Bb[i]);
		C[i] = (float)(i % 4);
	}
	void *dA, *dB, *dC;
	REQUIRE(cudaMalloc(&dA, sizeof Ab) == cudaSuccess && cudaMalloc(&dB, sizeof Bb) == cudaSuccess &&
		cudaMalloc(&dC, sizeof C) == cudaSuccess);
	cudaMemcpy(dA, Ab, sizeof Ab, cudaMemcpyHostToDevice);
	cudaMemcpy(dB, Bb, sizeof Bb, cudaMemcpyHostToDevice);
	const float alpha = 0.5f, beta = 2.0f;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice);
			CHECK(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, M, N, K,
					   &alpha, dA, CUDA_R_16BF, LD, dB, CUDA_R_16BF, LD, &beta, dC, CUDA_R_32F,
					   LD, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
			cudaMemcpy(R, dC, sizeof R, cudaMemcpyDeviceToHost);
			int bad = 0;
			for (int j = 0; j < N; j++)
				for (int i = 0; i < M; i++) {
					float s = 0;
					for (int l = 0; l < K; l++)
						s += (ta ? A[l + i * LD] : A[i + l * LD]) * (tb ? B[j + l * LD] : B[l + j * LD]);
					bad += fabsf(R[i + j * LD] - (alpha * s + beta * C[i + j * LD])) > 1e-4f;
				}
			for (int j = N; j < LD; j++)       /* columns past n untouched */
				bad += R[j * LD] != C[j * LD];
			CHECKF(!bad, "transa %d transb %d: %d wrong", ta, tb, bad);
		}
	/* cuBLAS's argument checks: lda < k for op T, ldc < m */
	CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, dA, CUDA_R_16BF, K - 1, dB, CUDA_R_16BF,
			   LD, &beta, dC, CUDA_R_32F, LD, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
	CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dA, CUDA_R_16BF, LD, dB, CUDA_R_16BF,
			   LD, &beta, dC, CUDA_R_32F, M - 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
	CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dA, CUDA_R_16BF, LD, C, CUDA_R_16BF,
			   LD, &beta, dC, CUDA_R_32F, LD, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
	cudaFree(dA); cudaFree(dB); cudaFree(dC);
	cublasDestroy(h);
	settle();
}

/* WMMA: a 16x16x16 product equals the plain one (A row-major, B column-major), and a pointer
 * that is not 256-bit aligned fails the launch, as CUDA requires. */
static void test_wmma(void)
{
	uint16_t A[16 * 17], B[16 * 16];
	float Af[16 * 17], Bf[16 * 16], C[16 * 16];
	for (int i = 0; i < 16 * 17; i++) {
		A[i] = to_bf16((float)((i * 7) % 9) - 4.0f);
		Af[i] = from_bf16(A[i]);
	}
	for (int i = 0; i < 16 * 16; i++) {
		B[i] = to_bf16((float)((i * 5) % 7) - 3.0f);
		Bf[i] = from_bf16(B[i]);
	}
	void *dA, *dB, *dC;
	REQUIRE(cudaMalloc(&dA, sizeof A) == cudaSuccess && cudaMalloc(&dB, sizeof B) == cudaSuccess &&
		cudaMalloc(&dC, sizeof C) == cudaSuccess);
	cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
	cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
	st_wmma(dC, dA, dB, 0);
	REQUIRE(cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost) == cudaSuccess);
	int bad = 0;
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float s = 0;
			for (int k = 0; k < 16; k++)
				s += Af[i * 16 + k] * Bf[j * 16 + k];     /* B column-major: B(k, j) at j*16 + k */
			bad += C[i * 16 + j] != s;
		}
	CHECKF(!bad, "%d of 256 wrong", bad);
	st_wmma(dC, dA, dB, 1);
	CHECK(settle() == cudaErrorLaunchFailure);
	cudaFree(dA); cudaFree(dB); cudaFree(dC);
}

/* A misaligned 4-byte bf16-pair load: UBSan (built into the emulator's kernels) aborts, as a
 * GPU raises a misaligned-address error. Run in a child. */
static void test_misaligned_load(void)
{
	uint16_t *in;
	float *out;
	REQUIRE(cudaMalloc((void **)&in, 64) == cudaSuccess && cudaMalloc((void **)&out, 4) == cudaSuccess);
	st_pair_load(out, in, 2);                  /* aligned: fine */
	CHECK(settle() == cudaSuccess);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 2);
		st_pair_load(out, in, 1);
		cudaDeviceSynchronize();
		_exit(0);
	}
	int st = 0;
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECKF(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "a misaligned load went unnoticed");
	cudaFree(in); cudaFree(out);
}

int main(void)
{
	RUN(test_missing_barrier_gives_wrong_results);
	RUN(test_barrier_faults);
	RUN(test_shuffles);
	RUN(test_pointer_and_copy_checks);
	RUN(test_dynamic_smem_limit);
	RUN(test_deferred_work_and_events);
	RUN(test_gemm_semantics);
	RUN(test_wmma);
	RUN(test_misaligned_load);
	TEST_MAIN_END();
}
