#!/usr/bin/env bash
# bench/presets_vs_llamacpp.sh — every `llama-quantize` preset of a generated shape, written by
# llama.cpp's own quantizer from one F16 `ringlm mkmodel` file, then timed beside llama.cpp by
# bench/cpu_vs_llamacpp.sh (prefill 128, decode b1, ringlm's b8). The files go to the cache
# (~/.cache/ringlm/presets), never into the repository, and are kept for the next run.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin bench/presets_vs_llamacpp.sh [SHAPE] [PRESET ...]
#   SHAPE: 110m (default) or 1b; PRESETs default to all twelve below
#   env: THREADS, ROUNDS as bench/cpu_vs_llamacpp.sh (defaults "1 2" and 2)
# Writes bench/out/presets_SHAPE.csv (cpu_vs_llamacpp.sh's CSV) and prints its table.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BIN:?set LLAMA_BIN to the build/bin folder of llama.cpp (llama-quantize, llama-bench)}"
shape=${1:-110m}; shift || true
presets=${*:-"Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS Q8_0"}
dir=${RINGLM_CACHE:-$HOME/.cache/ringlm}/presets
mkdir -p "$dir"
[ -x build/ringlm ] || { echo "build ringlm first (make)" >&2; exit 1; }
f16=$dir/$shape-f16.gguf
[ -s "$f16" ] || build/ringlm mkmodel --shape "$shape" --dtype f16 --seed 1 --out "$f16" >/dev/null
files=()
for p in $presets; do
	out=$dir/$shape-$p.gguf
	if [ ! -s "$out" ]; then
		LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-quantize" "$f16" "$out.tmp" "$p" >"$dir/$shape-$p.log" 2>&1 ||
			{ echo "llama-quantize $p failed: $dir/$shape-$p.log" >&2; exit 1; }
		mv "$out.tmp" "$out"
	fi
	files+=("$out")
done
export THREADS=${THREADS:-"1 2"} ROUNDS=${ROUNDS:-2}
LD_LIBRARY_PATH=$LLAMA_BIN LLAMA_BENCH=$LLAMA_BIN/llama-bench bench/cpu_vs_llamacpp.sh "${files[@]}"
cp bench/out/cpu_vs_llamacpp.csv "bench/out/presets_$shape.csv"
