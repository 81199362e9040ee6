package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is hco.kubevirt.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: "hco.kubevirt.io", Version: "v1beta1"}
	// SchemeBuilder registers HyperConverged and its list.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &HyperConverged{}, &HyperConvergedList{})
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
	// AddToScheme adds hco.kubevirt.io/v1beta1 to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
