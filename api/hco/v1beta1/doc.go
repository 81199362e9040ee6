// Package v1beta1 is HyperConverged as hco.kubevirt.io/v1beta1, served
// beside v1 (the storage version) through the CRD's conversion webhook:
// the same content as v1 with the groups flattened (liveMigrationConfig,
// certConfig, uninstallStrategy, ... at the top of the spec) and the
// feature gates as a map of booleans. Convert (conversion.go) is the pure
// function the webhook runs.
//
// +kubebuilder:object:generate=true
// +groupName=hco.kubevirt.io
package v1beta1
