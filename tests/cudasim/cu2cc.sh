#!/bin/sh
# cu2cc.sh IN.cu OUT.cc — turns a CUDA C++ file into plain C++ for the CPU emulator
# (tests/cudasim): a launch `k<<<g, b, smem, st>>>(args)` becomes
# `cudasim::launch(k, "k", cudasim::cfg(g, b, smem, st))(args)` (k may carry template arguments
# without nested <>, e.g. `attn_kernel<T><<<...>>>(`) and a dynamic shared array
# `extern __shared__ [__align__(n)] T name[];` becomes a pointer to the launch's buffer.
# Line numbers are kept (and a #line names the .cu), so diagnostics point at the source.
set -eu
in=$1; out=$2
{
  printf '#line 1 "%s"\n' "$in"
  sed -E \
    -e 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +([A-Za-z_][A-Za-z0-9_]*)\[\];/\2 *\3 = (\2 *)cudasim_dyn_smem();/' \
    -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/cudasim::launch(\1, "\1", cudasim::cfg(\3))(/' \
    "$in"
} > "$out.tmp"
if grep -n '<<<\|extern __shared__' "$out.tmp" >&2; then
  echo "cu2cc.sh: $in: a launch or dynamic shared array above was not rewritten (one launch per line, 'k<<<...>>>(' on that line)" >&2
  rm -f "$out.tmp"; exit 1
fi
mv "$out.tmp" "$out"
