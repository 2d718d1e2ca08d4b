#!/usr/bin/env bash
# bench/gpu_carry.sh [DIR] — fills DIR (default .gpu) with what a GPU session needs and the GPU
# machine cannot fetch (it has no network and receives only the working tree):
#   DIR/cache/flashinfer-VER   FlashInfer's headers, as .ci/flashinfer unpacks them; the build
#                              finds them through RINGLM_CACHE=DIR/cache
#   DIR/models                 the shared models (stories260K, its tokenizer, Llama 2's)
#   DIR/peers                  the peer scripts (torch_llama_step.py)
# DIR is kept out of git by .gitignore (/.gpu/) and by .git/info/exclude (added here), so the
# device call can carry it; bench/gpu_session.sh's defaults point at .gpu. Prints DIR's size.
#   RINGLM_SHARED (default ../shared): where models/ and peers/ are read from.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
shared=${RINGLM_SHARED:-../shared}
src=$(.ci/flashinfer)            # fetches into the home cache when missing; prints its folder
mkdir -p "$dir/cache" "$dir/models" "$dir/peers"
rm -rf "$dir/cache/$(basename "$src")"
cp -a "$src" "$dir/cache/"
for f in stories260K.bin stories260K.gguf tok512.bin tokenizer.bin; do
  if [ -f "$shared/models/$f" ]; then cp "$shared/models/$f" "$dir/models/"
  else echo "gpu_carry: $shared/models/$f not found; the stages that need it will say so" >&2; fi
done
if compgen -G "$shared/peers/*" >/dev/null; then cp -a "$shared/peers/." "$dir/peers/"
else echo "gpu_carry: no peers in $shared/peers; the peer stage will be skipped" >&2; fi
ex=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$ex" ]; then
  mkdir -p "$(dirname "$ex")"
  grep -qxF "/$dir/" "$ex" 2>/dev/null || echo "/$dir/" >> "$ex"
fi
# the check the session's build relies on: the headers are where RINGLM_CACHE will point
RINGLM_CACHE="$PWD/$dir/cache" .ci/flashinfer --dir | xargs -I{} test -f {}/include/flashinfer/attention/decode.cuh ||
  { echo "gpu_carry: FlashInfer's headers did not land in $dir/cache" >&2; exit 1; }
du -sh "$dir"
