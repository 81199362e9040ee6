#!/usr/bin/env bash
# virtctl (built from ./cmd/virtctl) against the dev cluster of
# `make cluster-up`, as KubeVirt's cluster-up/virtctl.sh. Any other
# cluster: set KUBECONFIG.
set -euo pipefail
. "$(dirname "$0")/cluster/lib.sh"
bin=$KUBEVMM_CACHE/images/bin/virtctl
mkdir -p "$(dirname "$bin")"
(cd "$REPO_DIR" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/virtctl)
if [ -z "${KUBECONFIG:-}" ]; then
  [ -f "$KUBECONFIG_ADMIN" ] || die "virtctl.sh: no cluster; run make cluster-up (or set KUBECONFIG)"
  export KUBECONFIG=$KUBECONFIG_ADMIN
fi
exec "$bin" "$@"
