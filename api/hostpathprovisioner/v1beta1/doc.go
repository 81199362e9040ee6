// Package v1beta1 holds the hostpathprovisioner.kubevirt.io/v1beta1 API:
// the cluster-scoped HostPathProvisioner, from which the hostpath
// provisioner's operator (operator/hostpath) deploys the CSI driver
// kubevirt.io.hostpath-provisioner with the storage pools the spec names.
//
// Field names and JSON tags are upstream's
// (kubevirt/hostpath-provisioner-operator). Declared: storagePools
// (name, path), pathConfig, imagePullPolicy, workload (nodeSelector,
// tolerations, affinity) and featureGates. The operator refuses, naming
// them, what kubevmm does not implement: pathConfig (upstream's legacy
// provisioner kubevirt.io/hostpath-provisioner), a pool's pvcTemplate,
// any feature gate, and any other field the CRD keeps (the spec preserves
// unknown fields so that none vanishes silently).
//
// controller-gen: `go generate ./api/hostpathprovisioner/...`.
//
// +kubebuilder:object:generate=true
// +groupName=hostpathprovisioner.kubevirt.io
package v1beta1
