#!/usr/bin/env bash
# bench/run.sh — measures one AG-UI streaming workload four ways on this
# machine: (a) direct to the synthetic agent, (b) through nginx configured for
# SSE, (c) through aguard (default policy, no Redis), (d) through a second
# aguard with the ledger in Redis (--redis, a throwaway redis-server); writes a
# Markdown report (each of issue 22's targets with its ratio to nginx and a
# verdict) to stdout and to bench/results/<date>.md, and draws its figures as
# PNG images in bench/results/<date>/ (benchplot).
#
#   bash bench/run.sh              # from the repository root, as root (installs nginx and redis-server if missing)
#   QUICK=1 bash bench/run.sh      # shorter windows, one paced round, fewer sweep points (≈8 min)
#   PHASES="paced sweep" bash bench/run.sh   # only some phases
#
# Phases (PHASES, in this order), each for direct, nginx, aguard and
# aguard-redis unless said otherwise:
#   idle      IDLE_STREAMS silent streams held open: RSS of the proxy before/after
#   unpaced   UNPACED_STREAMS streams sending as fast as they are read, UNPACED_SECONDS:
#             events/s delivered, proxy CPU seconds per million events;
#             UNPACED_ROUNDS rounds, targets interleaved, each target's median
#             (by events/s) shown
#   paced     PACED_STREAMS streams × PACED_RATE events/s, PACED_SECONDS: latency
#             agent→consumer (its CDF), proxy CPU seconds per million events;
#             PACED_ROUNDS rounds, targets interleaved, each target's median shown
#   sweep     nginx and aguard only: SWEEP_TOTAL_RATE events/s in all, shared by
#             each count of SWEEP_STREAMS streams, SWEEP_SECONDS: CPU per event
#             against the number of streams; SWEEP_ROUNDS rounds, the counts
#             in ascending order in odd rounds and descending in even ones, each
#             count's median shown
#   tools     TOOLS_STREAMS streams × TOOLS_RATE events/s, TOOLS_SECONDS: runs of
#             TOOLS_EVENTS content events carrying 2 frontend tool calls with
#             TOOLS_ARGS bytes of arguments each (left pending at RUN_FINISHED,
#             so every run end is a ledger write); latency and CPU as for paced,
#             TOOLS_ROUNDS rounds, targets interleaved, each target's median shown
#   idlesweep nginx and aguard only, each count of IDLE_COUNTS silent streams on
#             a freshly started proxy: RSS per stream against the number of
#             streams (counts are capped by the open-file limit: a proxy holds
#             two descriptors per stream)
#
# While it runs it logs to stderr each measurement's phase, round and target,
# and an estimate of the time left. ≈20 minutes on a quiet machine (QUICK=1:
# ≈8), plus the waits for quiet.
#
# Everything listens on and targets 127.0.0.1 only; every process started here
# is stopped on exit; nginx and redis-server run in the foreground (nginx from
# its own temporary prefix, Redis with no persistence). Before each measurement the script waits (30 s steps, WAIT_BUDGET in
# all) while the machine is busy with other work, and records the load.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# nginx_conf; run.sh defines its own log, die and cleanup below.
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BASE_PORT=${BASE_PORT:-18400}
SIM_PORT=$((BASE_PORT + 1))
NGINX_PORT=$((BASE_PORT + 2))
AGUARD_PORT=$((BASE_PORT + 3))
ADMIN_PORT=$((BASE_PORT + 4))
REDIS_PORT=$((BASE_PORT + 5))
AGUARD_REDIS_PORT=$((BASE_PORT + 6))
ADMIN_REDIS_PORT=$((BASE_PORT + 7))
LEDGER_PORT=$((BASE_PORT + 8))
FRESH_NGINX_PORT=$((BASE_PORT + 9))    # idlesweep: a fresh proxy for each count
FRESH_AGUARD_PORT=$((BASE_PORT + 10))
FRESH_ADMIN_PORT=$((BASE_PORT + 11))
if [[ -n ${QUICK:-} ]]; then
	: "${UNPACED_SECONDS:=5}" "${UNPACED_ROUNDS:=1}" "${PACED_SECONDS:=10}" "${PACED_ROUNDS:=1}" "${TOOLS_SECONDS:=10}" "${TOOLS_ROUNDS:=1}"
	: "${SWEEP_SECONDS:=5}" "${SWEEP_ROUNDS:=1}" "${SWEEP_STREAMS:=100 1000 5000}" "${IDLE_COUNTS:=1000 10000}"
