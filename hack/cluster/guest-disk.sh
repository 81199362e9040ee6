#!/usr/bin/env bash
# Builds the kernelBoot container image of the test guest
# (localhost/kubevmm/test-guest:devel: /boot/vmlinux and /boot/initramfs.cpio
# from hack/guest-image.sh, plus /disk/scratch.img) and imports it into the dev cluster's
# containerd. Prints the image reference.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
guest=$("$REPO_DIR/hack/guest-image.sh")
out=$KUBEVMM_CACHE/images
mkdir -p "$out/bin"
(cd "$REPO_DIR" && CGO_ENABLED=0 go build -trimpath -o "$out/bin/image-tool" ./hack/image)
tag=localhost/kubevmm/test-guest:devel
# A small blank raw disk too: the e2e's Windows-style VMI attaches it on
# SATA (a containerDisk volume with path /disk/scratch.img).
truncate -s 1M "$out/scratch.img"
"$out/bin/image-tool" -o "$out/test-guest.tar" -t "$tag" -user 65532 \
  -file "/boot/vmlinux=$guest/vmlinux:0644" -file "/boot/initramfs.cpio=$guest/initramfs.cpio:0644" \
  -file "/disk/scratch.img=$out/scratch.img:0644" >/dev/null
ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$out/test-guest.tar" >/dev/null
echo "$tag"
