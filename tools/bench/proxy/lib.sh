# Shared by the proxy bench scripts (run.sh, idlerss.sh, activationrss.sh); sourced,
# not run. The caller sets RUN (a temporary directory this removes at exit) and NAME
# (its name in error messages) before sourcing, and appends every process it starts
# to PIDS.
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT
# fail MSG: the message, the tail of every log in RUN, exit 1.
fail() {
	echo "$NAME: $*" >&2
	for f in "$RUN"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
	exit 1
}
# until_ok DEADLINE_S CMD...: polls CMD every 50ms until it succeeds or the deadline passes.
until_ok() {
	local end=$((SECONDS + $1)); shift
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.05
	done
}
# start_pilot BIN_DIR IP: a real pilot on RUN/pilot, admin on IP:15014, xDS on
# IP:15010; returns once it is healthy and has written its publisher key.
start_pilot() {
	"$1/pilot" --data-dir "$RUN/pilot" --admin-addr "$2:15014" --xds-addr "$2:15010" --xds-tls-addr "$2:15012" --webhook-addr "$2:15017" --insecure-plaintext-registration >"$RUN/pilot.log" 2>&1 &
	PIDS+=($!)
	until_ok 20 test -s "$RUN/pilot/publisher.pub" || fail "pilot wrote no publisher key"
	until_ok 20 curl -sf "http://$2:15014/healthz" || fail "pilot not healthy"
}
# sidecar_ready IP: the sidecar on IP answers /healthz/ready with 200.
sidecar_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$1:15021/healthz/ready")" = 200 ]; }
