#!/usr/bin/env bash
# Side-by-side proxy benchmark (issues #4, #7), one interleaved run, HTTP/1.1
# keep-alive, 1 KiB bodies, every target in front of the same benchapp:
#   direct      client -> app
#   sidecar     client -> the REAL bin/sidecar (outbound listener) -> app. The sidecar
#               is configured by a real bin/pilot: a Service/Workload/Route for the
#               app ("bench", port 9080 -> the app's port) is applied with meshctl,
#               the sidecar connects with the publisher key, and the load is sent
#               with "Host: bench:9080" so it takes the Route like mesh traffic.
#   nginx       client -> nginx (worker_processes 2, upstream keepalive) -> app
#   nginx1      the same nginx with worker_processes 1 (not in the default TARGETS)
#   benchproxy* a STAND-IN, not the product: tools/bench/proxy/benchproxy, the
#               sidecar's request path with a fixed Go-built config and no metrics
#               Observer (benchproxy2: two of them chained over HTTP/1.1,
#               benchproxy2h2: the hop between them over h2c; benchproxy2mtls: the
#               same pair with the hop over mTLS (issue #9: TLS 1.3, ALPN h2, SVIDs
#               from a certs/ca mesh CA, bundle+CRL+SAN checks, the server port
#               STRICT), the row to read against benchproxy2h2 for mTLS's cost).
# Fairness: both proxies may use both cores. nginx has 2 worker processes; the real
# sidecar runs as shipped, with its default --concurrency 1 (one worker thread,
# GOMAXPROCS=1: it could use both cores with --concurrency 2, measured as
# TARGETS="... sidecar-alt" ALT_FLAGS="--concurrency 2"); benchproxy rows use Go's
# default GOMAXPROCS (2). The load generator and the app share the same 2 CPUs.
# Per round and target: fortio fixed 2000 rps uniform (latency, CPU/req), then wrk
# closed-loop (max rps, CPU/req). CPU from /proc/<pid>/stat utime+stime deltas over
# the proxy's processes. The idle RSS of the real sidecar is read after it
# activated the bench config (before any load), and by idlerss.sh with examples/.
# Usage: tools/bench/proxy/run.sh [rounds]   (env: RUNS=1 DURATION=10s CONNS=32 WRK_CONNS=64
# QPS=2000 TARGETS="direct sidecar nginx benchproxy benchproxy2 benchproxy2h2";
# STEADY=S adds the idle sidecar's highest RSS over S more seconds of scrapes;
# PPROF=FILE profiles the real sidecar (then built with -tags weftpprof, the
# profiler served with --pprof) for PPROF_SECONDS=8 under wrk load first;
# target sidecar-alt is a second real sidecar started with ALT_ENV="K=V ..." in its
# environment and ALT_FLAGS, for an A/B of a setting in the same interleaved run;
# ALT_BIN=PATH runs that binary as sidecar-alt instead, for an A/B of two builds
# (SIDECAR_BIN=PATH: that binary as the sidecar row instead of the tree's build;
# target sidecar-alt2 is a third, with ALT2_BIN, ALT2_ENV and ALT2_FLAGS),
# e.g. main's: CGO_ENABLED=0 go build -tags grpcnotrace -o /tmp/a/sidecar ./sidecar/cmd/sidecar;
# targets sidecar-pair and sidecar-pair-mtls (issue #9) are the REAL sidecar pair:
# client sidecar (with an identity: a token from meshctl, a certificate from pilot's
# CA) -> server sidecar -> app, the hop between them pooled HTTP/2; in sidecar-pair
# the server sidecar has no identity (h2c, plaintext), in sidecar-pair-mtls it has one
# and its inbound is STRICT (mTLS 1.3, ALPN h2, SPIFFE IDs checked both ways, CRL on
# every handshake). Both rows count both sidecars' CPU (per sidecar: half):
# TARGETS="sidecar-pair sidecar-pair-mtls nginx" tools/bench/proxy/run.sh 3;
# sidecar-pair-alt and sidecar-pair-mtls-alt are a second such pair (three more
# sidecars, Services pair-alt and pair-mtls-alt) running ALT_BIN with ALT_ENV and
# ALT_FLAGS, for a same-run A/B of the pair: TARGETS="sidecar-pair sidecar-pair-alt
# sidecar-pair-mtls sidecar-pair-mtls-alt" ALT_BIN=/tmp/a/sidecar run.sh 3.
# target sidecar-policy (issue #8) is the same real sidecar process as "sidecar" sent
# "Host: bench-policy:9080": a second Service on the same app whose DestinationPolicy
# sets circuit breaking (with a retry budget), every outlier detector and a local rate
# limit, and whose Route retries, all far from tripping, so its row beside "sidecar"
# is the request path's cost of those checks, CPU per request within 5%:
# TARGETS="sidecar sidecar-policy" tools/bench/proxy/run.sh 3;
# AB_CONCURRENT=1 runs the fixed-rate load of each X-alt at the same time as X's
# (both at QPS) so the shared machine's noise falls on both alike, for A/B
# ratios; wrk still runs one target at a time; PAIRS="A:B ..." does so for the pairs
# it names (e.g. PAIRS="sidecar:nginx": their CPU/req at QPS under the same noise);
# SYSCALLS=DIR counts each target's syscalls and context switches per request with
# perf stat (before the rounds; ROUNDS=0 for that alone): TARGETS="sidecar nginx"
# SYSCALLS=/tmp/sc run.sh 0; PERF=DIR records each target's kernel and user stacks
# with perf record -g the same way)
set -euo pipefail
ROUNDS=${1:-${ROUNDS:-3}}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-32}
WRK_CONNS=${WRK_CONNS:-64}
QPS=${QPS:-2000}
TARGETS=${TARGETS:-direct sidecar sidecar-policy sidecar-pair sidecar-pair-mtls nginx benchproxy benchproxy2 benchproxy2h2 benchproxy2mtls}
PPROF_SECONDS=${PPROF_SECONDS:-8}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
if [ "${RUNS:-1}" -gt 1 ]; then
	# RUNS=N: N whole runs of ROUNDS rounds each, every process started afresh per
	# run, reported together (rounds numbered on). A process keeps a bias of its
	# own for its life (identical sidecars in one run measured up to ~10% apart,
	# the sign changing between runs), which more rounds of one run do not
	# average out; fresh processes do.
	all=$(mktemp /tmp/weft-bench-runs.XXXXXX)
	for i in $(seq "$RUNS"); do
		RUNS=1 KEEP_RESULTS="$all.$i" KEEP_ARGS="$all.args" bash "$0" "$ROUNDS" >&2
		awk -F'\t' -v OFS='\t' -v off=$(((i - 1) * ROUNDS)) '{$1 += off; print}' "$all.$i" >>"$all"
		rm -f "$all.$i"
	done
	mapfile -d '' args <"$all.args"
	echo "=== all $RUNS runs of $ROUNDS rounds (fresh processes per run; idle RSS: the last run's)"
	python3 "$ROOT/tools/bench/proxy/report.py" "$all" "${args[@]}"
	[ -z "${KEEP_RESULTS:-}" ] || cp "$all" "$KEEP_RESULTS"
	rm -f "$all" "$all.args"
	exit 0
