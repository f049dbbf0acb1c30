# bench/lib.sh — what the benchmark scripts share: logging, stopping the
# processes they started, waiting for a port, building aguard at git refs
# (conns.sh, syscalls.sh, segments.sh, ab.sh), and nginx's configuration (those and
# run.sh, which defines its own logging and clean-up after sourcing this).
# Sourced, not run; the script sets ROOT, PIDS (the processes to stop on
# exit) and WORK (its folder).

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

# refname REF: the name of REF's aguard binary, $WORK/aguard-<name>
# ("worktree" for ".").
refname() {
	if [[ $1 == . ]]; then echo worktree; else echo "${1//\//_}"; fi
}
# build_refs REF...: agentsim and loadgen from the working tree (and
# copyfloor when a REF is "copyfloor:MODE"), and one aguard per other REF (a
# git ref, or "." for the working tree; "nginx" is skipped, and so is a REF
# named twice), into $WORK.
build_refs() {
	local ref name tools=(./bench/cmd/agentsim ./bench/cmd/loadgen)
	[[ " $* " != *" copyfloor:"* ]] || tools+=(./bench/cmd/copyfloor)
	log "building ${tools[*]##*/} from the working tree"
	(cd "$ROOT" && go build -o "$WORK/" "${tools[@]}")
	for ref in "$@"; do
		[[ $ref != nginx && $ref != copyfloor:* ]] || continue
		name=$(refname "$ref")
		[[ ! -e $WORK/aguard-$name ]] || continue
		if [[ $ref == . ]]; then
			(cd "$ROOT" && go build -o "$WORK/aguard-$name" ./cmd/aguard)
		else
			mkdir -p "$WORK/src-$name"
			git -C "$ROOT" archive "$ref" | tar -x -C "$WORK/src-$name"
			(cd "$WORK/src-$name" && go build -o "$WORK/aguard-$name" ./cmd/aguard)
		fi
		log "built aguard at $ref"
	done
}

# The scripts that load nginx and one aguard per REF in turn behind one
# agentsim (syscalls.sh, segments.sh) set SIM_PORT, PROXY_PORT and
# ADMIN_PORT, and use the three functions below.
#
# turns_setup REF...: checks for nginx (NGINX), builds the REFs
# (build_refs), writes nginx's configuration and starts agentsim on
# SIM_PORT.
turns_setup() {
	NGINX=$(command -v nginx || true)
	[[ -n $NGINX ]] || die "nginx is not installed (apt-get install -y nginx-light)"
	build_refs "$@"
	mkdir -p "$WORK/nginx/tmp"
	nginx_conf "$SIM_PORT" "$PROXY_PORT" >"$WORK/nginx/nginx.conf"
	"$WORK/agentsim" -listen "127.0.0.1:$SIM_PORT" >"$WORK/agentsim.log" 2>&1 &
	PIDS+=($!)
	await "$SIM_PORT"
}
# turn_nginx: starts nginx on PROXY_PORT, its master's pid in TURN_PID.
turn_nginx() {
	"$NGINX" -p "$WORK/nginx/" -c nginx.conf -e error.log &
	TURN_PID=$!
	PIDS+=("$TURN_PID")
	await "$PROXY_PORT"
}
# turn_aguard REF: starts REF's `aguard serve` on PROXY_PORT in front of
# agentsim, its pid in TURN_PID.
turn_aguard() {
	local name
	name=$(refname "$1")
	"$WORK/aguard-$name" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$PROXY_PORT" \
		--admin-listen "127.0.0.1:$ADMIN_PORT" --drain-timeout 1s >"$WORK/aguard-$name.log" 2>&1 &
	TURN_PID=$!
	PIDS+=("$TURN_PID")
	await "$PROXY_PORT"
}

# nginx_conf SIM_PORT PROXY_PORT: nginx's configuration (on stdout) as an
# SSE reverse proxy on 127.0.0.1:PROXY_PORT in front of agentsim on
# SIM_PORT, run in the foreground from a prefix with a tmp/ folder:
#   nginx -p PREFIX -c nginx.conf -e error.log
nginx_conf() {
	cat <<EOF
# SSE reverse proxy in front of agentsim, loopback only, run in the foreground.
daemon off;
worker_processes auto;
worker_rlimit_nofile $(ulimit -n);
pid nginx.pid;
error_log error.log warn;
events { worker_connections $(ulimit -n); }
http {
    access_log off;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    client_body_buffer_size 64k;
    upstream agent {
        server 127.0.0.1:$1;
        keepalive 256;
    }
    server {
        listen 127.0.0.1:$2;
        location / {
            proxy_pass http://agent;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            gzip off;
        }
    }
}
EOF
}

# mode_load MODE [SHARE]: set QUERY and LOAD (loadgen's -streams, -ramp and
# -warmup) for ab.sh's and pair.sh's MODE (paced, unpaced, tools, cold or warm), with
# the streams divided among SHARE proxies loaded at once (default 1).
mode_load() {
	local share=${2:-1}
	case $1 in
	paced) QUERY="events=1000000000&rate=20" LOAD=(-streams $((1000 / share)) -ramp 2s -warmup 3s) ;;
	unpaced) QUERY="events=1000000000&rate=0" LOAD=(-streams $((50 / share)) -ramp 1s -warmup 2s) ;;
	tools) QUERY="events=200&rate=20&tools=2&args=1024&frontend=true" LOAD=(-streams $((200 / share)) -ramp 5s -warmup 2s) ;;
	# cold: the sweep's 3000-stream point (run.sh), where each stream is woken
	# once every 150 ms and finds its state cold in the cache.
	cold) QUERY="events=1000000000&rate=6.667" LOAD=(-streams $((3000 / share)) -ramp 3s -warmup 3s) ;;
	# warm: the sweep's 100-stream point, each stream woken every 5 ms.
	warm) QUERY="events=1000000000&rate=200" LOAD=(-streams $((100 / share)) -ramp 2s -warmup 3s) ;;
	*) die "MODE is paced, unpaced, tools, cold or warm, not $1" ;;
	esac
}
