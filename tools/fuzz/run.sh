#!/usr/bin/env bash
# Runs every native Fuzz target in the repository for FUZZTIME each (default 10s).
# Go fuzzes one target per invocation, so targets are listed per package first.
# Usage: tools/fuzz/run.sh [./pkg ...]   (default: every package with a Fuzz target)
set -euo pipefail
cd "$(dirname "$0")/../.."

FUZZTIME="${FUZZTIME:-10s}"

if [ "$#" -gt 0 ]; then
  pkgs=("$@")
else
  mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u)
fi
total=0
for p in "${pkgs[@]}"; do
  mapfile -t targets < <(go test -list '^Fuzz' "$p" | grep '^Fuzz' || true)
  for t in "${targets[@]}"; do
    echo "== fuzz $p $t ($FUZZTIME)"
    go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$p"
    total=$((total + 1))
  done
done
echo "fuzzed $total targets for $FUZZTIME each"