fi
RUN=$(mktemp -d /tmp/weft-bench.XXXXXX)
NAME=bench
# shellcheck source=tools/bench/proxy/lib.sh
. "$ROOT/tools/bench/proxy/lib.sh"

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
# for its CPU and RSS).
make -s build BIN="$RUN/bin" >/dev/null
if [ -n "${SIDECAR_BIN:-}" ]; then
	# A prebuilt sidecar as the "sidecar" row (and the pair's), e.g. an experiment
	# beside ALT_BIN's baseline with the tree left as it is.
	cp "$SIDECAR_BIN" "$RUN/bin/sidecar"
fi
if [ -n "${PPROF:-}${PPROF_PAIR:-}" ]; then
	# The profiler is linked in only with this tag (sidecar/admin PprofTag).
	CGO_ENABLED=0 go build -tags grpcnotrace,weftpprof -o "$RUN/bin/sidecar" ./sidecar/cmd/sidecar
	SIDECAR_FLAGS="${SIDECAR_FLAGS:-} --pprof"
fi

APP=127.0.0.1:19100
BP1=127.0.0.1:19101   # benchproxy in front of the app (also the 2nd hop of the chain)
BP2=127.0.0.1:19102   # first benchproxy of the chain, HTTP/1.1 to BP1 (plain endpoint)
BP3=127.0.0.1:19104   # first benchproxy of the chain, BP1 marked a peer sidecar: h2c to it
BP4=127.0.0.1:19105   # benchproxy in front of the app taking mTLS only (2nd hop of the mTLS chain)
BP5=127.0.0.1:19106   # first benchproxy of the mTLS chain: BP4 an mTLS peer sidecar, h2 inside TLS
NGX=127.0.0.1:19103
NGX1=127.0.0.1:19107  # nginx with one worker (target nginx1)
# The real sidecar and its pilot on loopback addresses of their own (n from the
# shell's pid, so concurrent runs do not collide).
IP_PREFIX=${IP_PREFIX:-127.$((20 + $$ % 200)).17}
PILOT_IP=$IP_PREFIX.254
SCR_IP=$IP_PREFIX.11
SCR=$SCR_IP:15001     # its outbound listener
HOST=bench:9080       # the Service's name and port, as the app would call it

