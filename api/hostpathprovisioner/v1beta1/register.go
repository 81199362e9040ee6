package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the hostpath provisioner's API group.
const GroupName = "hostpathprovisioner.kubevirt.io"

// CRDName is the HostPathProvisioner CRD's name.
const CRDName = "hostpathprovisioners." + GroupName

var (
	// GroupVersion is hostpathprovisioner.kubevirt.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the v1beta1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &HostPathProvisioner{}, &HostPathProvisionerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
