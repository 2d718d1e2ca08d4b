#!/bin/bash
# test_gpu_session — a GPU session cannot pass by skipping, checked without a GPU: the session
# script (bench/gpu_session.sh) refuses a librlcuda.so built without FlashInfer (the emulator's,
# and one nvcc links here with FLASHINFER=0, which must link with -z defs), refuses to go on
# without a device, and fails its test and benchmark stages instead of skipping them; the
# build refuses FLASHINFER=1 without headers; switching FlashInfer rebuilds the objects that
# depend on it. Installed by the Makefile as build/tests/test_gpu_session.
# Tests: bench/gpu_session.sh, Makefile (FLASHINFER, its stamp, -z defs), tests/gpu/test_gpu.c
# (RL_GPU_REQUIRED), runtime/cuda/cuda_bench.c (--check, --require-device).
here=$(cd "$(dirname "$0")" && pwd); b=$(cd "$here/.." && pwd); root=$(cd "$b/.." && pwd)
pass=0; fail=0; skip=0
ok()   { echo "PASS $1"; pass=$((pass+1)); }
bad()  { echo "FAIL $1: $2"; fail=$((fail+1)); }
skp()  { echo "SKIP $1: $2"; skip=$((skip+1)); }
has()  { case $1 in *"$2"*) return 0 ;; esac; return 1; }
dir=$(mktemp -d /tmp/rlgpus-XXXXXX); trap 'rm -rf "$dir"' EXIT
cd "$root"
# the session script drives build/ (its own build); a sanitizer build's tests skip this
if [ "$b" != "$root/build" ]; then
  echo "SKIP gpu_session: runs against the plain build only ($b)"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
export OUT=$dir/out
session() { bash bench/gpu_session.sh "$@" 2>&1; }
nvcc_found() { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }
fi_dir=$(.ci/flashinfer --dir 2>/dev/null)
have_fi_headers() { [ -f "$fi_dir/include/flashinfer/attention/decode.cuh" ]; }

# -- the emulator's library never has FlashInfer: check refuses it by name
if [ -f "$b/cudasim/librlcuda.so" ]; then
  out=$(RINGLM_CUDA_LIB=$b/cudasim/librlcuda.so session check); rc=$?
  if [ $rc -ne 0 ] && has "$out" "lacks FlashInfer"; then ok check_refuses_cudasim_lib; else bad check_refuses_cudasim_lib "rc $rc: $out"; fi
else
  skp check_refuses_cudasim_lib "no $b/cudasim/librlcuda.so (CUDASIM=0?)"
fi

# -- a real nvcc build without FlashInfer links (-z defs: no undefined symbol) and is refused
if nvcc_found; then
  log=$(make -s --no-print-directory BUILD="$dir/nofi" FLASHINFER=0 CUDASIM=0 "$dir/nofi/librlcuda.so" 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ -f "$dir/nofi/librlcuda.so" ] && ! nm -D --defined-only "$dir/nofi/librlcuda.so" | grep -qw rl_cuda_flashinfer_version
  then ok nofi_lib_links_with_z_defs; else bad nofi_lib_links_with_z_defs "rc $rc: $(echo "$log" | tail -5)"; fi
  out=$(RINGLM_CUDA_LIB=$dir/nofi/librlcuda.so session check); rc=$?
  if [ $rc -ne 0 ] && has "$out" "lacks FlashInfer"; then ok check_refuses_nofi_lib; else bad check_refuses_nofi_lib "rc $rc: $out"; fi
  # the link line itself carries -z defs (so the pass above means no symbol was left undefined)
  line=$(make -n --no-print-directory BUILD="$dir/nofi" FLASHINFER=0 CUDASIM=0 -W Makefile "$dir/nofi/librlcuda.so" 2>&1 | grep -- "-shared")
  if has "$line" "-z -Xlinker defs"; then ok cuda_lib_link_has_z_defs; else bad cuda_lib_link_has_z_defs "$line"; fi
  # switching FlashInfer on rebuilds what depends on it (its stamp), with its define
  if have_fi_headers; then
    plan=$(make -n --no-print-directory BUILD="$dir/nofi" FLASHINFER=auto CUDASIM=0 "$dir/nofi/librlcuda.so" 2>&1)
    if has "$plan" "-DRL_HAVE_FLASHINFER=1" && has "$plan" "backend_cuda.c" && has "$plan" "fi_decode.cu" &&
       has "$plan" "fi_prefill.cu"
    then ok flashinfer_switch_rebuilds; else bad flashinfer_switch_rebuilds "$(echo "$plan" | head -5)"; fi
  else
    skp flashinfer_switch_rebuilds "no FlashInfer headers in '$fi_dir' (.ci/flashinfer fetches them)"
  fi
