#!/usr/bin/env bash
# Idle RSS of the real sidecar (issue #4 target: <= 20 MiB): a real pilot on a
# temporary data directory, examples/ applied with meshctl, bin/sidecar started as
# node frontend-a with the publisher key, then: ready (/healthz/ready 200), pilot's
# latest revision effective on it (meshctl rollout status --wait), SETTLE seconds
# of idle, and /proc/<pid>/status + smaps_rollup read.
# Usage: tools/bench/proxy/idlerss.sh [BIN_DIR]   (default bin/; build with `make build`
# so the sidecar gets the Makefile's flags). Env: SETTLE=5 IP_PREFIX=127.<n>.19
# (n from the shell's pid, so concurrent runs do not share addresses)
# STEADY=0: with STEADY=S it then stays idle S more seconds while /metrics is
# scraped every 15s (as Prometheus would) and reports the highest RSS seen: idle
# work (staleness ticks, scrapes) allocates, and the heap keeps what it freed.
# Prints a human breakdown, then one machine-readable line:
#   idle_rss_kb=N rss_anon_kb=N rss_file_kb=N [steady_max_rss_kb=N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=$(cd "${1:-$ROOT/bin}" && pwd)
SETTLE=${SETTLE:-5}
STEADY=${STEADY:-0}
IP_PREFIX=${IP_PREFIX:-127.$((20 + $$ % 200)).19}
PILOT_IP=$IP_PREFIX.254
SC_IP=$IP_PREFIX.11
for b in pilot sidecar meshctl; do
	[ -x "$BIN/$b" ] || { echo "idlerss: $BIN/$b missing (make build)" >&2; exit 1; }
done
RUN=$(mktemp -d /tmp/weft-idlerss.XXXXXX)
NAME=idlerss
# shellcheck source=tools/bench/proxy/lib.sh
. "$ROOT/tools/bench/proxy/lib.sh"

start_pilot "$BIN" "$PILOT_IP"
"$BIN/meshctl" --pilot "http://$PILOT_IP:15014" apply -f "$ROOT/examples" >"$RUN/apply.log" 2>&1 || fail "meshctl apply failed"

"$BIN/sidecar" --node-id frontend-a --namespace shop --service-account frontend --labels app=frontend \
	--address "$SC_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
	--state-dir "$RUN/state" --admin-addr "$SC_IP:15000" --outbound-addr "$SC_IP:15001" >"$RUN/sidecar.log" 2>&1 &
SC=$!
PIDS+=($SC)
until_ok 20 sidecar_ready "$SC_IP" || fail "sidecar not ready"
"$BIN/meshctl" --pilot "http://$PILOT_IP:15014" rollout status --wait --timeout 20s >"$RUN/rollout.log" 2>&1 ||
	fail "pilot's latest revision not effective on the sidecar"
sleep "$SETTLE" # the measured state: idle for SETTLE seconds after activation

kill -0 "$SC" 2>/dev/null || fail "sidecar exited"
st=/proc/$SC/status
kb() { awk -v k="$1:" '$1==k{print $2}' "$2"; }
rss=$(kb VmRSS "$st") anon=$(kb RssAnon "$st") file=$(kb RssFile "$st")
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }
echo "sidecar idle RSS $(mib "$rss") MiB = anon $(mib "$anon") + file $(mib "$file") (pid $SC, threads $(kb Threads "$st"), $SETTLE s after activating examples/ at pilot's latest revision)"
# Where the file-backed part lives: the binary's own text/rodata pages vs libraries.
awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{r[name]+=$2} END{for(n in r) if (r[n]>=256) printf "  %-60s %6d kB\n", (n==""?"[anon]":n), r[n]}' "/proc/$SC/smaps" | sort -k2 -n -r
grep -E '^(Rss|Pss_Anon|Pss_File|Anonymous):' "/proc/$SC/smaps_rollup" | tr -s ' ' | paste -sd' ' | sed 's/^/  smaps_rollup: /'
steady=
if [ "$STEADY" -gt 0 ]; then
	peak=0 end=$((SECONDS + STEADY))
	while [ "$SECONDS" -lt "$end" ]; do
		curl -s -o /dev/null "http://$SC_IP:15000/metrics" || fail "metrics scrape failed"
		for _ in 1 2 3; do # RSS every 5s, a scrape every 15s
			r=$(kb VmRSS "$st")
			[ "$r" -gt "$peak" ] && peak=$r
			sleep 5
		done
	done
	echo "steady idle: highest RSS $(mib "$peak") MiB over ${STEADY}s with a /metrics scrape every 15s; now $(mib "$(kb VmRSS "$st")") MiB = anon $(mib "$(kb RssAnon "$st")") + file $(mib "$(kb RssFile "$st")")"
	steady=" steady_max_rss_kb=$peak"
fi
echo "idle_rss_kb=$rss rss_anon_kb=$anon rss_file_kb=$file$steady"
