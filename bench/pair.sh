#!/usr/bin/env bash
# bench/pair.sh — two aguard builds under load at the same time: one
# agentsim, two `aguard serve` (REF A and REF B, git refs or "." for the
# working tree), each loaded by its own loadgen with half the streams of
# MODE, both windows open together, for ROUNDS rounds. The host's drift
# (this 2-CPU VM's neighbours move nginx's own figures by ±20 % between
# runs) falls on both builds alike, so a few per cent between them shows,
# where bench/ab.sh's turns, one target after another, need many rounds.
# For each round: CPU s of each proxy per 1M events, p99, and B over A.
# Run it twice with the refs swapped to see that the ports and the Redis
# databases do not favour one.
#
# A REF of "nginx" runs nginx (the SSE configuration of bench/run.sh)
# instead of an aguard build: `bench/pair.sh nginx .` gives aguard's
# ratio to nginx with the host's drift on both alike (REDIS and WEBHOOK
# then apply to the aguard only).
#
#   MODE=tools REDIS=1 bash bench/pair.sh main .
#
# MODE: paced, unpaced, tools, cold or warm, as bench/ab.sh. REDIS=1 gives each aguard
# the ledger in Redis (one throwaway redis-server, a database each).
# WEBHOOK=1 gives each a --webhook to agentsim's receiver (POST /hook, 204),
# its deliveries queued in that Redis with REDIS=1:
#
#   MODE=tools REDIS=1 WEBHOOK=1 bash bench/pair.sh main . Every
# process started here listens on 127.0.0.1 and is stopped on exit. Writes a
# Markdown table to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18590}
SIM_PORT=$((BASE_PORT + 1))
MODE=${MODE:-tools}
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-20}
(($# == 2)) || { echo "usage: bench/pair.sh REF_A REF_B" >&2; exit 2; }
REFS=("$1" "$2")

WORK=$(mktemp -d /tmp/aguard-pair.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mode_load "$MODE" 2

build_refs "${REFS[@]}"
"$WORK/agentsim" -listen "127.0.0.1:$SIM_PORT" -idle-hold 5m >"$WORK/agentsim.log" 2>&1 &
PIDS+=($!)
await "$SIM_PORT"
if [[ -n ${REDIS:-} ]]; then
	redis_port=$((BASE_PORT + 9))
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
	PIDS+=($!)
	await "$redis_port"
fi
TPIDS=() PORTS=() NAMES=()
for i in 0 1; do
	name=$(refname "${REFS[$i]}") port=$((BASE_PORT + 2 + i))
	if [[ ${REFS[$i]} == nginx ]]; then
		command -v nginx >/dev/null || die "nginx is not installed (apt-get install -y nginx-light)"
		mkdir -p "$WORK/nginx/tmp"
		nginx_conf "$SIM_PORT" "$port" >"$WORK/nginx/nginx.conf"
		nginx -p "$WORK/nginx/" -c nginx.conf -e error.log &
		PIDS+=($!) TPIDS+=($!) PORTS+=("$port") NAMES+=(nginx)
		continue
	fi
	args=()
	[[ -z ${REDIS:-} ]] || args=(--redis "redis://127.0.0.1:$redis_port/$i")
	[[ -z ${WEBHOOK:-} ]] || args+=(--webhook "http://127.0.0.1:$SIM_PORT/hook")
	"$WORK/aguard-$name" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$port" \
		--admin-listen "127.0.0.1:$((port + 20))" --drain-timeout 1s "${args[@]}" >"$WORK/aguard-$i.log" 2>&1 &
	PIDS+=($!) TPIDS+=($!) PORTS+=("$port") NAMES+=("${REFS[$i]}")
done
for p in "${PORTS[@]}"; do await "$p"; done

# field FILE: "CPU p99" from a loadgen table ("latency ms: p50 … p99 X …",
# "proxy pids [...] cpu S s (X s per 1M events) …").
field() {
	awk '/^latency ms:/ { for (i = 1; i < NF; i++) if ($i == "p99") p99 = $(i + 1) }
		$1 == "proxy" { for (i = 1; i < NF; i++) if ($i == "per" && $(i + 1) == "1M") cpu = substr($(i - 2), 2) }
		END { print cpu, p99 }' "$1"
}

echo "| round | A: ${NAMES[0]}, CPU s per 1M events | p99 ms | B: ${NAMES[1]}, CPU s per 1M events | p99 ms | B / A |"
echo "|---:|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
	lg=()
	for i in 0 1; do
		"$WORK/loadgen" -url "http://127.0.0.1:${PORTS[$i]}/agent?$QUERY" "${LOAD[@]}" -duration "${WINDOW}s" \
			-thread-prefix "r$round-$i-" -watch "proxy=${TPIDS[$i]}" >"$WORK/r$round-$i.txt" &
		lg+=($!)
	done
	for p in "${lg[@]}"; do wait "$p" || die "loadgen failed in round $round"; done
	read -r ca pa < <(field "$WORK/r$round-0.txt")
	read -r cb pb < <(field "$WORK/r$round-1.txt")
	echo "| $round | $ca | $pa | $cb | $pb | $(awk -v a="$ca" -v b="$cb" 'BEGIN { printf "%.3f", b / a }') |"
done
echo
echo "($MODE${REDIS:+ with --redis}${WEBHOOK:+ and --webhook}, both at once: $QUERY ${LOAD[*]} each, ${WINDOW}s windows; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
