#!/usr/bin/env bash
# Builds the dev cluster's NetworkPolicy enforcer into $KUBE_ROUTER_DIR/bin:
# kube-router ($KUBE_ROUTER_VERSION) from the Go module proxy, of which
# up.sh runs the firewall alone (--run-firewall; no routing, no service
# proxy), on the node beside kube-proxy. The bridge CNI plugin enforces no
# NetworkPolicy; kube-router does it with iptables and ipsets, for pods
# on any bridge (br_netfilter).
#
# $KUBE_ROUTER_VERSION is the only release the module proxy serves, and it
# has advisories: GHSA-v5mh-h5hx-7v92 is in the routing controller (its
# GoBGP gRPC server), which is never started here; the others are in its
# dependencies, so it is built from a scratch module that raises
# golang.org/x/{net,crypto,sys,text,oauth2} and gRPC to fixed releases.
# Idempotent: a binary built with the current pins is kept. Prints the
# binary's path on stdout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

raised=(golang.org/x/net@v0.62.0 golang.org/x/crypto@v0.59.0 golang.org/x/sys@v0.50.0
  golang.org/x/text@v0.44.0 golang.org/x/oauth2@v0.38.0 google.golang.org/grpc@v1.85.0)
build_id=$(printf '%s\n' "$KUBE_ROUTER_VERSION" "${raised[@]}" "cgo=0" "$(go env GOVERSION)" | sha256sum | cut -c1-16)
bin=$KUBE_ROUTER_DIR/bin/kube-router

mkdir -p "$KUBE_ROUTER_DIR"
exec 9>"$KUBE_ROUTER_DIR/.build.lock"
flock 9
if [ "$(cat "$KUBE_ROUTER_DIR/bin/.build-id" 2>/dev/null)" = "$build_id" ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
t=$(now)
# A private module cache, as build.sh keeps for Kubernetes.
export GOMODCACHE=$KUBE_ROUTER_DIR/go/mod GOCACHE=$KUBE_ROUTER_DIR/go/cache GOPATH=$KUBE_ROUTER_DIR/go/path
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
src=$KUBE_ROUTER_DIR/src
mkdir -p "$src"
cd "$src"
printf 'module kubevmm.local/kube-router\n\ngo 1.25.0\n' > go.mod
rm -f go.sum
# quiet runs a command, showing what it printed only if it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}
pkg=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
quiet go get "$pkg@$KUBE_ROUTER_VERSION" "${raised[@]}"
# The raised modules may need go.sum lines of their own new dependencies.
quiet go get "$pkg@$KUBE_ROUTER_VERSION"
mkdir -p "$KUBE_ROUTER_DIR/bin"
go build -trimpath -ldflags "-s -w" -o "$bin.new" "$pkg"
mv -f "$bin.new" "$bin"
echo "$build_id" > "$KUBE_ROUTER_DIR/bin/.build-id"
log "kube-router.sh: built kube-router $KUBE_ROUTER_VERSION in $(since "$t") s"
echo "$bin"