fi
PHASES=${PHASES:-idle unpaced paced sweep tools idlesweep}
DELTA=${DELTA:-64}                      # bytes per TEXT_MESSAGE_CONTENT delta
IDLE_STREAMS=${IDLE_STREAMS:-1000}
UNPACED_STREAMS=${UNPACED_STREAMS:-50}
UNPACED_SECONDS=${UNPACED_SECONDS:-10}
UNPACED_ROUNDS=${UNPACED_ROUNDS:-3}     # unpaced runs per target, interleaved; the median (events/s) is reported
PACED_STREAMS=${PACED_STREAMS:-1000}
PACED_RATE=${PACED_RATE:-20}
PACED_SECONDS=${PACED_SECONDS:-20}
PACED_ROUNDS=${PACED_ROUNDS:-3}         # paced runs per target, interleaved; the median is reported
TOOLS_STREAMS=${TOOLS_STREAMS:-200}
TOOLS_RATE=${TOOLS_RATE:-20}            # events/s per stream, every event counted (≈11 s per run)
TOOLS_EVENTS=${TOOLS_EVENTS:-200}       # content events per run (≈220 events with the calls)
TOOLS_CALLS=${TOOLS_CALLS:-2}
TOOLS_ARGS=${TOOLS_ARGS:-1024}
TOOLS_SECONDS=${TOOLS_SECONDS:-20}
TOOLS_RAMP=${TOOLS_RAMP:-10}            # seconds; spreads run ends over a run's length
TOOLS_ROUNDS=${TOOLS_ROUNDS:-3}         # tool-call runs per target, interleaved; the median is reported
SWEEP_STREAMS=${SWEEP_STREAMS:-100 300 1000 3000 5000}
SWEEP_TOTAL_RATE=${SWEEP_TOTAL_RATE:-20000} # events/s offered in all at every stream count
SWEEP_SECONDS=${SWEEP_SECONDS:-10}
SWEEP_ROUNDS=${SWEEP_ROUNDS:-3}         # sweeps per target, counts in alternating order; each count's median is reported
IDLE_COUNTS=${IDLE_COUNTS:-1000 3000 10000}
MAX_LOAD=${MAX_LOAD:-0.8}               # 1-minute load average considered quiet
MAX_BUSY=${MAX_BUSY:-0.25}              # or: CPUs busy over 3 s while our processes idle
WAIT_BUDGET=${WAIT_BUDGET:-300}         # seconds of waiting for quiet, in all
DATE=$(date -u +%Y-%m-%d)
# bench/results/<date>.md, or <date>-2.md, -3.md … when that day already has results.
if [[ -z ${OUT_MD:-} ]]; then
	OUT_MD=$ROOT/bench/results/$DATE.md
	n=2
	while [[ -e $OUT_MD || -e ${OUT_MD%.md} ]]; do
		OUT_MD=$ROOT/bench/results/$DATE-$n.md
		n=$((n + 1))
	done
fi

WORK=$(mktemp -d /tmp/aguard-bench.XXXXXX)
BIN=$WORK/bin
RES=$WORK/results
mkdir -p "$BIN" "$RES" "$WORK/nginx/tmp"
PIDS=()
WAITED=0
UNPACED_ROUNDS_TEXT=""
PACED_ROUNDS_TEXT=""
TOOLS_ROUNDS_TEXT=""
SWEEP_ROUNDS_TEXT=""

