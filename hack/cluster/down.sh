#!/usr/bin/env bash
# Stops the dev cluster started by up.sh: every process by its recorded
# PID (checked against its command line, PIDs get reused), containers,
# mounts, network namespaces, iptables chains and bridges; then wipes the
# cluster state (etcd, kubelet, CNI) so the next cluster-up starts fresh.
# Kept: binaries, PKI, and containerd's image store. Safe to run when
# nothing (or only part) is running.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "down.sh: must run as root"
T0=$(now)

# stop NAME MATCH: SIGTERM, up to 10 s, then SIGKILL.
stop() {
  local name=$1 match=$2 pidfile=$CLUSTER_DIR/$1.pid pid
  if ! alive "$name" "$match"; then rm -f "$pidfile"; return 0; fi
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { log "down.sh: stopped $name ($pid)"; rm -f "$pidfile"; return 0; }
    sleep 0.2
  done
  # kube-apiserver has been seen to hang minutes in graceful shutdown.
  kill -9 "$pid" 2>/dev/null || true
  log "down.sh: killed $name ($pid) after 10 s"
  rm -f "$pidfile"
}

# Pods first, while the kubelet runs, so that it tears their sandboxes and
# network namespaces down properly.
if alive kube-apiserver "$K8S_BIN/kube-apiserver" && alive kubelet "$K8S_BIN/kubelet"; then
  kubectl_admin delete pods --all --all-namespaces --grace-period=1 --timeout=60s --wait=true >/dev/null 2>&1 || true
fi
# The kubelet before the apiserver: a connected kubelet can stall the
# apiserver's shutdown.
stop registry "$REGISTRY_BIN_DIR/registry-$REGISTRY_VERSION serve"
stop kube-proxy "$K8S_BIN/kube-proxy"
stop kube-router "$KUBE_ROUTER_DIR/bin/kube-router"
stop socat "socat TCP-LISTEN:$API_PORT"
stop kubelet "$K8S_BIN/kubelet"
stop kube-controller-manager "$K8S_BIN/kube-controller-manager"
stop kube-scheduler "$K8S_BIN/kube-scheduler"
stop kube-apiserver "$K8S_BIN/kube-apiserver"
stop etcd "$K8S_BIN/etcd"

if alive containerd "containerd --config"; then
  c() { ctr -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }
  for t in $(c tasks ls -q 2>/dev/null); do c tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
  for t in $(c tasks ls -q 2>/dev/null); do
    for _ in $(seq 1 25); do c tasks delete "$t" >/dev/null 2>&1 && break; sleep 0.2; done
  done
  for k in $(c containers ls -q 2>/dev/null); do c containers delete "$k" >/dev/null 2>&1 || true; done
  stop containerd "containerd --config"
fi

# Mounts the kubelet and containerd left under our directory (deepest first).
awk -v d="$CLUSTER_DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
  umount -l "$m" 2>/dev/null || true
done
# Network namespaces of pods (the CNI plugins name them cni-*; nothing else
# on this machine does).
for n in /run/netns/cni-*; do
  [ -e "$n" ] || continue
  umount "$n" 2>/dev/null || true
  # A namespace mounted before something bind-mounted /run/netns over
  # itself (ip netns does) is hidden under that mount and cannot be
  # removed from here; it is only a leak, not worth failing for.
  rm -f "$n" 2>/dev/null || log "down.sh: $n is hidden under a later /run/netns mount; left in place"
done
# iptables chains of kube-proxy, kube-router and the kubelet (all KUBE-*; this machine
# runs no other Kubernetes).
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for t in filter nat mangle; do
    # (grep finding nothing is fine; pipefail must not end the script.)
    { "$ipt-save" -t "$t" 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' || true; } |
      sed 's/^-A //' | while read -r rule; do eval "$ipt -t $t -D $rule" 2>/dev/null || true; done
    for ch in $("$ipt-save" -t "$t" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/{print $2}'); do "$ipt" -t "$t" -F "$ch" 2>/dev/null || true; done
    for ch in $("$ipt-save" -t "$t" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/{print $2}'); do "$ipt" -t "$t" -X "$ch" 2>/dev/null || true; done
  done
done
# kube-router's ipsets, now that no rule refers to them (it names them
# KUBE-* and kube-router-*).
if command -v ipset >/dev/null; then
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router-)' || true); do ipset destroy "$set" 2>/dev/null || true; done
fi
for br in "$POD_BRIDGE" "$NODE_BRIDGE"; do
  ip link show "$br" >/dev/null 2>&1 && ip link del "$br"
done

# The hostpath provisioner's pool: its volumes belong to the claims in etcd,
# which goes too. Loop devices of Block volumes still published are
# detached first (their mounts went above).
pool=$CLUSTER_DIR/hpvolumes
if [ -d "$pool" ]; then
  losetup -n -l -O NAME,BACK-FILE | awk -v d="$pool/" 'index($2, d) == 1 {print $1}' | while read -r l; do
    losetup -d "$l" 2>/dev/null || true
  done
  rm -rf "$pool"
fi
rm -rf "$CLUSTER_DIR/registry" "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/kubelet" "$CLUSTER_DIR/cni" "$CLUSTER_DIR/containerd/state"
log "down.sh: cluster down in $(since "$T0") s"
