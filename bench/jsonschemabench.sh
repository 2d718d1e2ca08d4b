#!/usr/bin/env bash
# bench/jsonschemabench.sh — structured output's coverage on JSONSchemaBench (guidance-ai/
# jsonschemabench, its data/ folder: 9,558 real-world schemas in ten sets), set by set, beside
# llguidance: which schemas ringlm compiles (as the runtime does, `ringlm bench schemas`), with
# random answers from each validated by python's jsonschema (bench/schema_suite_check.py), and
# which llguidance 1.9.1 compiles (its PyPI wheel, pinned by sha256, in a venv in the cache: an
# outside reference, not a dependency; `LLMatcher.validate_grammar` in its default mode).
#   bench/jsonschemabench.sh DATA_DIR [WALKS]   (DATA_DIR: the checkout's data/; default 4 walks)
# The benchmark is not in the repository: fetch it beside the project. Prints the table; writes
# bench/out/jsb/SET.jsonl (ringlm's per-schema verdicts), SET.json, llg-SET.json,
# bench/out/jsb/table.md, and gap.md: every schema llguidance compiles and ringlm refuses, with
# ringlm's reason, and the reasons counted.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bench/jsonschemabench.sh DATA_DIR [WALKS]}
walks=${2:-4}
LLG=llguidance-1.9.1-cp39-abi3-manylinux_2_31_x86_64.whl
LLG_SHA=dfac6021d9c4c5ef16b3a1d336c05ca5e8208ff30dec29d1c63ebcafbee3a346
venv=${RINGLM_CACHE:-$HOME/.cache/ringlm}/llguidance-1.9.1
[ -x build/ringlm ] || { echo "build ringlm first (make)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import llguidance' 2>/dev/null; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps "llguidance==1.9.1" --only-binary :all: -d "$tmp" >/dev/null ||
    { echo "could not fetch llguidance 1.9.1 from PyPI (offline?)" >&2; exit 1; }
  got=$(sha256sum "$tmp/$LLG" | cut -d' ' -f1)
  [ "$got" = "$LLG_SHA" ] || { echo "$LLG has sha256 $got, expected $LLG_SHA; not using it" >&2; exit 1; }
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "$tmp/$LLG"
fi
out=bench/out/jsb
mkdir -p "$out"
printf '| set | schemas | llguidance compiles | ringlm compiles | ringlm refuses by name / by size | answers valid (jsonschema) | compile p50 / p99 ms |\n|---|--:|--:|--:|--:|--:|--:|\n' > "$out/table.md"
for dir in "$data"/*/; do
  set=$(basename "$dir")
  build/ringlm bench schemas "$dir" --walks "$walks" --out "$out/$set.jsonl" > /dev/null
  python3 bench/schema_suite_check.py "$out/$set.jsonl" --json "$out/$set.json" > /dev/null || true
  "$venv/bin/python" - "$dir" "$out/llg-$set.json" <<'EOF'
import json, os, sys
from llguidance import LLMatcher, grammar_from
d, res = sys.argv[1], {}
for f in sorted(os.listdir(d)):
    if not f.endswith(".json"):
        continue
    try:
        text = open(os.path.join(d, f), encoding="utf-8").read()
        json.loads(text)
        res[f] = LLMatcher.validate_grammar(grammar_from("json_schema", text))
    except Exception as e:          # not JSON, or the library's own exception: not compiled
        res[f] = "error: %s" % e
json.dump(res, open(sys.argv[2], "w"), indent=0)
EOF
  python3 - "$set" "$out" <<'EOF' >> "$out/table.md"
import json, sys
s, out = sys.argv[1], sys.argv[2]
llg = json.load(open(f"{out}/llg-{s}.json"))
st = json.load(open(f"{out}/{s}.json"))
c = st["status"]
print(f"| {s} | {len(llg)} | {sum(v == '' for v in llg.values())} | {c.get('compiled', 0)} | "
      f"{c.get('refused', 0) + c.get('failed', 0)} / {c.get('too_large', 0)} | "
      f"{st['answers'] - st['answers_invalid']} of {st['answers']} | "
      f"{st['compile_ms_p50']:.1f} / {st['compile_ms_p99']:.0f} |")
EOF
  tail -1 "$out/table.md"
done
cat "$out/table.md"
python3 - "$out" <<'EOF' > "$out/gap.md"
import collections, glob, json, os, re, sys
out = sys.argv[1]
rows, count = [], collections.Counter()
for path in sorted(glob.glob(f"{out}/llg-*.json")):
    s = os.path.basename(path)[4:-5]
    llg = json.load(open(path))
    for line in open(f"{out}/{s}.jsonl"):
        r = json.loads(line)
        if r["status"] != "compiled" and llg.get(r["file"]) == "":
            why = r.get("reason", "")
            rows.append(f"| {s} | {r['file']} | {why[:160].replace('|', '/')} |")
            count[re.sub(r"\d+", "N", why.split(": ")[-1])[:100]] += 1
print(f"# Schemas llguidance compiles and ringlm refuses: {len(rows)}\n\n| count | ringlm's reason |\n|--:|---|")
for k, n in count.most_common():
    print(f"| {n} | {k.replace('|', '/')} |")
print("\n| set | schema | reason |\n|---|---|---|")
print("\n".join(rows))
EOF
head -30 "$out/gap.md"