log() { printf '[run.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for _ in $(seq 50); do
		local alive=0
		for pid in "${PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	if [[ -n ${KEEP:-} ]]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- what it needs ----------------------------------------------------------
# The open-file limit: raised to the hard limit (root may raise that too).
# A proxy holds two descriptors per stream (consumer and agent), loadgen and
# agentsim one: idlesweep's counts above what the limit allows are capped.
ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
(( NOFILE >= 2 * IDLE_STREAMS + 200 )) || die "open-file limit $NOFILE is too low for $IDLE_STREAMS streams"
MAX_STREAMS=$(( (NOFILE - 200) / 2 ))
counts=()
for n in $IDLE_COUNTS; do
	if (( n > MAX_STREAMS )); then
		log "open-file limit $NOFILE: idlesweep measures $MAX_STREAMS streams instead of $n"
		n=$MAX_STREAMS
	fi
	counts+=("$n")
done
IDLE_COUNTS="${counts[*]}"
for n in $SWEEP_STREAMS; do
	(( n <= MAX_STREAMS )) || die "open-file limit $NOFILE is too low for $n streams (SWEEP_STREAMS)"
done
command -v go >/dev/null || die "go is not installed"
if ! command -v nginx >/dev/null; then
	log "installing nginx from Debian's packages (the service is not started)"
	guard=""
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		# Keep dpkg from starting nginx's own daemon on port 80.
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
	fi
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null
	[[ -n $guard ]] && rm -f /usr/sbin/policy-rc.d
fi
NGINX=$(command -v nginx)
if ! command -v redis-server >/dev/null; then
	log "installing redis-server from Debian's packages (the service is not started)"
	guard=""
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
	fi
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
	[[ -n $guard ]] && rm -f /usr/sbin/policy-rc.d
fi
REDIS=$(command -v redis-server)

for port in "$SIM_PORT" "$NGINX_PORT" "$AGUARD_PORT" "$ADMIN_PORT" "$REDIS_PORT" "$AGUARD_REDIS_PORT" "$ADMIN_REDIS_PORT" "$LEDGER_PORT" \
	"$FRESH_NGINX_PORT" "$FRESH_AGUARD_PORT" "$FRESH_ADMIN_PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		die "port $port on 127.0.0.1 is in use; set BASE_PORT"
	fi
done

log "building aguard and the bench tools into $BIN"
(cd "$ROOT" && go build -o "$BIN/aguard" ./cmd/aguard && go build -o "$BIN/" ./bench/cmd/...)

# The synthetic agent's runs must pass aguard untouched: replay a few shapes.
printf '%s' '{"threadId":"t-1","runId":"r-1","protocolVersion":"1.0","messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[{"name":"bench_frontend_tool","description":"bench","parameters":{"type":"object"}}],"context":[],"state":{},"forwardedProps":{}}' >"$WORK/input.json"
for shape in "-events 20" "-events 20 -tools 2 -args 1024 -frontend" "-events 5 -tools 3 -args 10240"; do
	# shellcheck disable=SC2086
	"$BIN/agentsim" -print -delta "$DELTA" $shape >"$WORK/run.sse"
	"$BIN/aguard" replay --input "$WORK/input.json" --report "$WORK/report.json" "$WORK/run.sse" >"$WORK/out.sse"
	# Agent-side calls to a tool the application did not advertise are held
	# until judged, and released unchanged: "held" is the one note allowed.
	if grep -o '"kind": *"[a-z_]*"' "$WORK/report.json" | grep -qv '"held"'; then
		die "aguard noted something on agentsim $shape: $(cat "$WORK/report.json")"
	fi
	cmp -s <(grep '^data:' "$WORK/run.sse") <(grep '^data:' "$WORK/out.sse") || die "aguard changed agentsim's run $shape"
done
log "agentsim's runs pass aguard replay unchanged"

# --- the servers --------------------------------------------------------
nginx_conf "$SIM_PORT" "$NGINX_PORT" >"$WORK/nginx/nginx.conf"
"$NGINX" -t -q -p "$WORK/nginx/" -c nginx.conf -e error.log || die "nginx rejected its configuration"

"$BIN/agentsim" -listen "127.0.0.1:$SIM_PORT" -delta "$DELTA" -idle-hold 5m >"$WORK/agentsim.log" 2>&1 &
SIM_PID=$!
PIDS+=("$SIM_PID")
"$NGINX" -p "$WORK/nginx/" -c nginx.conf -e error.log &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
"$BIN/aguard" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$AGUARD_PORT" \
	--admin-listen "127.0.0.1:$ADMIN_PORT" --drain-timeout 2s --log-format json >"$WORK/aguard.log" 2>&1 &
AGUARD_PID=$!
PIDS+=("$AGUARD_PID")
# A throwaway Redis for the ledger: loopback, no snapshots, no AOF, no dir of its own.
(cd "$WORK" && exec "$REDIS" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
	--protected-mode yes --loglevel warning) >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for i in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break
	((i < 100)) || die "redis-server does not listen on 127.0.0.1:$REDIS_PORT (see $WORK/redis.log)"
	sleep 0.1
done
"$BIN/aguard" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$AGUARD_REDIS_PORT" \
	--admin-listen "127.0.0.1:$ADMIN_REDIS_PORT" --drain-timeout 2s --log-format json \
	--redis "redis://127.0.0.1:$REDIS_PORT/0" >"$WORK/aguard-redis.log" 2>&1 &
AGUARD_REDIS_PID=$!
PIDS+=("$AGUARD_REDIS_PID")
# aguardprof -redis is the same data plane built in-process with the ledger
# (proxy.Options.State) on the same Redis (db 1): a cross-check of the
# serve --redis column, and the process profile.sh profiles.
"$BIN/aguardprof" -upstream "http://127.0.0.1:$SIM_PORT" -listen "127.0.0.1:$LEDGER_PORT" \
	-redis "redis://127.0.0.1:$REDIS_PORT/1" -log "$WORK/ledger.log" >"$WORK/ledger.stderr" 2>&1 &
LEDGER_PID=$!
PIDS+=("$LEDGER_PID")

for port in "$SIM_PORT" "$NGINX_PORT" "$AGUARD_PORT" "$AGUARD_REDIS_PORT" "$LEDGER_PORT"; do
	for i in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		((i < 100)) || die "nothing listens on 127.0.0.1:$port (see $WORK/*.log)"
		sleep 0.1
	done
done
log "agentsim pid $SIM_PID :$SIM_PORT, nginx pid $NGINX_PID :$NGINX_PORT, aguard pid $AGUARD_PID :$AGUARD_PORT"
log "redis-server pid $REDIS_PID :$REDIS_PORT, aguard --redis pid $AGUARD_REDIS_PID :$AGUARD_REDIS_PORT, aguardprof -redis pid $LEDGER_PID :$LEDGER_PORT"

# --- noise --------------------------------------------------------------------
# busy_cpus SECONDS: CPUs busy (all processes) over an interval, from /proc/stat.
busy_cpus() {
	local a b
	a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
	sleep "$1"
	b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
	awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN{split(a,x," "); split(b,y," "); busy=y[1]-x[1]; idle=y[2]-x[2];
		if (busy+idle>0) printf "%.2f", n*busy/(busy+idle); else print 0}'
}

# quiet FILE: wait while other work keeps the machine busy; record the noise.
# The 1-minute load average lags (it still holds this script's previous
# phase), so a machine whose CPUs are idle right now also counts as quiet.
quiet() {
	local l1 busy
	while :; do
		l1=$(cut -d' ' -f1 /proc/loadavg)
		busy=$(busy_cpus 3)
		if awk -v l="$l1" -v b="$busy" -v ml="$MAX_LOAD" -v mb="$MAX_BUSY" 'BEGIN{exit !(l <= ml || b <= mb)}'; then
			echo "load $l1, busy $busy" >"$1"
			return
		fi
		if ((WAITED >= WAIT_BUDGET)); then
			log "still busy after ${WAITED}s of waiting: measuring anyway (marked noisy)"
			echo "load $l1, busy $busy (noisy)" >"$1"
			return
		fi
		log "machine busy (load $l1, $busy CPUs busy by others): waiting 30 s"
		sleep 30
		WAITED=$((WAITED + 30))
	done
}

# --- measurements -------------------------------------------------------------
TARGETS=(direct nginx aguard aguard-redis aguard-ledger)
declare -A URL=([direct]="http://127.0.0.1:$SIM_PORT/agent" [nginx]="http://127.0.0.1:$NGINX_PORT/agent"
	[aguard]="http://127.0.0.1:$AGUARD_PORT/agent" [aguard-redis]="http://127.0.0.1:$AGUARD_REDIS_PORT/agent"
	[aguard-ledger]="http://127.0.0.1:$LEDGER_PORT/agent")
declare -A PROXY_PID=([nginx]=$NGINX_PID [aguard]=$AGUARD_PID [aguard-redis]=$AGUARD_REDIS_PID [aguard-ledger]=$LEDGER_PID)

# Progress: the phases run twice, first as a plan (PLAN=1: measure only
# adds up each measurement's expected length), then for real. The time left
# is the plan's remainder, scaled by how long the measurements so far took
# against their plan.
PLAN=1
STEPS=0
STEP=0
EST_TOTAL=0
EST_DONE=0
T0=0

# expected LOADGEN-ARGS...: seconds a loadgen run is expected to take, with
# the quiet check before it.
expected() {
	local t=4 idle=0 settle=2
	while (($#)); do
		case $1 in
		-ramp | -warmup | -duration) t=$((t + ${2%s})) && shift ;;
		-settle) settle=${2%s} && shift ;;
		-idle) idle=1 ;;
		esac
		shift
	done
	((idle)) && t=$((t + 2 * settle + 1))
	echo "$t"
}

