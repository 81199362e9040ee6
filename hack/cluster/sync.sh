#!/usr/bin/env bash
# Builds the kubevmm component images, imports them into the dev cluster's
# containerd and installs the kubevirt.io CRDs. Deploying the components
# (virt-operator, or manifests) comes with phase 2; until then this is the
# part of KubeVirt's `make cluster-sync` that exists.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "sync.sh: must run as root (containerd socket)"
ctr -a "$CONTAINERD_SOCK" version >/dev/null 2>&1 || die "sync.sh: the cluster is not up (make cluster-up)"
T0=$(now)
components=()
for c in virt-operator virt-api virt-controller virt-handler virt-launcher; do
  [ -d "$REPO_DIR/cmd/$c" ] && components+=("$c")
done
"$HACK_DIR/cluster/images.sh" "${components[@]}"
# Server-side apply: the CRDs are too large for the last-applied annotation.
kubectl_admin apply --server-side --force-conflicts -f "$REPO_DIR/api/crds/" >/dev/null
for crd in $(ls "$REPO_DIR"/api/crds/*.yaml | xargs -n1 basename | sed 's/^kubevirt.io_\(.*\)\.yaml$/\1.kubevirt.io/'); do
  kubectl_admin wait --for=condition=Established "crd/$crd" --timeout=60s >/dev/null
done
log "sync.sh: images (${components[*]}) imported and CRDs established in $(since "$T0") s"
