#!/usr/bin/env bash
# bench/ab.sh — aguard builds against each other and nginx, interleaved:
# one agentsim, nginx (SSE config) and one `aguard serve` per REF (a git
# ref, or "." for the working tree) all running at once, loaded in turn by
# loadgen for ROUNDS rounds, so that the machine's drift falls on every
# target alike. For each target and round: CPU s of the proxy per 1M events
# (loadgen -watch), p99 latency, how long the proxy's threads were runnable
# but had no CPU over the window and that time per scheduling (the kernel's
# own account: run_delay over pcount in /proc/PID/task/*/schedstat, summed
# over the proxy's threads and nginx's workers), and, when perf is
# installed, the proxy's context switches over the window (perf stat).
#
#   bash bench/ab.sh main .                  # paced: 1,000 streams × 20 events/s
#   MODE=tools ROUNDS=2 bash bench/ab.sh main .
#   MODE=unpaced bash bench/ab.sh . .+GOMAXPROCS=1
#
# A REF "copyfloor:go" or "copyfloor:ev" is no aguard but bench/cmd/copyfloor
# in that mode, a proxy that copies the agent's bytes and does nothing else,
# a goroutine per stream or epoll workers: what the design costs before
# aguard's own work.
#
# A REF may carry environment settings for its aguard after a plus
# (REF+VAR=VALUE[+VAR=VALUE...]): the same build with and without them are
# then two targets.
#
# MODE: paced (default), unpaced (50 streams, as fast as read) or tools (200
# streams × 20 events/s, runs of 200 events with two frontend calls of 1 KiB
# arguments, as run.sh's tools phase), cold (3,000 streams × 6.667 events/s,
# the sweep's 3,000-stream point: each stream's state cold when it wakes) or
# warm (100 streams × 200 events/s, the sweep's 100-stream point).
# REDIS=1 gives every aguard the
# ledger in Redis (--redis; one throwaway redis-server, a database per
# aguard). Needs nginx (apt-get install -y nginx-light). Everything listens on 127.0.0.1; every process started here
# is stopped on exit. Writes a Markdown table to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18570}
SIM_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
MODE=${MODE:-paced}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-12}
REFS=("$@")
((${#REFS[@]})) || REFS=(main .)

WORK=$(mktemp -d /tmp/aguard-ab.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NGINX=$(command -v nginx || true)
[[ -n $NGINX ]] || die "nginx is not installed (apt-get install -y nginx-light)"
mode_load "$MODE"

build_refs "${REFS[@]%%+*}" # each REF without its environment settings
mkdir -p "$WORK/nginx/tmp"
nginx_conf "$SIM_PORT" "$NGINX_PORT" >"$WORK/nginx/nginx.conf"
"$WORK/agentsim" -listen "127.0.0.1:$SIM_PORT" -idle-hold 5m >"$WORK/agentsim.log" 2>&1 &
PIDS+=($!)
await "$SIM_PORT"
"$NGINX" -p "$WORK/nginx/" -c nginx.conf -e error.log &
NAMES=(nginx) TPIDS=($!) PORTS=("$NGINX_PORT")
PIDS+=($!)
REDIS_ARGS=()
if [[ -n ${REDIS:-} ]]; then
	redis_port=$((BASE_PORT + 9))
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
	PIDS+=($!)
	await "$redis_port"
fi
port=$((NGINX_PORT + 1))
db=0
for ref in "${REFS[@]}"; do
	base=${ref%%+*} envs=()
	name=$(refname "$base")
	[[ $ref == "$base" ]] || IFS=+ read -ra envs <<<"${ref#"$base"+}"
	[[ -z ${REDIS:-} ]] || REDIS_ARGS=(--redis "redis://127.0.0.1:$redis_port/$db")
	db=$((db + 1))
	if [[ $base == copyfloor:* ]]; then
		env "${envs[@]}" "$WORK/copyfloor" -mode "${base#copyfloor:}" -listen "127.0.0.1:$port" -agent "127.0.0.1:$SIM_PORT" >"$WORK/copyfloor-$db.log" 2>&1 &
		NAMES+=("$ref")
	else
		env "${envs[@]}" "$WORK/aguard-$name" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$port" \
			--admin-listen "127.0.0.1:$((port + 20))" --drain-timeout 1s "${REDIS_ARGS[@]}" >"$WORK/aguard-$name-$db.log" 2>&1 &
		NAMES+=("aguard $ref")
	fi
	PIDS+=($!) TPIDS+=($!) PORTS+=("$port")
	port=$((port + 1))
done
for p in "${PORTS[@]}"; do await "$p"; done

# run_delay PID...: "NS WAITS", the nanoseconds the processes' threads have
# spent runnable and waiting for a CPU and the number of times they were
# given one, each summed over the threads (schedstat's second and third
# fields).
run_delay() {
	local p
	for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done | awk '{ s += $2; n += $3 } END { printf "%.0f %.0f\n", s, n }'
}

# measure ROUND I: load target I for WINDOW seconds and print its row.
measure() {
	local pid=${TPIDS[$2]} out="$WORK/r$1-$2" lg procs d0 d1 n0 n1
	procs=$(echo "$pid" $(pgrep -P "$pid" || true) | tr ' ' ,)
	"$WORK/loadgen" -url "http://127.0.0.1:${PORTS[$2]}/agent?$QUERY" "${LOAD[@]}" \
		-duration "${WINDOW}s" -watch "proxy=$pid" >"$out.txt" &
	lg=$!
	sleep 6 # the ramp and warm-up: the window opens
	read -r d0 n0 < <(run_delay ${procs//,/ })
	if command -v perf >/dev/null; then
		perf stat -x, -e context-switches -p "$procs" -o "$out.perf" -- sleep "$((WINDOW - 2))" >/dev/null 2>&1 || true
	else
		sleep "$((WINDOW - 2))"
	fi
	read -r d1 n1 < <(run_delay ${procs//,/ })
	wait "$lg" || die "loadgen failed against ${NAMES[$2]}"
	# loadgen's table: "latency ms: p50 … p99 X …" and
	# "proxy pids [...] cpu S s (X s per 1M events) …".
	awk -v round="$1" -v name="${NAMES[$2]}" -v wait="$(((d1 - d0) / 1000000)) ($(((d1 - d0) / 1000 / (n1 - n0 > 0 ? n1 - n0 : 1))))" -v cs="$( (grep -s context-switches "$out.perf" || true) | cut -d, -f1)" '
		/^latency ms:/ { for (i = 1; i < NF; i++) if ($i == "p99") p99 = $(i + 1) }
		$1 == "proxy" { for (i = 1; i < NF; i++) if ($i == "per" && $(i + 1) == "1M") cpu = substr($(i - 2), 2) }
		/events in window/ { eps = $0; sub(/.*\(/, "", eps); sub(/\/s\).*/, "", eps) }
		END { printf "| %s | %s | %.2f | %.3f | %s | %s | %s |\n", round, name, cpu, p99, eps, wait, (cs == "" ? "—" : cs) }' "$out.txt"
}

echo "| round | proxy | CPU s per 1M events | p99 ms | events/s | run-queue wait ms in $((WINDOW - 2)) s (µs per wait) | context switches in $((WINDOW - 2)) s |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
	for i in "${!TPIDS[@]}"; do measure "$round" "$i"; done
done
echo
echo "($MODE${REDIS:+ with --redis}: $QUERY ${LOAD[*]}, ${WINDOW}s windows; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
