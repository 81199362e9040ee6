// Package v1 holds the kubevirt.io/v1 API types kubevmm serves:
// VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration and
// KubeVirt (the installation, virt-operator's).
//
// Field names and JSON tags are KubeVirt's, so manifests written for KubeVirt
// decode unchanged. The Go code is kubevmm's own (the kubevirt.io modules are
// not available from the module proxy, and we want no dependency on them).
//
// Fields KubeVirt has but kubevmm does not model are still declared, with the
// type Unmodeled, so that the API server keeps them instead of pruning them:
// admission then refuses an object that uses one, naming the field (see
// UnmodeledFields), rather than the field vanishing silently.
//
// The generated files (zz_generated.deepcopy.go, ../../crds/*.yaml) come from
// controller-gen; run `make generate` after changing a type or a marker.
//
// +kubebuilder:object:generate=true
// +groupName=kubevirt.io
package v1
