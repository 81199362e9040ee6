package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// Name is the one name a HyperConverged CR may have.
const Name = "kubevirt-hyperconverged"

// CRDName is the HyperConverged CRD's name.
const CRDName = "hyperconvergeds.hco.kubevirt.io"

// HyperConverged is the single source of truth of a kubevmm installation
// beside virt-operator: the HCO creates the operand CRs from it and keeps
// them so.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
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
	Status HyperConvergedStatus `json:"status,omitempty"`
}

// HyperConvergedList is a list of HyperConverged.
//
// +kubebuilder:object:root=true
type HyperConvergedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HyperConverged `json:"items"`
}

// HyperConvergedSpec is what the operands are derived from.
// +kubebuilder:pruning:PreserveUnknownFields
type HyperConvergedSpec struct {
	// FeatureGates are HCO feature gates; kubevmm implements none, so
	// only state Disabled is accepted.
	// +optional
	// +listType=atomic
	FeatureGates []FeatureGate `json:"featureGates,omitempty"`
	// +optional
	Virtualization VirtualizationConfig `json:"virtualization,omitempty"`
	// +optional
	Networking *NetworkingConfig `json:"networking,omitempty"`
	// +optional
	WorkloadSources WorkloadSourcesConfig `json:"workloadSources,omitempty"`
	// +optional
	Security SecurityConfig `json:"security,omitempty"`
	// +optional
	Deployment DeploymentConfig `json:"deployment,omitempty"`
}

// FeatureGate is one HCO feature gate; a missing state means Enabled.
// +kubebuilder:pruning:PreserveUnknownFields
type FeatureGate struct {
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=Enabled;Disabled
	// +optional
	State FeatureGateState `json:"state,omitempty"`
}

// FeatureGateState is Enabled or Disabled.
type FeatureGateState string

// The feature gate states.
const (
	FeatureGateEnabled  FeatureGateState = "Enabled"
	FeatureGateDisabled FeatureGateState = "Disabled"
)

// VirtualizationConfig is what goes into the KubeVirt CR.
// +kubebuilder:pruning:PreserveUnknownFields
type VirtualizationConfig struct {
	// LiveMigrationConfig becomes the KubeVirt CR's
	// configuration.migrations.
	// +optional
	LiveMigrationConfig LiveMigrationConfigurations `json:"liveMigrationConfig,omitempty"`
	// WorkloadUpdateStrategy becomes the KubeVirt CR's, with upstream's
	// defaults: workloadUpdateMethods [LiveMigrate] (an empty list: no
	// automatic updates), batchEvictionSize 10, batchEvictionInterval 1m.
	// +optional
	WorkloadUpdateStrategy *WorkloadUpdateStrategy `json:"workloadUpdateStrategy,omitempty"`
	// VirtualMachineOptions: only the upstream defaults (false) are
	// accepted.
	// +optional
	VirtualMachineOptions *VirtualMachineOptions `json:"virtualMachineOptions,omitempty"`
	// HigherWorkloadDensity: memory overcommit is not implemented, only
	// 100 (percent, none) is accepted.
	// +optional
	HigherWorkloadDensity *HigherWorkloadDensityConfiguration `json:"higherWorkloadDensity,omitempty"`
	// VmiCPUAllocationRatio: kubevmm's KubeVirt CR has no
	// cpuAllocationRatio to pass it to, so only the upstream default 10 is
	// accepted.
	// +optional
	VmiCPUAllocationRatio *int `json:"vmiCPUAllocationRatio,omitempty"`
}

// LiveMigrationConfigurations are the cluster's migration limits.
// +kubebuilder:pruning:PreserveUnknownFields
type LiveMigrationConfigurations struct {
	// +optional
	ParallelMigrationsPerCluster *uint32 `json:"parallelMigrationsPerCluster,omitempty"`
	// +optional
	ParallelOutboundMigrationsPerNode *uint32 `json:"parallelOutboundMigrationsPerNode,omitempty"`
	// BandwidthPerMigration is a quantity ("64Mi"), bytes per second.
	// +optional
	BandwidthPerMigration *string `json:"bandwidthPerMigration,omitempty"`
	// +optional
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// +optional
	ProgressTimeout *int64 `json:"progressTimeout,omitempty"`
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
	// AllowWorkloadDisruption: only false is accepted.
	// +optional
	AllowWorkloadDisruption *bool `json:"allowWorkloadDisruption,omitempty"`
}

// WorkloadUpdateStrategy is how VMIs are moved onto a new launcher image.
// +kubebuilder:pruning:PreserveUnknownFields
type WorkloadUpdateStrategy struct {
	// +optional
	// +listType=atomic
	WorkloadUpdateMethods []string `json:"workloadUpdateMethods,omitempty"`
	// +optional
	BatchEvictionSize *int `json:"batchEvictionSize,omitempty"`
	// +optional
	BatchEvictionInterval *metav1.Duration `json:"batchEvictionInterval,omitempty"`
}

// VirtualMachineOptions are cluster-wide VM defaults.
// +kubebuilder:pruning:PreserveUnknownFields
type VirtualMachineOptions struct {
	// +optional
	DisableFreePageReporting *bool `json:"disableFreePageReporting,omitempty"`
	// +optional
	DisableSerialConsoleLog *bool `json:"disableSerialConsoleLog,omitempty"`
}

// HigherWorkloadDensityConfiguration is the memory overcommit.
// +kubebuilder:pruning:PreserveUnknownFields
type HigherWorkloadDensityConfiguration struct {
	// +optional
	MemoryOvercommitPercentage int `json:"memoryOvercommitPercentage,omitempty"`
}

