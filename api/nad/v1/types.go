package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NetworkAttachmentDefinition is a CRD schema specified by the Network
// Plumbing Working Group to express the intent for attaching pods to one
// or more logical or physical networks. More information available at:
// https://github.com/k8snetworkplumbingwg/multi-net-spec
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=network-attachment-definitions,singular=network-attachment-definition,shortName=net-attach-def
// +kubebuilder:storageversion
type NetworkAttachmentDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NetworkAttachmentDefinitionSpec `json:"spec,omitempty"`
}

// NetworkAttachmentDefinitionSpec defines the desired state of a network
// attachment.
type NetworkAttachmentDefinitionSpec struct {
	// Config is a JSON-formatted CNI configuration: one plugin's conf or a
	// conflist. Empty means a file in the node's CNI configuration
	// directory whose network name is the object's name.
	// +optional
	Config string `json:"config,omitempty"`
}

// NetworkAttachmentDefinitionList is a list of NetworkAttachmentDefinitions.
//
// +kubebuilder:object:root=true
type NetworkAttachmentDefinitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NetworkAttachmentDefinition `json:"items"`
}
