#!/usr/bin/env bash
# tests/run.sh BUILD_DIR [FILTER] — runs every test binary in BUILD_DIR/tests, adds up the
# PASS/FAIL/SKIP lines and prints the closing line "N passed, N failed, N skipped".
# A binary that dies without reporting counts as one failure. Run from the repo root.
set -u
build=${1:-build}; filter=${2:-}
pass=0; fail=0; skip=0; failed=()
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ -n "$filter" ] && ! echo "$name" | grep -qE "$filter" && continue
  echo "== $name"
  out=$(mktemp)
  timeout "${RL_TEST_TIMEOUT:-900}" "$t" >"$out" 2>&1; rc=$?
  grep -v -E "^[0-9]+ passed, [0-9]+ failed" "$out"
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name: exited with status $rc"; fi
  [ "$f" -gt 0 ] && failed+=("$name")
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s))
  rm -f "$out"
done
[ ${#failed[@]} -gt 0 ] && echo "failed binaries: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