// NetworkingConfig goes into the NetworkAddonsConfig.
// +kubebuilder:pruning:PreserveUnknownFields
type NetworkingConfig struct {
	// +optional
	KubeMacPoolConfiguration *KubeMacPoolConfig `json:"kubeMacPoolConfiguration,omitempty"`
}

// KubeMacPoolConfig is kubemacpool's range; both or neither.
// +kubebuilder:pruning:PreserveUnknownFields
type KubeMacPoolConfig struct {
	// +optional
	RangeStart *string `json:"rangeStart,omitempty"`
	// +optional
	RangeEnd *string `json:"rangeEnd,omitempty"`
}

// WorkloadSourcesConfig goes into the SSP CR.
// +kubebuilder:pruning:PreserveUnknownFields
type WorkloadSourcesConfig struct {
	// CommonTemplatesNamespace is where SSP deploys the common templates
	// (default "openshift", as upstream).
	// +optional
	CommonTemplatesNamespace *string `json:"commonTemplatesNamespace,omitempty"`
	// EnableCommonBootImageImport (default true) imports the built-in
	// golden images; kubevmm's built-in list is empty (upstream's point at
	// quay.io), so only dataImportCronTemplates are imported either way.
	// +optional
	EnableCommonBootImageImport *bool `json:"enableCommonBootImageImport,omitempty"`
	// CommonBootImageNamespace is where the golden images' DataImportCrons
	// (and their DataSources and imports) go, created by the HCO; default
	// kubevirt-os-images.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	CommonBootImageNamespace *string `json:"commonBootImageNamespace,omitempty"`
	// DataImportCronTemplates are golden images, passed to the SSP's
	// commonTemplates.dataImportCronTemplates in
	// commonBootImageNamespace. At most 64 (the CEL cost budget).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DataImportCronTemplates []sspv1beta3.DataImportCronTemplate `json:"dataImportCronTemplates,omitempty"`
}

// SecurityConfig holds the certificates' lifetimes.
// +kubebuilder:pruning:PreserveUnknownFields
type SecurityConfig struct {
	// CertConfig is validated (the hco-webhook refuses lifetimes
	// virt-operator could not rotate by) and passed on to the KubeVirt
	// CR's certificateRotateStrategy.selfSigned, with upstream's defaults
	// (CA 48h, renewed 24h before; server 24h, 12h before).
	// +optional
	CertConfig CertConfig `json:"certConfig,omitempty"`
}

// CertConfig is the CA's and the serving certificates' lifetimes.
// +kubebuilder:pruning:PreserveUnknownFields
type CertConfig struct {
	// +optional
	CA CertRotateConfig `json:"ca,omitempty"`
	// +optional
	Server CertRotateConfig `json:"server,omitempty"`
}

// CertRotateConfig is one certificate's lifetime.
// +kubebuilder:pruning:PreserveUnknownFields
type CertRotateConfig struct {
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// DeploymentConfig is about the installation itself.
// +kubebuilder:pruning:PreserveUnknownFields
type DeploymentConfig struct {
	// UninstallStrategy: BlockUninstallIfWorkloadsExist (the default)
	// refuses deleting the CR while VMs or VMIs exist; RemoveWorkloads
	// lets virt-operator delete them.
	// +kubebuilder:validation:Enum=RemoveWorkloads;BlockUninstallIfWorkloadsExist
	// +optional
	UninstallStrategy UninstallStrategy `json:"uninstallStrategy,omitempty"`
	// DeployVMConsoleProxy: only false is accepted.
	// +optional
	DeployVMConsoleProxy *bool `json:"deployVmConsoleProxy,omitempty"`
	// DeployNetworkResourcesInjector: kubevmm has no separate injector
	// to deploy; unset and true (upstream's sample) are accepted, false
	// is refused. v1beta1 has no such field: converting to it drops the
	// field (unset and true mean the same here).
	// +optional
	DeployNetworkResourcesInjector *bool `json:"deployNetworkResourcesInjector,omitempty"`
}

// UninstallStrategy is RemoveWorkloads or BlockUninstallIfWorkloadsExist.
type UninstallStrategy string

// The uninstall strategies.
const (
	RemoveWorkloads                UninstallStrategy = "RemoveWorkloads"
	BlockUninstallIfWorkloadsExist UninstallStrategy = "BlockUninstallIfWorkloadsExist"
)

// HyperConvergedStatus is the operands' aggregated state.
type HyperConvergedStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// RelatedObjects are the operand CRs.
	// +optional
	// +listType=atomic
	RelatedObjects []corev1.ObjectReference `json:"relatedObjects,omitempty"`
	// +optional
	// +listType=atomic
	Versions []Version `json:"versions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SystemHealthStatus is healthy, warning or error.
	// +optional
	SystemHealthStatus string `json:"systemHealthStatus,omitempty"`
	// DataImportCronTemplates are the golden images passed to the SSP.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DataImportCronTemplates []DataImportCronTemplateStatus `json:"dataImportCronTemplates,omitempty"`
}

// Version is a component's version.
type Version struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// The condition types.
const (
	ConditionAvailable            = conditions.Available
	ConditionProgressing          = conditions.Progressing
	ConditionDegraded             = conditions.Degraded
	ConditionUpgradeable          = "Upgradeable"
	ConditionReconcileComplete    = "ReconcileComplete"
	ConditionTaintedConfiguration = "TaintedConfiguration"
)
