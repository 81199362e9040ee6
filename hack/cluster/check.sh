#!/usr/bin/env bash
# The cluster's own test: cluster-up, the node is Ready as kubectl sees it,
# a pod runs, aggregated-API plumbing is configured, then (optionally) the
# kubevirt.io CRDs and virt-controller are exercised, and cluster-down
# leaves nothing running. Usage: hack/cluster/check.sh [--keep]
set -euo pipefail
. "$(dirname "$0")/lib.sh"

keep=false
[ "${1:-}" = --keep ] && keep=true
K="$HACK_DIR/kubectl.sh"
fail() { log "check.sh: FAIL: $*"; exit 1; }
pass() { log "check.sh: ok: $*"; }

t=$(now)
make -C "$REPO_DIR" --no-print-directory cluster-up
pass "make cluster-up ($(since "$t") s)"

"$K" get nodes -o wide
[ "$("$K" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ] \
  || fail "node $NODE_NAME is not Ready"
"$K" get nodes --no-headers | awk -v n="$NODE_NAME" '$1 == n && $2 == "Ready" {ok=1} END {exit !ok}' \
  || fail "kubectl get nodes does not show $NODE_NAME Ready"
pass "hack/kubectl.sh get nodes shows $NODE_NAME Ready"
[ "$("$K" version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | sort -u | tr '\n' ' ')" = "$KUBE_VERSION " ] \
  || fail "client and server are not both $KUBE_VERSION"
pass "kubectl and kube-apiserver are $KUBE_VERSION"

# A pod runs: sandbox image, CNI, kubelet, containerd, runc all work.
ns=kubevmm-check
"$K" create namespace "$ns" --dry-run=client -o yaml | "$K" apply -f - >/dev/null
"$K" -n "$ns" delete pod sandbox --ignore-not-found --wait=true >/dev/null
t=$(now)
"$K" -n "$ns" run sandbox --image=localhost/kubevmm/pause:devel --image-pull-policy=Never --restart=Never >/dev/null
"$K" -n "$ns" wait --for=condition=Ready pod/sandbox --timeout=120s >/dev/null || { "$K" -n "$ns" describe pod sandbox; fail "pod did not become Ready"; }
ip=$("$K" -n "$ns" get pod sandbox -o 'jsonpath={.status.podIP}')
pass "a pod runs (apply -> Ready $(since "$t") s, pod IP $ip)"

# The aggregation layer is configured: the apiserver publishes the
# requestheader CA that virt-api will use to trust proxied requests.
"$K" -n kube-system get configmap extension-apiserver-authentication -o jsonpath='{.data.requestheader-client-ca-file}' \
  | grep -q 'BEGIN CERTIFICATE' || fail "no requestheader CA in extension-apiserver-authentication"
pass "aggregation layer configured (requestheader CA published)"

# cluster-sync builds and deploys kubevmm (namespace kubevirt): virt-operator,
# the HCO and a HyperConverged CR, from which the HCO makes the KubeVirt CR
# and virt-operator deploys the CRDs,
# virt-controller, virt-api (webhooks, APIService) and virt-handler (device
# plugins, the node's schedulable label). A VirtualMachine whose
# containerDisk cannot be pulled (no registry here) becomes a VMI and a
# launcher pod, scheduled on the node, and the VM says ErrImagePull.
t=$(now)
make -C "$REPO_DIR" --no-print-directory cluster-sync
pass "make cluster-sync ($(since "$t") s)"
[ "$("$K" -n kubevirt get kubevirt kubevirt-kubevirt-hyperconverged -o 'jsonpath={.status.phase}')" = Deployed ] \
  || fail "the KubeVirt CR is not Deployed"
pass "virt-operator deployed kubevmm from the KubeVirt CR the HCO made (phase Deployed)"
[ "$("$K" -n kubevirt get ssp ssp-kubevirt-hyperconverged -o 'jsonpath={.status.phase}')" = Deployed ] \
  || fail "the SSP CR is not Deployed"
pass "the SSP operator deployed the common instance types, templates and virt-template-validator (phase Deployed)"
[ "$("$K" get node "$NODE_NAME" -o 'jsonpath={.status.allocatable.devices\.kubevirt\.io/kvm}')" = 1k ] \
  || fail "the node does not offer devices.kubevirt.io/kvm"
pass "virt-handler offers devices.kubevirt.io/kvm and /tun and labels the node schedulable"
"$K" get apiservice v1.subresources.kubevirt.io -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' | grep -qx True \
  || fail "the subresources.kubevirt.io APIService is not available"
pass "virt-api serves subresources.kubevirt.io through the aggregation layer"
cat <<EOV | "$K" -n "$ns" apply -f - >/dev/null
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: check
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices: {disks: [{name: root, disk: {bus: virtio}}]}
      volumes:
      - name: root
        containerDisk: {image: quay.io/containerdisks/cirros:latest}
EOV
t=$(now)
status() { "$K" -n "$ns" get vm check -o 'jsonpath={.status.printableStatus}' 2>/dev/null; }
for _ in $(seq 1 600); do
  case "$(status)" in ErrImagePull|ImagePullBackOff) break ;; esac
  sleep 0.2
done
"$K" -n "$ns" get vm,vmi,pods -o wide
case "$(status)" in ErrImagePull|ImagePullBackOff) ;; *) fail "VM did not reach ErrImagePull";; esac
[ "$("$K" -n "$ns" get vmi check -o 'jsonpath={.status.nodeName}')" = "$NODE_NAME" ] || fail "the VMI was not scheduled to $NODE_NAME"
pass "VM -> VMI -> launcher pod scheduled on $NODE_NAME; the image pull error on the VM ($(since "$t") s)"
for c in virt-controller virt-api; do
  "$K" -n kubevirt logs "deploy/$c" | grep -i forbidden && fail "$c lacks RBAC (above)"
done
"$K" -n kubevirt logs ds/virt-handler | grep -i forbidden && fail "virt-handler lacks RBAC (above)"
pass "the components need no more than their generated roles"
"$K" delete namespace "$ns" --wait=true --timeout=120s >/dev/null

$keep && { log "check.sh: --keep: leaving the cluster up"; exit 0; }
t=$(now)
make -C "$REPO_DIR" --no-print-directory cluster-down
left=""
for f in "$CLUSTER_DIR"/*.pid; do [ -e "$f" ] && left="$left $(basename "$f")"; done
[ -z "$left" ] || fail "pid files left after cluster-down:$left"
for b in etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy; do
  pgrep -f "^$K8S_BIN/$b" >/dev/null && fail "$b still running after cluster-down"
done
pgrep -f "^$KUBE_ROUTER_DIR/bin/kube-router" >/dev/null && fail "kube-router still running after cluster-down"
pgrep -f "containerd --config $CLUSTER_DIR" >/dev/null && fail "containerd still running after cluster-down"
"$K" get nodes >/dev/null 2>&1 && fail "the API server still answers after cluster-down"
pass "make cluster-down stopped everything ($(since "$t") s)"
