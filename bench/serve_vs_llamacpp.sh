#!/usr/bin/env bash
# bench/serve_vs_llamacpp.sh — ringlm and llama.cpp's llama-server under the same open-loop load,
# as users meet them: both OpenAI-compatible over HTTP, driven by the `openai` Python package
# (bench/serve_load.py). ringlm is `ringlmd --model M` at its defaults behind `ringlm-http`;
# llama.cpp is `llama-server -m M` at its defaults except `-np 8 -c 16384` (8 slots of 2,048
# tokens) and `-t` = all cores. Each run starts a fresh server, waits until it answers /health
# (no warm-up request: the first user's wait is measured), sends the load, stops the server.
#
# Load: Poisson arrivals at R req/s for DURATION s, seeded so both engines get the same
# schedule and prompts; a quarter ask to summarize a ~1,000-token text (each a different
# text), the rest are short chat questions; streamed chat completions, temperature 0,
# max_tokens 64, no retries, a TIMEOUT per request. Reported per engine, model, rate and round:
# TTFT p50/p99, inter-token gap p50/p99/max, output tokens/s, requests ok / refused (HTTP status)
# / lost; goodput: the highest rate at which every round kept TTFT p99 <= TTFT_SLO and
# inter-token p99 <= ITL_SLO and served >= 99% of requests. BURST=N adds, per round, N requests
# at random times within BURST_S seconds: served, refused (by status) and lost, with the same
# percentiles over the streams admitted.
#
# llama.cpp is not part of ringlm: build it yourself outside the repository and point
# LLAMA_SERVER at its llama-server binary. The driver needs `openai` (python3 -m pip install openai).
#
#   LLAMA_SERVER=/path/to/llama-server bench/serve_vs_llamacpp.sh model1.gguf [model2.gguf ...]
#   env: RATES="0.25 0.5 1 2 4" (req/s; RATES= runs bursts only) DURATION=60 ROUNDS=2 (round 1
#   runs ringlm first, round 2 llama-server first, and so on) SEED=1 (arrivals and prompts:
#   the same for every engine and round)
#   BURST=400 BURST_S=4: also a burst per round
#   RINGLMD_ARGS="--max-batch-tokens 512": added to ringlmd's command line
#   LLAMA_SERVER_ARGS="...": added to llama-server's (a later -t replaces the script's)
#   RINGLM_BUILD=build: where ringlmd and ringlm-http are (make build/ringlmd build/ringlm-http)
#   ENGINES="ringlm llama": which to run (ENGINES=ringlm needs no LLAMA_SERVER)
#   TIMEOUT=120 (s, per request) TTFT_SLO=2 (s) ITL_SLO=0.1 (s) READY_S=300 (s to start a server)
#   Quick check: DURATION=10 RATES=1 ROUNDS=1
# Prints markdown tables; writes bench/out/serve_vs_llamacpp.csv and .json (every run's
# percentiles), and under bench/out/serve_vs_llamacpp/ (emptied at start) each run's requests (NAME.json, with
# every chunk's time), the servers' logs (NAME.log) and ringlmd's `ringlm stats --json` at
# the end of each of its runs (NAME.stats.json).
# The client shares the machine with the server: on a small machine its own CPU time shows in
# both columns (serve_load warns when it sent a request late; each run's JSON has the driver's
# CPU seconds). llama.cpp's threads wait for each other spinning, so with -t = every core it
# slows sharply when anything else wants a core (the client, another job): on a busy or
# 2-core machine, LLAMA_SERVER_ARGS="-t N-1" and RINGLMD_ARGS="--threads N-1" show the other side.
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINES=${ENGINES:-"ringlm llama"}
RATES=${RATES-"0.25 0.5 1 2 4"}
DURATION=${DURATION:-60}
ROUNDS=${ROUNDS:-2}
SEED=${SEED:-1}
BURST=${BURST:-0}
BURST_S=${BURST_S:-4}
TIMEOUT=${TIMEOUT:-120}
TTFT_SLO=${TTFT_SLO:-2}
ITL_SLO=${ITL_SLO:-0.1}
READY_S=${READY_S:-300}
RINGLM_BUILD=${RINGLM_BUILD:-build}
RINGLMD_ARGS=${RINGLMD_ARGS:-}
LLAMA_SERVER_ARGS=${LLAMA_SERVER_ARGS:-}
NCORES=$(nproc)
[ $# -ge 1 ] || { echo "usage: LLAMA_SERVER=/path/to/llama-server $0 model.gguf ..." >&2; exit 2; }
case " $ENGINES " in *" llama "*)
	: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary (llama.cpp, built outside the repository), or ENGINES=ringlm}"
	[ -x "$LLAMA_SERVER" ] || { echo "LLAMA_SERVER=$LLAMA_SERVER is not an executable" >&2; exit 1; };;
