#!/usr/bin/env bash
# Side-by-side proxy benchmark (issue #4): direct client→app, client→sidecar→app,
# client→sidecar→sidecar→app and client→nginx→app, HTTP/1.1 keep-alive, 1 KiB bodies.
# sidecar2 sends the hop between sidecars as HTTP/1.1, sidecar2h2 as h2c (the peer
# marking pilot puts on registered sidecars' endpoints).
# Interleaved rounds of: fortio fixed 2000 rps uniform (latency, CPU/req) and wrk
# closed-loop (max rps, CPU/req). CPU from /proc/<pid>/stat utime+stime deltas.
# The proxy rows run tools/bench/proxy/benchproxy (the sidecar's request path with a
# fixed config); the idle RSS of the real bin/sidecar, after activating examples/
# from a real pilot, comes from idlerss.sh and is compared with nginx's idle RSS.
# Usage: tools/bench/proxy/run.sh [rounds]   (env: DURATION=10s CONNS=32 WRK_CONNS=64;
# STEADY=S adds the idle sidecar's highest RSS over S more seconds of scrapes)
set -euo pipefail
ROUNDS=${1:-${ROUNDS:-3}}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
WRK_CONNS=${WRK_CONNS:-64}
QPS=${QPS:-2000}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
RUN=$(mktemp -d /tmp/weft-bench.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need nginx; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y wrk nginx-light >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk nginx-light >/dev/null; }
	else
		echo "need wrk and nginx (apt-get install -y wrk nginx-light)" >&2; exit 1
	fi
fi
FORTIO=$(command -v fortio || echo "$(go env GOPATH)/bin/fortio")
[ -x "$FORTIO" ] || go install fortio.org/fortio@v1.66.5
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

cd "$ROOT"
go build -o "$RUN/benchapp" ./tools/bench/proxy/benchapp
go build -o "$RUN/benchproxy" ./tools/bench/proxy/benchproxy
# The real binaries, built as `make build` builds them (the sidecar's flags matter
# for its RSS), for the idle-RSS measurement of bin/sidecar below.
make -s build BIN="$RUN/bin" >/dev/null

APP=127.0.0.1:19100
SC1=127.0.0.1:19101   # sidecar in front of the app (also the 2nd hop of the chain)
SC2=127.0.0.1:19102   # first sidecar of the two-sidecar chain, HTTP/1.1 to SC1 (plain endpoint)
SC3=127.0.0.1:19104   # first sidecar of the two-sidecar chain, SC1 marked a peer sidecar: h2c to it
NGX=127.0.0.1:19103

start() { "$@" & PIDS+=($!); }
# Go runtime setting for the sidecars. With schedtrace set, sysmon never parks in
# sysmonwait, so a syscall does not have to futex-wake it: at 2,000 rps that wake is
# ~10% of the proxy's CPU (pprof: runtime.entersyscallWakeSysmon). The hourly SCHED
# line on stderr is the price. SIDECAR_GODEBUG= (empty) measures the default runtime.
SIDECAR_GODEBUG=${SIDECAR_GODEBUG-schedtrace=3600000}
start "$RUN/benchapp" -listen $APP -size 1024
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $SC1 -upstream $APP; PID_SC1=$!
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $SC2 -upstream $SC1; PID_SC2=$!
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $SC3 -upstream $SC1 -peer; PID_SC3=$!
mkdir -p "$RUN/nginx"
cat >"$RUN/nginx/nginx.conf" <<NGX
worker_processes 2;
daemon off;
error_log $RUN/nginx/error.log warn;
pid $RUN/nginx/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $RUN/nginx/body; proxy_temp_path $RUN/nginx/proxy;
    fastcgi_temp_path $RUN/nginx/fcgi; uwsgi_temp_path $RUN/nginx/uwsgi; scgi_temp_path $RUN/nginx/scgi;
    keepalive_requests 1000000;
    upstream be { server $APP; keepalive 128; keepalive_requests 1000000; }
    server {
        listen $NGX;
        location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
NGX
start "$NGINX" -c "$RUN/nginx/nginx.conf" -p "$RUN/nginx"; PID_NGX=$!

# Wait for readiness by content (200 with the full body), not by port.
for u in $APP $SC1 $SC2 $SC3 $NGX; do
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$u/")" = 200 ] && break
		sleep 0.1
	done
done

# CPU ticks (utime+stime) summed over a process and its children threads/processes.
ticks() {
	local t=0
	for p in "$@"; do
		for c in $p $(pgrep -P "$p" || true); do
			t=$((t + $(awk '{print $14+$15}' "/proc/$c/stat")))
		done
	done
	echo $t
}
rss_kb() { local t=0; for p in "$@"; do for c in $p $(pgrep -P "$p" || true); do t=$((t + $(awk '/VmRSS/{print $2}' "/proc/$c/status"))); done; done; echo $t; }
HZ=$(getconf CLK_TCK)

