#!/usr/bin/env bash
# bench/gpu_session.sh — everything a lent GPU machine should run for the CUDA backend, in one
# call (device time is scarce): build with nvcc, the GPU tests (tests/gpu on the real device),
# then `ringlm bench gpu` at the default llama3-8b shape, table and JSON, then `ringlm bench serve`
# through ringlmd --backend cuda (fixed budgets against auto). Output goes to $OUT
# (the device tool's folder) or bench/out/. Model files for the stories260K tests travel in a
# folder ignored by git (e.g. .models/, listed in .git/info/exclude), named by RINGLM_MODELS.
#   RINGLM_MODELS=$PWD/.models bash bench/gpu_session.sh
set -uo pipefail
out=${OUT:-bench/out}; mkdir -p "$out" bench/out
{
  date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  git rev-parse HEAD 2>/dev/null || true
} > "$out/device.txt" 2>&1
make -j"$(nproc)" all > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
RL_TEST_TIMEOUT=300 bash tests/run.sh build "^test_gpu$" 2>&1 | tee "$out/tests.log" | tail -25
if [ -n "${RINGLM_MODELS:-}" ] && [ -f "$RINGLM_MODELS/stories260K.bin" ]; then
  # the whole stack on the device: runtime loop, streaming upload, graphs, device sampling
  ./build/ringlm generate --model "$RINGLM_MODELS/stories260K.bin" --tokenizer "$RINGLM_MODELS/tok512.bin" \
    --backend cuda --prompt "Once upon a time" -n 200 --stats 2>&1 | tee "$out/generate.txt"
fi
./build/ringlm bench gpu 2>&1 | tee "$out/bench_gpu.txt"
cp bench/out/gpu.json "$out/" 2>/dev/null || true
# the whole serving path on the device: client processes, rings, scheduler, cuda steps; fixed
# budgets against the automatic one (SERVE_SECONDS per run; 0 skips)
if [ "${SERVE_SECONDS:-20}" -gt 0 ]; then
  ./build/ringlm bench serve --users 32 --duration "${SERVE_SECONDS:-20}" --prompt 500-4000 --output 128 \
    --itl-target-us 30000 --sweep max-batch-tokens=256,1024,4096,auto --out "$out/serve" \
    -- --backend cuda --model synthetic:llama3-8b 2>&1 | tail -8 | tee "$out/serve.txt"
fi
