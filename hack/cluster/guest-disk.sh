#!/usr/bin/env bash
# Builds the test guest's images and imports them into the dev cluster's
# containerd:
#  - localhost/kubevmm/test-guest:devel, for kernelBoot: /boot/vmlinux and
#    /boot/initramfs.cpio from hack/guest-image.sh, plus /disk/scratch.img;
#  - localhost/kubevmm/test-bootdisk:devel, a containerDisk (KubeVirt's
#    layout: the image alone under /disk/): /disk/guest.qcow2, a GPT disk
#    whose ext4 /boot has a Boot Loader Specification entry for the same
#    kernel (bzImage) and initramfs (hack/bootdisk), with the guest's
#    console shell on (kubevmm.mode=shell).
# Prints the kernelBoot image's reference.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
guest=$("$REPO_DIR/hack/guest-image.sh")
out=$KUBEVMM_CACHE/images
mkdir -p "$out/bin"
"$HACK_DIR/deps.sh" qemu # qemu-img, sfdisk for the boot disk
(cd "$REPO_DIR" && CGO_ENABLED=0 go build -trimpath -o "$out/bin/image-tool" ./hack/image &&
  go build -trimpath -o "$out/bin/bootdisk" ./hack/bootdisk)
tag=localhost/kubevmm/test-guest:devel
# A small blank raw disk too: the e2e's Windows-style VMI attaches it on
# SATA (a containerDisk volume with path /disk/scratch.img).
truncate -s 1M "$out/scratch.img"
"$out/bin/image-tool" -o "$out/test-guest.tar" -t "$tag" -user 65532 \
  -file "/boot/vmlinux=$guest/vmlinux:0644" -file "/boot/initramfs.cpio=$guest/initramfs.cpio:0644" \
  -file "/disk/scratch.img=$out/scratch.img:0644" >/dev/null
ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$out/test-guest.tar" >/dev/null

"$out/bin/bootdisk" -kernel "$guest/bzImage" -initrd "$guest/initramfs.cpio" \
  -options "kubevmm.mode=shell" -o "$out/guest.qcow2"
"$out/bin/image-tool" -o "$out/test-bootdisk.tar" -t localhost/kubevmm/test-bootdisk:devel -user 65532 \
  -file "/disk/guest.qcow2=$out/guest.qcow2:0644" >/dev/null
ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$out/test-bootdisk.tar" >/dev/null
echo "$tag"
