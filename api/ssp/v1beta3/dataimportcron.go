package v1beta3

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// GoldenImagesNamespace is where a DataImportCronTemplate without a
// namespace makes its DataImportCron (upstream's kubevirt-os-images); the
// operator creates it.
const GoldenImagesNamespace = "kubevirt-os-images"

// DataImportCronTemplate is a golden image's DataImportCron as the SSP
// deploys it: its name, namespace (GoldenImagesNamespace when empty),
// labels and annotations, and its spec.
//
// +kubebuilder:validation:XValidation:rule="has(self.metadata) && has(self.metadata.name) && size(self.metadata.name) > 0",message="a dataImportCronTemplate needs metadata.name"
type DataImportCronTemplate struct {
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cdiv1.DataImportCronSpec `json:"spec"`
}
