#!/bin/sh
# test_gpu_cudasim — tests/gpu/test_gpu run against the CUDA backend built for the CPU emulator
# (tests/cudasim): the kernels, host code, graphs and cuBLAS calls, checked without a GPU.
# Installed by the Makefile as build/tests/test_gpu_cudasim. A pass here is not a GPU pass.
# Tests: kernels/*.cu, runtime/cuda (on cudasim).
here=$(dirname "$0")
RINGLM_CUDA_LIB="$here/../cudasim/librlcuda.so" exec "$here/test_gpu" "$@"
