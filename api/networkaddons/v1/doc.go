// Package v1 holds the networkaddonsoperator.network.kubevirt.io/v1 API:
// the cluster-scoped NetworkAddonsConfig, from which the network add-ons
// operator (operator/network) deploys the components whose keys are set.
//
// Field names and JSON tags are upstream's
// (kubevirt/cluster-network-addons-operator). Only what kubevmm honours is
// declared: multus, linuxBridge, kubeMacPool and imagePullPolicy. The CRD
// keeps any other field (ovs, macvtap, multusDynamicNetworks,
// kubeSecondaryDNS, kubevirtIpamController, selfSignConfiguration,
// placementConfiguration, tlsSecurityProfile, ...) and the operator refuses
// a NetworkAddonsConfig that sets one, naming it (Degraded), rather than
// the setting vanishing silently. v1alpha1 is served too, with the same
// schema: upstream's v1alpha1 and v1 share one spec and status type
// (pkg/apis/networkaddonsoperator/shared), so no conversion.
//
// controller-gen: `go generate ./api/networkaddons/...`.
//
// +kubebuilder:object:generate=true
// +groupName=networkaddonsoperator.network.kubevirt.io
package v1
