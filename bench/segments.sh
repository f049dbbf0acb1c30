#!/usr/bin/env bash
# bench/segments.sh — the TCP segments each hop carries per event at
# run.sh's unpaced load (50 streams, the agent writing as fast as it is
# read): agent → proxy, proxy → consumer, and the acknowledgements back,
# read from the kernel's per-socket counters (ss -ti: data_segs_out,
# segs_in) before and after an 8 s window. nginx (SSE config, as run.sh
# runs it) and one aguard build per REF (a git ref, or "." for the working
# tree), ROUNDS rounds (default 3) with the targets interleaved.
#
#   bash bench/segments.sh              # nginx and the working tree
#   ROUNDS=5 bash bench/segments.sh main .
#
# A proxy whose writes to the consumer carry more events sends fewer
# segments, and the consumer reads fewer times: the chain, which shares the
# CPUs, gets cheaper by what the consumer saves. Needs ss (iproute2) and
# nginx. Everything listens on 127.0.0.1; every process started here is
# stopped on exit. Writes a Markdown table to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PORT=${BASE_PORT:-18650}
SIM_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 2))
ADMIN_PORT=$((BASE_PORT + 3))
ROUNDS=${ROUNDS:-3}
WINDOW=8
REFS=("$@")
((${#REFS[@]})) || REFS=(.)

WORK=$(mktemp -d /tmp/aguard-segments.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM
command -v ss >/dev/null || die "ss is not installed (apt-get install -y iproute2)"
turns_setup "${REFS[@]}"

# counters: the sums, over the established sockets on the agent's port
# (its side of agent → proxy) and on the proxy's (its side of proxy →
# consumer), of the data segments each sent and the segments it received.
counters() {
	ss -tinH state established "( sport = :$SIM_PORT or sport = :$PROXY_PORT )" |
		awk -v sim=":$SIM_PORT" '
			/^[^ \t]/ { hop = ($3 ~ sim "$") ? "up" : "down"; next }
			{
				for (i = 1; i <= NF; i++) {
					split($i, kv, ":")
					if (kv[1] == "data_segs_out" || kv[1] == "segs_in") s[hop "_" kv[1]] += kv[2]
				}
			}
			END { printf "%d %d %d %d\n", s["up_data_segs_out"], s["up_segs_in"], s["down_data_segs_out"], s["down_segs_in"] }'
}

# measure NAME: one unpaced loadgen run through the proxy on PROXY_PORT, and
# a table row: per 1,000 events delivered in the window, each hop's
# segments.
measure() {
	local name=$1
	"$WORK/loadgen" -json -url "http://127.0.0.1:$PROXY_PORT/agent?events=1000000000&rate=0" -streams 50 \
		-ramp 1s -warmup 2s -duration "$((WINDOW + 2))s" >"$WORK/$name.json" &
	local lg=$! before after
	sleep 4
	before=$(counters)
	sleep "$WINDOW"
	after=$(counters)
	wait "$lg" || die "loadgen failed against $name"
	local eps
	eps=$(sed -n 's/.*"eventsPerSecond": *\([0-9.]*\).*/\1/p' "$WORK/$name.json" | head -1)
	awk -v name="$name" -v eps="$eps" -v w="$WINDOW" -v b="$before" -v a="$after" 'BEGIN {
		split(b, x, " "); split(a, y, " ")
		k = eps * w / 1000
		up = (y[1] - x[1]) / k; down = (y[3] - x[3]) / k
		printf "| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", name, eps, up, (y[2] - x[2]) / k, down, (y[4] - x[4]) / k, 1000 / down
	}'
}

echo "| round, proxy | events/s | agent → proxy data segments per 1k events | proxy → agent segments (ACKs) | proxy → consumer data segments | consumer → proxy segments (ACKs) | events per proxy → consumer segment |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
	turn_nginx
	measure "$r nginx"
	stop "$TURN_PID"
	for ref in "${REFS[@]}"; do
		turn_aguard "$ref"
		measure "$r aguard $ref"
		stop "$TURN_PID"
	done
done
echo
echo "(50 streams unpaced, ${WINDOW}s windows; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
