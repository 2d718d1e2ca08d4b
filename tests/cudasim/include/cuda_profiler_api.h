/* cuda_profiler_api.h — cudasim's stand-in for the toolkit header: there is no profiler to
 * start on the CPU emulator, so both calls succeed and do nothing. */
#ifndef CUDASIM_CUDA_PROFILER_API_H
#define CUDASIM_CUDA_PROFILER_API_H
#include "cuda_runtime_api.h"
static inline cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
static inline cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
#endif
