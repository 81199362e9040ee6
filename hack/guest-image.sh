#!/usr/bin/env bash
# Builds the test/demo guest: the kernel (hack/guest-kernel.sh: vmlinux,
# bzImage, System.map, .config) and an uncompressed busybox initramfs with
# the guest agent (test/guestagent as /bin/kubevmm-agent). Output goes to
# $KUBEVMM_CACHE/guest/<hash>/, the kernel's files and initramfs.cpio in one
# directory, and is reused until an input changes. The kernel is cached by its
# own inputs, so a change to /init, the agent or the initramfs's other files
# rebuilds only the initramfs (seconds). Prints the output directory on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBEVMM_CACHE:-$HOME/.cache/kubevmm}
src=$here/test/guest

kernel=$("$here/hack/guest-kernel.sh")

# The agent, static; hashed as built, so its sources, its dependencies and the
# Go version are all inputs. Go's build cache makes this quick when nothing
# changed.
mkdir -p "$cache/guest"
agent=$(mktemp "$cache/guest/agent.XXXXXX")
trap 'rm -f "$agent"' EXIT
(cd "$here" && CGO_ENABLED=0 "${GO:-go}" build -trimpath -ldflags='-s -w' -o "$agent" ./test/guestagent)

inputs_hash=$( {
  echo "$kernel"
  cat "$src/init" "$src/fstab" "$src/os-release" "$agent" "$0"
  dpkg-query -W -f='${Version}\n' busybox-static
} | sha256sum | cut -c1-16)
out=$cache/guest/$inputs_hash
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi
# One build at a time: concurrent callers (parallel test runs) wait for it.
exec 9>"$cache/guest/.lock"
flock 9
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi

log() { echo "guest-image: $*" >&2; }
start=$(date +%s)
log "building initramfs"
bb=/bin/busybox
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
list=$out.tmp/initramfs.list
{
  for d in /dev /proc /sys /bin /etc /etc/kubevmm /tmp /root /mnt; do echo "dir $d 755 0 0"; done
  echo "nod /dev/console 600 0 0 c 5 1"
  echo "file /bin/busybox $bb 755 0 0"
  echo "file /bin/kubevmm-agent $agent 755 0 0"
  echo "file /init $src/init 755 0 0"
  echo "file /etc/fstab $src/fstab 644 0 0"
  echo "file /etc/os-release $src/os-release 644 0 0"
  # Two links only. Every other command is a busybox applet found by name:
  # Debian's busybox-static has FEATURE_SH_STANDALONE and PREFER_APPLETS, so
  # its shell and the applets that run commands (setsid, timeout, xargs, env)
  # run an applet through /proc/self/exe. Only /init's first command, mount,
  # runs before /proc is mounted. A link per applet (~270) cost the guest
  # kernel 8-12 s of emulated time in each boot to unpack.
  echo "slink /bin/sh busybox 777 0 0"
  echo "slink /bin/mount busybox 777 0 0"
} > "$list"
"$kernel/gen_init_cpio" "$list" > "$out.tmp/initramfs.cpio"
rm "$list"
# The kernel's files, linked: the directory is what tests and images read.
cp -l "$kernel/vmlinux" "$kernel/bzImage" "$kernel/System.map" "$kernel/.config" "$out.tmp/"
rm -rf "$out" && mv "$out.tmp" "$out"
touch "$out/done"
log "done in $(( $(date +%s) - start ))s: $out"
echo "$out"
