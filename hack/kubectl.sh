#!/usr/bin/env bash
# kubectl (v1.35.4, built by hack/cluster/build.sh) against the dev cluster
# of `make cluster-up`, as KubeVirt's cluster-up/kubectl.sh. Any other
# cluster: set KUBECONFIG.
set -euo pipefail
. "$(dirname "$0")/cluster/lib.sh"
[ -x "$K8S_BIN/kubectl" ] || die "kubectl.sh: no kubectl yet; run make cluster-up (or hack/cluster/build.sh kubectl)"
if [ -z "${KUBECONFIG:-}" ]; then
  [ -f "$KUBECONFIG_ADMIN" ] || die "kubectl.sh: no cluster; run make cluster-up (or set KUBECONFIG)"
  export KUBECONFIG=$KUBECONFIG_ADMIN
fi
exec "$K8S_BIN/kubectl" "$@"
