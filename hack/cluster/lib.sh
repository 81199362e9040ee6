# Shared settings for the hack/cluster scripts. Sourced, not run.
#
# Everything lives under $KUBEVMM_CACHE/k8s:
#   bin/      etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
#             kubelet, kube-proxy, kubectl (built once from the Go module proxy)
#   go/       the private GOMODCACHE/GOCACHE those builds use, so they never
#             touch (or get evicted with) the project's own Go caches
#   src/      the scratch module the binaries are built from
#   cluster/  state of the running cluster: pki/, etcd/, kubelet/, logs/, *.pid
# Nothing here is committed; removing the directory resets everything.

KUBEVMM_CACHE=${KUBEVMM_CACHE:-$HOME/.cache/kubevmm}
K8S_DIR=$KUBEVMM_CACHE/k8s
K8S_BIN=$K8S_DIR/bin
CLUSTER_DIR=$K8S_DIR/cluster
PKI_DIR=$CLUSTER_DIR/pki
LOG_DIR=$CLUSTER_DIR/logs
KUBECONFIG_ADMIN=$PKI_DIR/admin.kubeconfig
CONTAINERD_SOCK=$CLUSTER_DIR/containerd/containerd.sock
# The CNI plugins (hack/cluster/cni-plugins.sh builds them) and, beside
# them, the kubevmm-multus meta-plugin its DaemonSet installs.
CNI_DIR=$KUBEVMM_CACHE/cni
CNI_BIN=$CNI_DIR/bin
CNI_PLUGINS_VERSION=v1.9.1
# The NetworkPolicy enforcer (hack/cluster/kube-router.sh builds it):
# kube-router's firewall alone, on the node like kube-proxy.
KUBE_ROUTER_DIR=$KUBEVMM_CACHE/kube-router
KUBE_ROUTER_VERSION=v2.1.0

# v1.35.x and not 1.36: 1.36 drops containerd 1.x, and Debian 12 ships 1.6.
# v1.35.4 is what the module proxy serves (later patches are filtered out).
KUBE_VERSION=v1.35.4
# The etcd release k8s.io/kubernetes@$KUBE_VERSION itself requires.
ETCD_VERSION=v3.6.5

# The node is this machine. The kubelet refuses a loopback node IP and the
# apiserver refuses to advertise one, so both use an address on a private
# bridge that exists only inside this machine and is never routed off it.
NODE_NAME=${KUBEVMM_NODE_NAME:-node01}
NODE_BRIDGE=kvmmnode0
NODE_IP=10.200.0.1
NODE_CIDR=10.200.0.0/24
POD_BRIDGE=kvmmbr0
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.96.0.0/24
# The first address of the service range: the kubernetes Service.
SERVICE_API_IP=10.96.0.1
API_PORT=6443

# The dev registry (hack/cluster/registry.sh): the distribution registry,
# built once into $REGISTRY_BIN_DIR, listening on the node IP.
REGISTRY_VERSION=v3.1.2
REGISTRY_BIN_DIR=$KUBEVMM_CACHE/registry
REGISTRY_ADDR=$NODE_IP:5000

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$HACK_DIR/.." && pwd)
CONF_DIR=$HACK_DIR/cluster/conf

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# now prints seconds since the epoch with sub-second precision, for the
# timings the scripts report.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# render copies a template from conf/ to $2, substituting @VARS@.
render() {
  sed -e "s|@CLUSTER_DIR@|$CLUSTER_DIR|g" -e "s|@NODE_IP@|$NODE_IP|g" -e "s|@NODE_CIDR@|$NODE_CIDR|g" \
      -e "s|@POD_BRIDGE@|$POD_BRIDGE|g" -e "s|@POD_CIDR@|$POD_CIDR|g" -e "s|@POD_GATEWAY@|$POD_GATEWAY|g" \
      -e "s|@SERVICE_CIDR@|$SERVICE_CIDR|g" -e "s|@PKI_DIR@|$PKI_DIR|g" \
      -e "s|@CONTAINERD_SOCK@|$CONTAINERD_SOCK|g" -e "s|@CNI_BIN@|$CNI_BIN|g" "$CONF_DIR/$1" > "$2"
}

# alive reports whether the process recorded in $CLUSTER_DIR/<name>.pid runs
# and is still the program we started (PIDs get reused).
alive() {
  local f=$CLUSTER_DIR/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

kubectl_admin() { "$K8S_BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }
