#!/usr/bin/env bash
# bench/profile.sh — profiles aguard's data plane (in-process, via
# bench/cmd/aguardprof) under the load of bench/run.sh and writes the top
# costs to bench/results/<date>-profile.txt.
#
#   bash bench/profile.sh            # KEEP=1 keeps the .pprof files
#
# Four profiles: CPU at the paced load (many streams, few events each),
# CPU unpaced (few streams, as fast as possible), CPU under run.sh's tool-call
# workload with the ledger wired in front of a throwaway redis-server
# (aguardprof -redis; -ledger, in-process only, without redis-server), and
# the heap with idle streams open (plus goroutines and stacks per stream).
# Loopback only; every process started here is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18400}
SIM_PORT=$((BASE_PORT + 1))
AG_PORT=$((BASE_PORT + 3))
REDIS_PORT=$((BASE_PORT + 5))
TOOLS_STREAMS=${TOOLS_STREAMS:-200}
TOOLS_RATE=${TOOLS_RATE:-20}
PACED_STREAMS=${PACED_STREAMS:-1000}
PACED_RATE=${PACED_RATE:-20}
IDLE_STREAMS=${IDLE_STREAMS:-1000}
# bench/results/<date>-profile.txt, or <date>-2-profile.txt … when that day already has one.
if [[ -z ${OUT:-} ]]; then
	DAY=$(date -u +%Y-%m-%d)
	OUT=$ROOT/bench/results/$DAY-profile.txt
	n=2
	while [[ -e $OUT ]]; do
		OUT=$ROOT/bench/results/$DAY-$n-profile.txt
		n=$((n + 1))
	done
fi
WORK=$(mktemp -d /tmp/aguard-prof.XXXXXX)
PIDS=()
# await; profile.sh defines its own log and cleanup below.
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '[profile.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n ${KEEP:-} ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

(cd "$ROOT" && go build -o "$WORK/" ./bench/cmd/agentsim ./bench/cmd/loadgen ./bench/cmd/aguardprof)

"$WORK/agentsim" -listen "127.0.0.1:$SIM_PORT" -idle-hold 5m 2>"$WORK/agentsim.log" &
PIDS+=($!)
await "$SIM_PORT"

LEDGER=(-ledger)
if command -v redis-server >/dev/null; then
	(cd "$WORK" && exec redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --loglevel warning) >"$WORK/redis.log" 2>&1 &
	PIDS+=($!)
	await "$REDIS_PORT"
	LEDGER=(-redis "redis://127.0.0.1:$REDIS_PORT/0")
fi

# profiled NAME LOADGEN-QUERY [AGUARDPROF-FLAGS... --] LOADGEN-ARGS...: one aguardprof, one load, one CPU profile.
profiled() {
	local name=$1 query=$2 flags=()
	shift 2
	if [[ " $* " == *" -- "* ]]; then
		while [[ $1 != -- ]]; do
			flags+=("$1")
			shift
		done
		shift
	fi
	"$WORK/aguardprof" -upstream "http://127.0.0.1:$SIM_PORT" -listen "127.0.0.1:$AG_PORT" -cpuprofile "$WORK/cpu-$name.pprof" "${flags[@]}" 2>"$WORK/aguardprof-$name.log" &
	local pid=$!
	await "$AG_PORT"
	log "$name (load $(cut -d' ' -f1-3 /proc/loadavg))"
	timeout 120 "$WORK/loadgen" -url "http://127.0.0.1:$AG_PORT/agent?$query" -watch "aguard=$pid" "$@" | tee "$WORK/loadgen-$name.txt" >&2
	kill -TERM "$pid"
	wait "$pid" || true
}

profiled paced "events=1000000000&rate=$PACED_RATE" -streams "$PACED_STREAMS" -ramp 2s -warmup 3s -duration 15s
profiled unpaced "events=1000000000&rate=0" -streams 50 -ramp 1s -warmup 2s -duration 8s
profiled tools "events=200&rate=$TOOLS_RATE&tools=2&args=1024&frontend=true" "${LEDGER[@]}" -- \
	-streams "$TOOLS_STREAMS" -ramp 10s -warmup 2s -duration 15s

# Idle: runtime figures before and with the streams open, and a heap profile.
"$WORK/aguardprof" -upstream "http://127.0.0.1:$SIM_PORT" -listen "127.0.0.1:$AG_PORT" -memprofile "$WORK/heap-idle.pprof" 2>"$WORK/aguardprof-idle.log" &
AGPID=$!
await "$AG_PORT"
sleep 1
kill -USR1 "$AGPID"
timeout 120 "$WORK/loadgen" -idle -url "http://127.0.0.1:$AG_PORT/agent?idle=true" -streams "$IDLE_STREAMS" -ramp 2s -settle 2s \
	-hold 3s -ready-file "$WORK/idle.ready" -watch "aguard=$AGPID" >"$WORK/loadgen-idle.txt" &
LG=$!
for _ in $(seq 600); do
	[[ -e $WORK/idle.ready ]] && break
	sleep 0.1
done
kill -USR1 "$AGPID"
wait "$LG"
sleep 0.5
kill -TERM "$AGPID"
wait "$AGPID" || true

{
	echo "# aguard profiles, $(date -u +'%Y-%m-%d %H:%M UTC') ($(cd "$ROOT" && git describe --always --dirty 2>/dev/null)), bash bench/profile.sh"
	for name in paced unpaced tools; do
		echo
		echo "## CPU, $name"
		[[ $name == tools ]] && echo "(aguardprof ${LEDGER[*]}; runs of 200 content events with 2 frontend calls of 1 KiB arguments)"
		echo
		cat "$WORK/loadgen-$name.txt"
		echo
		go tool pprof -top -nodecount 35 "$WORK/aguardprof" "$WORK/cpu-$name.pprof" 2>/dev/null
		echo
		echo "### cumulative"
		go tool pprof -top -cum -nodecount 40 "$WORK/aguardprof" "$WORK/cpu-$name.pprof" 2>/dev/null | tail -n +6
	done
	echo
	echo "## idle streams ($IDLE_STREAMS)"
	echo
	cat "$WORK/loadgen-idle.txt"
	grep '^aguardprof: goroutines' "$WORK/aguardprof-idle.log"
	echo
	go tool pprof -sample_index=inuse_space -top -nodecount 30 "$WORK/aguardprof" "$WORK/heap-idle.pprof" 2>/dev/null
} >"$OUT"
log "wrote $OUT"
