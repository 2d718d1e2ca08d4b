#!/bin/sh
# test_bench_gpu_cudasim — `ringlm bench gpu` run end to end on the CPU emulator at a tiny size,
# so the benchmark a GPU session depends on is known to run (every phase: copy, decode,
# prefill, graph vs eager, chunked vs unchunked ITL; and the decode phase with --deterministic)
# and to print well-formed JSON before device time is spent on it. The times are meaningless here and are not checked; the kernel
# counts are the graphs' own.
# Installed by the Makefile as build/tests/test_bench_gpu_cudasim.
# Tests: bench/bench_gpu.c, runtime/cuda/cuda_bench.c (on cudasim).
here=$(dirname "$0")
out=$(RINGLM_CUDA_LIB="$here/../cudasim/librlcuda.so" "$here/../ringlm" bench gpu --shape tiny --ctx 40 \
      --reps 2 --prompt 64 --chunk 32 --streams 3 --max-batch 8 --itl-steps 4 --copy-mb 16 --json 2>&1)
rc=$?
ok=1
[ $rc -eq 0 ] || { echo "  bench gpu exited with $rc: $out" | tail -3; ok=0; }
for key in '"device":"cudasim' '"decode":[{"batch":1,' '{"batch":8,' '"prefill":[{"tokens":64,' \
           '"graph_launch_us":' '"chunked_p50_ms":' '"unchunked_p99_ms":' '"steps":{"graph":' '"flashinfer":null'; do
  case $out in *"$key"*) ;; *) echo "  missing $key in: $out"; ok=0 ;; esac
done
case $out in *:nan*|*:-nan*|*:inf*|*:-inf*) echo "  non-finite value in: $out"; ok=0 ;; esac
# decode steps replay graphs: each states its kernel count (the tiny shape's 5 layers launch
# at least 9 kernels each: norms, GEMMs, RoPE+KV, attention, SwiGLU)
for k in $(echo "$out" | sed 's/"prefill".*//' | grep -o '"kernels":[0-9]*' | cut -d: -f2) none; do
  [ "$k" = none ] && break
  [ "$k" -ge 45 ] || { echo "  a decode step's kernel count is $k: $out"; ok=0; }
done
echo "$out" | sed 's/"prefill".*//' | grep -q '"kernels":' || { echo "  no kernel count in: $out"; ok=0; }
# --deterministic (issue 51): the decode phase on the batch-invariant kernels, from their own
# graphs (a kernel count, not "eager"), the JSON saying which mode ran
det=$(RINGLM_CUDA_LIB="$here/../cudasim/librlcuda.so" "$here/../ringlm" bench gpu --shape tiny --ctx 40 \
      --reps 2 --max-batch 8 --copy-mb 16 --decode-only --deterministic --json 2>&1) ||
  { echo "  bench gpu --deterministic failed: $det" | tail -3; ok=0; }
for key in '"deterministic":1,' '"decode":[{"batch":1,' '{"batch":8,'; do
  case $det in *"$key"*) ;; *) echo "  missing $key in: $det"; ok=0 ;; esac
done
for k in $(echo "$det" | sed 's/"prefill".*//' | grep -o '"kernels":[0-9]*' | cut -d: -f2) none; do
  [ "$k" = none ] && break
  [ "$k" -ge 45 ] || { echo "  a deterministic decode step's kernel count is $k: $det"; ok=0; }
done
if [ $ok -eq 1 ]; then echo "PASS bench_gpu_on_emulator"; echo "1 passed, 0 failed, 0 skipped"; exit 0; fi
echo "FAIL bench_gpu_on_emulator"; echo "0 passed, 1 failed, 0 skipped"; exit 1