# progress LABEL: logs the measurement about to run and the time left. The
# plan's remainder is scaled by how long the measurements so far took
# against their plan (at least 1×, at most 3×), waits for quiet left out:
# those are unknown ahead, and the log shows them as they happen.
progress() {
	local now left
	now=$(date +%s)
	left=$((EST_TOTAL - EST_DONE))
	if ((EST_DONE > 0)); then
		left=$(awk -v l="$left" -v e="$((now - T0 - WAITED))" -v d="$EST_DONE" 'BEGIN{f=e/d; if (f<1) f=1; if (f>3) f=3; printf "%d", l*f}')
	fi
	log "[$STEP/$STEPS] $1 — about $((left / 60)) min $((left % 60)) s left, besides waits for quiet (${WAITED} s so far)"
}

# measure PHASE TARGET QUERY LOADGEN-ARGS... (M_URL and M_PID, when set,
# replace the target's URL and proxy process: the fresh proxies of idlesweep).
measure() {
	local phase=$1 target=$2 query=$3
	shift 3
	local est
	est=$(expected "$@")
	if ((PLAN)); then
		STEPS=$((STEPS + 1))
		EST_TOTAL=$((EST_TOTAL + est))
		return
	fi
	STEP=$((STEP + 1))
	local label=$phase
	[[ $phase == unpaced-r* ]] && label="unpaced, round ${phase#unpaced-r} of $UNPACED_ROUNDS"
	[[ $phase == paced-r* ]] && label="paced, round ${phase#paced-r} of $PACED_ROUNDS"
	[[ $phase == tools-r* ]] && label="tools, round ${phase#tools-r} of $TOOLS_ROUNDS"
	if [[ $phase == sweep-n*-r* ]]; then
		local n=${phase#sweep-n}
		label="sweep, round ${phase##*-r} of $SWEEP_ROUNDS, ${n%-r*} streams"
	fi
	progress "$label / $target"
	local url=${M_URL:-${URL[$target]}} pid=${M_PID:-${PROXY_PID[$target]:-}}
	local watch=(-watch "agentsim=$SIM_PID")
	[[ -n $pid ]] && watch+=(-watch "proxy=$pid")
	[[ $target == aguard-redis || $target == aguard-ledger ]] && watch+=(-watch "redis=$REDIS_PID")
	quiet "$RES/$phase-$target.noise"
	log "$phase / $target ($(cat "$RES/$phase-$target.noise"))"
	timeout 300 "$BIN/loadgen" -json -label "$phase-$target" -url "$url?$query" "${watch[@]}" \
		-agent-stats "http://127.0.0.1:$SIM_PORT/stats" "$@" \
		>"$RES/$phase-$target.json" || die "loadgen failed in $phase / $target"
	EST_DONE=$((EST_DONE + est))
}

# start_fresh TARGET: a new nginx or aguard for idlesweep (FRESH_PID, FRESH_URL).
FRESH_PID=""
FRESH_URL=""
start_fresh() {
	local port
	case $1 in
	nginx)
		rm -rf "$WORK/nginx-fresh" && mkdir -p "$WORK/nginx-fresh/tmp"
		nginx_conf "$SIM_PORT" "$FRESH_NGINX_PORT" >"$WORK/nginx-fresh/nginx.conf"
		"$NGINX" -p "$WORK/nginx-fresh/" -c nginx.conf -e error.log &
		FRESH_PID=$!
		port=$FRESH_NGINX_PORT
		;;
	aguard)
		"$BIN/aguard" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$FRESH_AGUARD_PORT" \
			--admin-listen "127.0.0.1:$FRESH_ADMIN_PORT" --drain-timeout 2s --log-format json >>"$WORK/aguard-fresh.log" 2>&1 &
		FRESH_PID=$!
		port=$FRESH_AGUARD_PORT
		;;
	esac
	PIDS+=("$FRESH_PID")
	FRESH_URL="http://127.0.0.1:$port/agent"
	for i in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
		((i < 100)) || die "the fresh $1 does not listen on 127.0.0.1:$port"
		sleep 0.1
	done
}

