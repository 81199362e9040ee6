#!/usr/bin/env bash
# Builds the kubevmm component images (virt-operator, virt-controller,
# virt-api, virt-handler, virt-launcher, hostpath-provisioner and its
# operator, ssp-operator,
# virt-template-validator, hco-operator, kubevmm-multus, bridge-marker,
# kubemacpool, cluster-network-addons-operator, cdi-operator,
# cdi-controller, cdi-importer, cdi-apiserver, cdi-uploadproxy,
# cdi-uploadserver, cdi-cloner), imports them into the dev
# cluster's containerd and installs kubevmm the documented way: virt-operator
# (namespace kubevirt, the KubeVirt CRD, its RBAC and Deployment, generated
# by hack/cluster/manifests -operator; virt-operator makes and rotates the
# components' certificates), the SSP and HCO operators
# beside it and a HyperConverged CR, from which the HCO makes the KubeVirt
# and SSP CRs and their operators deploy the rest, and the hostpath
# provisioner (its operator and a HostPathProvisioner CR) and the network
# add-ons operator, which deploys the add-ons from the NetworkAddonsConfig
# the HCO makes, and CDI's operator, which deploys CDI from the CDI CR
# the HCO makes. Then waits for the CRs' Available condition and for the
# node to take VMs: KubeVirt's `make cluster-sync`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "sync.sh: must run as root (containerd socket)"
ctr -a "$CONTAINERD_SOCK" version >/dev/null 2>&1 || die "sync.sh: the cluster is not up (make cluster-up)"
T0=$(now)
components=()
for c in virt-operator hco-operator virt-api virt-controller virt-handler virt-launcher hostpath-provisioner hostpath-provisioner-operator kubevmm-multus bridge-marker kubemacpool cluster-network-addons-operator ssp-operator virt-template-validator cdi-operator cdi-controller cdi-importer cdi-apiserver cdi-uploadproxy cdi-uploadserver cdi-cloner; do
  [ -d "$REPO_DIR/cmd/$c" ] && components+=("$c")
done
"$HACK_DIR/cluster/images.sh" "${components[@]}"
log "sync.sh: images (${components[*]}) imported in $(since "$T0") s"

ns=kubevirt
manifests=$CLUSTER_DIR/kubevmm-operator.yaml
# (The kubelet's device-plugin directory is /var/lib/kubelet/device-plugins
# whatever its --root-dir: the path is a constant of the device-plugin API.)
(cd "$REPO_DIR" && go run ./hack/cluster/manifests -operator -namespace "$ns" -pki "$CLUSTER_DIR/kubevmm-pki" -kubelet-root "$CLUSTER_DIR/kubelet" \
  -hostpath-pool "$CLUSTER_DIR/hpvolumes" -cni-bin-dir "$CNI_BIN" -cni-conf-dir "$CLUSTER_DIR/cni/net.d") > "$manifests"
