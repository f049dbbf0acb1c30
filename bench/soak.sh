#!/usr/bin/env bash
# bench/soak.sh: a bounded soak of aguard with Redis. STREAMS concurrent
# streams of runs that each carry tool calls (frontend calls, so every
# RUN_FINISHED writes its pending calls to Redis), for DURATION seconds.
# Every INTERVAL seconds it samples aguard's resident memory, goroutines, open
# streams and ledger queue; at the end it reports errors and whether memory
# and goroutines came back once the load stopped. Then a slow-Redis phase:
# SLOW_STREAMS streams for SLOW_SECONDS while Redis is paused (CLIENT PAUSE
# PAUSE_MS ALL) every PAUSE_EVERY seconds; it reports the events' latency
# (p99 must stay under the 250 ms --redis-timeout), what /readyz said, the
# slow round trips and late RUN_FINISHED writes counted, and whether every
# log line parsed as JSON.
#
#   bash bench/soak.sh                          # 10 minutes, 500 streams
#   DURATION=60 STREAMS=100 bash bench/soak.sh  # a quick one
#   SLOW_SECONDS=0 bash bench/soak.sh           # without the slow-Redis phase
#   AGUARD_ARGS="--ledger-cache 10000" bash bench/soak.sh   # more flags for aguard serve
#
# Loopback only; every process it starts is stopped on exit. Needs
# redis-server (installed with apt-get when missing) and Go.
set -euo pipefail

DURATION=${DURATION:-600}
STREAMS=${STREAMS:-500}
INTERVAL=${INTERVAL:-10}
RATE=${RATE:-20}   # events per second per stream
EVENTS=${EVENTS:-200} # events per run: runs end, and new ones start, all the time
SLOW_STREAMS=${SLOW_STREAMS:-50}
SLOW_SECONDS=${SLOW_SECONDS:-20}
PAUSE_MS=${PAUSE_MS:-1900}
PAUSE_EVERY=${PAUSE_EVERY:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/aguard-soak.XXXXXX)
BIN=$WORK/bin
SIM_PORT=18511 AGUARD_PORT=18512 ADMIN_PORT=18513 REDIS_PORT=18514
PIDS=()

log() { printf '%s soak: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

if ! command -v redis-server >/dev/null 2>&1; then
	log "installing redis-server"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
mkdir -p "$BIN"
log "building aguard and the bench tools"
(cd "$ROOT" && go build -o "$BIN/aguard" ./cmd/aguard && go build -o "$BIN/" ./bench/cmd/agentsim ./bench/cmd/loadgen)

redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
"$BIN/agentsim" -listen "127.0.0.1:$SIM_PORT" >"$WORK/agentsim.log" 2>&1 &
PIDS+=($!)
"$BIN/aguard" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$AGUARD_PORT" \
	--admin-listen "127.0.0.1:$ADMIN_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/0" --log-format json ${AGUARD_ARGS:-} >"$WORK/aguard.log" 2>&1 &
AGUARD_PID=$!
PIDS+=("$AGUARD_PID")
for port in "$REDIS_PORT" "$SIM_PORT" "$AGUARD_PORT" "$ADMIN_PORT"; do
	for i in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		((i < 100)) || die "nothing listens on 127.0.0.1:$port (see $WORK/*.log)"
		sleep 0.1
	done
done

# metric NAME: a value from aguard's /metrics (first sample of that name).
metric() {
	local body
	exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT"
	printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	body=$(cat <&3)
	exec 3<&-
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {print $2; exit}' <<<"$body"
}
# metric_sum NAME: the sum of every sample of NAME (labelled or not); 0 if none.
metric_sum() {
	local body
	exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT"
	printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	body=$(cat <&3)
	exec 3<&-
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}' <<<"$body"
}
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$AGUARD_PID/status"; }
sample() {
	printf '| %6s | %8s | %10s | %12s | %11s |\n' "$1" "$(( $(rss_kib) / 1024 ))" "$(metric go_goroutines)" \
		"$(metric aguard_streams_open)" "$(metric aguard_state_queue_depth)"
}

BASE_GOROUTINES=$(metric go_goroutines)
BASE_RSS=$(rss_kib)
log "$STREAMS streams × $RATE events/s, $EVENTS events and 2 frontend tool calls (1 KiB arguments) per run, for ${DURATION}s"
"$BIN/loadgen" -json -label soak -url "http://127.0.0.1:$AGUARD_PORT/agent?events=$EVENTS&rate=$RATE&tools=2&args=1024&frontend=true" \
	-streams "$STREAMS" -ramp 5s -warmup 5s -duration "${DURATION}s" -watch "proxy=$AGUARD_PID" >"$WORK/loadgen.json" &
LOADGEN_PID=$!
PIDS+=("$LOADGEN_PID")

