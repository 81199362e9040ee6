#!/usr/bin/env bash
# Runs every Go fuzz target in the module (or those FUZZ_TARGETS, a regexp
# on the name, selects) for a bounded time or number of executions each.
# Usage: hack/fuzz.sh [fuzztime]   (default 20s; "10000000x" = 10 M executions)
# With FUZZ_KEEP_CORPUS=1 the inputs the fuzzer found interesting are copied
# from Go's cache into the package's testdata/fuzz/<Target>/, where every
# plain `go test` runs them as regression seeds (names are content hashes,
# so copying again is idempotent). A failing input is written there by Go
# itself. The last line per target gives its executions and corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-20s}
cache=$(go env GOCACHE)/fuzz
found=0
summary=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for name in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    [[ $name =~ ${FUZZ_TARGETS:-.} ]] || continue
    found=1
    echo "fuzz: $pkg $name ($t)"
    # A new input is minimized for up to 60 s by default, which would
    # eat a short run whole on targets whose every execution builds a VM.
    log=$(mktemp)
    status=0
    if [[ $t =~ ^([0-9]+)s$ ]]; then
      # A time budget is spent as runs of a set number of executions.
      # Go's coordinator races its own -fuzztime deadline (1.26's
      # internal/fuzz compares the parent context's error with the
      # workers' child context before the child is cancelled): under load
      # a duration fails a target with a bare "context deadline exceeded"
      # and no failing input (golang/go#75804, fixed in Go 1.27.1). A
      # count sets no deadline. Each run's size comes from the last one's
      # rate, so the budget is kept to within one run's start-up.
      budget=${BASH_REMATCH[1]} start=$SECONDS n=500 execs=0
      while :; do
        t0=$SECONDS
        go test -run '^$' -fuzz "^${name}\$" -fuzztime "${n}x" -fuzzminimizetime 2s "$pkg" 2>&1 | tee -a "$log" || { status=$?; break; }
        execs=$((execs + n))
        left=$((budget - (SECONDS - start)))
        [ "$left" -ge 2 ] || break
        took=$((SECONDS - t0 > 0 ? SECONDS - t0 : 1))
        n=$((n * left / took))
        [ "$n" -ge 100 ] || n=100
      done
    else
      go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" -fuzzminimizetime 2s "$pkg" 2>&1 | tee "$log" || status=$?
      execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
    fi
    rm -f "$log"
    if [ "${FUZZ_KEEP_CORPUS:-0}" = 1 ] && [ -d "$cache/$pkg/$name" ]; then
      mkdir -p "$dir/testdata/fuzz/$name"
      cp -n "$cache/$pkg/$name"/* "$dir/testdata/fuzz/$name/"
    fi
    corpus=$(find "$cache/$pkg/$name" "$dir/testdata/fuzz/$name" -type f 2>/dev/null | xargs -r -n1 basename | sort -u | wc -l || true)
    summary+=("$(printf '%-22s %-45s %12s execs %6s inputs' "$name" "${pkg#github.com/kubevmm/kubevmm/}" "${execs:-?}" "$corpus")")
    [ "$status" -eq 0 ] || { printf '%s\n' "${summary[@]}"; exit "$status"; }
  done
done
[ $found -eq 1 ] || { echo "fuzz: no fuzz targets"; exit 1; }
printf 'fuzz: %s\n' "${summary[@]}"
