package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// HyperConverged is hco.kubevirt.io/v1beta1's form of hcov1.HyperConverged.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hco;hcos,scope=Namespaced
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.systemHealthStatus"
type HyperConverged struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec HyperConvergedSpec `json:"spec,omitempty"`
	// +optional
	Status hcov1.HyperConvergedStatus `json:"status,omitempty"`
}

// HyperConvergedList is a list of HyperConverged.
//
// +kubebuilder:object:root=true
type HyperConvergedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HyperConverged `json:"items"`
}

// HyperConvergedSpec is v1's spec, flat. What each field does (and which
// values kubevmm accepts) is said on the v1 field it converts to.
// +kubebuilder:pruning:PreserveUnknownFields
type HyperConvergedSpec struct {
	// FeatureGates maps an HCO feature gate to enabled (true) or not.
	// +optional
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// +optional
	LiveMigrationConfig hcov1.LiveMigrationConfigurations `json:"liveMigrationConfig,omitempty"`
	// +optional
	WorkloadUpdateStrategy *hcov1.WorkloadUpdateStrategy `json:"workloadUpdateStrategy,omitempty"`
	// +optional
	VirtualMachineOptions *hcov1.VirtualMachineOptions `json:"virtualMachineOptions,omitempty"`
	// +optional
	HigherWorkloadDensity *hcov1.HigherWorkloadDensityConfiguration `json:"higherWorkloadDensity,omitempty"`
	// +optional
	ResourceRequirements *ResourceRequirements `json:"resourceRequirements,omitempty"`
	// +optional
	KubeMacPoolConfiguration *hcov1.KubeMacPoolConfig `json:"kubeMacPoolConfiguration,omitempty"`
	// +optional
	CommonTemplatesNamespace *string `json:"commonTemplatesNamespace,omitempty"`
	// +optional
	EnableCommonBootImageImport *bool `json:"enableCommonBootImageImport,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	CommonBootImageNamespace *string `json:"commonBootImageNamespace,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DataImportCronTemplates []sspv1beta3.DataImportCronTemplate `json:"dataImportCronTemplates,omitempty"`
	// +optional
	CertConfig hcov1.CertConfig `json:"certConfig,omitempty"`
	// +kubebuilder:validation:Enum=RemoveWorkloads;BlockUninstallIfWorkloadsExist
	// +optional
	UninstallStrategy hcov1.UninstallStrategy `json:"uninstallStrategy,omitempty"`
	// +optional
	DeployVMConsoleProxy *bool `json:"deployVmConsoleProxy,omitempty"`
}

// ResourceRequirements holds v1's virtualization.vmiCPUAllocationRatio.
// +kubebuilder:pruning:PreserveUnknownFields
type ResourceRequirements struct {
	// +optional
	VmiCPUAllocationRatio *int `json:"vmiCPUAllocationRatio,omitempty"`
}
