package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is tekton-tasks-operator's API group.
const GroupName = "tektontasks.kubevirt.io"

// CRDName is the TektonTasks CRD's name.
const CRDName = "tektontasks." + GroupName

var (
	// GroupVersion is tektontasks.kubevirt.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the tektontasks.kubevirt.io/v1alpha1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TektonTasks{}, &TektonTasksList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
