#!/usr/bin/env bash
# Builds the Kubernetes binaries the cluster and envtest need, from the Go
# module proxy only, into $KUBEVMM_CACHE/k8s/bin. Idempotent: binaries that
# exist and were built with the current pins are kept.
#
#   hack/cluster/build.sh            all of them (cluster-up)
#   hack/cluster/build.sh envtest    etcd, kube-apiserver, kubectl (envtest)
#   hack/cluster/build.sh NAME...    just those
#
# Prints the bin directory on stdout (for KUBEBUILDER_ASSETS=$(...)).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

all=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy kubectl)
want=()
case "${1:-all}" in
  all) want=("${all[@]}") ;;
  envtest) want=(etcd kube-apiserver kubectl) ;;
  *) want=("$@") ;;
esac

# The version must be stamped in or every binary reports v0.0.0-master and
# kubectl warns about skew on every call. CGO off: static binaries that do
# not depend on whether gcc happens to be installed.
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=35 -X $p.gitTreeState=clean"
  LDF="$LDF -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
done
build_id=$(printf '%s\n' "$KUBE_VERSION" "$ETCD_VERSION" "$LDF" "cgo=0" "$(go env GOVERSION)" | sha256sum | cut -c1-16)

mkdir -p "$K8S_DIR"
exec 9>"$K8S_DIR/.build.lock"
flock 9   # two make targets building at once would fight over the same caches

# A build with other pins is thrown away rather than mixed with this one.
if [ "$(cat "$K8S_BIN/.build-id" 2>/dev/null)" != "$build_id" ]; then
  rm -rf "$K8S_BIN"
fi
mkdir -p "$K8S_BIN"
echo "$build_id" > "$K8S_BIN/.build-id"

missing=()
for b in "${want[@]}"; do
  case " ${all[*]} " in *" $b "*) ;; *) die "build.sh: unknown binary '$b' (one of: ${all[*]})" ;; esac
  [ -x "$K8S_BIN/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$K8S_BIN"
  exit 0
fi

export GOMODCACHE=$K8S_DIR/go/mod GOCACHE=$K8S_DIR/go/cache GOPATH=$K8S_DIR/go/path
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
src=$K8S_DIR/src
mkdir -p "$src/cmd/etcd"
cd "$src"

if [ "$(cat .ready 2>/dev/null)" != "$build_id" ]; then
  t=$(now)
  log "build.sh: resolving k8s.io/kubernetes@$KUBE_VERSION (private module cache $GOMODCACHE)"
  km=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$km" ] || die "build.sh: cannot download k8s.io/kubernetes@$KUBE_VERSION"
  # k8s.io/kubernetes replaces its staging modules with ./staging/...; a
  # module that requires it must name the published versions instead.
  {
    printf 'module kubevmm.local/k8sbuild\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n'
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
    grep -E '=> \./staging' "$km" | awk -v v="${KUBE_VERSION/v1/v0}" '{print "\t"$1" => "$1" "v}'
    printf ')\n'
  } > go.mod
  rm -f go.sum
  cat > cmd/etcd/main.go <<'EOG'
// etcd as the kubernetes release pins it; built here because Debian's etcd
// is older than what kube-apiserver is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOG
  # Always @version: without it go get silently moves to the newest release,
  # whose new staging modules the proxy here does not serve.
  k=k8s.io/kubernetes/cmd
  go get "$k/kube-apiserver@$KUBE_VERSION" "$k/kube-scheduler@$KUBE_VERSION" \
    "$k/kube-controller-manager@$KUBE_VERSION" "$k/kubelet@$KUBE_VERSION" "$k/kube-proxy@$KUBE_VERSION" \
    "$k/kubectl@$KUBE_VERSION" "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION"
  echo "$build_id" > .ready
  log "build.sh: modules resolved in $(since "$t") s"
fi

pkgs=()
for b in "${missing[@]}"; do
  if [ "$b" = etcd ]; then pkgs+=(./cmd/etcd); else pkgs+=("k8s.io/kubernetes/cmd/$b"); fi
done
t=$(now)
log "build.sh: building ${missing[*]} (cold: several minutes on 2 cores)"
go build -p "$(nproc)" -trimpath -ldflags "$LDF" -o "$K8S_BIN/" "${pkgs[@]}"
log "build.sh: built ${missing[*]} in $(since "$t") s"
echo "$K8S_BIN"
