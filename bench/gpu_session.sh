#!/usr/bin/env bash
# bench/gpu_session.sh [STAGE...] — what a lent GPU machine runs for the CUDA backend, in one
# device call: device time is scarce (about 15 minutes a session), so a whole run stays under
# 9 minutes on an H100 and one rerun still fits. Nothing may pass by skipping: FlashInfer is
# required at build time, every GPU test runs with RL_GPU_REQUIRED=1 (a skip is a failure), and
# the benchmarks refuse to run without a device.
#
# What the GPU machine cannot fetch travels with the tree in .gpu/ (git ignores it; fill it with
# bench/gpu_carry.sh before the call): FlashInfer's headers (.gpu/cache, found through
# RINGLM_CACHE), the models (.gpu/models, RINGLM_MODELS) and the peer script (.gpu/peers,
# RINGLM_PEERS). Each default can be overridden by its variable.
#
# Stages, in this order when none is named:
#   quick    the go/no-go, about 3-4 minutes, whose result decides whether the rest is worth
#            running; the script stops at its first failure, leaving time to fix and rerun:
#              build    make with FLASHINFER=1 (no FlashInfer headers: the build stops)
#              check    librlcuda.so has the FlashInfer entry points and no undefined symbol,
#                       and a device is there (`ringlm bench gpu --check --require-flashinfer`)
#              fitest   only the FlashInfer tests (test_fi_decode, test_fi_prefill, test_model_fi,
#                       test_mixed_equals_alone_fi) and test_attention_long
#              fibench  one `bench gpu --cuda-attn flashinfer` row: decode at batch 256; every
#                       decode step must have run FlashInfer from its graph
#   test     every GPU test
#   gen      a stories260K generation through the whole stack
#   gpu      `ringlm bench gpu` at the llama3-8b shape (table and JSON) with the upload rate of
#            a generated 1b-shape bf16 file; then again with --cuda-attn flashinfer
#   peer     the PyTorch peer on the same shapes
#   profile  ncu's per-kernel table (name, launches, time per step, DRAM bandwidth) for decode
#            at batch 1 and 64, a 2048-token prefill and a mixed step ($out/kernels.md, raw CSV
#            beside it); PROFILE_ATTN=ringlm profiles the in-house decode attention instead
#   serve    `ringlm bench serve` through ringlmd --backend cuda, fixed budgets against auto
#            (SERVE_SECONDS per run, default 20), and auto with --cuda-attn flashinfer
#   table    one markdown table of ringlm (in-house and FlashInfer) beside the peer
#   det      (only when named) the deterministic mode (issue 51): its GPU tests (gemm_det,
#            attention_det, model_det: a row's bits alike whatever shares its step, on the
#            device's tensor cores), then `ringlm bench gpu --deterministic` at llama3-8b, to set
#            beside the gpu stage's default run ($out/bench_det.txt, gpu_det.json)
# Output goes to $OUT (the device tool's folder) or bench/out/; each stage prints its time,
# and $out/stages.txt lists every stage's result and seconds.
#   bash bench/gpu_carry.sh && <device call>: bash bench/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}; mkdir -p "$out" bench/out
carry=${RINGLM_CARRY:-$PWD/.gpu}
export RINGLM_CACHE=${RINGLM_CACHE:-$carry/cache}
export RINGLM_MODELS=${RINGLM_MODELS:-$carry/models}
peers=${RINGLM_PEERS:-$carry/peers}
lib=${RINGLM_CUDA_LIB:-build/librlcuda.so}
stages=${*:-quick test gen gpu peer profile serve table}
{
  date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 || true
  git rev-parse HEAD 2>/dev/null || true
} > "$out/device.txt" 2>&1

die() { echo "gpu_session: $*" >&2; exit 1; }

# the FlashInfer test selection and the one-row benchmark shared by quick and its parts
fi_tests="fi_decode,fi_prefill,model_fi,mixed_equals_alone_fi,attention_long"

