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

# The kubevirt.io CRDs install and print like KubeVirt's; with
# virt-controller running (out of cluster here: its deployment is phase 2),
# a VirtualMachine becomes a VMI and a launcher pod, which stays Pending:
# no node offers devices.kubevirt.io/kvm until virt-handler (phase 2).
t=$(now)
make -C "$REPO_DIR" --no-print-directory cluster-sync
pass "make cluster-sync ($(since "$t") s)"
# virt-controller runs with only its generated ClusterRole (as it will in
# the cluster), through a service-account token, so missing RBAC fails here.
"$K" apply -f "$REPO_DIR/controller/rbac/role.yaml" >/dev/null
# (Its namespace is not the test namespace: deleting that must not revoke
# the token the controller needs to clean the namespace up.)
sans=kubevmm-system
"$K" create namespace "$sans" --dry-run=client -o yaml | "$K" apply -f - >/dev/null
"$K" -n "$sans" create serviceaccount kubevirt-controller --dry-run=client -o yaml | "$K" apply -f - >/dev/null
"$K" create clusterrolebinding kubevmm-check-controller --clusterrole=kubevirt-controller \
  --serviceaccount="$sans:kubevirt-controller" --dry-run=client -o yaml | "$K" apply -f - >/dev/null
vckc=$CLUSTER_DIR/virt-controller.kubeconfig
cat > "$vckc" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: kubevmm
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: $PKI_DIR/ca.crt}
users:
- name: kubevirt-controller
  user: {token: $("$K" -n "$sans" create token kubevirt-controller --duration=1h)}
contexts:
- name: kubevmm
  context: {cluster: kubevmm, user: kubevirt-controller}
current-context: kubevmm
EOK
# The static binary cluster-sync just put into the image.
"$KUBEVMM_CACHE/images/bin/virt-controller" --kubeconfig "$vckc" --health-probe-bind-address=0 \
  --launcher-image localhost/kubevmm/virt-launcher:devel > "$LOG_DIR/virt-controller.log" 2>&1 &
vc=$!
trap 'kill $vc 2>/dev/null || true' EXIT
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
for _ in $(seq 1 600); do
  [ "$("$K" -n "$ns" get vm check -o 'jsonpath={.status.printableStatus}' 2>/dev/null)" = ErrorUnschedulable ] && break
  sleep 0.2
done
"$K" -n "$ns" get vm,vmi,pods -o wide
[ "$("$K" -n "$ns" get vm check -o 'jsonpath={.status.printableStatus}')" = ErrorUnschedulable ] \
  || fail "VM did not reach ErrorUnschedulable (see $LOG_DIR/virt-controller.log)"
"$K" -n "$ns" get vmi check -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}' | grep -q "didn't match Pod's node affinity/selector\|Insufficient devices.kubevirt.io/kvm" \
  || fail "the VMI does not carry the scheduler's reason"
pass "VM -> VMI -> launcher pod on the real cluster; scheduler's reason on the VMI ($(since "$t") s)"
grep -i forbidden "$LOG_DIR/virt-controller.log" && fail "virt-controller lacks RBAC (above)"
pass "virt-controller needs no more than controller/rbac/role.yaml"
"$K" delete namespace "$ns" --wait=true --timeout=120s >/dev/null
kill $vc; wait $vc 2>/dev/null || true
"$K" delete clusterrolebinding kubevmm-check-controller >/dev/null
"$K" delete namespace "$sans" --wait=true --timeout=120s >/dev/null
rm -f "$vckc"
trap - EXIT

$keep && { log "check.sh: --keep: leaving the cluster up"; exit 0; }
t=$(now)
make -C "$REPO_DIR" --no-print-directory cluster-down
left=""
for f in "$CLUSTER_DIR"/*.pid; do [ -e "$f" ] && left="$left $(basename "$f")"; done
[ -z "$left" ] || fail "pid files left after cluster-down:$left"
for b in etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy; do
  pgrep -f "^$K8S_BIN/$b" >/dev/null && fail "$b still running after cluster-down"
done
pgrep -f "containerd --config $CLUSTER_DIR" >/dev/null && fail "containerd still running after cluster-down"
"$K" get nodes >/dev/null 2>&1 && fail "the API server still answers after cluster-down"
pass "make cluster-down stopped everything ($(since "$t") s)"
