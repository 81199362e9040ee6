// Package v1beta3 holds the ssp.kubevirt.io/v1beta3 API: the SSP CR, from
// which the SSP operator (operator/ssp) deploys the common instance types
// and preferences, the common templates and virt-template-validator.
//
// Field names and JSON tags are upstream's (kubevirt/ssp-operator). Only
// what kubevmm honours is declared; the spec keeps any other field (the
// CRD preserves unknown fields rather than pruning them) and the operator
// refuses an SSP that sets one, naming it (see v1.UnknownFields), rather
// than the setting vanishing silently. Only v1beta3 is served (upstream
// also serves v1beta2, deprecated).
//
// The generated files (zz_generated.deepcopy.go, ../crds/*.yaml) come from
// controller-gen: `go generate ./api/ssp/...`.
//
// +kubebuilder:object:generate=true
// +groupName=ssp.kubevirt.io
package v1beta3
