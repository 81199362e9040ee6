#!/usr/bin/env bash
# Gives images the sync imported a second tag in the dev cluster's
# containerd, or takes it away: an upgrade test's "new version" without
# building every image twice (the content is the same; what changes is the
# image each pod names, which is what an upgrade rolls).
#
#   hack/cluster/retag.sh TAG NAME...      localhost/kubevmm/NAME:devel -> localhost/kubevmm/NAME:TAG
#   hack/cluster/retag.sh -d TAG NAME...   removes localhost/kubevmm/NAME:TAG
#
# TAG devel is refused: it is what cluster-sync deploys.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

remove=false
if [ "${1:-}" = -d ]; then remove=true; shift; fi
[ $# -gt 1 ] || die "usage: retag.sh [-d] TAG NAME..."
tag=$1; shift
[ "$tag" != devel ] || die "retag.sh: tag devel is cluster-sync's"
for name in "$@"; do
  if $remove; then
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images rm "localhost/kubevmm/$name:$tag" >/dev/null
  else
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images tag --force "localhost/kubevmm/$name:devel" "localhost/kubevmm/$name:$tag" >/dev/null
  fi
done