# Server-side apply: the CRDs are too large for the last-applied annotation.
kubectl_admin apply --server-side --force-conflicts -f "$manifests" >/dev/null
kubectl_admin wait --for=condition=Established crd/kubevirts.kubevirt.io --timeout=60s >/dev/null
# Same tag, new image: restart so the pods run what was just built.
kubectl_admin -n "$ns" rollout restart deployment/virt-operator >/dev/null
kubectl_admin -n "$ns" rollout status deployment/virt-operator --timeout=180s >/dev/null || {
  kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: virt-operator did not become ready"; }
# The HCO operator (its webhook admits the HyperConverged CR) and the
# cli-download server, onto the new image too.
kubectl_admin -n "$ns" rollout restart deployment/hyperconverged-cluster-operator deployment/hyperconverged-cluster-cli-download >/dev/null
for w in deployment/hyperconverged-cluster-operator deployment/hyperconverged-cluster-cli-download; do
  kubectl_admin -n "$ns" rollout status "$w" --timeout=180s >/dev/null || {
    kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: $w did not become ready"; }
done
# The network add-ons operator: the HCO makes NetworkAddonsConfig/cluster
# (its CRD is in the manifests) and is Available only with it.
kubectl_admin -n cluster-network-addons rollout restart deployment/cluster-network-addons-operator >/dev/null
kubectl_admin -n cluster-network-addons rollout status deployment/cluster-network-addons-operator --timeout=180s >/dev/null || {
  kubectl_admin -n cluster-network-addons get pods -o wide >&2; die "sync.sh: cluster-network-addons-operator did not become ready"; }
# The CDI operator: the HCO makes CDI/cdi-kubevirt-hyperconverged (its
# CRD is in the manifests) and is Available only with it.
kubectl_admin -n cdi rollout restart deployment/cdi-operator >/dev/null
kubectl_admin -n cdi rollout status deployment/cdi-operator --timeout=180s >/dev/null || {
  kubectl_admin -n cdi get pods -o wide >&2; die "sync.sh: cdi-operator did not become ready"; }
# The HyperConverged CR, from which the HCO makes the KubeVirt CR
# kubevirt-kubevirt-hyperconverged. The dev cluster has one node: without
# the KubeVirt feature gate SameNodeLiveMigration a migration's target pod
# could never be scheduled there; the HCO has no field for it, the
# jsonpatch annotation is the escape hatch. HotplugVolumes (KubeVirt's gate)
# lets addvolume/removevolume through virt-api, for e2e TestHotplugVolume.
# Guest kernels run emulated
# here: migrations get upstream's old 150 s per GiB, not 20.
hco_cr() {
  kubectl_admin apply --server-side --force-conflicts -f - >/dev/null <<YAML
apiVersion: hco.kubevirt.io/v1
kind: HyperConverged
metadata:
  name: kubevirt-hyperconverged
  namespace: $ns
  annotations:
    kubevirt.kubevirt.io/jsonpatch: '[{"op":"add","path":"/spec/configuration/developerConfiguration","value":{"featureGates":["SameNodeLiveMigration","HotplugVolumes"]}}]'
spec:
  virtualization:
    liveMigrationConfig:
      completionTimeoutPerGiB: 150
YAML
}
# The common templates' namespace, upstream's default, which only
# OpenShift has: the SSP the HCO makes is not Available without it.
kubectl_admin apply --server-side --force-conflicts -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: openshift
YAML
# (The webhook's Service may route to the new pod a moment after it is ready.)
for _ in $(seq 1 30); do hco_cr 2>/dev/null && break; sleep 1; done
hco_cr
kv_available() {
  kubectl_admin wait -n "$ns" hco/kubevirt-hyperconverged --for=condition=Available --timeout="$1" >/dev/null || {
    kubectl_admin -n "$ns" get hco/kubevirt-hyperconverged -o jsonpath='{.status}' >&2; echo >&2
    kubectl_admin -n "$ns" get kubevirt/kubevirt-kubevirt-hyperconverged -o jsonpath='{.status}' >&2; echo >&2
    kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: the HyperConverged CR did not become Available"; }
}
kv_available 300s
# Components already running the same tag: restart them onto the new images.
kubectl_admin -n "$ns" rollout restart deployment/virt-controller deployment/virt-api daemonset/virt-handler >/dev/null
for w in deployment/virt-controller deployment/virt-api daemonset/virt-handler; do
  kubectl_admin -n "$ns" rollout status "$w" --timeout=180s >/dev/null || {
    kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: $w did not become ready"; }
done
kv_available 180s
# The operator installed the CRDs: api/crds/GROUP_PLURAL.yaml is the CRD PLURAL.GROUP.
for crd in $(ls "$REPO_DIR"/api/crds/*.yaml | xargs -n1 basename | sed 's/^\(.*\)_\(.*\)\.yaml$/\2.\1/'); do
  kubectl_admin wait --for=condition=Established "crd/$crd" --timeout=60s >/dev/null
done
# The SSP operator (deployed beside virt-operator by the manifests) and
# the SSP CR the HCO made (ssp-kubevirt-hyperconverged): the common
# instance types and preferences, the common templates in namespace
# openshift (made with the HyperConverged CR) and virt-template-validator.
kubectl_admin -n "$ns" rollout restart deployment/ssp-operator >/dev/null
kubectl_admin -n "$ns" rollout status deployment/ssp-operator --timeout=180s >/dev/null || {
  kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: ssp-operator did not become ready"; }
for _ in $(seq 1 300); do kubectl_admin -n "$ns" get ssp/ssp-kubevirt-hyperconverged >/dev/null 2>&1 && break; sleep 0.2; done
ssp_available() {
  kubectl_admin wait -n "$ns" ssp/ssp-kubevirt-hyperconverged --for=condition=Available --timeout="$1" >/dev/null || {
    kubectl_admin -n "$ns" get ssp/ssp-kubevirt-hyperconverged -o jsonpath='{.status}' >&2; echo >&2
    kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: the SSP CR did not become Available"; }
}
ssp_available 180s
kubectl_admin -n "$ns" rollout restart deployment/virt-template-validator >/dev/null
kubectl_admin -n "$ns" rollout status deployment/virt-template-validator --timeout=180s >/dev/null || {
  kubectl_admin -n "$ns" get pods -o wide >&2; die "sync.sh: virt-template-validator did not become ready"; }
ssp_available 120s
# CDI, deployed by its operator from the CDI CR the HCO made: running
# the same tag, cdi-controller, cdi-apiserver and cdi-uploadproxy are
# restarted onto the new images.
cdi_available() {
  kubectl_admin wait cdi/cdi-kubevirt-hyperconverged --for=condition=Available --timeout="$1" >/dev/null || {
    kubectl_admin get cdi/cdi-kubevirt-hyperconverged -o jsonpath='{.status}' >&2; echo >&2
    kubectl_admin -n cdi get pods -o wide >&2; die "sync.sh: the CDI CR did not become Available"; }
}
for _ in $(seq 1 300); do kubectl_admin get cdi/cdi-kubevirt-hyperconverged >/dev/null 2>&1 && break; sleep 0.2; done
cdi_available 180s
for d in cdi-deployment cdi-apiserver cdi-uploadproxy; do
  kubectl_admin -n cdi rollout restart "deployment/$d" >/dev/null
  kubectl_admin -n cdi rollout status "deployment/$d" --timeout=180s >/dev/null || {
    kubectl_admin -n cdi get pods -o wide >&2; die "sync.sh: $d did not become ready"; }
done
cdi_available 120s
# The hostpath provisioner (StorageClass hostpath-csi, the default, pool
# local): its operator (in the manifests) deploys the CSI driver from the
# HostPathProvisioner CR, Available once the driver's DaemonSet is ready;
# the driver is ready once the kubelet registered it (the node's CSINode
# lists it). A DaemonSet of the plain manifests (before the operator; no
# owner) is deleted first: the operator's names its pool's volume
# differently, and apply would merge the two.
hpp=hostpath-provisioner
if owner=$(kubectl_admin -n $hpp get daemonset/$hpp -o 'jsonpath={.metadata.ownerReferences[*].kind}' 2>/dev/null) && [ "$owner" != HostPathProvisioner ]; then
  kubectl_admin -n $hpp delete daemonset/$hpp --wait=true >/dev/null
fi
kubectl_admin wait --for=condition=Established crd/hostpathprovisioners.hostpathprovisioner.kubevirt.io --timeout=60s >/dev/null
kubectl_admin -n $hpp rollout restart deployment/hostpath-provisioner-operator >/dev/null
kubectl_admin -n $hpp rollout status deployment/hostpath-provisioner-operator --timeout=180s >/dev/null || {
  kubectl_admin -n $hpp get pods -o wide >&2; die "sync.sh: hostpath-provisioner-operator did not become ready"; }
kubectl_admin apply --server-side --force-conflicts -f - >/dev/null <<YAML
apiVersion: hostpathprovisioner.kubevirt.io/v1beta1
kind: HostPathProvisioner
metadata:
  name: hostpath-provisioner
spec:
  imagePullPolicy: Never
  storagePools:
  - name: local
    path: $CLUSTER_DIR/hpvolumes
YAML
for _ in $(seq 1 300); do kubectl_admin -n $hpp get daemonset/$hpp >/dev/null 2>&1 && break; sleep 0.2; done
# Running the same tag: restarted onto the new image.
kubectl_admin -n $hpp rollout restart daemonset/$hpp >/dev/null
kubectl_admin -n $hpp rollout status daemonset/$hpp --timeout=180s >/dev/null || {
  kubectl_admin -n $hpp get pods -o wide >&2; die "sync.sh: daemonset/hostpath-provisioner did not become ready"; }
kubectl_admin wait hostpathprovisioner/hostpath-provisioner --for=condition=Available --timeout=120s >/dev/null || {
  kubectl_admin get hostpathprovisioner/hostpath-provisioner -o jsonpath='{.status}' >&2; echo >&2
  die "sync.sh: the HostPathProvisioner did not become Available"; }
csi_registered() {
  kubectl_admin get csinode "$NODE_NAME" -o 'jsonpath={.spec.drivers[*].name}' 2>/dev/null | grep -qw kubevirt.io.hostpath-provisioner
}
for _ in $(seq 1 300); do csi_registered && break; sleep 0.2; done
csi_registered || die "sync.sh: the kubelet on $NODE_NAME did not register the CSI driver kubevirt.io.hostpath-provisioner"
# The network add-ons, deployed by their operator from the
# NetworkAddonsConfig the HCO made (multus, linuxBridge, kubeMacPool):
# running the same tag, they are restarted onto the new images. kubevmm-multus
# is the node's CNI entry once its installer wrote 00-multus.conflist (the
# node is this machine); kubemacpool is ready once its pool is rebuilt
# from the VMs.
nac_available() {
  kubectl_admin wait networkaddonsconfig/cluster --for=condition=Available --timeout="$1" >/dev/null || {
    kubectl_admin get networkaddonsconfig/cluster -o jsonpath='{.status}' >&2; echo >&2
    kubectl_admin -n cluster-network-addons get pods -o wide >&2; die "sync.sh: NetworkAddonsConfig cluster did not become Available"; }
}
for _ in $(seq 1 300); do kubectl_admin get networkaddonsconfig/cluster >/dev/null 2>&1 && break; sleep 0.2; done
nac_available 180s
kubectl_admin wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout=60s >/dev/null
for w in daemonset/kubevmm-multus daemonset/bridge-marker deployment/kubemacpool-mac-controller-manager; do
  kubectl_admin -n cluster-network-addons rollout restart "$w" >/dev/null
  kubectl_admin -n cluster-network-addons rollout status "$w" --timeout=180s >/dev/null || {
    kubectl_admin -n cluster-network-addons get pods -o wide >&2; die "sync.sh: $w did not become ready"; }
done
for _ in $(seq 1 300); do [ -s "$CLUSTER_DIR/cni/net.d/00-multus.conflist" ] && break; sleep 0.2; done
[ -s "$CLUSTER_DIR/cni/net.d/00-multus.conflist" ] || die "sync.sh: kubevmm-multus did not install 00-multus.conflist"
nac_available 120s
kv_available 120s
kubectl_admin wait --for=condition=Available apiservice/v1.subresources.kubevirt.io --timeout=120s >/dev/null
# Launcher pods can be scheduled once virt-handler labelled the node and the
# kubelet reports the device plugins' resources.
node_ready_for_vms() {
  kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.metadata.labels.kubevirt\.io/schedulable} {.status.allocatable.devices\.kubevirt\.io/kvm} {.status.allocatable.devices\.kubevirt\.io/tun} {.status.allocatable.devices\.kubevirt\.io/userfaultfd}' \
    | grep -qx 'true 1k 1k 1k'
}
for _ in $(seq 1 600); do node_ready_for_vms && break; sleep 0.2; done
node_ready_for_vms || die "sync.sh: $NODE_NAME is not labelled schedulable or offers no devices.kubevirt.io/kvm, /tun, /userfaultfd"
log "sync.sh: kubevmm deployed by the HCO and virt-operator in namespace $ns in $(since "$T0") s"
