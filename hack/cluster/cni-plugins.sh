#!/usr/bin/env bash
# Builds the CNI plugins the nodes run (the pod network's and the
# NetworkAttachmentDefinitions' delegates) from the Go module proxy,
# github.com/containernetworking/plugins at $CNI_PLUGINS_VERSION, into
# $CNI_BIN ($KUBEVMM_CACHE/cni/bin): the kubelet's containerd runs them
# from there, and the kubevmm-multus DaemonSet installs the meta-plugin
# beside them. Idempotent: plugins built with the current pins are kept.
# Prints the bin directory on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# main: bridge (pod network, linux-bridge NADs), loopback; ipam: host-local
# (pod network), static (NADs with "ips"); meta: tuning (NADs' "mac").
plugins=(main/bridge main/loopback ipam/host-local ipam/static meta/tuning)
build_id=$(printf '%s\n' "$CNI_PLUGINS_VERSION" "${plugins[@]}" "cgo=0" "$(go env GOVERSION)" | sha256sum | cut -c1-16)

mkdir -p "$CNI_DIR"
exec 9>"$CNI_DIR/.build.lock"
flock 9
if [ "$(cat "$CNI_BIN/.build-id" 2>/dev/null)" = "$build_id" ]; then
  echo "$CNI_BIN"
  exit 0
fi
t=$(now)
pkgs=()
for p in "${plugins[@]}"; do pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"); done
# A private module cache, as build.sh keeps for Kubernetes: the plugins'
# dependencies never mix with (or get evicted with) the project's.
tmp=$(mktemp -d "$CNI_DIR/.build.XXXXXX")
GOMODCACHE=$CNI_DIR/go/mod GOCACHE=$CNI_DIR/go/cache GOPATH=$CNI_DIR/go/path GOBIN=$tmp \
  GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
mkdir -p "$CNI_BIN"
# Each binary replaces its old self by rename: a runtime may be running one.
for f in "$tmp"/*; do mv -f "$f" "$CNI_BIN/"; done
rm -rf "$tmp"
echo "$build_id" > "$CNI_BIN/.build-id"
log "cni-plugins.sh: built ${plugins[*]##*/} ($CNI_PLUGINS_VERSION) in $(since "$t") s"
echo "$CNI_BIN"
