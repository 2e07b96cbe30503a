#!/usr/bin/env bash
# Runs the benchmarks of every package that has a Benchmark function. Later issues
# add steps below (e.g. data-plane load tests); keep each step bounded.
# Usage: tools/bench/run.sh [./pkg ...]   (default: every package with a benchmark)
set -euo pipefail
cd "$(dirname "$0")/../.."

BENCHTIME="${BENCHTIME:-1s}"

if [ "$#" -gt 0 ]; then
  pkgs=("$@")
else
  mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -r -n1 dirname | sort -u)
fi
if [ "${#pkgs[@]}" -eq 0 ]; then
  echo "no benchmarks found"
  exit 0
fi
for p in "${pkgs[@]}"; do
  echo "== go test -bench $p"
  go test -run '^$' -bench . -benchmem -benchtime "$BENCHTIME" "$p"
done

# Data-plane side-by-side (issues #4, #7): direct, the real bin/sidecar configured by
# a real pilot, nginx, and the benchproxy stand-in rows; fortio fixed-rate and wrk
# max-rate, interleaved rounds (installs nginx/wrk/fortio).
if [ "$#" -eq 0 ] && [ -z "${SKIP_PROXY_BENCH:-}" ]; then
  bash tools/bench/proxy/run.sh "${PROXY_BENCH_ROUNDS:-3}"
fi

# Activation at size (issue #7): the real bin/sidecar receiving 1,000 Services x
# 10 route rules from a real pilot, re-applied with changes; RSS after each.
if [ "$#" -eq 0 ] && [ -z "${SKIP_PROXY_BENCH:-}" ]; then
  echo "== activation at size (tools/bench/proxy/activationrss.sh)"
  bin=$(mktemp -d /tmp/weft-bench-bin.XXXXXX)
  make -s build BIN="$bin" >/dev/null
  bash tools/bench/proxy/activationrss.sh "$bin"
  rm -rf "$bin"
fi

# Pilot load test (issue #3): N simulated delta-ADS clients over loopback gRPC
# against the production pilot stack, 1,000 services; skipped when packages are
# named. ADSLOAD_PROXIES=1000 for a quick run.
if [ "$#" -eq 0 ]; then
  echo "== pilot ADS load test (tools/bench/adsload)"
  go run ./tools/bench/adsload -stack real -proxies "${ADSLOAD_PROXIES:-1000,10000}" -services 1000
fi

# Interception in pods (issue #10): wrk in a client pod calling a Service by name,
# through the real sidecars with iptables and eBPF capture, beside direct
# pod-to-pod, interleaved rounds (needs root: network namespaces, cgroups).
if [ "$#" -eq 0 ] && [ -z "${SKIP_PROXY_BENCH:-}" ] && [ "$(id -u)" = 0 ]; then
  echo "== interception in pods (tools/bench/proxy/podbench)"
  bin=$(mktemp -d /tmp/weft-bench-bin.XXXXXX)
  make -s build BIN="$bin" >/dev/null
  go run ./tools/bench/proxy/podbench --bin "$bin" --rounds "${PROXY_BENCH_ROUNDS:-3}" --duration "${DURATION:-10s}"
  rm -rf "$bin"
fi

# Pilot at scale (issue #11): the real bin/pilot, 10,000 simulated sidecars each
# on its own mTLS connection (own 127.x source address; certificates from a test
# CA plugged into pilot), 2,000 of them endpoints of one Service; reports the
# joins' pushes, one endpoint change to every sidecar's ACK (p50/p99 per round,
# median of rounds) and pilot's peak RSS (VmHWM). ADSLOAD_SIDECARS=2000 for a
# quick run.
if [ "$#" -eq 0 ]; then
  echo "== pilot at scale (tools/bench/adsload -stack binary)"
  bin=$(mktemp -d /tmp/weft-bench-bin.XXXXXX)
  make -s build BIN="$bin" >/dev/null
  go run ./tools/bench/adsload -stack binary -pilot-bin "$bin/pilot" -proxies "${ADSLOAD_SIDECARS:-10000}" \
    -endpoints "${ADSLOAD_ENDPOINTS:-2000}" -services 100 -rounds "${ADSLOAD_ROUNDS:-5}" -timeout 30m
  rm -rf "$bin"
fi