echo "| t (s) | RSS (MiB) | goroutines | streams open | ledger queue |"
echo "|---:|---:|---:|---:|---:|"
sample 0
start=$(date +%s)
while kill -0 "$LOADGEN_PID" 2>/dev/null; do
	sleep "$INTERVAL"
	kill -0 "$LOADGEN_PID" 2>/dev/null || break
	sample $(( $(date +%s) - start ))
done
wait "$LOADGEN_PID" || die "loadgen failed: $(cat "$WORK/loadgen.json")"
sleep 5
sample "after"

END_GOROUTINES=$(metric go_goroutines)
echo
echo "loadgen: $(tr -d '\n' <"$WORK/loadgen.json" | head -c 2000)"
echo
echo "- loadgen errors: $(tr -d '\n ' <"$WORK/loadgen.json" | grep -o '"errors":{[^}]*}')"
echo "- goroutines before/after the load: $BASE_GOROUTINES / $END_GOROUTINES"
echo "- RSS before/after the load: $(( BASE_RSS / 1024 )) / $(( $(rss_kib) / 1024 )) MiB"
echo "- protocol violations, upstream errors, ledger writes queued or dropped: $(metric_sum 'aguard_stream_notes_total{kind="violation"}') / $(metric_sum aguard_upstream_errors_total) / $(metric_sum 'aguard_state_writes_total{result="queued"}') / $(metric_sum aguard_state_queue_dropped_total)"
if (( END_GOROUTINES > BASE_GOROUTINES + 10 )); then
	die "goroutines did not come back after the load: $BASE_GOROUTINES before, $END_GOROUTINES after"
fi

# readyz: /readyz's body.
readyz() {
	exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT"
	printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	sed '1,/^\r$/d' <&3
	exec 3<&-
}
if (( SLOW_SECONDS > 0 )); then
	echo
	log "slow Redis: $SLOW_STREAMS streams for ${SLOW_SECONDS}s, CLIENT PAUSE $PAUSE_MS every ${PAUSE_EVERY}s"
	SLOW_BEFORE=$(metric_sum aguard_state_redis_slow_total)
	LATE_BEFORE=$(metric_sum aguard_state_writes_late_total)
	"$BIN/loadgen" -json -label slow-redis -thread-prefix slow-redis-thread- -url "http://127.0.0.1:$AGUARD_PORT/agent?events=$EVENTS&rate=$RATE&tools=2&args=1024&frontend=true" \
		-streams "$SLOW_STREAMS" -ramp 1s -warmup 1s -duration "${SLOW_SECONDS}s" >"$WORK/slow.json" &
	SLOW_PID=$!
	PIDS+=("$SLOW_PID")
	sleep 2
	pauses=0 degraded=0
	end=$(( $(date +%s) + SLOW_SECONDS - 2 ))
	while (( $(date +%s) < end )); do
		redis-cli -p "$REDIS_PORT" CLIENT PAUSE "$PAUSE_MS" ALL >/dev/null
		pauses=$((pauses + 1))
		sleep 0.5
		readyz | grep -q 'redis slow' && degraded=$((degraded + 1))
		sleep "$(awk -v e="$PAUSE_EVERY" 'BEGIN {print (e > 0.5 ? e - 0.5 : 0)}')"
	done
	wait "$SLOW_PID" || die "loadgen failed in the slow-Redis phase: $(cat "$WORK/slow.json")"
	sleep 1
	echo "slow-redis loadgen: $(tr -d '\n' <"$WORK/slow.json" | head -c 2000)"
	echo
	echo "- slow Redis: $pauses pauses of $PAUSE_MS ms; event latency ms: $(jq -r '.latency | "p50 \(.p50Ms) p99 \(.p99Ms) max \(.maxMs)"' "$WORK/slow.json"); errors: $(jq -c '.errors' "$WORK/slow.json")"
	echo "- /readyz said \"redis slow\" $degraded of $pauses times; now: $(readyz | tr -d '\n')"
	echo "- slow round trips counted: $(( $(metric_sum aguard_state_redis_slow_total) - SLOW_BEFORE )); RUN_FINISHED sent with its write queued: $(( $(metric_sum aguard_state_writes_late_total) - LATE_BEFORE )); \"redis slow\" log lines: $(grep -c '"msg":"redis slow"' "$WORK/aguard.log" || true)"
	bad=$(jq -R -r 'try (fromjson | "ok") catch "bad"' "$WORK/aguard.log" | grep -c bad || true)
	echo "- log lines that are not JSON: $bad of $(wc -l <"$WORK/aguard.log")"
	p99=$(jq -r '.latency.p99Ms' "$WORK/slow.json")
	awk -v p="$p99" 'BEGIN {exit !(p < 250)}' || die "p99 latency $p99 ms with Redis paused: over 250 ms"
	(( bad == 0 )) || die "$bad log lines are not JSON"
fi
log "done"
