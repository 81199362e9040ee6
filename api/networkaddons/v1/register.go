package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the network add-ons operator's API group.
const GroupName = "networkaddonsoperator.network.kubevirt.io"

// CRDName is the NetworkAddonsConfig CRD's name.
const CRDName = "networkaddonsconfigs." + GroupName

// Name is the one NetworkAddonsConfig's name: the CRD refuses any other.
const Name = "cluster"

var (
	// GroupVersion is networkaddonsoperator.network.kubevirt.io/v1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}
	// GroupVersionAlpha is v1alpha1, served with v1's schema.
	GroupVersionAlpha = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the v1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NetworkAddonsConfig{}, &NetworkAddonsConfigList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
