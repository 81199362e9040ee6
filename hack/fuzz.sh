#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a bounded time each.
# Usage: hack/fuzz.sh [duration]   (default 20s)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-20s}
found=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for name in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    found=1
    echo "fuzz: $pkg $name ($t)"
    # A new input is minimized for up to 60 s by default, which would
    # eat a short run whole on targets whose every execution builds a VM.
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" -fuzzminimizetime 2s "$pkg"
  done
done
[ $found -eq 1 ] || echo "fuzz: no fuzz targets"
