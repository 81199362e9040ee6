#!/usr/bin/env bash
# Installs the Debian packages of the given sets of hack/deps.list, only
# those that are missing. Usage: hack/deps.sh SET...   (guest, qemu, net,
# cluster, ...; see hack/deps.list)
set -euo pipefail
list=$(dirname "$0")/deps.list

pkgs=()
for want in "$@"; do
  case "$want" in
    # Never installed: see the top of deps.list.
    base|toolchain|built) echo "deps.sh: set '$want' is not installed by this script (see $list)" >&2; exit 2 ;;
  esac
  found=false
  while read -r set pkg _; do
    [ "$set" = "$want" ] || continue
    found=true
    pkgs+=("$pkg")
  done < <(sed 's/#.*//' "$list")
  if ! $found; then
    sets=$(sed 's/#.*//' "$list" | awk 'NF && $1 != "base" && $1 != "toolchain" && $1 != "built" {print $1}' | sort -u | paste -sd'|')
    echo "deps.sh: unknown set '$want' ($sets)" >&2
    exit 2
  fi
done

find_missing() {
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
}
find_missing
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: need root to install: ${missing[*]}" >&2
  exit 1
fi
# Tests of several packages may need the same set at once; apt-get fails
# instead of waiting for another's lock, so one installs and the others
# find the packages there.
exec 9>/run/lock/kubevmm-deps.lock
flock 9
find_missing
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# a stale package index makes the install 404; refresh once per hour at most
stamp=/var/lib/apt/periodic/kubevmm-update
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +60)" ]; then
  apt-get update -qq >&2
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
