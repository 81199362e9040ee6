package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the Network Plumbing Working Group's API group.
const GroupName = "k8s.cni.cncf.io"

// Resource is the NetworkAttachmentDefinition resource's plural name.
const Resource = "network-attachment-definitions"

var (
	// GroupVersion is k8s.cni.cncf.io/v1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the k8s.cni.cncf.io/v1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NetworkAttachmentDefinition{}, &NetworkAttachmentDefinitionList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
