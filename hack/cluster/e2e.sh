#!/usr/bin/env bash
# `make e2e`: the end-to-end test on the real dev cluster. Brings the
# cluster up, deploys kubevmm (cluster-sync), builds the test guest's
# kernelBoot image, runs test/e2e, and takes the cluster down again unless
# E2E_KEEP=1 (or it was already up before). E2E_RUN=REGEXP runs only the
# matching tests (go test -run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || die "e2e.sh: must run as root (the dev cluster needs it)"
# test/e2e pings the guest from this host, runs Prometheus and OpenSSH there
# (hosttools would install them mid-test; here a missing package fails
# before the cluster is started).
"$HACK_DIR/deps.sh" net metrics ssh
was_up=false
kubectl_admin get --raw=/readyz >/dev/null 2>&1 && was_up=true
# Each stage's time, for CI's log: its whole run has a limit.
stage() {
  local name=$1 t0
  shift
  t0=$(now)
  "$@"
  log "e2e: $name took $(since "$t0")s"
}
stage cluster-up "$HACK_DIR/cluster/up.sh"
if ! $was_up && [ "${E2E_KEEP:-0}" != 1 ]; then
  trap '"$HACK_DIR/cluster/down.sh" >/dev/null 2>&1 || true' EXIT
fi
stage cluster-sync "$HACK_DIR/cluster/sync.sh"
stage guest-disk "$HACK_DIR/cluster/guest-disk.sh" >/dev/null
cd "$REPO_DIR"
t0=$(now)
# -parallel 2: the tests that call t.Parallel (see test/e2e's package
# comment) run two at a time, after all the others.
KUBEVMM_E2E=1 go test -count=1 -timeout 70m -parallel 2 -v ${E2E_RUN:+-run "$E2E_RUN"} ./test/e2e/ 2>&1 | tee "$LOG_DIR/e2e.log"
status=${PIPESTATUS[0]}
log "e2e: tests took $(since "$t0")s"
exit "$status"
