#!/usr/bin/env bash
# Builds container images from Go commands of this repository (static,
# CGO_ENABLED=0) with hack/image and imports them into the dev cluster's
# containerd, where the kubelet finds them (there is no registry).
#
#   hack/cluster/images.sh pause              the pod sandbox image (cluster-up)
#   hack/cluster/images.sh virt-controller    localhost/kubevmm/virt-controller:devel
#
# Each NAME is ./cmd/NAME (or ./hack/image/NAME), built as /usr/bin/NAME and
# tagged localhost/kubevmm/NAME:devel. Prints one line per image.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || die "usage: images.sh NAME..."
out=$KUBEVMM_CACHE/images
mkdir -p "$out/bin"
cd "$REPO_DIR"
export CGO_ENABLED=0
go build -trimpath -o "$out/bin/image-tool" ./hack/image
for name in "$@"; do
  pkg=./cmd/$name
  [ -d "$pkg" ] || pkg=./hack/image/$name
  [ -d "$pkg" ] || die "images.sh: no ./cmd/$name or ./hack/image/$name"
  go build -trimpath -ldflags "-s -w" -o "$out/bin/$name" "$pkg"
  tag=localhost/kubevmm/$name:devel
  user=65532
  # The sandbox's pause runs as root like upstream's (it must be able to
  # reap any process of the pod).
  [ "$name" = pause ] && user=0
  extra=()
  # The launcher runs QEMU for what our VMM does not emulate (SATA, e1000,
  # Hyper-V, EFI): Debian's QEMU goes into its image, with its libraries
  # and firmware (qemu-files.sh).
  if [ "$name" = virt-launcher ]; then
    while read -r f; do extra+=(-file "$f"); done < <("$HACK_DIR/cluster/qemu-files.sh")
    [ ${#extra[@]} -gt 0 ] || die "images.sh: no QEMU files for the launcher image"
  fi
  # bridge-marker's image carries the CNI plugins a linux-bridge network
  # needs (cni-plugins.sh builds them), which its init container installs
  # on the nodes (cmd/bridge-marker install-plugins).
  if [ "$name" = bridge-marker ]; then
    cni_bin=$("$HACK_DIR/cluster/cni-plugins.sh")
    for p in bridge tuning; do extra+=(-file "/usr/lib/cni/$p=$cni_bin/$p:0755"); done
  fi
  # The HCO image is also the cli-download server's: it carries the
  # virtctl build it serves (/amd64/linux/virtctl.tar.gz).
  if [ "$name" = hco-operator ]; then
    mkdir -p "$out/cli"
    GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w" -o "$out/cli/virtctl" ./cmd/virtctl
    tar -C "$out/cli" -czf "$out/virtctl.tar.gz" virtctl
    extra+=(-file "/srv/cli-download/amd64/linux/virtctl.tar.gz=$out/virtctl.tar.gz:0644")
  fi
  "$out/bin/image-tool" -o "$out/$name.tar" -t "$tag" -user "$user" \
    -entrypoint "/usr/bin/$name" -file "/usr/bin/$name=$out/bin/$name:0755" "${extra[@]}" \
    -label org.opencontainers.image.source=https://github.com/kubevmm/kubevmm >/dev/null
  if ctr -a "$CONTAINERD_SOCK" version >/dev/null 2>&1; then
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$out/$name.tar" >/dev/null
    echo "$tag imported ($out/$name.tar)"
  else
    echo "$tag built ($out/$name.tar); containerd not running, not imported"
  fi
done
