#!/usr/bin/env bash
# Prints, one per line, the hack/image -file arguments that put Debian's
# QEMU (the launcher's fallback backend) into the virt-launcher image:
# qemu-system-x86_64, its TCG accelerator module, every shared library
# `ldd` lists for them (and the dynamic loader), and the firmware and
# option ROMs an x86 guest needs (SeaBIOS, iPXE ROMs for the emulated NICs,
# OVMF for EFI and its secure-boot build with Microsoft's keys, QEMU's own
# boot ROMs and keymaps), and swtpm (a guest's TPM) with its libraries. Files keep their Debian
# paths: QEMU finds its modules and firmware relative to /usr/bin, and the
# loader searches /lib/x86_64-linux-gnu without an ld.so.cache.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
"$HACK_DIR/deps.sh" qemu

bin=/usr/bin/qemu-system-x86_64
moddir=/usr/lib/x86_64-linux-gnu/qemu
[ -x "$bin" ] || die "qemu-files.sh: $bin is missing"
declare -A seen=()
emit() { # DEST [MODE]
  local dest=$1 mode=${2:-}
  [ -n "${seen[$dest]:-}" ] && return
  [ -e "$dest" ] || die "qemu-files.sh: $dest is missing"
  seen[$dest]=1
  if [ -n "$mode" ]; then echo "$dest=$dest:$mode"; else echo "$dest=$dest"; fi
}
swtpm=/usr/bin/swtpm
[ -x "$swtpm" ] || die "qemu-files.sh: $swtpm is missing"
emit "$bin" 0755
emit "$swtpm" 0755
# TCG is a loadable module in Debian's build (accel-tcg-*.so); KVM is built in.
objs=("$bin" "$moddir/accel-tcg-x86_64.so" "$moddir/accel-tcg-i386.so" "$swtpm")
for o in "${objs[@]:1:2}"; do emit "$o" 0644; done
for o in "${objs[@]}"; do
  ldd "$o" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
    echo "$lib"
  done
done | sort -u | while read -r lib; do emit "$lib" 0755; done
for f in /usr/share/seabios/* /usr/lib/ipxe/qemu/*; do emit "$f" 0644; done
for f in OVMF_CODE.fd OVMF_VARS.fd OVMF_CODE_4M.secboot.fd OVMF_VARS_4M.ms.fd; do emit "/usr/share/OVMF/$f" 0644; done
for f in kvmvapic.bin linuxboot.bin linuxboot_dma.bin multiboot.bin multiboot_dma.bin pvh.bin qboot.rom sgabios.bin bios-microvm.bin; do
  emit "/usr/share/qemu/$f" 0644
done
for f in /usr/share/qemu/keymaps/* /usr/share/qemu/firmware/*.json; do emit "$f" 0644; done
