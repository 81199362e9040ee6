#!/usr/bin/env bash
# Fetches Debian's distribution kernel for the cloud
# (linux-image-cloud-amd64: the package it depends on) with apt-get
# download, once, and extracts its /boot/vmlinuz-*. Output goes to
# $KUBEVMM_CACHE/distro-kernel/; prints that directory on stdout. Exits 75
# (EX_TEMPFAIL), saying why, when apt cannot provide the package.
set -euo pipefail
cache=${KUBEVMM_CACHE:-$HOME/.cache/kubevmm}/distro-kernel
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
meta=linux-image-cloud-amd64
if ! ls "$cache"/vmlinuz-* >/dev/null 2>&1; then
  pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
  if [ -z "$pkg" ]; then
    echo "distro-kernel.sh: apt knows no $meta (run apt-get update?)" >&2
    exit 75
  fi
  work=$(mktemp -d "$cache/.work-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  # apt-get download writes into the current directory.
  if ! (cd "$work" && apt-get download "$pkg" >&2); then
    echo "distro-kernel.sh: apt-get download $pkg failed" >&2
    exit 75
  fi
  dpkg-deb -x "$work"/*.deb "$work/root"
  cp "$work"/root/boot/vmlinuz-* "$cache/"
fi
echo "$cache"
