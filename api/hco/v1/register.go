package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the HCO's API group.
const GroupName = "hco.kubevirt.io"

var (
	// GroupVersion is hco.kubevirt.io/v1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}
	// SchemeBuilder registers HyperConverged and its list.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &HyperConverged{}, &HyperConvergedList{})
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
	// AddToScheme adds hco.kubevirt.io/v1 to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
