#!/usr/bin/env bash
# Builds the test/demo guest's kernel: a minimal Linux from Debian's
# linux-source-6.1 (ELF vmlinux and bzImage), for hack/guest-image.sh. Output
# goes to $KUBEVMM_CACHE/guest/kernel-<hash of the kernel's inputs>/ (vmlinux,
# bzImage, System.map, .config and the tree's usr/gen_init_cpio) and is reused
# until one of those inputs changes: guest.config, the patch, this script, the
# linux-source version. The initramfs is cached apart, so changing the guest's
# /init or its agent does not rebuild the kernel. Prints the directory.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${KUBEVMM_CACHE:-$HOME/.cache/kubevmm}
src=$here/test/guest

"$here/hack/deps.sh" guest

tarball=/usr/src/linux-source-6.1.tar.xz
hash=$( {
  cat "$src/guest.config" "$src/pvm-syscall-workaround.patch" "$0"
  dpkg-query -W -f='${Version}\n' linux-source-6.1
} | sha256sum | cut -c1-16)
out=$cache/guest/kernel-$hash
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi
# One build at a time: concurrent callers (parallel test runs) wait for it.
mkdir -p "$cache/guest"
exec 9>"$cache/guest/.kernel-lock"
flock 9
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi

log() { echo "guest-kernel: $*" >&2; }
work=$cache/guest/build-kernel-$hash
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
log "extracting $tarball"
tar -xJf "$tarball" -C "$work"
ksrc=$work/linux-source-6.1
# Needed only on hosts whose KVM completes guest SYSCALL without leaving CPL3
# (the nested-KVM CI hosts); a no-op elsewhere. See README, "Guest image".
patch -d "$ksrc" -p0 --forward --quiet < "$src/pvm-syscall-workaround.patch"

log "configuring"
make -C "$ksrc" -s tinyconfig >&2
"$ksrc/scripts/kconfig/merge_config.sh" -m -O "$ksrc" "$ksrc/.config" "$src/guest.config" >/dev/null
make -C "$ksrc" -s olddefconfig >&2
# merge_config only warns when an option doesn't stick; a silently dropped
# option would cost a much slower debug session later, so fail here instead.
missing=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*)
      grep -qx "$line" "$ksrc/.config" || { log "option not in final config: $line"; missing=1; } ;;
    "# CONFIG_"*" is not set"*)
      opt=${line#\# }; opt=${opt%% *}
      grep -q "^$opt=" "$ksrc/.config" && { log "option still enabled (selected by another): $opt"; missing=1; } ;;
  esac
done < "$src/guest.config"
[ $missing -eq 0 ] || exit 1

log "building kernel (make -j$(nproc) bzImage)"
make -C "$ksrc" -s -j"$(nproc)" bzImage >&2

mkdir -p "$out.tmp"
cp "$ksrc/vmlinux" "$ksrc/arch/x86/boot/bzImage" "$ksrc/System.map" "$ksrc/.config" "$ksrc/usr/gen_init_cpio" "$out.tmp/"
rm -rf "$out" && mv "$out.tmp" "$out"
touch "$out/done"
log "done in $(( $(date +%s) - start ))s: $out"
echo "$out"
