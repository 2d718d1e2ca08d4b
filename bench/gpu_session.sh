#!/usr/bin/env bash
# bench/gpu_session.sh [STAGE...] — what a lent GPU machine should run for the CUDA backend,
# in as few device calls as possible (device time is scarce; one call may run 10 minutes):
#   build  make with nvcc (build/librlcuda.so)
#   test   the GPU tests (tests/gpu on the real device)
#   gen    a stories260K generation through the whole stack (needs RINGLM_MODELS)
#   gpu    `ringlm bench gpu` at the default llama3-8b shape, table and JSON, with the upload
#          rate of a generated 1b-shape bf16 file; then again with --cuda-attn flashinfer
#          (when librlcuda.so has it)
#   peer   the PyTorch peer on the same shapes ($RINGLM_PEERS/torch_llama_step.py, default
#          .models/peers: copy ../shared/peers there before the call)
#   serve  `ringlm bench serve` through ringlmd --backend cuda, fixed budgets against auto
#          (SERVE_SECONDS per run, default 20), plus the auto budget with --cuda-attn flashinfer
#   table  one markdown table of ringlm (in-house and FlashInfer attention) beside the peer,
#          from the JSON the stages above wrote ($OUT/summary.md)
# No stage named: all of them, in this order. Output goes to $OUT (the device tool's folder) or
# bench/out/. Model files travel in a folder git ignores (e.g. .models/ listed in
# .git/info/exclude) named by RINGLM_MODELS:
#   RINGLM_MODELS=$PWD/.models bash bench/gpu_session.sh build test gen
set -uo pipefail
out=${OUT:-bench/out}; mkdir -p "$out" bench/out
stages=${*:-build test gen gpu peer serve table}
peers=${RINGLM_PEERS:-.models/peers}
{
  date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  git rev-parse HEAD 2>/dev/null || true
} > "$out/device.txt" 2>&1
for st in $stages; do
  echo "== $st"
  case $st in
  build) make -j"$(nproc)" all > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; } ;;
  test)  RL_TEST_TIMEOUT=300 bash tests/run.sh build "^test_gpu$" 2>&1 | tee "$out/tests.log" | tail -30 ;;
  gen)   if [ -f "${RINGLM_MODELS:-/nonexistent}/stories260K.bin" ]; then
           ./build/ringlm generate --model "$RINGLM_MODELS/stories260K.bin" --tokenizer "$RINGLM_MODELS/tok512.bin" \
             --backend cuda --prompt "Once upon a time" -n 200 --stats 2>&1 | tee "$out/generate.txt"
         else echo "skipped: RINGLM_MODELS has no stories260K.bin"; fi ;;
  gpu)   # a 1b-shape bf16 file for the upload figure (file -> pinned staging -> device)
         [ -f /tmp/m1b.gguf ] || ./build/ringlm mkmodel --shape 1b --dtype bf16 --out /tmp/m1b.gguf > /dev/null
         ./build/ringlm bench gpu --upload /tmp/m1b.gguf 2>&1 | tee "$out/bench_gpu.txt"
         cp bench/out/gpu.json "$out/" 2>/dev/null || true
         if ./build/ringlm bench gpu --cuda-attn flashinfer 2>&1 | tee "$out/bench_gpu_fi.txt"; then
           cp bench/out/gpu.json "$out/gpu_fi.json" 2>/dev/null || true
         fi ;;
  peer)  if [ -f "$peers/torch_llama_step.py" ]; then
           python3 "$peers/torch_llama_step.py" --json > "$out/peer.json" 2> "$out/peer.err" && cat "$out/peer.json" ||
             tail -5 "$out/peer.err"
         else echo "skipped: no $peers/torch_llama_step.py (copy ../shared/peers there)"; fi ;;
  serve) ./build/ringlm bench serve --users 32 --duration "${SERVE_SECONDS:-20}" --prompt 500-4000 --output 128 \
           --itl-target-us 30000 --sweep max-batch-tokens=256,1024,4096,auto --out "$out/serve" \
           -- --backend cuda --model synthetic:llama3-8b 2>&1 | tail -8 | tee "$out/serve.txt"
         ./build/ringlm bench serve --users 32 --duration "${SERVE_SECONDS:-20}" --prompt 500-4000 --output 128 \
           --itl-target-us 30000 --sweep max-batch-tokens=auto --out "$out/serve_fi" \
           -- --backend cuda --model synthetic:llama3-8b --cuda-attn flashinfer 2>&1 | tail -4 | tee "$out/serve_fi.txt" ;;
  table) python3 bench/gpu_table.py "$out" | tee "$out/summary.md" ;;
  *)     echo "unknown stage '$st' (build test gen gpu peer serve table)"; exit 2 ;;
  esac
done
