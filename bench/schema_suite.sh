#!/usr/bin/env bash
# bench/schema_suite.sh — structured output's conformance on the official JSON-Schema-Test-Suite
# (draft 2020-12, the copy python-jsonschema's source distribution carries, pinned by version and
# sha256, kept in the cache outside the repository): which schemas compile and which are refused
# by name, the suite's invalid instances the automaton accepts (must be none), and random answers
# from each compiled schema validated by python's jsonschema (must all validate).
#   bench/schema_suite.sh [WALKS]        (default 20 answers per schema; env RINGLM_CACHE)
# Prints the table and the summary; writes bench/out/schemas.jsonl and bench/out/schemas.json.
set -euo pipefail
cd "$(dirname "$0")/.."
VER=4.23.0
SHA=d71497fef26351a33265337fa77ffeb82423f3ea21283cd9467bb03999266bc4
cache=${RINGLM_CACHE:-$HOME/.cache/ringlm}/schema-suite
suite=$cache/jsonschema-$VER/json/tests/draft2020-12
[ -x build/ringlm ] || { echo "build ringlm first (make)" >&2; exit 1; }
if [ ! -d "$suite" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --no-binary :all: "jsonschema==$VER" -d "$tmp" >/dev/null ||
    { echo "could not fetch jsonschema==$VER's source from PyPI (offline?)" >&2; exit 1; }
  got=$(sha256sum "$tmp/jsonschema-$VER.tar.gz" | cut -d' ' -f1)
  [ "$got" = "$SHA" ] || { echo "jsonschema-$VER.tar.gz has sha256 $got, expected $SHA; not using it" >&2; exit 1; }
  tar xzf "$tmp/jsonschema-$VER.tar.gz" -C "$cache" "jsonschema-$VER/json/tests/draft2020-12"
fi
mkdir -p bench/out
build/ringlm bench schemas "$suite" --walks "${1:-20}" --out bench/out/schemas.jsonl
python3 bench/schema_suite_check.py bench/out/schemas.jsonl --json bench/out/schemas.json