# stop_fresh: stops the fresh proxy and waits for it to exit.
stop_fresh() {
	kill -TERM "$FRESH_PID" 2>/dev/null || true
	wait "$FRESH_PID" 2>/dev/null || true
	local keep=() pid
	for pid in "${PIDS[@]}"; do
		[[ $pid == "$FRESH_PID" ]] || keep+=("$pid")
	done
	PIDS=("${keep[@]}")
	FRESH_PID=""
}

# phase NAME: true when PHASES includes it.
phase() { [[ " $PHASES " == *" $1 "* ]]; }

# The unpaced, paced and tools phases decide the throughput and CPU
# targets, and one run of them varies by ±5 % (paced) to ±15 % (tools,
# unpaced) on a shared machine, more as the machine's load drifts over a
# phase: each runs UNPACED_ROUNDS (PACED_ROUNDS, TOOLS_ROUNDS) times, the
# targets interleaved, and the report shows each target's median round (by
# events/s delivered for unpaced; by the proxy's CPU per event for the
# others, and for direct by p99 latency), with every round listed. A tools round has
# threads of its own (loadgen -thread-prefix): the calls an earlier round
# left pending stay out of its way.
run_phases() {
	local t r n rate ramp
	if phase idle; then
		for t in "${TARGETS[@]}"; do
			measure idle "$t" "idle=true" -idle -streams "$IDLE_STREAMS" -ramp 2s -settle 2s
		done
	fi
	if phase unpaced; then
		for r in $(seq "$UNPACED_ROUNDS"); do
			for t in "${TARGETS[@]}"; do
				measure "unpaced-r$r" "$t" "events=1000000000&rate=0" -streams "$UNPACED_STREAMS" -ramp 1s -warmup 2s -duration "${UNPACED_SECONDS}s"
			done
		done
	fi
	if phase paced; then
		for r in $(seq "$PACED_ROUNDS"); do
			for t in "${TARGETS[@]}"; do
				measure "paced-r$r" "$t" "events=1000000000&rate=$PACED_RATE" -streams "$PACED_STREAMS" -ramp 2s -warmup 3s -duration "${PACED_SECONDS}s"
			done
		done
	fi
	# CPU per event against the number of streams, at one total event rate:
	# what each open stream costs beyond its events. The host's own cost
	# per event drifts by ±15 % over minutes (nginx's figure at one count,
	# measured twice a few minutes apart, moved from 16.8 to 21.5 s per 1M
	# events): each count is measured SWEEP_ROUNDS times and its median
	# reported, and the counts run in ascending order in odd rounds and in
	# descending order in even ones, so that a drift over the phase does not
	# line up with the stream count.
	if phase sweep; then
		local order
		for r in $(seq "$SWEEP_ROUNDS"); do
			order=$SWEEP_STREAMS
			((r % 2)) || order=$(printf '%s\n' $SWEEP_STREAMS | tac | paste -sd' ')
			for n in $order; do
				rate=$(awk -v t="$SWEEP_TOTAL_RATE" -v n="$n" 'BEGIN{printf "%g", t/n}')
				ramp=$((n / 1000 > 2 ? n / 1000 : 2))
				for t in nginx aguard; do
					measure "sweep-n$n-r$r" "$t" "events=1000000000&rate=$rate" -streams "$n" -ramp "${ramp}s" -warmup 3s -duration "${SWEEP_SECONDS}s"
				done
			done
		done
	fi
	if phase tools; then
		for r in $(seq "$TOOLS_ROUNDS"); do
			for t in "${TARGETS[@]}"; do
				measure "tools-r$r" "$t" "events=$TOOLS_EVENTS&rate=$TOOLS_RATE&tools=$TOOLS_CALLS&args=$TOOLS_ARGS&frontend=true" \
					-streams "$TOOLS_STREAMS" -ramp "${TOOLS_RAMP}s" -warmup 2s -duration "${TOOLS_SECONDS}s" -thread-prefix "tools-r$r-thread-"
			done
		done
	fi
	# Memory per idle stream against the number of streams, each count on a
	# freshly started proxy (Go keeps the heap an earlier count grew).
	if phase idlesweep; then
		for n in $IDLE_COUNTS; do
			ramp=$((n / 2000 > 2 ? n / 2000 : 2))
			for t in nginx aguard; do
				((PLAN)) || start_fresh "$t"
				M_URL=$FRESH_URL M_PID=$FRESH_PID measure "idle-n$n" "$t" "idle=true" -idle -streams "$n" -ramp "${ramp}s" -settle 2s -open-timeout 120s
				((PLAN)) || stop_fresh
			done
		done
	fi
}

