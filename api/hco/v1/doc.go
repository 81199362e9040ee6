// Package v1 holds the HyperConverged type as hco.kubevirt.io/v1 (the
// storage version): the single CR from which the HCO operator
// (operator/hco) derives the operand CRs (KubeVirt, CDI, SSP,
// NetworkAddonsConfig).
//
// Field names and JSON tags are upstream HCO's. Only the fields kubevmm
// honours, or accepts at their upstream default, are declared; the CRD
// keeps any other field (x-kubernetes-preserve-unknown-fields) so that the
// hco-webhook and the operator can refuse it by name (see
// corev1.UnknownFields) instead of the API server pruning it silently.
//
// zz_generated.deepcopy.go and ../crd/*.yaml come from controller-gen
// (`go generate ./api/hco/...`).
//
// +kubebuilder:object:generate=true
// +groupName=hco.kubevirt.io
package v1
