# bench/lib.sh — what conns.sh and syscalls.sh share: logging, stopping
# the processes they started, waiting for a port. Sourced, not run; the
# script sets PIDS (the processes to stop on exit) and WORK (its folder).

log() { printf '[%s %s] %s\n' "$(basename "$0")" "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
# stop PID...: TERM each, then wait for each.
stop() {
	local pid
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}
cleanup() {
	stop "${PIDS[@]}"
	rm -rf "$WORK"
}
# await PORT: until something listens on 127.0.0.1:PORT (10 s at most).
await() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	die "nothing listens on 127.0.0.1:$1"
}
