package v1beta1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is KubeVirt's instance type API group.
const GroupName = "instancetype.kubevirt.io"

// The kinds, as a VM's spec.instancetype.kind and spec.preference.kind
// name them (KubeVirt also takes the lower-case singular and plural
// resource names; see the Kind functions).
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
)

// Labels of the ControllerRevisions that capture a type or preference for
// a VM (KubeVirt's).
const (
	RevisionObjectGenerationLabel = "instancetype.kubevirt.io/object-generation"
	RevisionObjectKindLabel       = "instancetype.kubevirt.io/object-kind"
	RevisionObjectNameLabel       = "instancetype.kubevirt.io/object-name"
	RevisionObjectUIDLabel        = "instancetype.kubevirt.io/object-uid"
	RevisionObjectVersionLabel    = "instancetype.kubevirt.io/object-version"
)

var (
	// GroupVersion is instancetype.kubevirt.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the instancetype.kubevirt.io/v1beta1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&VirtualMachineInstancetype{}, &VirtualMachineInstancetypeList{},
		&VirtualMachineClusterInstancetype{}, &VirtualMachineClusterInstancetypeList{},
		&VirtualMachinePreference{}, &VirtualMachinePreferenceList{},
		&VirtualMachineClusterPreference{}, &VirtualMachineClusterPreferenceList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// InstancetypeKind is the kind a VM's spec.instancetype.kind names, as
// KubeVirt reads it: the kind, or its lower-case singular or plural
// resource name; empty is the cluster-wide kind. ok is false for any other.
func InstancetypeKind(k string) (kind string, ok bool) {
	switch strings.ToLower(k) {
	case "", "virtualmachineclusterinstancetype", "virtualmachineclusterinstancetypes":
		return KindClusterInstancetype, true
	case "virtualmachineinstancetype", "virtualmachineinstancetypes":
		return KindInstancetype, true
	}
	return "", false
}

// PreferenceKind is InstancetypeKind for spec.preference.kind.
func PreferenceKind(k string) (kind string, ok bool) {
	switch strings.ToLower(k) {
	case "", "virtualmachineclusterpreference", "virtualmachineclusterpreferences":
		return KindClusterPreference, true
	case "virtualmachinepreference", "virtualmachinepreferences":
		return KindPreference, true
	}
	return "", false
}
