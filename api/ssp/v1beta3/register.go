package v1beta3

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the SSP API group.
const GroupName = "ssp.kubevirt.io"

// CRDName is the SSP CRD's name.
const CRDName = "ssps." + GroupName

var (
	// GroupVersion is ssp.kubevirt.io/v1beta3.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta3"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the ssp.kubevirt.io/v1beta3 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &SSP{}, &SSPList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
