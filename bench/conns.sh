#!/usr/bin/env bash
# bench/conns.sh — how many connections a run costs on each side of aguard:
# those the consumer opens to aguard, and those aguard opens to the agent
# (agentsim counts what it accepts). One aguard build per REF (a git ref,
# or "." for the working tree), each measured fresh, in three traffic shapes:
#
#   back-to-back   STREAMS streams, each starting its next run as soon as one ends
#   bursty         the same, with PAUSE between a stream's runs
#   sparse         one stream, PAUSE between its runs (longer than aguard's
#                  default keep-alive bound: every run finds the agent idle)
#
#   bash bench/conns.sh              # the working tree only
#   bash bench/conns.sh main .       # before (main) and after (the working tree)
#
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit. Writes a Markdown table to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18500}
SIM_PORT=$((BASE_PORT + 1))
AGUARD_PORT=$((BASE_PORT + 2))
ADMIN_PORT=$((BASE_PORT + 3))
STREAMS=${STREAMS:-20}
EVENTS=${EVENTS:-20}       # content events per run (unpaced: a run takes a few ms)
SECONDS_EACH=${SECONDS_EACH:-10}
PAUSE=${PAUSE:-2s}
REFS=("$@")
((${#REFS[@]})) || REFS=(.)

WORK=$(mktemp -d /tmp/aguard-conns.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

build_refs "${REFS[@]}"

# json FILE KEY: the first number under "KEY" in loadgen's JSON.
json() { grep -o "\"$2\": *[0-9]*" "$1" | head -1 | grep -o '[0-9]*$' || true; }
# per N RUNS: N per run, three decimals.
per() { if [[ -n $1 && ${2:-0} -gt 0 ]]; then awk -v n="$1" -v r="$2" 'BEGIN { printf "%.3f", n / r }'; else echo "—"; fi; }
# row FILE REF SHAPE: one table row.
row() {
	local runs consumer agent errs
	runs=$(json "$1" runs)
	consumer=$(json "$1" consumerConnections)
	agent=$(json "$1" connections)
	errs=$(tr -d '\n' <"$1" | grep -o '"errors": *{[^}]*}' | sed 's/"errors": *//; s/[{}"]//g; s/  */ /g')
	echo "| $2 | $3 | ${runs:-—} | ${consumer:-—} | ${agent:-—} | $(per "$consumer" "$runs") | $(per "$agent" "$runs") | ${errs:-none} |"
}

echo "| aguard | traffic | runs | consumer connections | agent connections | per run: consumer | per run: agent | errors |"
echo "|---|---|---|---|---|---|---|---|"
for ref in "${REFS[@]}"; do
	name=$(refname "$ref")
	for shape in back-to-back bursty sparse; do
		streams=$STREAMS pause=$PAUSE
		[[ $shape == back-to-back ]] && pause=0s
		[[ $shape == sparse ]] && streams=1
		"$WORK/agentsim" -listen "127.0.0.1:$SIM_PORT" >"$WORK/agentsim.log" 2>&1 &
		sim=$!
		PIDS+=("$sim")
		"$WORK/aguard-$name" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$AGUARD_PORT" \
			--admin-listen "127.0.0.1:$ADMIN_PORT" --drain-timeout 1s >"$WORK/aguard.log" 2>&1 &
		ag=$!
		PIDS+=("$ag")
		await "$SIM_PORT"
		await "$AGUARD_PORT"
		"$WORK/loadgen" -json -url "http://127.0.0.1:$AGUARD_PORT/agent?events=$EVENTS&rate=0" -streams "$streams" \
			-ramp 1s -warmup 0s -duration "${SECONDS_EACH}s" -pause "$pause" \
			-agent-stats "http://127.0.0.1:$SIM_PORT/stats" >"$WORK/$name-$shape.json" ||
			die "loadgen failed against aguard at $ref ($shape)"
		stop "$ag" "$sim"
		PIDS=()
		row "$WORK/$name-$shape.json" "$ref" "$shape, $streams streams, $pause between runs"
	done
done
echo
echo "(runs of $EVENTS unpaced content events, ${SECONDS_EACH}s window after a 1 s ramp; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