# run_tests FILTER_ONLY: test_gpu with RL_GPU_REQUIRED=1; fails on any failure or skip, or on
# no test run at all
run_tests() {
  local log=$1; shift
  RL_GPU_REQUIRED=1 RL_TEST_TIMEOUT=300 RL_TEST_ONLY="${1:-}" bash tests/run.sh build "^test_gpu$" 2>&1 | tee "$log" | tail -40
  local last; last=$(grep -E "^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" "$log" | tail -1)
  echo "$last" | grep -E "^[1-9][0-9]* passed, 0 failed, 0 skipped$" >/dev/null ||
    die "GPU tests did not all pass (${last:-no closing line}); see $log"
}

stage() {
  case $1 in
  quick)   stage build && stage check && stage fitest && stage fibench ;;
  build)   make -j"$(nproc)" FLASHINFER=1 all > "$out/build.log" 2>&1 ||
             { tail -30 "$out/build.log"; die "the build failed (FLASHINFER=1; RINGLM_CACHE=$RINGLM_CACHE)"; } ;;
  check)   [ -f "$lib" ] || die "$lib is not built (no nvcc, or CUDA=0)"
           nm -D --defined-only "$lib" | awk '{print $NF}' | grep -x rl_cuda_flashinfer_version >/dev/null ||
             die "$lib lacks FlashInfer (no rl_cuda_flashinfer_version): it was built without FlashInfer's headers; run bench/gpu_carry.sh and build with FLASHINFER=1"
           for s in rl_cuda_fi_decode_sizes rl_cuda_fi_decode_plan rl_cuda_fi_decode_run \
                    rl_cuda_fi_prefill_sizes rl_cuda_fi_prefill_plan rl_cuda_fi_prefill_run; do
             nm --defined-only "$lib" | awk '{print $NF}' | grep -x "$s" >/dev/null || die "$lib lacks FlashInfer's $s"
           done
           local undef; undef=$(ldd -r "$lib" 2>&1 | grep -E "undefined symbol|not found")
           [ -z "$undef" ] || die "$lib has unresolved symbols or libraries: $undef"
           ./build/ringlm bench gpu --check --require-flashinfer 2>&1 | tee "$out/check.txt"
           [ "${PIPESTATUS[0]}" -eq 0 ] || die "no usable device, or no FlashInfer in $lib (above)" ;;
  fitest)  run_tests "$out/tests_fi.log" "$fi_tests" ;;
  fibench) ./build/ringlm bench gpu --require-device --require-flashinfer --cuda-attn flashinfer --batches 256 \
             --decode-only --json > "$out/bench_fi256.json" 2> "$out/bench_fi256.err" ||
             { cat "$out/bench_fi256.err"; die "bench gpu --cuda-attn flashinfer at batch 256 failed"; }
           python3 - "$out/bench_fi256.json" <<'EOF' || die "FlashInfer did not run every decode step from its graph"
import json, sys
r = json.load(open(sys.argv[1]))
s, d = r["steps"], r["decode"][0]
print("decode batch %d with FlashInfer %s: %.3f ms (%.0f%% of roofline); steps: FlashInfer %d graph, %d eager, "
      "in-house %d graph, %d eager" % (d["batch"], r["flashinfer"], d["step_ms"], 100 * d["efficiency"],
      s["fi_graph"], s["fi_eager"], s["graph"], s["eager"]))
