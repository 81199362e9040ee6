// Package v1alpha1 holds the tektontasks.kubevirt.io/v1alpha1 API: the
// TektonTasks CR of tekton-tasks-operator, which upstream deprecated in
// favour of SSP. kubevmm serves the kind so that what creates one (older
// HCO versions, manifests) keeps working, and deploys nothing for it: the
// SSP operator sets its condition Deprecated (see operator/ssp).
//
// +kubebuilder:object:generate=true
// +groupName=tektontasks.kubevirt.io
package v1alpha1
