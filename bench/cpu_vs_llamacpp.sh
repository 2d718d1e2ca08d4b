#!/usr/bin/env bash
# bench/cpu_vs_llamacpp.sh — ringlm's cpu backend beside llama.cpp on the same GGUF files:
# prefill of a 128-token prompt and batch-1 decode (llama-bench pp128 / tg64 against
# `ringlm bench model --prompt 128`), plus ringlm's batch-8 decode, at each thread count.
# Runs are interleaved (ringlm, llama.cpp, ringlm, ...) and each figure is the best of ROUNDS,
# so that a noisy shared machine shows in both columns alike.
#
# llama.cpp is not part of ringlm: build it yourself outside the repository and point
# LLAMA_BENCH at its llama-bench binary.
#
#   LLAMA_BENCH=/path/to/llama-bench bench/cpu_vs_llamacpp.sh model1.gguf [model2.gguf ...]
#   env: THREADS="1 2" ROUNDS=3 ISA=avx2 (ringlm's kernels for a lesser ISA than the CPU's best,
#   `bench model --isa`; llama.cpp runs as it was built, so say so beside such a table)
#   DEPTH=512: decode from that many tokens of context (`bench model --depth`, llama-bench -d;
#   both keep a half KV cache by default); unset, ringlm decodes from 16 and llama.cpp from 0
#   LLAMA_BATCHED=/path/to/llama-batched-bench: also llama.cpp's own batch-1 and batch-8 decode
#   (`-npl 1,8`: one and eight parallel sequences, each 16 tokens after a 16-token prompt, or
#   after DEPTH), beside ringlm's batch 8 over batch 1
# Prints a markdown table; writes bench/out/cpu_vs_llamacpp.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary (llama.cpp, built outside the repository)}"
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-3}
[ $# -ge 1 ] || { echo "usage: LLAMA_BENCH=... $0 model.gguf ..." >&2; exit 2; }
[ -x build/ringlm ] || { echo "build ringlm first (make)" >&2; exit 1; }
mkdir -p bench/out
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for m in "$@"; do
	for t in $THREADS; do
		for r in $(seq "$ROUNDS"); do
			# batch 64 is not in the table: --max-batch 8 (minutes on a 1B file)
			j=$(build/ringlm bench model --model "$m" --threads "$t" --prompt 128 --max-batch 8 ${ISA:+--isa "$ISA"} ${DEPTH:+--depth "$DEPTH"} --json)
			echo "ringlm	$m	$t	$j" >> "$raw"
			l=$("$LLAMA_BENCH" -m "$m" -p 128 -n 64 -r 1 -t "$t" ${DEPTH:+-d "$DEPTH"} -o csv 2>/dev/null)
			echo "llama	$m	$t	$(echo "$l" | tr '\n' '|')" >> "$raw"
			if [ -n "${LLAMA_BATCHED:-}" ]; then
				# room for all 8 sequences' prompts and tokens
				l=$("$LLAMA_BATCHED" -m "$m" -c $((8 * (${DEPTH:-16} + 16))) -npp "${DEPTH:-16}" -ntg 16 -npl 1,8 -t "$t" \
					--output-format jsonl 2>/dev/null)
				echo "batched	$m	$t	$(echo "$l" | grep '^{' | tr '\n' '|')" >> "$raw"
			fi
		done
	done
done
python3 - "$raw" <<'EOF'
import csv, io, json, os, sys
best = {}
def keep(k, v):
    best[k] = max(best.get(k, 0.0), v)
for line in open(sys.argv[1]):
    who, model, t, rest = line.rstrip("\n").split("\t", 3)
    key = (os.path.basename(model), int(t))
    if who == "ringlm":
        j = json.loads(rest)
        keep(key + ("r_pp",), j["prefill_tok_s"])
        keep(key + ("r_tg",), j["decode_tok_s"]["1"])
        keep(key + ("r_tg8",), j["decode_tok_s"]["8"])
        best[key + ("rss",)] = j["peak_rss_mb"]; best[key + ("file",)] = j["file_mb"]
        best[key + ("kv",)] = j["kv_mb"]; best[key + ("isa",)] = j["isa"]; best[key + ("w",)] = j["weights"]
        keep(key + ("r_gbs",), j["decode_b1_gbs"]); keep(key + ("stream",), j["stream_gbs"])
    elif who == "batched":
        for r in rest.split("|"):
            if r.strip():
                j = json.loads(r)
                keep(key + ("l_b%d" % j["pl"],), j["speed_tg"])
    else:
        for row in csv.DictReader(io.StringIO(rest.replace("|", "\n"))):
            if int(row["n_prompt"]) == 128 and int(row["n_gen"]) == 0:
                keep(key + ("l_pp",), float(row["avg_ts"]))
            if int(row["n_prompt"]) == 0 and int(row["n_gen"]) == 64:
                keep(key + ("l_tg",), float(row["avg_ts"]))
keys = sorted({k[:2] for k in best})
cols = ["model", "threads", "isa", "pp128 ringlm", "pp128 llama.cpp", "pp ratio", "tg ringlm", "tg llama.cpp",
        "tg ratio", "decode b8 ringlm", "b8 / b1", "b1 GB/s", "stream GB/s", "of stream", "peak RSS MB", "file MB", "KV pool MB"]
batched = any(k[2] == "l_b8" for k in best)
if batched:
    cols += ["llama.cpp batched b1", "llama.cpp batched b8", "llama.cpp b8 / b1"]
out = open("bench/out/cpu_vs_llamacpp.csv", "w")
w = csv.writer(out)
w.writerow(cols)
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for k in keys:
    g = lambda f: best.get(k + (f,), 0.0)
    ratio = lambda a, b: "%.2f" % (g(a) / g(b) if g(b) else 0)
    row = [k[0], k[1], g("isa"), "%.1f" % g("r_pp"), "%.1f" % g("l_pp"), ratio("r_pp", "l_pp"),
           "%.1f" % g("r_tg"), "%.1f" % g("l_tg"), ratio("r_tg", "l_tg"), "%.1f" % g("r_tg8"), ratio("r_tg8", "r_tg"),
           "%.2f" % g("r_gbs"), "%.2f" % g("stream"), ratio("r_gbs", "stream"),
           "%.0f" % g("rss"), "%.0f" % g("file"), "%.0f" % g("kv")]
    if batched:
        row += ["%.1f" % g("l_b1"), "%.1f" % g("l_b8"), ratio("l_b8", "l_b1")]
    w.writerow(row)
    print("| " + " | ".join(str(x) for x in row) + " |")
EOF