sys.exit(0 if s["fi_graph"] > 0 and s["fi_eager"] == 0 and s["graph"] + s["eager"] == 0 else 1)
EOF
           ;;
  test)    run_tests "$out/tests.log" "" ;;
  det)     run_tests "$out/tests_det.log" "gemm_det,attention_det,model_det" &&
           ./build/ringlm bench gpu --require-device --deterministic 2>&1 | tee "$out/bench_det.txt" &&
           { cp bench/out/gpu.json "$out/gpu_det.json" 2>/dev/null || true; } ;;
  gen)     if [ -f "$RINGLM_MODELS/stories260K.bin" ]; then
             ./build/ringlm generate --model "$RINGLM_MODELS/stories260K.bin" --tokenizer "$RINGLM_MODELS/tok512.bin" \
               --backend cuda --prompt "Once upon a time" -n 200 --stats 2>&1 | tee "$out/generate.txt"
             [ "${PIPESTATUS[0]}" -eq 0 ] || die "generation through --backend cuda failed"
           else echo "skipped: $RINGLM_MODELS has no stories260K.bin (bench/gpu_carry.sh copies it)"; fi ;;
  gpu)     # a 1b-shape bf16 file for the upload figure (file -> pinned staging -> device)
           [ -f /tmp/m1b.gguf ] || ./build/ringlm mkmodel --shape 1b --dtype bf16 --out /tmp/m1b.gguf > /dev/null
           ./build/ringlm bench gpu --require-device --upload /tmp/m1b.gguf 2>&1 | tee "$out/bench_gpu.txt"
           cp bench/out/gpu.json "$out/" 2>/dev/null || true
           if ./build/ringlm bench gpu --require-device --cuda-attn flashinfer 2>&1 | tee "$out/bench_gpu_fi.txt"; then
             cp bench/out/gpu.json "$out/gpu_fi.json" 2>/dev/null || true
           fi ;;
  peer)    if [ -f "$peers/torch_llama_step.py" ]; then
             python3 "$peers/torch_llama_step.py" --json > "$out/peer.json" 2> "$out/peer.err" && cat "$out/peer.json" ||
               tail -5 "$out/peer.err"
           else echo "skipped: no $peers/torch_llama_step.py (bench/gpu_carry.sh copies ../shared/peers)"; fi ;;
  profile) if ! command -v ncu >/dev/null; then echo "skipped: no ncu on the PATH"; return 0; fi
           local attn=${PROFILE_ATTN:-flashinfer} p
           for p in decode1 decode64 prefill2048 mixed; do
             ncu --profile-from-start off --clock-control none --csv --page raw --print-units base \
               --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
               ./build/ringlm bench gpu --require-device --cuda-attn "$attn" --profile "$p" \
               > "$out/ncu_$p.csv" 2> "$out/ncu_$p.err" || { echo "ncu $p failed:"; tail -5 "$out/ncu_$p.err"; }
           done
           python3 bench/ncu_table.py "$out" | tee "$out/kernels.md" ;;
  serve)   ./build/ringlm bench serve --users 32 --duration "${SERVE_SECONDS:-20}" --prompt 500-4000 --output 128 \
             --itl-target-us 30000 --sweep max-batch-tokens=256,1024,4096,auto --out "$out/serve" \
             -- --backend cuda --model synthetic:llama3-8b 2>&1 | tail -8 | tee "$out/serve.txt"
           ./build/ringlm bench serve --users 32 --duration "${SERVE_SECONDS:-20}" --prompt 500-4000 --output 128 \
             --itl-target-us 30000 --sweep max-batch-tokens=auto --out "$out/serve_fi" \
             -- --backend cuda --model synthetic:llama3-8b --cuda-attn flashinfer 2>&1 | tail -4 | tee "$out/serve_fi.txt" ;;
  table)   python3 bench/gpu_table.py "$out" | tee "$out/summary.md" ;;
  *)       die "unknown stage '$1' (quick build check fitest fibench test gen gpu peer profile serve table)" ;;
  esac
}

: > "$out/stages.txt"
for st in $stages; do
  echo "== $st"
  t0=$SECONDS
  ( stage "$st" ); rc=$?
  echo "$st: $([ $rc -eq 0 ] && echo ok || echo FAILED) in $((SECONDS - t0)) s" | tee -a "$out/stages.txt"
  # the go/no-go decides whether the rest is worth the device's minutes
  [ $rc -eq 0 ] || [ "$st" != quick ] || { echo "gpu_session: quick failed; fix it and rerun before the rest" >&2; exit 1; }
  [ $rc -eq 0 ] || failed=1
done
[ -z "${failed:-}" ]
