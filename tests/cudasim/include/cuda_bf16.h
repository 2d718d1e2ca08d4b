/* cuda_bf16.h (cudasim) — bf16 types and conversions for kernels compiled for the emulator;
 * defined in cudasim_device.h. */
#include "cuda_runtime_api.h"
#include "cudasim_device.h"