start() { "$@" & PIDS+=($!); }
# Go runtime setting for the sidecars. With schedtrace set, sysmon never parks in
# sysmonwait, so a syscall does not have to futex-wake it: at 2,000 rps that wake is
# ~10% of the proxy's CPU (pprof: runtime.entersyscallWakeSysmon). The hourly SCHED
# line on stderr is the price. SIDECAR_GODEBUG= (empty) measures the default runtime.
SIDECAR_GODEBUG=${SIDECAR_GODEBUG-schedtrace=3600000}
start "$RUN/benchapp" -listen $APP -size 1024
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $BP1 -upstream $APP; PID_BP1=$!
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $BP2 -upstream $BP1; PID_BP2=$!
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $BP3 -upstream $BP1 -peer; PID_BP3=$!
"$RUN/benchproxy" -mtls-gen "$RUN/mtls"
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $BP4 -upstream $APP -mtls "$RUN/mtls" -mtls-as server; PID_BP4=$!
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/benchproxy" -listen $BP5 -upstream $BP4 -peer -mtls "$RUN/mtls" -mtls-as client; PID_BP5=$!
# nginx_conf DIR WORKERS LISTEN: nginx's configuration, written to DIR/nginx.conf.
nginx_conf() {
	mkdir -p "$1"
	cat >"$1/nginx.conf" <<NGX
worker_processes $2;
daemon off;
error_log $1/error.log warn;
pid $1/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1/body; proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fcgi; uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
    keepalive_requests 1000000;
    upstream be { server $APP; keepalive 128; keepalive_requests 1000000; }
    server {
        listen $3;
        location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
NGX
}
nginx_conf "$RUN/nginx" 2 $NGX
start "$NGINX" -c "$RUN/nginx/nginx.conf" -p "$RUN/nginx"; PID_NGX=$!
PID_NGX1=
if [[ " $TARGETS " == *" nginx1 "* ]]; then
	# The same nginx with one worker process: the shape of the sidecar's default
	# (--concurrency 1, one thread running Go code), for the fairness check.
	nginx_conf "$RUN/nginx1" 1 $NGX1
	start "$NGINX" -c "$RUN/nginx1/nginx.conf" -p "$RUN/nginx1"; PID_NGX1=$!
fi

# The real sidecar, configured by a real pilot.
start_pilot "$RUN/bin" "$PILOT_IP"
cat >"$RUN/mesh.yaml" <<MESH
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: bench, namespace: bench}
spec:
  selector: {app: bench}
  ports: [{name: http, port: 9080, targetPort: ${APP##*:}, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: bench-a, namespace: bench, labels: {app: bench}}
spec:
  address: ${APP%:*}
  serviceAccount: bench
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: bench, namespace: bench}
spec:
  hosts: [bench]
  http:
  - name: all
    match: [{path: {prefix: /}}]
    route:
    - destination: {service: bench, port: 9080}
      weight: 100
MESH
POLICY_HOST=bench-policy:9080
if [[ " $TARGETS " == *" sidecar-policy "* ]]; then
	# Every limit high enough never to trip at the bench's rates (wrk's 64
	# connections, fortio's 32); every outlier detector on, at Envoy's defaults
	# where the API has them (a 200-only app trips none).
	cat >>"$RUN/mesh.yaml" <<MESH
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: bench-policy, namespace: bench}
spec:
  selector: {app: bench}
  ports: [{name: http, port: 9080, targetPort: ${APP##*:}, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: bench-policy, namespace: bench}
spec:
  hosts: [bench-policy]
  http:
  - name: all
    match: [{path: {prefix: /}}]
    route:
    - destination: {service: bench-policy, port: 9080}
      weight: 100
    retries: {attempts: 2, retryOn: [5xx, gateway-error, reset, connect-failure]}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: bench-policy, namespace: bench}
spec:
  service: bench-policy
  connectionPool:
    maxConnections: 10000
    maxPendingRequests: 10000
    maxRequests: 100000
    maxRetries: 1000
    retryBudget: {percent: 20, minConcurrency: 3}
  outlierDetection:
    consecutive5xx: 5
    consecutiveGatewayErrors: 5
    consecutiveLocalOriginFailures: 5
    successRate: {minHosts: 1, requestVolume: 100, stdevFactor: 1.9}
    failurePercentage: {threshold: 85, minHosts: 1, requestVolume: 50}
    interval: 10s
    baseEjectionTime: 30s
    maxEjectionTime: 300s
    maxEjectionPercent: 10
    minHealthPercent: 50
  localRateLimit: {requestsPerSecond: 10000000, burst: 10000000}
MESH
fi
PAIR=0 PAIR_ALT=0
[[ " $TARGETS " == *" sidecar-pair"* ]] && PAIR=1
[[ " $TARGETS " == *" sidecar-pair-alt "* || " $TARGETS " == *" sidecar-pair-mtls-alt "* ]] && PAIR_ALT=1
PAIR_SVCS="pair pair-mtls"
[ "$PAIR_ALT" = 1 ] && PAIR_SVCS="$PAIR_SVCS pair-alt pair-mtls-alt"
if [ "$PAIR" = 1 ]; then
	for svc in $PAIR_SVCS; do
		cat >>"$RUN/mesh.yaml" <<MESH
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: $svc, namespace: bench}
spec:
  selector: {app: $svc}
  ports: [{name: http, port: 9080, targetPort: ${APP##*:}, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Route
metadata: {name: $svc, namespace: bench}
spec:
  hosts: [$svc]
  http:
  - name: all
    match: [{path: {prefix: /}}]
    route:
    - destination: {service: $svc, port: 9080}
      weight: 100
MESH
	done
	cat >>"$RUN/mesh.yaml" <<MESH
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: pair-mtls, namespace: bench}
spec:
  selector: {app: pair-mtls}
  mtls: STRICT
MESH
	if [ "$PAIR_ALT" = 1 ]; then
		cat >>"$RUN/mesh.yaml" <<MESH
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: pair-mtls-alt, namespace: bench}
spec:
  selector: {app: pair-mtls-alt}
  mtls: STRICT
MESH
	fi
fi
"$RUN/bin/meshctl" --pilot "http://$PILOT_IP:15014" apply -f "$RUN/mesh.yaml" >"$RUN/apply.log" 2>&1 || fail "meshctl apply failed"
SIDECAR_FLAGS=${SIDECAR_FLAGS:-}  # with PPROF set: built with the profiler, --pprof added
# shellcheck disable=SC2086 # SIDECAR_FLAGS is a word list
start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/bin/sidecar" --node-id bench-client --namespace bench --service-account client \
	--labels app=client --address "$SCR_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
	--state-dir "$RUN/state" --admin-addr "$SCR_IP:15000" --outbound-addr "$SCR" $SIDECAR_FLAGS >"$RUN/sidecar.log" 2>&1
PID_SCR=$!
SCA_IP=$IP_PREFIX.12
SCA=$SCA_IP:15001
PID_SCA=
if [[ " $TARGETS " == *" sidecar-alt "* ]]; then
	# shellcheck disable=SC2086 # ALT_ENV and ALT_FLAGS are word lists
	start env GODEBUG="$SIDECAR_GODEBUG" ${ALT_ENV:-} "${ALT_BIN:-$RUN/bin/sidecar}" --node-id bench-client-alt --namespace bench --service-account client \
		--labels app=client --address "$SCA_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
		--state-dir "$RUN/state-alt" --admin-addr "$SCA_IP:15000" --outbound-addr "$SCA" ${ALT_FLAGS:-} >"$RUN/sidecar-alt.log" 2>&1
	PID_SCA=$!
fi
SCA2_IP=$IP_PREFIX.19
SCA2=$SCA2_IP:15001
PID_SCA2=
if [[ " $TARGETS " == *" sidecar-alt2 "* ]]; then
	# A third real sidecar, as sidecar-alt with ALT2_BIN, ALT2_ENV and ALT2_FLAGS:
	# two variants, or a variant and the baseline again (an A/A control), in one run.
	# shellcheck disable=SC2086 # ALT2_ENV and ALT2_FLAGS are word lists
	start env GODEBUG="$SIDECAR_GODEBUG" ${ALT2_ENV:-} "${ALT2_BIN:-$RUN/bin/sidecar}" --node-id bench-client-alt2 --namespace bench --service-account client \
		--labels app=client --address "$SCA2_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
		--state-dir "$RUN/state-alt2" --admin-addr "$SCA2_IP:15000" --outbound-addr "$SCA2" ${ALT2_FLAGS:-} >"$RUN/sidecar-alt2.log" 2>&1
	PID_SCA2=$!
fi
PC_IP=$IP_PREFIX.15  # the pair's client sidecar (identity)
SP_IP=$IP_PREFIX.13  # the plain pair's server sidecar (no identity: h2c)
SM_IP=$IP_PREFIX.14  # the mTLS pair's server sidecar (identity, STRICT)
PC=$PC_IP:15001
PID_PC= PID_SP= PID_SM=
if [ "$PAIR" = 1 ]; then
	# ident NAME SA: the flags giving a sidecar an identity from pilot's CA.
	ident() {
		"$RUN/bin/meshctl" --pilot "http://$PILOT_IP:15014" token create --namespace bench --service-account "$2" --ttl 1h >"$RUN/$1.token" ||
			fail "meshctl token create for $1"
		echo --token-file "$RUN/$1.token" --ca-root "$RUN/pilot/ca/root.pem" --pilot "$PILOT_IP:15012"
	}
	# shellcheck disable=SC2046,SC2086 # word lists
	start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/bin/sidecar" --node-id pair-plain --namespace bench --service-account pair \
		--labels app=pair --address "$SP_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
		--state-dir "$RUN/state-sp" --admin-addr "$SP_IP:15000" --outbound-addr "$SP_IP:15001" $SIDECAR_FLAGS >"$RUN/sidecar-sp.log" 2>&1
	PID_SP=$!
	# shellcheck disable=SC2046,SC2086
	start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/bin/sidecar" --node-id pair-mtls --namespace bench --service-account pair-mtls \
		--labels app=pair-mtls --address "$SM_IP" $(ident sm pair-mtls) \
		--state-dir "$RUN/state-sm" --admin-addr "$SM_IP:15000" --outbound-addr "$SM_IP:15001" $SIDECAR_FLAGS >"$RUN/sidecar-sm.log" 2>&1
	PID_SM=$!
	# shellcheck disable=SC2046,SC2086
	start env GODEBUG="$SIDECAR_GODEBUG" "$RUN/bin/sidecar" --node-id pair-client --namespace bench --service-account client \
		--labels app=client --address "$PC_IP" $(ident pc client) \
		--state-dir "$RUN/state-pc" --admin-addr "$PC_IP:15000" --outbound-addr "$PC" $SIDECAR_FLAGS >"$RUN/sidecar-pc.log" 2>&1
	PID_PC=$!
	for ip in $SP_IP $SM_IP $PC_IP; do until_ok 20 sidecar_ready "$ip" || fail "sidecar $ip not ready"; done
fi
PCA_IP=$IP_PREFIX.16  # the alt pair (ALT_BIN, ALT_ENV, ALT_FLAGS on all three): client,
SPA_IP=$IP_PREFIX.17  # plain server (Service pair-alt),
SMA_IP=$IP_PREFIX.18  # mTLS server (Service pair-mtls-alt)
PCA=$PCA_IP:15001
PID_PCA= PID_SPA= PID_SMA=
if [ "$PAIR_ALT" = 1 ]; then
	ALT=${ALT_BIN:-$RUN/bin/sidecar}
	# shellcheck disable=SC2046,SC2086 # word lists
	start env GODEBUG="$SIDECAR_GODEBUG" ${ALT_ENV:-} "$ALT" --node-id pair-plain-alt --namespace bench --service-account pair \
		--labels app=pair-alt --address "$SPA_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
		--state-dir "$RUN/state-spa" --admin-addr "$SPA_IP:15000" --outbound-addr "$SPA_IP:15001" $SIDECAR_FLAGS ${ALT_FLAGS:-} >"$RUN/sidecar-spa.log" 2>&1
	PID_SPA=$!
	# shellcheck disable=SC2046,SC2086
	start env GODEBUG="$SIDECAR_GODEBUG" ${ALT_ENV:-} "$ALT" --node-id pair-mtls-alt --namespace bench --service-account pair-mtls \
		--labels app=pair-mtls-alt --address "$SMA_IP" $(ident sma pair-mtls) \
		--state-dir "$RUN/state-sma" --admin-addr "$SMA_IP:15000" --outbound-addr "$SMA_IP:15001" $SIDECAR_FLAGS ${ALT_FLAGS:-} >"$RUN/sidecar-sma.log" 2>&1
	PID_SMA=$!
	# shellcheck disable=SC2046,SC2086
	start env GODEBUG="$SIDECAR_GODEBUG" ${ALT_ENV:-} "$ALT" --node-id pair-client-alt --namespace bench --service-account client \
		--labels app=client --address "$PCA_IP" $(ident pca client) \
		--state-dir "$RUN/state-pca" --admin-addr "$PCA_IP:15000" --outbound-addr "$PCA" $SIDECAR_FLAGS ${ALT_FLAGS:-} >"$RUN/sidecar-pca.log" 2>&1
	PID_PCA=$!
	for ip in $SPA_IP $SMA_IP $PCA_IP; do until_ok 20 sidecar_ready "$ip" || fail "sidecar $ip not ready"; done
fi
until_ok 20 sidecar_ready "$SCR_IP" || fail "real sidecar not ready"
"$RUN/bin/meshctl" --pilot "http://$PILOT_IP:15014" rollout status --wait --timeout 20s >"$RUN/rollout.log" 2>&1 ||
	fail "pilot's latest revision not effective on the real sidecar"

# Wait for readiness by content (200 with the full body), not by port.
ok200() { [ "$(curl -s -o /dev/null -w '%{http_code} %{size_download}' -H "Host: ${2:-$HOST}" "http://$1/")" = "200 1024" ]; }
for u in $APP $BP1 $BP2 $BP3 $NGX ${PID_NGX1:+$NGX1} $SCR ${PID_SCA:+$SCA} ${PID_SCA2:+$SCA2}; do
	until_ok 10 ok200 "$u" || fail "$u does not answer 200 with 1024 bytes"
done
# mtls_seen IP: the sidecar on IP counted a server-side mTLS handshake (the counter
# may trail the answer that the handshake carried by a moment: polled).
mtls_seen() { curl -s "http://$1:15000/metrics" | grep -Eq '^weft_sidecar_mtls_handshakes_total\{result="(ok|resumed)",side="server"\} [1-9]'; }
if [ "$PAIR" = 1 ]; then
	for h in pair:9080 pair-mtls:9080; do
		until_ok 20 ok200 "$PC" "$h" || fail "$PC does not answer $h with 200 and 1024 bytes"
	done
	if [ "$PAIR_ALT" = 1 ]; then
		for h in pair-alt:9080 pair-mtls-alt:9080; do
			until_ok 20 ok200 "$PCA" "$h" || fail "$PCA does not answer $h with 200 and 1024 bytes"
		done
		until_ok 5 mtls_seen "$SMA_IP" ||
			fail "sidecar-pair-mtls-alt: no mTLS handshake on the server sidecar: $(curl -s "http://$SMA_IP:15000/metrics" | grep mtls_handshakes)"
	fi
	# The mTLS row must be mTLS: the server sidecar's handshakes say so.
	until_ok 5 mtls_seen "$SM_IP" ||
		fail "sidecar-pair-mtls: no mTLS handshake on the server sidecar: $(curl -s "http://$SM_IP:15000/metrics" | grep mtls_handshakes)"
fi
if [[ " $TARGETS " == *" sidecar-policy "* ]]; then
	until_ok 10 ok200 "$SCR" "$POLICY_HOST" || fail "$SCR does not answer $POLICY_HOST with 200 and 1024 bytes"
fi
# A port already in use makes a peer exit while another process answers for it.
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "process $p exited (port in use?)"; done

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

declare -A TARGET=([direct]=$APP [sidecar]=$SCR [sidecar-alt]=$SCA [sidecar-alt2]=$SCA2 [sidecar-policy]=$SCR [nginx]=$NGX [nginx1]=$NGX1 [benchproxy]=$BP1
	[benchproxy2]=$BP2 [benchproxy2h2]=$BP3 [benchproxy2mtls]=$BP5 [sidecar-pair]=$PC [sidecar-pair-mtls]=$PC
	[sidecar-pair-alt]=$PCA [sidecar-pair-mtls-alt]=$PCA)
declare -A PROCS=([direct]="" [sidecar]="$PID_SCR" [sidecar-alt]="$PID_SCA" [sidecar-alt2]="$PID_SCA2" [sidecar-policy]="$PID_SCR" [nginx]="$PID_NGX" [nginx1]="$PID_NGX1"
	[benchproxy]="$PID_BP1" [benchproxy2]="$PID_BP2 $PID_BP1" [benchproxy2h2]="$PID_BP3 $PID_BP1" [benchproxy2mtls]="$PID_BP5 $PID_BP4"
	[sidecar-pair]="$PID_PC $PID_SP" [sidecar-pair-mtls]="$PID_PC $PID_SM"
	[sidecar-pair-alt]="$PID_PCA $PID_SPA" [sidecar-pair-mtls-alt]="$PID_PCA $PID_SMA")
# Every target gets Host: $HOST but sidecar-policy, whose Service is bench-policy.
declare -A HOSTS=([sidecar-policy]=$POLICY_HOST [sidecar-pair]=pair:9080 [sidecar-pair-mtls]=pair-mtls:9080
	[sidecar-pair-alt]=pair-alt:9080 [sidecar-pair-mtls-alt]=pair-mtls-alt:9080)
read -r -a ORDER <<<"$TARGETS"
for n in "${ORDER[@]}"; do [ -n "${TARGET[$n]:-}" ] || fail "unknown target $n (TARGETS)"; done
sleep "${SETTLE:-2}" # the real sidecar idle after activation
IDLE_RSS_SCR=$(rss_kb "$PID_SCR")
IDLE_RSS_BP=$(rss_kb "$PID_BP1")
IDLE_RSS_NGX=$(rss_kb "$PID_NGX")
# Idle RSS of the real bin/sidecar after it activated examples/ from a real pilot
# (its own loopback addresses; nothing else is running on them).
IDLE_REAL=$(bash tools/bench/proxy/idlerss.sh "$RUN/bin" | tee "$RUN/idlerss.txt" | tail -1)

if [ -n "${PPROF:-}" ]; then
	echo "profiling the real sidecar for ${PPROF_SECONDS}s under wrk -c$WRK_CONNS -> $PPROF" >&2
	wrk -t1 -c"$WRK_CONNS" -d"$((PPROF_SECONDS + 2))s" -H "Host: $HOST" "http://$SCR/" >/dev/null &
	wpid=$!
	sleep 1
	curl -sf -o "$PPROF" "http://$SCR_IP:15000/debug/pprof/profile?seconds=$PPROF_SECONDS" || echo "profile failed" >&2
	wait "$wpid"
fi

if [ -n "${PPROF_PAIR:-}" ] && [ "$PAIR" = 1 ]; then
	# CPU profiles of both sidecars of each pair target, under fortio at QPS (the
	# rate the #9 goal is stated at): DIR/<target>-{client,server}.prof; with
	# PERF_STAT=1, perf stat's syscall and context-switch counts of each instead
	# (.perf; not both at once: the tracepoints inflate the profile's syscalls);
	# with PERF_RECORD="ARGS" (e.g. "-g" or "-e sched:sched_switch -g"), perf
	# record ARGS of each instead (.data).
	mkdir -p "$PPROF_PAIR"
	declare -A PAIR_PIDS=([sidecar-pair]="$PC_IP:$PID_PC $SP_IP:$PID_SP" [sidecar-pair-mtls]="$PC_IP:$PID_PC $SM_IP:$PID_SM"
		[sidecar-pair-alt]="$PCA_IP:$PID_PCA $SPA_IP:$PID_SPA" [sidecar-pair-mtls-alt]="$PCA_IP:$PID_PCA $SMA_IP:$PID_SMA")
	for name in "${ORDER[@]}"; do
		[ -n "${PAIR_PIDS[$name]:-}" ] || continue
		echo "profiling $name for ${PPROF_SECONDS}s under fortio -qps $QPS -> $PPROF_PAIR" >&2
		"$FORTIO" load -quiet -uniform -qps "$QPS" -c "$CONNS" -t "$((PPROF_SECONDS + 2))s" -H "Host: ${HOSTS[$name]}" \
			"http://${TARGET[$name]}/" >/dev/null 2>&1 &
		fpid=$!
		sleep 1
		side=client waits=()
		for ipp in ${PAIR_PIDS[$name]}; do
			if [ -n "${PERF_STAT:-}" ]; then
				perf stat -e 'syscalls:sys_enter_*,context-switches' -p "${ipp#*:}" -o "$PPROF_PAIR/$name-$side.perf" -- sleep "$PPROF_SECONDS" 2>/dev/null &
			elif [ -n "${PERF_RECORD:-}" ]; then
				# shellcheck disable=SC2086 # a word list, e.g. "-e sched:sched_switch -g"
				perf record $PERF_RECORD -p "${ipp#*:}" -o "$PPROF_PAIR/$name-$side.data" -- sleep "$PPROF_SECONDS" 2>/dev/null &
			else
				curl -sf -o "$PPROF_PAIR/$name-$side.prof" "http://${ipp%:*}:15000/debug/pprof/profile?seconds=$PPROF_SECONDS" &
			fi
			waits+=($!)
			side=server
		done
		read -r -a st0 < <(for ipp in ${PAIR_PIDS[$name]}; do awk '{printf "%d %d ", $14, $15}' "/proc/${ipp#*:}/stat"; done; echo)
		sleep "$PPROF_SECONDS"
		read -r -a st1 < <(for ipp in ${PAIR_PIDS[$name]}; do awk '{printf "%d %d ", $14, $15}' "/proc/${ipp#*:}/stat"; done; echo)
		wait "$fpid" "${waits[@]}" || echo "profiling $name: a profile failed" >&2
		# user and system CPU per request of each side over the profile's window
		python3 -c "import sys; a=list(map(int,sys.argv[1].split())); b=list(map(int,sys.argv[2].split())); n=$QPS*$PPROF_SECONDS; hz=$HZ
for i,side in enumerate(('client','server')):
    print(side, 'user %.1f sys %.1f us/req' % ((b[2*i]-a[2*i])/hz*1e6/n, (b[2*i+1]-a[2*i+1])/hz*1e6/n))" \
			"${st0[*]}" "${st1[*]}" | tee "$PPROF_PAIR/$name.cpu" >&2
	done
fi

if [ -n "${SYSCALLS:-}" ]; then
	# Syscalls and context switches per request of each target's processes (nginx:
	# master and workers), by perf stat over exactly one load run: fortio at QPS
	# ("fixed") and wrk ("max"), each PPROF_SECONDS long; DIR/<target>-<load>.perf
	# and a per-request table on stderr. The tracepoints slow the processes: read
	# counts here, CPU in the rounds.
	mkdir -p "$SYSCALLS"
	for name in "${ORDER[@]}"; do
		procs=${PROCS[$name]}
		[ -n "$procs" ] || continue
		pids=$(for p in $procs; do echo "$p"; pgrep -P "$p" || true; done | paste -sd,)
		host=${HOSTS[$name]:-$HOST}
		perf stat -e 'syscalls:sys_enter_*,context-switches' -p "$pids" -o "$SYSCALLS/$name-fixed.perf" -- \
			"$FORTIO" load -quiet -uniform -qps "$QPS" -c "$CONNS" -t "${PPROF_SECONDS}s" -H "Host: $host" \
			-json "$RUN/sc.json" "http://${TARGET[$name]}/" >/dev/null 2>&1
		n=$(python3 -c "import json; print(json.load(open('$RUN/sc.json'))['DurationHistogram']['Count'])")
		perf stat -e 'syscalls:sys_enter_*,context-switches' -p "$pids" -o "$SYSCALLS/$name-max.perf" -- \
			wrk -t1 -c"$WRK_CONNS" -d"${PPROF_SECONDS}s" -H "Host: $host" "http://${TARGET[$name]}/" >"$RUN/sc.wrk"
		m=$(awk '/requests in/{print $1}' "$RUN/sc.wrk")
		python3 - "$name" "$SYSCALLS/$name-fixed.perf" "$n" "$SYSCALLS/$name-max.perf" "$m" <<'PY' | tee "$SYSCALLS/$name.txt" >&2
import re, sys
name = sys.argv[1]
def load(f, n):
    d = {}
    for l in open(f):
        m = re.match(r"\s*([\d,]+)\s+(\S+)", l)
        if m and int(m.group(1).replace(",", "")):
            k = m.group(2).replace("syscalls:sys_enter_", "")
            d[k] = int(m.group(1).replace(",", "")) / int(n)
    return d
a, b = load(sys.argv[2], sys.argv[3]), load(sys.argv[4], sys.argv[5])
keys = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0), b.get(k, 0)))
print(f"{name}: per request, fixed {sys.argv[3]} requests at QPS / max {sys.argv[5]} requests (wrk)")
tot = lambda d: sum(v for k, v in d.items() if k != "context-switches")
for k in keys:
    if max(a.get(k, 0), b.get(k, 0)) >= 0.01:
        print(f"  {k:24} {a.get(k, 0):7.3f} {b.get(k, 0):7.3f}")
print(f"  {'all syscalls':24} {tot(a):7.3f} {tot(b):7.3f}")
PY
	done
fi

if [ -n "${PERF:-}" ]; then
	# perf record -g of each target's processes over one fortio run at QPS and one
	# wrk run, PPROF_SECONDS each: DIR/<target>-{fixed,max}.data (kernel and user
	# stacks; read with perf report -i FILE --no-children --sort sym).
	mkdir -p "$PERF"
	for name in "${ORDER[@]}"; do
		procs=${PROCS[$name]}
		[ -n "$procs" ] || continue
		pids=$(for p in $procs; do echo "$p"; pgrep -P "$p" || true; done | paste -sd,)
		host=${HOSTS[$name]:-$HOST}
		perf record -g -q -p "$pids" -o "$PERF/$name-fixed.data" -- \
			"$FORTIO" load -quiet -uniform -qps "$QPS" -c "$CONNS" -t "${PPROF_SECONDS}s" -H "Host: $host" \
			"http://${TARGET[$name]}/" >/dev/null 2>&1
		perf record -g -q -p "$pids" -o "$PERF/$name-max.data" -- \
			wrk -t1 -c"$WRK_CONNS" -d"${PPROF_SECONDS}s" -H "Host: $host" "http://${TARGET[$name]}/" >/dev/null 2>&1
	done
fi

RES="$RUN/results.tsv"
: >"$RES"
# fixed NAME JSON: fortio at QPS against target NAME, its results into JSON.
# Fixed-rate, uniform arrivals, 10 µs histogram resolution. Every target gets
# the same Host header (the app and nginx ignore it).
fixed() {
	"$FORTIO" load -quiet -uniform -r 0.00001 -qps "$QPS" -c "$CONNS" -t "$DURATION" -H "Host: ${HOSTS[$1]:-$HOST}" \
		-json "$2" "http://${TARGET[$1]}/" >/dev/null 2>&1
}
# fixed_result JSON TICKS: "requests errors p50 p90 p99 cpu_us_per_request".
fixed_result() {
	python3 - "$1" "$2" "$HZ" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
pc={p["Percentile"]:p["Value"] for p in d["DurationHistogram"]["Percentiles"]}
errs=sum(v for k,v in d.get("RetCodes",{}).items() if str(k)!="200")
n=d["DurationHistogram"]["Count"]
print(n, errs, pc.get(50)*1e3, pc.get(90)*1e3, pc.get(99)*1e3, int(sys.argv[2])/int(sys.argv[3])*1e6/n if n else 0)
PY
}
in_order() { [[ " ${ORDER[*]} " == *" $1 "* ]]; }
# With AB_CONCURRENT=1 a target X and X-alt both in TARGETS take their fixed-rate
# load at the same time (each at QPS, disjoint processes), so the machine's
# noise from other work lands on both alike; wrk still runs one at a time.
# partner NAME: the other of NAME and NAME-alt (or of X-alt and X) when both are in
# TARGETS, else nothing.
# PAIRS="A:B C:D" names the pairs instead (any targets, e.g. "sidecar:nginx
# sidecar-alt:sidecar-alt2"), and implies AB_CONCURRENT.
partner() {
	local pr
	if [ -n "${PAIRS:-}" ]; then
		for pr in $PAIRS; do
			if [ "${pr%%:*}" = "$1" ] && in_order "${pr#*:}"; then echo "${pr#*:}"; return; fi
			if [ "${pr#*:}" = "$1" ] && in_order "${pr%%:*}"; then echo "${pr%%:*}"; return; fi
		done
		return
	fi
	if [[ $1 == *-alt ]] && in_order "${1%-alt}"; then echo "${1%-alt}"; elif in_order "$1-alt"; then echo "$1-alt"; fi
}
# The order alternates by round (odd rounds as TARGETS, even rounds reversed), so
# a drift of the shared machine within a round does not fall on one target alone.
declare -A FIXED=()
for r in $(seq "$ROUNDS"); do
	order=("${ORDER[@]}")
	if [ $((r % 2)) = 0 ] && [ -z "${NO_ALTERNATE:-}" ]; then
		order=()
		for ((i = ${#ORDER[@]} - 1; i >= 0; i--)); do order+=("${ORDER[$i]}"); done
	fi
	for name in "${order[@]}"; do
		url="http://${TARGET[$name]}/"
		host=${HOSTS[$name]:-$HOST}
		procs=${PROCS[$name]}
		load=$(cut -d' ' -f1 /proc/loadavg)
		echo "round $r $name: load $load" >&2
		other=$( [ -n "${AB_CONCURRENT:-}${PAIRS:-}" ] && partner "$name" || true)
		if [ -n "$other" ] && [ -n "${FIXED[$r $name]:-}" ]; then
			read -r n errs p50 p90 p99 cpu_fixed <<<"${FIXED[$r $name]}" # measured with $other
		elif [ -n "$other" ]; then
			t0=$(ticks $procs) a0=$(ticks ${PROCS[$other]})
			fixed "$other" "$RUN/fa.json" &
			fpid=$!
			fixed "$name" "$RUN/f.json"
			wait "$fpid"
			t1=$(ticks $procs) a1=$(ticks ${PROCS[$other]})
			FIXED[$r $other]=$(fixed_result "$RUN/fa.json" $((a1 - a0)))
			read -r n errs p50 p90 p99 cpu_fixed < <(fixed_result "$RUN/f.json" $((t1 - t0)))
		else
			t0=$( [ -n "$procs" ] && ticks $procs || echo 0 )
			fixed "$name" "$RUN/f.json"
			t1=$( [ -n "$procs" ] && ticks $procs || echo 0 )
			read -r n errs p50 p90 p99 cpu_fixed < <(fixed_result "$RUN/f.json" $((t1 - t0)))
		fi
		# Closed loop at max rate.
		t0=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		out=$(wrk -t1 -c"$WRK_CONNS" -d"$DURATION" -H "Host: $host" "$url")
		t1=$( [ -n "$procs" ] && ticks $procs || echo 0 )
		reqs=$(echo "$out" | awk '/requests in/{print $1}')
		rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
		non2xx=$(echo "$out" | awk '/Non-2xx/{print $NF}')
		errs=$((errs + ${non2xx:-0}))
		cpu_max=$(python3 -c "print(($t1-$t0)/$HZ*1e6/$reqs if $reqs else 0)")
		rss=$( [ -n "$procs" ] && rss_kb $procs || echo 0 )
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$p50" "$p90" "$p99" "$cpu_fixed" "$rps" "$cpu_max" "$rss" "$errs" "$load" >>"$RES"
	done
done
[ "$ROUNDS" != 0 ] || exit 0 # profiles only
if [ -n "${KEEP_RESULTS:-}" ]; then cp "$RES" "$KEEP_RESULTS"; fi

report_args=(--qps "$QPS" --conns "$CONNS" --wrk-conns "$WRK_CONNS" --duration "$DURATION"
	--host "$HOST" --godebug "$SIDECAR_GODEBUG" --idle-sidecar-kb "$IDLE_RSS_SCR" --idle-benchproxy-kb "$IDLE_RSS_BP"
	--idle-nginx-kb "$IDLE_RSS_NGX" --idlerss "$IDLE_REAL" --alt "${ALT_BIN:+bin $ALT_BIN }${ALT_ENV:-} ${ALT_FLAGS:-}"
	--alt2 "${ALT2_BIN:+bin $ALT2_BIN }${ALT2_ENV:-} ${ALT2_FLAGS:-}")
[ -z "${KEEP_ARGS:-}" ] || printf '%s\0' "${report_args[@]}" >"$KEEP_ARGS"
python3 tools/bench/proxy/report.py "$RES" "${report_args[@]}"
