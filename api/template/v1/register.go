package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is OpenShift's template API group.
const GroupName = "template.openshift.io"

// Kind is the Template kind.
const Kind = "Template"

var (
	// GroupVersion is template.openshift.io/v1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the template.openshift.io/v1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Template{}, &TemplateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
