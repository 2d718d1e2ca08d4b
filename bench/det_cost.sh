#!/usr/bin/env bash
# bench/det_cost.sh — what the deterministic mode costs on the CPU: `ringlm bench model` with
# and without --deterministic on the same files, interleaved (default, deterministic, default,
# ...), best of ROUNDS each: prefill of a 128-token prompt and decode at batch 1, 8 and 64.
#
#   bench/det_cost.sh model1.gguf [model2.gguf ...]     env: THREADS="1 2" ROUNDS=2
# Prints a markdown table; writes bench/out/det_cost.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-2}
[ $# -ge 1 ] || { echo "usage: $0 model.gguf ..." >&2; exit 2; }
[ -x build/ringlm ] || { echo "build ringlm first (make)" >&2; exit 1; }
mkdir -p bench/out
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for m in "$@"; do
	for t in $THREADS; do
		for r in $(seq "$ROUNDS"); do
			for det in "" --deterministic; do
				j=$(build/ringlm bench model --model "$m" --threads "$t" --prompt 128 $det --json)
				echo "$m	$t	$j" >> "$raw"
			done
		done
	done
done
python3 - "$raw" <<'PY'
import csv, json, os, sys
best = {}
for line in open(sys.argv[1]):
    m, t, j = line.rstrip("\n").split("\t", 2)
    j = json.loads(j)
    k = (os.path.basename(m), int(t), j["deterministic"])
    v = [j["prefill_tok_s"], j["decode_tok_s"]["1"], j["decode_tok_s"]["8"], j["decode_tok_s"]["64"]]
    best[k] = [max(a, b) for a, b in zip(best.get(k, v), v)]
    best[k[:2] + ("isa",)] = j["isa"]
cols = ["model", "threads", "isa"] + ["%s default / deterministic (cost)" % p for p in ("pp128", "b1", "b8", "b64")]
w = csv.writer(open("bench/out/det_cost.csv", "w"))
w.writerow(["model", "threads", "isa", "phase", "default_tok_s", "deterministic_tok_s", "cost_pct"])
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for m, t in sorted({k[:2] for k in best if k[2] in (0, 1)}):
    a, b = best.get((m, t, 0)), best.get((m, t, 1))
    if not a or not b:
        continue
    cells = []
    for i, p in enumerate(("pp128", "b1", "b8", "b64")):
        cost = 100 * (1 - b[i] / a[i]) if a[i] else 0
        cells.append("%.1f / %.1f (%+.0f%%)" % (a[i], b[i], -cost))
        w.writerow([m, t, best[(m, t, "isa")], p, a[i], b[i], "%.1f" % cost])
    print("| %s | %d | %s | %s |" % (m, t, best[(m, t, "isa")], " | ".join(cells)))
PY
