package templatevalidator

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The kind of the templates VMs are processed from: OpenShift's Template.
const (
	TemplateGroup   = "template.openshift.io"
	TemplateVersion = "v1"
	TemplateKind    = "Template"
)

// TemplateRef is the template a VM's labels name (vm.kubevirt.io/template
// and vm.kubevirt.io/template.namespace); ok is false unless both are set.
func TemplateRef(labels map[string]string) (ref types.NamespacedName, ok bool) {
	ref = types.NamespacedName{Namespace: labels[LabelTemplateNamespace], Name: labels[LabelTemplate]}
	return ref, ref.Name != "" && ref.Namespace != ""
}

// TemplateRules returns the rules a template gives the VMs processed
// from it, as JSON: the vm.kubevirt.io/validations annotation of its
// VirtualMachine object (what processing copies to the VM), else the
// template's own "validations" annotation (older common templates). ""
// when it has none.
func TemplateRules(t *unstructured.Unstructured) string {
	objs, _, _ := unstructured.NestedSlice(t.Object, "objects")
	for _, o := range objs {
		m, ok := o.(map[string]any)
		if !ok {
			continue
		}
		obj := unstructured.Unstructured{Object: m}
		if obj.GetKind() != "VirtualMachine" || obj.GroupVersionKind().Group != "kubevirt.io" {
			continue
		}
		if r := annotation(m, AnnotationValidations); r != "" {
			return r
		}
	}
	return t.GetAnnotations()[TemplateAnnotationValidations]
}

// annotation reads one annotation of an object of the template without
// failing on a malformed one (a template's objects are any JSON).
func annotation(obj map[string]any, key string) string {
	s, _, _ := unstructured.NestedString(obj, "metadata", "annotations", key)
	return s
}
