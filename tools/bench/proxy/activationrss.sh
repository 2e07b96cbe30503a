#!/usr/bin/env bash
# Activation at size (issue #7 goal: RSS <= 60 MiB across repeated activations of
# 1,000 Services x 10 route rules): a real pilot on a temporary data directory,
# the mesh of tools/bench/proxy/bigmesh.py applied with meshctl, the real
# bin/sidecar (namespace bench: it routes to every Service) started, ready, and
# pilot's revision effective on it; then CHANGES more applies, each changing every
# route's timeouts (a new configuration for all 10,000 rules). After each
# activation: VmRSS when pilot's revision is effective on the sidecar (meshctl
# rollout status --wait), VmRSS after SETTLE seconds, the peak VmHWM so far, and
# the activation's time from weft_sidecar_activation_duration_seconds.
# Usage: tools/bench/proxy/activationrss.sh [BIN_DIR]   (default bin/; build with
# `make build`). Env: SERVICES=1000 RULES=10 CHANGES=4 SETTLE=2 IP_PREFIX=127.<n>.21
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=$(cd "${1:-$ROOT/bin}" && pwd)
SERVICES=${SERVICES:-1000}
RULES=${RULES:-10}
CHANGES=${CHANGES:-4}
SETTLE=${SETTLE:-2}
GOAL_MIB=60
IP_PREFIX=${IP_PREFIX:-127.$((20 + $$ % 200)).21}
PILOT_IP=$IP_PREFIX.254
SC_IP=$IP_PREFIX.11
for b in pilot sidecar meshctl; do
	[ -x "$BIN/$b" ] || { echo "activationrss: $BIN/$b missing (make build)" >&2; exit 1; }
done
RUN=$(mktemp -d /tmp/weft-actrss.XXXXXX)
NAME=activationrss
# shellcheck source=tools/bench/proxy/lib.sh
. "$ROOT/tools/bench/proxy/lib.sh"
MESHCTL=("$BIN/meshctl" --pilot "http://$PILOT_IP:15014")
mesh() { python3 "$ROOT/tools/bench/proxy/bigmesh.py" --services "$SERVICES" --rules "$RULES" --gen "$1" >"$RUN/mesh.yaml"; }
apply() { "${MESHCTL[@]}" apply -f "$RUN/mesh.yaml" >"$RUN/apply.log" 2>&1 || fail "meshctl apply failed"; }
effective() { "${MESHCTL[@]}" rollout status --wait --timeout 60s >"$RUN/rollout.log" 2>&1 || fail "pilot's revision not effective on the sidecar"; }

start_pilot "$BIN" "$PILOT_IP"
mesh 0
apply
"$BIN/sidecar" --node-id big-client --namespace bench --service-account client --labels app=client \
	--address "$SC_IP" --pilot "$PILOT_IP:15010" --publisher-key "$RUN/pilot/publisher.pub" \
	--state-dir "$RUN/state" --admin-addr "$SC_IP:15000" --outbound-addr "$SC_IP:15001" >"$RUN/sidecar.log" 2>&1 &
SC=$!
PIDS+=($SC)
until_ok 60 sidecar_ready "$SC_IP" || fail "sidecar not ready"

kb() { awk -v k="$1:" '$1==k{print $2}' "/proc/$SC/status"; }
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }
hist() { curl -sf "http://$SC_IP:15000/metrics" | awk '/^weft_sidecar_activation_duration_seconds_(sum|count) /{printf "%s ", $2} END{print ""}'; }
printf '%-12s %9s %12s %12s %12s %14s\n' activation revision "RSS MiB" "+${SETTLE}s MiB" "peak MiB" "activation ms"
prev_sum=0 prev_n=0 worst=0
for i in $(seq 0 "$CHANGES"); do
	if [ "$i" -gt 0 ]; then
		mesh "$i"
		apply
	fi
	effective
	kill -0 "$SC" 2>/dev/null || fail "sidecar exited"
	rss=$(kb VmRSS)
	sleep "$SETTLE"
	rss2=$(kb VmRSS) hwm=$(kb VmHWM)
	read -r sum n < <(hist)
	ms=$(python3 -c "print(f'{($sum-$prev_sum)/max($n-$prev_n,1)*1e3:.1f}')")
	prev_sum=$sum prev_n=$n
	rev=$(awk '/store revision/{print $NF}' "$RUN/apply.log" | tail -1)
	for v in $rss $rss2; do [ "$v" -gt "$worst" ] && worst=$v; done
	printf '%-12s %9s %12s %12s %12s %14s\n' "$((i + 1))" "$rev" "$(mib "$rss")" "$(mib "$rss2")" "$(mib "$hwm")" "$ms"
done
echo "$SERVICES Services x $RULES rules; $((CHANGES + 1)) activations (${n%.*} observed by weft_sidecar_activation_duration_seconds); highest RSS after an activation $(mib "$worst") MiB (<= $GOAL_MIB MiB: $([ "$worst" -le $((GOAL_MIB * 1024)) ] && echo met || echo MISSED)); peak VmHWM $(mib "$(kb VmHWM)") MiB; load $(cut -d' ' -f1-3 /proc/loadavg)"