run_phases
log "plan: $STEPS measurements (phases: $PHASES), about $((EST_TOTAL / 60)) min without waits for quiet"
PLAN=0
T0=$(date +%s)
run_phases

# figure FILE [eps]: the proxy's CPU s per 1M events, or p99 ms without a
# proxy; with eps, the events/s delivered.
figure() {
	if [[ ${2:-} == eps ]]; then
		awk '/"eventsPerSecond"/{gsub(/[,]/,"",$2); printf "%.0f", $2}' "$1"
		return
	fi
	awk '/"p99Ms"/{gsub(/[,]/,"",$2); p99=$2} /"name": "proxy"/{px=1} px && /cpuSecondsPerMillionEvents/{gsub(/[,]/,"",$2); cpu=$2; px=0}
		END{if (cpu != "") printf "%.2f", cpu; else printf "%.3f", p99}' "$1"
}
# median_rounds PHASE ROUNDS [eps] [TARGET...]: makes each target's median
# round of PHASE (by figure) its PHASE result, and prints every round's
# figure ("target r1 / r2 …; …"). The targets are TARGETS unless given.
median_rounds() {
	local phase=$1 rounds=$2 by=${3:-} t r median text="" figures
	local targets=("${TARGETS[@]}")
	(($# > 3)) && targets=("${@:4}")
	for t in "${targets[@]}"; do
		figures=()
		for r in $(seq "$rounds"); do
			figures+=("$(figure "$RES/$phase-r$r-$t.json" "$by")")
		done
		# The round of the median figure (rounds are numbered from 1).
		median=$(for i in "${!figures[@]}"; do echo "${figures[$i]} $((i + 1))"; done | sort -n | awk '{a[NR]=$2} END{print a[int((NR+1)/2)]}')
		cp "$RES/$phase-r$median-$t.json" "$RES/$phase-$t.json"
		cp "$RES/$phase-r$median-$t.noise" "$RES/$phase-$t.noise"
		r=$(printf ' / %s' "${figures[@]}")
		text+="${text:+; }$t ${r# / }"
	done
	printf '%s' "$text"
}
if phase unpaced; then
	UNPACED_ROUNDS_TEXT=$(median_rounds unpaced "$UNPACED_ROUNDS" eps)
fi
if phase paced; then
	PACED_ROUNDS_TEXT=$(median_rounds paced "$PACED_ROUNDS")
fi
if phase tools; then
	TOOLS_ROUNDS_TEXT=$(median_rounds tools "$TOOLS_ROUNDS")
fi
if phase sweep; then
	for n in $SWEEP_STREAMS; do
		SWEEP_ROUNDS_TEXT+="${SWEEP_ROUNDS_TEXT:+; }$n streams: $(median_rounds "sweep-n$n" "$SWEEP_ROUNDS" "" nginx aguard)"
	done
fi
if command -v redis-cli >/dev/null; then
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info commandstats >"$RES/redis-commandstats.txt" 2>/dev/null || true
fi
log "measured in $(( ($(date +%s) - T0) / 60 )) min $(( ($(date +%s) - T0) % 60 )) s (waited ${WAITED} s for quiet)"

# --- report ---------------------------------------------------------------------
{
	echo "Run $(date -u +'%Y-%m-%d %H:%M UTC') with \`bash bench/run.sh\`; aguard at \`$(cd "$ROOT" && git describe --always --dirty 2>/dev/null || echo unknown)\`."
	echo
	echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
	echo "- $(go version | cut -d' ' -f3-), $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') (worker_processes auto = $(nproc))"
	echo "- workload: agentsim AG-UI 1.0 runs of TEXT_MESSAGE_CONTENT events, ${DELTA}-byte deltas, no tool calls (pass-through), each event its own flushed SSE frame; agentsim, the proxy and loadgen share the machine"
	echo "- unpaced: $UNPACED_STREAMS streams, ${UNPACED_SECONDS}s window after 1s ramp + 2s warm-up, $UNPACED_ROUNDS rounds with the targets interleaved, each target's median round (by events/s) shown; paced: $PACED_STREAMS streams × $PACED_RATE events/s, ${PACED_SECONDS}s window after 2s ramp + 3s warm-up, $PACED_ROUNDS rounds with the targets interleaved, each target's median round shown; idle: $IDLE_STREAMS streams"
	echo "- unpaced rounds (events/s delivered), in order: $UNPACED_ROUNDS_TEXT"
	echo "- paced rounds (proxy CPU s per 1M events; direct: p99 ms), in order: $PACED_ROUNDS_TEXT"
	echo "- tool-call workload: $TOOLS_STREAMS streams × $TOOLS_RATE events/s (every event counted), runs of $TOOLS_EVENTS content events with $TOOLS_CALLS frontend tool calls of $TOOLS_ARGS-byte arguments (TOOL_CALL_ARGS of 256 B), left pending at RUN_FINISHED; ${TOOLS_SECONDS}s window after ${TOOLS_RAMP}s ramp + 2s warm-up, $TOOLS_ROUNDS rounds with the targets interleaved, each target's median round shown"
	echo "- tools rounds (proxy CPU s per 1M events; direct: p99 ms), in order: $TOOLS_ROUNDS_TEXT"
	echo "- sweep (nginx and aguard): $SWEEP_TOTAL_RATE events/s offered in all, shared by $(echo "$SWEEP_STREAMS" | sed 's/ /, /g') streams in turn, ${SWEEP_SECONDS}s window after a ramp of max(2 s, streams/1000 s) + 3s warm-up; $SWEEP_ROUNDS rounds, the counts in ascending order in odd rounds and descending in even ones, each count's median round shown"
	echo "- sweep rounds (proxy CPU s per 1M events), in order of the rounds: $SWEEP_ROUNDS_TEXT"
	echo "- idlesweep (nginx and aguard): $(echo "$IDLE_COUNTS" | sed 's/ /, /g') silent streams, each count on a freshly started proxy (open-file limit $NOFILE)"
	echo "- aguard + Redis: a second \`aguard serve\` with \`--redis redis://127.0.0.1:$REDIS_PORT/0\`, $("$REDIS" --version | cut -d' ' -f1-3) on loopback, \`--save '' --appendonly no\`"
	echo "- aguard + Redis ledger wired: \`bench/cmd/aguardprof -redis redis://127.0.0.1:$REDIS_PORT/1\` — the same data plane built in-process with the ledger in Redis, a cross-check of the serve --redis column"
	if [[ -s $RES/redis-commandstats.txt ]]; then
		echo "- Redis commands over the whole run (both aguards): $(grep -o '^cmdstat_[a-z]*:calls=[0-9]*' "$RES/redis-commandstats.txt" | sed 's/^cmdstat_//; s/:calls=/ /' | tr '\n' ',' | sed 's/,$//; s/,/, /g')"
	fi
} >"$WORK/meta.md"
mkdir -p "$(dirname "$OUT_MD")"
"$BIN/benchreport" -dir "$RES" -meta "$WORK/meta.md" -paced-rate "$PACED_RATE" -tools-rate "$TOOLS_RATE" -nofile "$NOFILE" | tee "$OUT_MD"
mkdir -p "${OUT_MD%.md}"
cp "$RES"/*.json "$RES"/*.noise "${OUT_MD%.md}/"
cp "$RES"/*.txt "${OUT_MD%.md}/" 2>/dev/null || true
"$BIN/benchplot" -dir "${OUT_MD%.md}" || die "benchplot failed"
log "wrote $OUT_MD, the raw results and the figures (PNG) in ${OUT_MD%.md}/"
