package v1

import (
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// DefaultCommonBootImageNamespace is where the golden images' crons go
// without spec.workloadSources.commonBootImageNamespace (upstream's).
const DefaultCommonBootImageNamespace = "kubevirt-os-images"

// DataImportCronTemplateStatus is a golden image as passed to the SSP.
type DataImportCronTemplateStatus struct {
	sspv1beta3.DataImportCronTemplate `json:",inline"`
	// +optional
	Status DataImportCronStatus `json:"status,omitempty"`
}

// DataImportCronStatus says where a golden image comes from.
type DataImportCronStatus struct {
	// CommonTemplate: one of the HCO's built-in golden images (kubevmm's
	// list is empty: upstream's point at quay.io, which a kubevmm cluster
	// need not reach), rather than the spec's.
	// +optional
	CommonTemplate bool `json:"commonTemplate,omitempty"`
	// Modified: a built-in golden image the spec customized.
	// +optional
	Modified bool `json:"modified,omitempty"`
}