declare -A TARGET=([direct]=$APP [sidecar]=$SC1 [sidecar2]=$SC2 [sidecar2h2]=$SC3 [nginx]=$NGX)
declare -A PROCS=([direct]="" [sidecar]="$PID_SC1" [sidecar2]="$PID_SC2 $PID_SC1" [sidecar2h2]="$PID_SC3 $PID_SC1" [nginx]="$PID_NGX")
ORDER=(direct sidecar sidecar2 sidecar2h2 nginx)
IDLE_RSS_SC=$(rss_kb "$PID_SC1")
IDLE_RSS_NGX=$(rss_kb "$PID_NGX")
# Idle RSS of the real bin/sidecar after it activated examples/ from a real pilot
# (its own loopback addresses; nothing else is running on them).
IDLE_REAL=$(bash tools/bench/proxy/idlerss.sh "$RUN/bin" | tee "$RUN/idlerss.txt" | tail -1)
RES="$RUN/results.tsv"
: >"$RES"

for r in $(seq "$ROUNDS"); do
	for name in "${ORDER[@]}"; do
		url="http://${TARGET[$name]}/"
		procs=${PROCS[$name]}
		echo "round $r $name: load $(cut -d' ' -f1 /proc/loadavg)" >&2
		# Fixed-rate, uniform arrivals, 10 µs histogram resolution.
		t0=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		"$FORTIO" load -quiet -uniform -r 0.00001 -qps "$QPS" -c "$CONNS" -t "$DURATION" -json "$RUN/f.json" "$url" >/dev/null 2>&1
		t1=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		read -r n p50 p99 < <(python3 - "$RUN/f.json" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
pc={p["Percentile"]:p["Value"] for p in d["DurationHistogram"]["Percentiles"]}
print(d["DurationHistogram"]["Count"], pc.get(50)*1e3, pc.get(99)*1e3)
PY
)
		cpu_fixed=$(python3 -c "print(($t1-$t0)/$HZ*1e6/$n if $n else 0)")
		# Closed loop at max rate.
		t0=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		out=$(wrk -t1 -c"$WRK_CONNS" -d"$DURATION" "$url")
		t1=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		reqs=$(echo "$out" | awk '/requests in/{print $1}')
		rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
		cpu_max=$(python3 -c "print(($t1-$t0)/$HZ*1e6/$reqs if $reqs else 0)")
		rss=$( [ -n "$procs" ] && rss_kb $procs || echo 0 )
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$p50" "$p99" "$cpu_fixed" "$rps" "$cpu_max" "$rss" >>"$RES"
	done
done

python3 - "$RES" "$IDLE_RSS_SC" "$SIDECAR_GODEBUG" "$IDLE_RSS_NGX" "$IDLE_REAL" <<'PY'
import sys, statistics as st
rows=[l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
idle=int(sys.argv[2])/1024
idle_ngx=int(sys.argv[4])/1024
real={k:int(v)/1024 for k,v in (kv.split("=") for kv in sys.argv[5].split())}
names=["direct","sidecar","sidecar2","sidecar2h2","nginx"]
agg={}
for n in names:
    rs=[r for r in rows if r[1]==n]
    col=lambda i:[float(r[i]) for r in rs]
    agg[n]=dict(p50=st.median(col(2)),p99=min(col(3)),cpu=st.median(col(4)),rps=st.median(col(5)),cpumax=st.median(col(6)),rss=max(col(7))/1024,
                rpsr=(min(col(5)),max(col(5))), cpur=(min(col(4)),max(col(4))))
d,x=agg["direct"],agg["nginx"]
def ratio(a,b): return f"{a/b:.2f}x" if b else "n/a"
print(f"rounds={len(rows)//len(names)}  fixed: fortio -uniform -r 0.00001 -qps 2000  max: wrk -t1 -c64  (medians; p99 = best round)")
print(f"{'target':10} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/req@2k':>14} {'xnginx':>7} {'max rps':>9} {'xdirect':>8} {'xnginx':>7} {'cpu us/req@max':>15} {'xnginx':>7} {'RSS MiB':>8}")
for n in names:
    a=agg[n]
    print(f"{n:10} {a['p50']:7.3f} {a['p99']:7.3f} {a['cpu']:14.1f} {ratio(a['cpu'],x['cpu']) if n!='direct' else '':>7} {a['rps']:9.0f} {ratio(a['rps'],d['rps']):>8} {ratio(a['rps'],x['rps']):>7} {a['cpumax']:15.1f} {ratio(a['cpumax'],x['cpumax']) if n!='direct' else '':>7} {a['rss']:8.1f}")
print(f"benchproxy idle RSS: {idle:.1f} MiB; sidecar2* CPU counts both sidecars (sidecar2: HTTP/1.1 hop, sidecar2h2: h2c hop to a peer); sidecar GODEBUG={sys.argv[3]!r}")
r=real["idle_rss_kb"]
print(f"bin/sidecar idle RSS (examples/ activated from a real pilot): {r:.1f} MiB = anon {real['rss_anon_kb']:.1f} + file {real['rss_file_kb']:.1f}"
      f" (target <= 20 MiB: {'met' if r <= 20 else 'MISSED'}); {ratio(r, idle_ngx)} nginx's idle {idle_ngx:.1f} MiB (master + 2 workers)")
if "steady_max_rss_kb" in real:
    import os
    print(f"bin/sidecar steady idle ({os.environ.get('STEADY')}s more, /metrics scraped every 15s): highest RSS {real['steady_max_rss_kb']:.1f} MiB, {ratio(real['steady_max_rss_kb'], idle_ngx)} nginx's idle")
PY
