#!/usr/bin/env bash
# Installs the Debian packages a given part of the project needs, only when
# missing. Usage: hack/deps.sh guest|qemu|net|cluster ...
set -euo pipefail

pkgs=()
for want in "$@"; do
  case "$want" in
    # kernel build (tinyconfig needs no ssl/elf headers beyond these), busybox for the initramfs
    guest) pkgs+=(linux-source-6.1 build-essential bc flex bison libelf-dev xz-utils busybox-static) ;;
    qemu) pkgs+=(qemu-system-x86 qemu-utils ovmf) ;;
    net) pkgs+=(iproute2 iputils-ping) ;;
    cluster) pkgs+=(containerd runc containernetworking-plugins busybox-static iptables socat) ;;
    *) echo "deps.sh: unknown set '$want' (guest|qemu|net|cluster)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# a stale package index makes the install 404; refresh once per hour at most
stamp=/var/lib/apt/periodic/kubevmm-update
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +60)" ]; then
  apt-get update -qq >&2
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