else
  for t in nofi_lib_links_with_z_defs check_refuses_nofi_lib cuda_lib_link_has_z_defs flashinfer_switch_rebuilds; do
    skp $t "no nvcc"
  done
fi

# -- FLASHINFER=1 without headers stops the build with one line that says what to do
out=$(make -n --no-print-directory BUILD="$dir/x" FLASHINFER=1 FLASHINFER_DIR="$dir/none" all 2>&1); rc=$?
if [ $rc -ne 0 ] && has "$out" "FLASHINFER=1 but no FlashInfer headers in '$dir/none'" && has "$out" "RINGLM_CACHE"
then ok build_requires_flashinfer; else bad build_requires_flashinfer "rc $rc: $out"; fi

# -- the build's own library: refused here for want of a device (or of FlashInfer), never passed
if [ -f "$b/librlcuda.so" ]; then
  out=$(session check); rc=$?
  if nm -D --defined-only "$b/librlcuda.so" | grep -qw rl_cuda_flashinfer_version; then
    if [ $rc -ne 0 ] && has "$out" "needs one" && ! has "$out" "lacks"; then ok check_needs_device
    else bad check_needs_device "rc $rc: $out"; fi
  elif [ $rc -ne 0 ] && has "$out" "lacks FlashInfer"; then ok check_needs_device
  else bad check_needs_device "rc $rc: $out"; fi
else
  out=$(session check); rc=$?
  if [ $rc -ne 0 ] && has "$out" "is not built"; then ok check_needs_device; else bad check_needs_device "rc $rc: $out"; fi
fi

# -- without a GPU the test and benchmark stages fail: nothing passes by skipping
if [ -f "$b/librlcuda.so" ] && [ -x "$b/tests/test_gpu" ]; then
  out=$(session fitest); rc=$?
  if [ $rc -ne 0 ] && has "$out" "GPU tests did not all pass" && grep -q "^FAIL test_fi_decode_bf16" "$OUT/tests_fi.log"
  then ok fitest_fails_without_gpu; else bad fitest_fails_without_gpu "rc $rc: $(echo "$out" | tail -3)"; fi
  out=$(session fibench); rc=$?
  if [ $rc -ne 0 ] && has "$out" "this run needs one"; then ok fibench_fails_without_gpu
  else bad fibench_fails_without_gpu "rc $rc: $out"; fi
  # every stage names its result and time in stages.txt, and a failed stage fails the run
  out=$(session check test); rc=$?
  if [ $rc -ne 0 ] && grep -q "^check: FAILED in [0-9]* s" "$OUT/stages.txt" && grep -q "^test: FAILED" "$OUT/stages.txt"
  then ok stages_report_and_fail; else bad stages_report_and_fail "rc $rc: $(cat "$OUT/stages.txt")"; fi
else
  skp fitest_fails_without_gpu "no librlcuda.so in $b"
  skp fibench_fails_without_gpu "no librlcuda.so in $b"
  skp stages_report_and_fail "no librlcuda.so in $b"
fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
