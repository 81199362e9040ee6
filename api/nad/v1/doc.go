// Package v1 is the k8s.cni.cncf.io/v1 API of the Network Plumbing Working
// Group's multi-network specification, as Multus serves it:
// NetworkAttachmentDefinition (a CNI configuration naming a secondary
// network), and the pod annotations that ask for secondary networks
// (k8s.v1.cni.cncf.io/networks) and report them
// (k8s.v1.cni.cncf.io/network-status). Field names, JSON tags and the CRD
// schema are Multus's (network-attachment-definition-client), so manifests
// written for Multus work unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=k8s.cni.cncf.io
package v1
