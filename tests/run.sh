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
  out=$(mktemp); t0=$SECONDS
  timeout "${RL_TEST_TIMEOUT:-900}" "$t" >"$out" 2>&1; rc=$?
  grep -v -E "^[0-9]+ passed, [0-9]+ failed" "$out"
  echo "-- $name: $((SECONDS - t0)) s"
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name: exited with status $rc"; fi
  [ "$f" -gt 0 ] && failed+=("$name")
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s))
  rm -f "$out"
done
# the Python client's and ringlm-http's tests (pytest, against a real ringlmd of this build);
# clients/conftest.py prints
# the same PASS/FAIL/SKIP lines. Only for the plain build: a sanitizer build's library cannot be
# loaded into an uninstrumented python.
if [ -d clients/python/tests ] && [ "$build" = build ] && { [ -z "$filter" ] || echo python | grep -qE "$filter"; } &&
   [ -z "${RL_NO_PYTHON:-}" ]; then
  echo "== python (clients/python/tests, clients/http/tests)"
  py=
  for c in /usr/bin/python3 python3; do
    command -v "$c" >/dev/null && "$c" -c "import pytest" 2>/dev/null && { py=$c; break; }
  done
  out=$(mktemp)
  if [ -z "$py" ]; then
    echo "SKIP python: pytest not installed (apt-get install python3-pytest)" | tee "$out"
    rc=0
  else
    # the openai package that .ci/pylibs fetched (pinned wheels in the user's cache), when it is there
    pylibs=$(bash .ci/pylibs --dir); pp=${PYTHONPATH:-}
    [ -f "$pylibs/.ok" ] && pp="$pylibs${pp:+:$pp}"
    PYTHONPATH="$pp" RINGLM_LIB="$PWD/$build/libringlm.so" timeout "${RL_TEST_TIMEOUT:-900}" \
      "$py" -m pytest -q -p no:cacheprovider clients/python/tests clients/http/tests >"$out" 2>&1; rc=$?
    grep -E "^(PASS|FAIL|SKIP) |Error|error|assert" "$out" | head -60
  fi
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL python: pytest exited with status $rc"; tail -20 "$out"; fi
  [ "$f" -gt 0 ] && failed+=("python")
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s))
  rm -f "$out"
fi
[ ${#failed[@]} -gt 0 ] && echo "failed binaries: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
