#!/usr/bin/env bash
# bench/budget_case.sh MODEL [RINGLMD ARGS...] — the automatic budget's hard case on real
# compute: one client decodes DECODE tokens (default 300); OFFSET seconds later (0.5) a second
# client sends a LONG-token prompt (900) for one token. Per budget (BUDGETS, default
# "4096 64 128 auto"; auto uses --itl-target-us TARGET_US, default 20000) it starts ringlmd on
# MODEL with --threads 1 --cpu 1 (clients on cpu 0) and the extra RINGLMD ARGS, and prints the
# decoder's ITL p50/p99/max and the long prompt's TTFT, plus the fitted step model and
# calibration `ringlm stats --json` shows after the run. ROUNDS (default 1) repeats each row.
# Writes bench/out/budget_case.csv. Timings only: nothing passes or fails on them.
#   bash bench/budget_case.sh /tmp/m110q8.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/budget_case.sh MODEL [RINGLMD ARGS...]}; shift
decode=${DECODE:-300}; long=${LONG:-900}; offset=${OFFSET:-0.5}; target=${TARGET_US:-20000}
budgets=${BUDGETS:-4096 64 128 auto}; rounds=${ROUNDS:-1}
b=build; out=bench/out/budget_case.csv; mkdir -p bench/out
sock=budget-case-$$
echo "budget,round,itl_p50_ms,itl_p99_ms,itl_max_ms,long_ttft_ms,step_model" > "$out"
printf '%-8s %-5s %12s %12s %12s %14s\n' budget round "ITL p50 ms" "ITL p99 ms" "ITL max ms" "long TTFT ms"
prompt=$(seq -s, 1 "$long" | awk -F, -v OFS=, '{for (i = 1; i <= NF; i++) $i = 3 + (i * 7919) % 500; print}')
for bud in $budgets; do
  for r in $(seq "$rounds"); do
    args=(--model "$model" --socket "$sock" --threads 1 --cpu 1 --max-batch-tokens "$bud" --quiet)
    [ "$bud" = auto ] && args+=(--itl-target-us "$target")
    "$b/ringlmd" "${args[@]}" "$@" 2> "bench/out/budget_case_rt.err" & rt=$!
    for i in $(seq 600); do "$b/ringlm" stats --socket "$sock" >/dev/null 2>&1 && break; sleep 0.05; done
    taskset -c 0 "$b/ringlm" generate --socket "$sock" --prompt-ids 1,403,407,261,378 -n "$decode" --ids --stats \
      > /dev/null 2> "bench/out/budget_case_a.json" & a=$!
    sleep "$offset"
    taskset -c 0 "$b/ringlm" generate --socket "$sock" --prompt-ids "$prompt" -n 1 --ids --stats \
      > /dev/null 2> "bench/out/budget_case_b.json"
    wait $a
    model_js=$("$b/ringlm" stats --socket "$sock" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d.get("step_model")).replace(",", ";"))')
    kill $rt; wait $rt 2>/dev/null || true
    python3 - "$bud" "$r" "$model_js" "$out" <<'EOF'
import json, sys
a = json.loads(open("bench/out/budget_case_a.json").read().strip().splitlines()[-1])
b = json.loads(open("bench/out/budget_case_b.json").read().strip().splitlines()[-1])
row = (sys.argv[1], sys.argv[2], a["itl_us_p50"] / 1e3, a["itl_us_p99"] / 1e3, a["itl_us_max"] / 1e3, b["ttft_us"] / 1e3)
print("%-8s %-5s %12.1f %12.1f %12.1f %14.1f" % row)
print("         step model: %s" % sys.argv[3].replace(";", ","))
open(sys.argv[4], "a").write("%s,%s,%.2f,%.2f,%.2f,%.2f,%s\n" % (row + (sys.argv[3],)))
EOF
  done
done
