/* library_types.h (cudasim) — data type tags (values as in the CUDA toolkit). */
#ifndef CUDASIM_LIBRARY_TYPES_H
#define CUDASIM_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
	CUDA_R_32F = 0,
	CUDA_R_64F = 1,
	CUDA_R_16F = 2,
	CUDA_R_8I = 3,
	CUDA_R_16BF = 14,
} cudaDataType;
typedef cudaDataType cudaDataType_t;
#endif
