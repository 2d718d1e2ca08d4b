/* cuda_runtime.h (cudasim) — see cuda_runtime_api.h. */
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "cudasim_device.h"
#endif