esac
case " $ENGINES " in *" ringlm "*)
	for b in ringlmd ringlm-http; do
		[ -x "$RINGLM_BUILD/$b" ] || { echo "no $RINGLM_BUILD/$b: make build/ringlmd build/ringlm-http (or set RINGLM_BUILD)" >&2; exit 1; }
	done;;
esac
python3 -c 'import openai' 2>/dev/null || { echo "the driver needs the openai package: python3 -m pip install openai" >&2; exit 1; }
for m in "$@"; do [ -f "$m" ] || { echo "no model file $m" >&2; exit 1; }; done
[ -n "$RATES" ] || [ "$BURST" -gt 0 ] || { echo "nothing to run: RATES is empty and BURST is 0" >&2; exit 2; }

OUT=bench/out/serve_vs_llamacpp
rm -rf "$OUT"
mkdir -p "$OUT"
SOCKDIR=${RINGLM_SOCKET_DIR:-/tmp/ringlm-$(id -u)}
PIDS=()
cleanup() {
	local p
	[ ${#PIDS[@]} -gt 0 ] || return 0
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# stop one server process: TERM, then KILL after 15 s
stop() {
	local p=$1
	if kill "$p" 2>/dev/null; then
		for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	else
		echo "note: server process $p had already exited (see its log)" >&2
	fi
	wait "$p" 2>/dev/null || true
	local keep=() q
	for q in "${PIDS[@]}"; do [ "$q" = "$p" ] || keep+=("$q"); done
	PIDS=("${keep[@]}")    # ended: never signalled again (its id may be reused)
}

# wait until URL/health answers 200 while every pid in $@ lives; 0 ready, 1 not
ready() {
	local url=$1 t0=$SECONDS p
	shift
	while [ $((SECONDS - t0)) -lt "$READY_S" ]; do
		curl -sf -m 2 -o /dev/null "$url/health" && return 0
		for p in "$@"; do kill -0 "$p" 2>/dev/null || return 1; done
		sleep 0.2
	done
	return 1
}

SERVER_PIDS=()
SERVER_CMD=
# start_ringlm MODEL PORT LOG NAME: ringlmd (its defaults + RINGLMD_ARGS) and ringlm-http
start_ringlm() {
	local m=$1 port=$2 log=$3 sock="servebench-$$-$4" t0 hp
	# shellcheck disable=SC2086
	"$RINGLM_BUILD/ringlmd" --model "$m" --socket "$sock" $RINGLMD_ARGS > "$log" 2>&1 &
	local dp=$!
	PIDS+=("$dp")
	SERVER_PIDS=("$dp")
	SERVER_CMD="ringlmd --model $m --socket $sock $RINGLMD_ARGS; ringlm-http --socket $sock --port $port"
	SOCK=$sock
	# ringlm-http needs a runtime that takes clients: start it until it stays up
	t0=$SECONDS
	while [ $((SECONDS - t0)) -lt "$READY_S" ]; do
		kill -0 "$dp" 2>/dev/null || return 1
		if [ -S "$SOCKDIR/$sock" ]; then
			"$RINGLM_BUILD/ringlm-http" --socket "$sock" --port "$port" >> "$log" 2>&1 &
			hp=$!
			sleep 0.3
			if kill -0 "$hp" 2>/dev/null; then
				PIDS+=("$hp")
				SERVER_PIDS=("$hp" "$dp")   # stopped in this order
				return 0
			fi
			wait "$hp" 2>/dev/null || true
		fi
		sleep 0.2
	done
	return 1
}

# start_llama MODEL PORT LOG
start_llama() {
	local m=$1 port=$2 log=$3
	# shellcheck disable=SC2086
	"$LLAMA_SERVER" -m "$m" --host 127.0.0.1 --port "$port" -np 8 -c 16384 -t "$NCORES" $LLAMA_SERVER_ARGS > "$log" 2>&1 &
	PIDS+=("$!")
	SERVER_PIDS=("$!")
	SERVER_CMD="llama-server -m $m --port $port -np 8 -c 16384 -t $NCORES $LLAMA_SERVER_ARGS"
}

loads=()
for r in $RATES; do loads+=("rate:$r"); done
[ "$BURST" -gt 0 ] && loads+=("burst:$BURST")
read -ra engs <<< "$ENGINES"
nruns=$(( $# * ROUNDS * ${#loads[@]} * ${#engs[@]} ))
echo "serve_vs_llamacpp: $nruns runs (${#loads[@]} loads x $ROUNDS rounds x engines: $ENGINES x $# models)," \
	"each ~$DURATION s of arrivals plus start and drain; $NCORES cores" >&2
[ -n "${LLAMA_SERVER:-}" ] && echo "llama-server: $("$LLAMA_SERVER" --version 2>&1 | grep -m1 -i version || echo '?')" >&2

for m in "$@"; do
	mb=$(basename "$m" .gguf)
	for round in $(seq "$ROUNDS"); do
		order=("${engs[@]}")
		if [ $((round % 2)) -eq 0 ]; then    # even rounds: the other engine first
			order=()
			for e in "${engs[@]}"; do order=("$e" "${order[@]}"); done
		fi
		for load in "${loads[@]}"; do
			for e in "${order[@]}"; do
				name="$e-$mb-${load/:/}-r$round"
				log="$OUT/$name.log"
				port=$(free_port)
				if [ "$e" = ringlm ]; then
					start_ringlm "$m" "$port" "$log" "$round-${load/:/}" || {
						echo "ringlm did not start; $log:" >&2; tail -5 "$log" >&2; exit 1; }
				else
					start_llama "$m" "$port" "$log"
				fi
				ready "http://127.0.0.1:$port" "${SERVER_PIDS[@]}" || {
					echo "$e did not become ready in $READY_S s; $log:" >&2; tail -5 "$log" >&2; exit 1; }
				if [ "${load%%:*}" = rate ]; then
					args=(--rate "${load#*:}" --duration "$DURATION")
				else
					args=(--burst "${load#*:}" --burst-s "$BURST_S")
				fi
				extra=$(python3 -c 'import json, sys; print(json.dumps({"cmd": sys.argv[1], "cores": int(sys.argv[2])}))' \
					"$SERVER_CMD" "$NCORES")
				python3 bench/serve_load.py run --url "http://127.0.0.1:$port/v1" --engine "$e" --model-file "$m" \
					"${args[@]}" --round "$round" --seed "$SEED" --timeout "$TIMEOUT" --out "$OUT/$name.json" \
					--extra "$extra" || echo "serve_load failed for $name" >&2
				if [ "$e" = ringlm ] && [ -x "$RINGLM_BUILD/ringlm" ]; then
					"$RINGLM_BUILD/ringlm" stats --socket "$SOCK" --json > "$OUT/$name.stats.json" 2>/dev/null || true
				fi
				for p in "${SERVER_PIDS[@]}"; do stop "$p"; done
				if [ "$e" = ringlm ] && [ -S "$SOCKDIR/$SOCK" ]; then rm -f "$SOCKDIR/$SOCK"; fi   # left by a KILL
			done
		done
	done
done
shopt -s nullglob
runs=()
for f in "$OUT"/*.json; do case $f in *.stats.json) ;; *) runs+=("$f");; esac; done
[ ${#runs[@]} -gt 0 ] || { echo "no run finished" >&2; exit 1; }
python3 bench/serve_load.py report "${runs[@]}" --ttft-slo "$TTFT_SLO" --itl-slo "$ITL_SLO" \
	--csv bench/out/serve_vs_llamacpp.csv --json bench/out/serve_vs_llamacpp.json
