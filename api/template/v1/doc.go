// Package v1 holds the template.openshift.io/v1 Template kind as kubevmm
// serves it (a CRD, not OpenShift's aggregated API): a list of objects with
// ${PARAMETER} placeholders, the parameters, and labels for every object.
// KubeVirt's common templates (operator/ssp/templates) are Templates, and
// api/template/process turns one into its objects as `oc process` does.
//
// Field names and JSON tags are OpenShift's (github.com/openshift/api
// template/v1), so existing templates decode unchanged; TemplateInstance and
// BrokerTemplateInstance are not served. The generated files
// (zz_generated.deepcopy.go, ../crds/*.yaml) come from controller-gen; run
// `make generate` after changing a type or a marker.
//
// +kubebuilder:object:generate=true
// +groupName=template.openshift.io
package v1
