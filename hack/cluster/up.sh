#!/usr/bin/env bash
# Brings up a real single-node Kubernetes on this machine: etcd,
# kube-apiserver (with the aggregation layer configured), containerd,
# kube-scheduler, kube-controller-manager, kubelet, kube-proxy and
# kube-router's NetworkPolicy firewall, all
# started in the background with their PIDs recorded under
# $KUBEVMM_CACHE/k8s/cluster; waits until the node is Ready.
# Idempotent: components already running are left alone.
# Stop with hack/cluster/down.sh (make cluster-down).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "up.sh: must run as root (bridges, iptables, containerd, kubelet)"
T0=$(now)
phase() { log "up.sh: $1 (+$(since "$T0") s)"; }

"$HACK_DIR/deps.sh" cluster
phase "packages present"
"$HACK_DIR/cluster/build.sh" all >/dev/null
phase "kubernetes $KUBE_VERSION binaries present"
"$HACK_DIR/cluster/pki.sh"
phase "PKI present"
"$HACK_DIR/cluster/cni-plugins.sh" >/dev/null
KUBE_ROUTER=$("$HACK_DIR/cluster/kube-router.sh")
phase "CNI plugins and kube-router present"

mkdir -p "$LOG_DIR" "$CLUSTER_DIR/cni/net.d" "$CLUSTER_DIR/containerd" "$CLUSTER_DIR/kubelet" "$CLUSTER_DIR/conf"
P=$PKI_DIR B=$K8S_BIN

# start NAME MATCH CMD...: runs CMD in its own session (it must outlive the
# make that started it) unless the recorded PID still runs it.
start() {
  local name=$1 match=$2; shift 2
  local pidfile=$CLUSTER_DIR/$name.pid
  if alive "$name" "$match"; then return 0; fi
  rm -f "$pidfile"
  # The shell records its own PID and then becomes the program, so the PID
  # is the program's whether or not setsid had to fork.
  setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" > "$LOG_DIR/$name.log" 2>&1 < /dev/null &
  until [ -s "$pidfile" ]; do sleep 0.05; done
}
# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds; the bound is
# only there to fail instead of hanging forever.
wait_for() {
  local what=$1 limit=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "up.sh: $what did not happen within ${limit}s; see $LOG_DIR"
    sleep 0.2
  done
}

# The node's address lives on a bridge of its own: the kubelet refuses a
# loopback node IP, and this address is never routed off the machine.
if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
fi

start etcd "$B/etcd" "$B/etcd" --name default --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
  --unsafe-no-fsync

# Admission webhooks get the front proxy's client certificate too ('*'
# matches every webhook's host): every webhook of the platform answers only
# a caller with it, as an extension API server answers only the front proxy
# (api/frontproxy), so no pod can send them reviews of its own.
mkdir -p "$CLUSTER_DIR/conf"
cat >"$CLUSTER_DIR/conf/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: '*'
  user:
    client-certificate: $P/front-proxy-client.crt
    client-key: $P/front-proxy-client.key
EOF
cat >"$CLUSTER_DIR/conf/admission.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $CLUSTER_DIR/conf/webhook-client.kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $CLUSTER_DIR/conf/webhook-client.kubeconfig
EOF

# Aggregation: --requestheader-* and --proxy-client-* let kube-apiserver
# front virt-api's subresources.kubevirt.io through an APIService, and
# --enable-aggregator-routing sends those (and webhook) calls to endpoint
# IPs directly, since this apiserver runs on the host, not in the pod network.
start kube-apiserver "$B/kube-apiserver" "$B/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=127.0.0.1 --advertise-address="$NODE_IP" --secure-port="$API_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction --allow-privileged=true \
  --requestheader-client-ca-file="$P/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
  --enable-aggregator-routing=true --admission-control-config-file="$CLUSTER_DIR/conf/admission.yaml"
