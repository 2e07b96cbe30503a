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
#   idle_rss_kb=N rss_anon_kb=N rss_file_kb=N text_kb=N rodata_kb=N data_kb=N
#   heap_inuse_kb=N heap_alloc_kb=N [steady_max_rss_kb=N]
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
# Where the file-backed part lives: the binary's segments, by permission. A
# read fault maps the whole aligned 64 KiB around the page (the kernel's
# fault-around) when it is in the page cache, so the binary's file RSS follows
# the size of its segments more than the bytes init touches: 85-90% of each here.
# r-x is .text; r-- is .rodata (type descriptors, itabsinit reads one per
# itab), .gopclntab (stack growth and GC stack scans read it per frame) and
# the type/itab links; rw- is initialised data.
read -r text rodata data other < <(awk -v bin="$BIN/sidecar" '
	/^[0-9a-f]+-[0-9a-f]+ /{perm=$2; name=$6}
	/^Rss:/{ if (name==bin) seg[substr(perm,1,3)]+=$2; else if (name!="") o+=$2 }
	END{printf "%d %d %d %d\n", seg["r-x"], seg["r--"], seg["rw-"], o}' "/proc/$SC/smaps")
echo "  file: the sidecar binary's text (r-x) $(mib "$text") + rodata/pclntab (r--) $(mib "$rodata") + data (rw-) $(mib "$data") MiB; other files $(mib "$other")"
grep -E '^(Rss|Pss_Anon|Pss_File|Anonymous):' "/proc/$SC/smaps_rollup" | tr -s ' ' | paste -sd' ' | sed 's/^/  smaps_rollup: /'
# Where the anonymous part lives: Go's heap and stacks from one /metrics scrape
# (read after the RSS above, so its own allocation is not in it).
metrics=$(curl -sf "http://$SC_IP:15000/metrics") || fail "metrics scrape failed"
gm() { awk -v k="$1" '$1==k{printf "%d", $2/1024}' <<<"$metrics"; }
heap_inuse=$(gm go_memstats_heap_inuse_bytes) heap_alloc=$(gm go_memstats_heap_alloc_bytes)
next_gc=$(gm go_memstats_next_gc_bytes) stacks=$(gm go_memstats_stack_inuse_bytes)
echo "  anon: Go heap spans in use $(mib "$heap_inuse") MiB (objects $(mib "$heap_alloc"), next GC at $(mib "$next_gc")) + stacks $(mib "$stacks") + the rest (runtime metadata, bss) $(mib $((anon - heap_inuse - stacks)))"
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
echo "idle_rss_kb=$rss rss_anon_kb=$anon rss_file_kb=$file text_kb=$text rodata_kb=$rodata data_kb=$data heap_inuse_kb=$heap_inuse heap_alloc_kb=$heap_alloc$steady"
