#!/usr/bin/env bash
# bench/syscalls.sh — the system calls a proxy makes per event at the paced
# load (STREAMS streams × RATE events/s), counted by strace -c over WINDOW
# seconds in the middle of a loadgen run: nginx (SSE config, as run.sh
# runs it) and one aguard build per REF (a git ref, or "." for the working
# tree). strace slows the traced process, so read the counts, not the times.
#
#   bash bench/syscalls.sh              # nginx and the working tree
#   bash bench/syscalls.sh main .       # nginx, main, the working tree
#
# Needs strace and nginx (apt-get install -y strace nginx-light). Everything
# listens on 127.0.0.1; every process started here is stopped on exit.
# Writes a Markdown table to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18550}
SIM_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 2))
ADMIN_PORT=$((BASE_PORT + 3))
STREAMS=${STREAMS:-1000}
RATE=${RATE:-20}
WINDOW=${WINDOW:-5}
REFS=("$@")
((${#REFS[@]})) || REFS=(.)

WORK=$(mktemp -d /tmp/aguard-syscalls.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v strace >/dev/null || die "strace is not installed (apt-get install -y strace)"
turns_setup "${REFS[@]}"

# measure NAME PIDS...: strace the processes for WINDOW seconds under the
# paced load, and print a table row (calls per event delivered).
measure() {
	local name=$1
	shift
	local args=() pid
	for pid in "$@"; do args+=(-p "$pid"); done
	"$WORK/loadgen" -json -url "http://127.0.0.1:$PROXY_PORT/agent?events=1000000000&rate=$RATE" -streams "$STREAMS" \
		-ramp 2s -warmup 3s -duration "$((WINDOW + 4))s" >"$WORK/$name.json" &
	local lg=$!
	sleep 7
	timeout -s INT "$WINDOW" strace -c -f -o "$WORK/$name.strace" "${args[@]}" >/dev/null 2>&1 || true
	wait "$lg" || die "loadgen failed against $name"
	awk -v name="$name" '
		$NF ~ /^(read|recvfrom|readv|write|writev|sendto|epoll_wait|epoll_pwait|futex|nanosleep)$/ {
			c[$NF] += $4
			if (NF == 6) e[$NF] += $5
		}
		END {
			r = c["read"] + c["recvfrom"] + c["readv"]; re = e["read"] + e["recvfrom"] + e["readv"]
			w = c["write"] + c["writev"] + c["sendto"]
			p = c["epoll_wait"] + c["epoll_pwait"]
			printf "| %s | %d | %.2f | %.2f | %.3f | %.3f |\n", name, w, r / w, re / w, p / w, (c["futex"] + c["nanosleep"]) / w
		}' "$WORK/$name.strace"
}

echo "| proxy | writes to consumers (≈ events: at this load each goes out alone) | reads per write | of which found nothing (EAGAIN) | epoll waits per write | futex + nanosleep per write |"
echo "|---|---:|---:|---:|---:|---:|"
turn_nginx
measure nginx $(pgrep -P "$TURN_PID")
stop "$TURN_PID"
for ref in "${REFS[@]}"; do
	turn_aguard "$ref"
	measure "aguard $ref" "$TURN_PID"
	stop "$TURN_PID"
done
echo
echo "($STREAMS streams × $RATE events/s, strace -c -f over ${WINDOW}s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
