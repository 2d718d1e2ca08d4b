/* rl_cuda_dtype.h — the storage dtypes of the CUDA backend's weights, activations and KV cache
 * (plain C: the host code, the packer's tests and the kernel launchers share it). Arithmetic is
 * fp32 whatever the storage; the residual stream, norms and logits stay fp32. */
#ifndef RL_CUDA_DTYPE_H
#define RL_CUDA_DTYPE_H

/* bf16: fp32's range, 8 mantissa bits (the default: real checkpoints never overflow it).
 * fp16: 11 mantissa bits, but overflows to inf above 65504. */
enum rl_cuda_dtype { RL_CUDA_BF16 = 0, RL_CUDA_FP16 = 1 };

#endif