wait_for "kube-apiserver /readyz" 300 curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "https://127.0.0.1:$API_PORT/readyz"
phase "etcd + kube-apiserver ready"

render containerd.toml "$CLUSTER_DIR/conf/containerd.toml"
render 10-bridge.conflist "$CLUSTER_DIR/cni/net.d/10-bridge.conflist"
render kubelet-config.yaml "$CLUSTER_DIR/conf/kubelet-config.yaml"
start containerd "containerd --config" containerd --config "$CLUSTER_DIR/conf/containerd.toml"
wait_for "containerd" 60 ctr -a "$CONTAINERD_SOCK" version
"$HACK_DIR/cluster/images.sh" pause >/dev/null
phase "containerd up, sandbox image imported"

start kube-scheduler "$B/kube-scheduler" "$B/kube-scheduler" --kubeconfig="$P/scheduler.kubeconfig" \
  --authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false
start kube-controller-manager "$B/kube-controller-manager" "$B/kube-controller-manager" \
  --kubeconfig="$P/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$P/controller-manager.kubeconfig" --authorization-kubeconfig="$P/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --allocate-node-cidrs=false \
  --controllers='*,-cloud-node-lifecycle'
start kubelet "$B/kubelet" "$B/kubelet" --config="$CLUSTER_DIR/conf/kubelet-config.yaml" \
  --kubeconfig="$P/kubelet.kubeconfig" --root-dir="$CLUSTER_DIR/kubelet" --cert-dir="$CLUSTER_DIR/kubelet/pki" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
# The apiserver listens on 127.0.0.1 only; pods reach it through the
# kubernetes Service, whose endpoint is the node IP: forward that to it.
start socat "socat TCP-LISTEN:$API_PORT" socat "TCP-LISTEN:$API_PORT,bind=$NODE_IP,fork,reuseaddr" "TCP:127.0.0.1:$API_PORT"
start kube-proxy "$B/kube-proxy" "$B/kube-proxy" --kubeconfig="$P/kube-proxy.kubeconfig" \
  --hostname-override="$NODE_NAME" --proxy-mode=iptables --cluster-cidr="$POD_CIDR" \
  --bind-address="$NODE_IP" --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
  --nodeport-addresses="$NODE_IP/32" --conntrack-max-per-core=0
"$HACK_DIR/cluster/registry.sh" start
phase "node components and registry ($REGISTRY_ADDR) started"

node_ready() {
  kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}
wait_for "node $NODE_NAME Ready" 300 node_ready
# Pods cannot be created in a namespace before its default service account exists.
wait_for "default service account" 120 kubectl_admin get serviceaccount default -n default
phase "node $NODE_NAME Ready"

# NetworkPolicies: the bridge plugin enforces none, kube-router's firewall
# does (kube-router.sh), on the node as kube-proxy is, once the node it
# finds itself by exists. Its health and metrics servers are off: nothing
# listens for it on the node.
kubectl_admin apply -f "$CONF_DIR/kube-router-rbac.yaml" >/dev/null
start kube-router "$KUBE_ROUTER" "$KUBE_ROUTER" --kubeconfig="$P/kube-router.kubeconfig" \
  --hostname-override="$NODE_NAME" --run-firewall=true --run-router=false --run-service-proxy=false \
  --enable-cni=false --service-cluster-ip-range="$SERVICE_CIDR" --health-port=0 --metrics-port=0
wait_for "kube-router's firewall chains" 120 sh -c 'iptables -S KUBE-ROUTER-FORWARD'
phase "NetworkPolicy firewall (kube-router) running"

for n in etcd kube-apiserver containerd kube-scheduler kube-controller-manager kubelet socat kube-proxy kube-router registry; do
  printf '  %-24s pid %s\n' "$n" "$(cat "$CLUSTER_DIR/$n.pid")"
done
log "up.sh: cluster up in $(since "$T0") s. Use hack/kubectl.sh, or export KUBECONFIG=$KUBECONFIG_ADMIN"
