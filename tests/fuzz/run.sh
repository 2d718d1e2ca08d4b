#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR SECONDS [RINGLM] — for each fuzzer BUILD_DIR/fuzz_NAME: replay its
# regression inputs (tests/fuzz/regress/NAME/, findings kept as tests), then fuzz for SECONDS
# on a copy of its seed corpus (tests/fuzz/corpus/NAME/, never modified) plus the model-file
# seeds written here (no model files are committed): GGUF by RINGLM mkmodel (default
# build/ringlm), safetensors by tests/fuzz/make_seeds.py. A crash leaves the
# input in BUILD_DIR/artifacts/NAME/ and makes this script exit non-zero.
set -u
build=${1:-build-fuzz}; secs=${2:-10}; ringlm=${3:-build/ringlm}
gen=$build/gen-seeds
rm -rf "$gen"; mkdir -p "$gen/gguf" "$gen/safetensors"
for d in f32 f16; do
  "$ringlm" mkmodel --shape custom --dim 8 --hidden 16 --layers 1 --heads 2 --kv-heads 1 \
    --vocab 300 --ctx 16 --dtype $d --seed 1 --out "$gen/gguf/tiny-$d.gguf" >/dev/null ||
    { echo "fuzz: cannot write the GGUF seeds with $ringlm"; exit 1; }
done
# rows of 32 weights: the q8_0 seed really holds Q8_0 blocks
"$ringlm" mkmodel --shape custom --dim 32 --hidden 32 --layers 1 --heads 2 --kv-heads 1 \
  --vocab 300 --ctx 16 --dtype q8_0 --seed 1 --out "$gen/gguf/tiny-q8_0.gguf" >/dev/null ||
  { echo "fuzz: cannot write the GGUF seeds with $ringlm"; exit 1; }
python3 tests/fuzz/make_seeds.py "$gen/safetensors" || { echo "fuzz: cannot write the safetensors seeds"; exit 1; }
python3 tests/fuzz/make_tok_seeds.py "$gen/tok" || { echo "fuzz: cannot write the tokenizer seeds"; exit 1; }
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
fail=0
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=${bin##*/fuzz_}
  seeds=tests/fuzz/corpus/$name regress=tests/fuzz/regress/$name
  work=$build/corpus/$name art=$build/artifacts/$name/
  rm -rf "$work"; mkdir -p "$work" "$art"
  [ -d "$seeds" ] && cp "$seeds"/* "$work"/ 2>/dev/null
  [ -d "$gen/$name" ] && cp "$gen/$name"/* "$work"/
  # the real 512-token vocabulary as one more tokenizer seed, built here from ../shared (model
  # files are never copied into the repository): u16 blob length, the blob, then text
  if [ "$name" = tok ] && [ -f ../shared/models/tok512.bin ]; then
    python3 - ../shared/models/tok512.bin "$work/tok512-story" <<'PY'
import struct, sys
blob = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(struct.pack('<H', len(blob)) + blob + 'Once upon a time, a little girl said "hi" \U0001F642\n'.encode())
PY
  fi
  if [ -d "$regress" ] && ls "$regress"/* >/dev/null 2>&1; then
    if ! "$bin" -runs=0 "$regress"/* >"$build/$name.regress.log" 2>&1; then
      echo "fuzz $name: a regression input fails (see $build/$name.regress.log)"; fail=1; continue
    fi
  fi
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$art" -print_final_stats=1 "$work" >"$build/$name.log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$name.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$build/$name.log" | tail -1)
  if [ $rc -ne 0 ]; then
    echo "fuzz $name: FAILED after ${runs:-?} runs ($cov); input in $art, log $build/$name.log"
    grep -m3 -E 'ERROR|runtime error|assertion' "$build/$name.log"
    fail=1
  else
    echo "fuzz $name: ok, ${runs:-?} runs in ${secs}s ($cov, corpus $(ls "$work" | wc -l))"
  fi
done
exit $fail
