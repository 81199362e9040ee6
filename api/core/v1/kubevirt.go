package v1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// KubeVirtCRDName is the KubeVirt CRD's name; it is deployed with
// virt-operator, which deploys every other CRD of the group.
const KubeVirtCRDName = "kubevirts." + GroupName

// KubeVirtFinalizer keeps a KubeVirt CR until virt-operator removed what it
// deployed.
const KubeVirtFinalizer = "kubevirt.io/foregroundDeleteKubeVirt"

// KubeVirt is the installation of kubevmm in a cluster, reconciled by
// virt-operator. There is one per cluster: a second one is ignored (its
// condition Synchronized is False, reason ExistingDeployment).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirts,singular=kubevirt,shortName=kv;kvs,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
type KubeVirt struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              KubeVirtSpec `json:"spec"`
	// +optional
	Status KubeVirtStatus `json:"status,omitempty"`
}

// KubeVirtList is a list of KubeVirts.
//
// +kubebuilder:object:root=true
type KubeVirtList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirt `json:"items"`
}

// KubeVirtSpec is what virt-operator deploys. Fields declared Unmodeled
// are kept by the API server and refused by virt-operator, which names them
// in the CR's conditions and deploys nothing until they are gone. So are
// fields not declared at all (KubeVirt has many more, scalars among them):
// the spec's objects keep unknown fields rather than letting the API
// server prune them, and virt-operator refuses those too (UnknownFields).
// +kubebuilder:pruning:PreserveUnknownFields
type KubeVirtSpec struct {
	// ImageTag of every component's image; default: virt-operator's own.
	// +optional
	ImageTag string `json:"imageTag,omitempty"`
	// ImageRegistry is the images' repository prefix
	// (REGISTRY/virt-api:TAG); default: virt-operator's own.
	// +optional
	ImageRegistry string `json:"imageRegistry,omitempty"`
	// ImagePullPolicy of the components' and launchers' containers;
	// default: virt-operator's own.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Configuration is the cluster configuration.
	// +optional
	Configuration KubeVirtConfiguration `json:"configuration,omitempty"`
	// UninstallStrategy says what deleting the CR does while
	// VirtualMachines or VirtualMachineInstances exist: RemoveWorkloads
	// (the default) deletes them, BlockUninstallIfWorkloadsExist keeps
	// the installation until they are gone.
	// +kubebuilder:validation:Enum=RemoveWorkloads;BlockUninstallIfWorkloadsExist
	// +optional
	UninstallStrategy KubeVirtUninstallStrategy `json:"uninstallStrategy,omitempty"`
	// CustomizeComponents patches the objects virt-operator deploys.
	// +optional
	CustomizeComponents CustomizeComponents `json:"customizeComponents,omitempty"`
	// CertificateRotateStrategy says how long the components' self-signed
	// certificates live and when virt-operator remakes them.
	// +optional
	CertificateRotateStrategy KubeVirtCertificateRotateStrategy `json:"certificateRotateStrategy,omitempty"`
	// WorkloadUpdateStrategy says how running VMIs whose launcher pod runs
	// an older virt-launcher image are moved onto the current one.
	// +optional
	WorkloadUpdateStrategy KubeVirtWorkloadUpdateStrategy `json:"workloadUpdateStrategy,omitempty"`
	// +optional
	Infra *Unmodeled `json:"infra,omitempty"`
	// +optional
	Workloads *Unmodeled `json:"workloads,omitempty"`
}

// KubeVirtWorkloadUpdateStrategy is how virt-controller's workload updater
// moves outdated VMIs (label OutdatedLauncherImageLabel) onto the current
// launcher image, as in KubeVirt.
// +kubebuilder:pruning:PreserveUnknownFields
type KubeVirtWorkloadUpdateStrategy struct {
	// WorkloadUpdateMethods: LiveMigrate migrates the VMIs that can
	// migrate; Evict deletes the others (all of them without
	// LiveMigrate). Empty (the default): VMIs are only marked outdated.
	// +optional
	// +listType=atomic
	WorkloadUpdateMethods []WorkloadUpdateMethod `json:"workloadUpdateMethods,omitempty"`
	// BatchEvictionSize is how many VMIs are migrated or evicted per
	// BatchEvictionInterval; default 10.
	// +optional
	BatchEvictionSize *int `json:"batchEvictionSize,omitempty"`
	// BatchEvictionInterval; default 1m.
	// +optional
	BatchEvictionInterval *metav1.Duration `json:"batchEvictionInterval,omitempty"`
}

// WorkloadUpdateMethod is LiveMigrate or Evict.
type WorkloadUpdateMethod string

// The workload update methods, and KubeVirt's defaults for a batch.
const (
	WorkloadUpdateMethodLiveMigrate WorkloadUpdateMethod = "LiveMigrate"
	WorkloadUpdateMethodEvict       WorkloadUpdateMethod = "Evict"

	DefaultBatchEvictionSize = 10
)

// DefaultBatchEvictionInterval is KubeVirt's default batchEvictionInterval.
var DefaultBatchEvictionInterval = metav1.Duration{Duration: time.Minute}

// KubeVirtUninstallStrategy is RemoveWorkloads or BlockUninstallIfWorkloadsExist.
type KubeVirtUninstallStrategy string

// The uninstall strategies.
const (
	KubeVirtUninstallRemoveWorkloads                KubeVirtUninstallStrategy = "RemoveWorkloads"
	KubeVirtUninstallBlockUninstallIfWorkloadsExist KubeVirtUninstallStrategy = "BlockUninstallIfWorkloadsExist"
)

// KubeVirtCertificateRotateStrategy is how virt-operator makes the
// components' certificates: self-signed, by its own CA.
// +kubebuilder:pruning:PreserveUnknownFields
type KubeVirtCertificateRotateStrategy struct {
	// +optional
	SelfSigned *KubeVirtSelfSignConfiguration `json:"selfSigned,omitempty"`
}

// KubeVirtSelfSignConfiguration is the lifetimes of the CA and of the
// certificates it signs (the components' serving and client
// certificates). KubeVirt's deprecated caRotateInterval,
// certRotateInterval and caOverlapInterval are refused by name.
// +kubebuilder:pruning:PreserveUnknownFields
type KubeVirtSelfSignConfiguration struct {
	// CA: default duration 168h, renewBefore a fifth of the duration.
	// +optional
	CA *CertConfig `json:"ca,omitempty"`
	// Server: the leaves; default duration 24h, renewBefore a fifth of
	// the duration.
	// +optional
	Server *CertConfig `json:"server,omitempty"`
}

// CertConfig is one kind of certificate's lifetime.
// +kubebuilder:pruning:PreserveUnknownFields
type CertConfig struct {
	// Duration is how long a new certificate is valid.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// RenewBefore: the certificate is remade this long before it
	// expires; it must be less than the duration.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// KubeVirtConfiguration is the part of KubeVirt's cluster configuration
// kubevmm implements (virt-controller's, see controller.ClusterConfig).
// +kubebuilder:pruning:PreserveUnknownFields
type KubeVirtConfiguration struct {
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Migrations *MigrationConfiguration `json:"migrations,omitempty"`
	// +optional
	DeveloperConfiguration *DeveloperConfiguration `json:"developerConfiguration,omitempty"`
	// +optional
	Network *Unmodeled `json:"network,omitempty"`
	// +optional
	PermittedHostDevices *Unmodeled `json:"permittedHostDevices,omitempty"`
	// +optional
	MediatedDevicesConfiguration *Unmodeled `json:"mediatedDevicesConfiguration,omitempty"`
	// +optional
	SeccompConfiguration *Unmodeled `json:"seccompConfiguration,omitempty"`
	// +optional
	SMBIOSConfig *Unmodeled `json:"smbios,omitempty"`
	// +optional
	APIConfiguration *Unmodeled `json:"apiConfiguration,omitempty"`
	// +optional
	WebhookConfiguration *Unmodeled `json:"webhookConfiguration,omitempty"`
	// +optional
	ControllerConfiguration *Unmodeled `json:"controllerConfiguration,omitempty"`
	// +optional
	HandlerConfiguration *Unmodeled `json:"handlerConfiguration,omitempty"`
	// +optional
	LiveUpdateConfiguration *Unmodeled `json:"liveUpdateConfiguration,omitempty"`
}

// DeveloperConfiguration holds the feature gates.
// +kubebuilder:pruning:PreserveUnknownFields
type DeveloperConfiguration struct {
	// +optional
	FeatureGates []string `json:"featureGates,omitempty"`
}

// CustomizeComponents are patches onto the deployed objects.
// +kubebuilder:pruning:PreserveUnknownFields
type CustomizeComponents struct {
	// +optional
	// +listType=atomic
	Patches []CustomizeComponentsPatch `json:"patches,omitempty"`
	// +optional
	Flags *Unmodeled `json:"flags,omitempty"`
}

// CustomizeComponentsPatch is a patch of one deployed object, found by its
// name and kind.
// +kubebuilder:pruning:PreserveUnknownFields
type CustomizeComponentsPatch struct {
	// ResourceName is the object's name ("virt-controller").
	// +kubebuilder:validation:MinLength=1
	ResourceName string `json:"resourceName"`
	// ResourceType is its kind ("Deployment").
	// +kubebuilder:validation:MinLength=1
	ResourceType string `json:"resourceType"`
	// Patch is the patch document, in the format Type says.
	Patch string `json:"patch"`
	// +kubebuilder:validation:Enum=json;merge;strategic
	Type PatchType `json:"type"`
}

// PatchType is json (RFC 6902), merge (RFC 7386) or strategic (Kubernetes'
// strategic merge patch).
type PatchType string

// The patch types.
const (
	JSONPatchType           PatchType = "json"
	MergePatchType          PatchType = "merge"
	StrategicMergePatchType PatchType = "strategic"
)

// KubeVirtStatus is what virt-operator observed.
type KubeVirtStatus struct {
	// +optional
	Phase KubeVirtPhase `json:"phase,omitempty"`
	// +optional
	// +listType=atomic
	Conditions []KubeVirtCondition `json:"conditions,omitempty"`
	// ObservedKubeVirtVersion is the image tag deployed and available.
	// +optional
	ObservedKubeVirtVersion string `json:"observedKubeVirtVersion,omitempty"`
	// TargetKubeVirtVersion is the image tag being deployed.
	// +optional
	TargetKubeVirtVersion string `json:"targetKubeVirtVersion,omitempty"`
	// +optional
	ObservedKubeVirtRegistry string `json:"observedKubeVirtRegistry,omitempty"`
	// +optional
	TargetKubeVirtRegistry string `json:"targetKubeVirtRegistry,omitempty"`
	// ObservedGeneration is the spec generation the status is about.
	// +optional
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// OutdatedVirtualMachineInstanceWorkloads counts the running VMIs
	// whose launcher runs another image than the current one (written by
	// virt-controller's workload updater).
	// +optional
	OutdatedVirtualMachineInstanceWorkloads *int `json:"outdatedVirtualMachineInstanceWorkloads,omitempty"`
}

// KubeVirtPhase is where the installation is.
type KubeVirtPhase string

// The phases.
const (
	KubeVirtPhaseDeploying KubeVirtPhase = "Deploying"
	KubeVirtPhaseDeployed  KubeVirtPhase = "Deployed"
	KubeVirtPhaseDeleting  KubeVirtPhase = "Deleting"
	KubeVirtPhaseDeleted   KubeVirtPhase = "Deleted"
)

// KubeVirtCondition is one aspect of the installation.
type KubeVirtCondition struct {
	Type   KubeVirtConditionType  `json:"type"`
	Status corev1.ConditionStatus `json:"status"`
	// +optional
	// +nullable
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// KubeVirtConditionType is a condition's type.
type KubeVirtConditionType string

// The condition types and reasons, KubeVirt's.
const (
	KubeVirtConditionAvailable    KubeVirtConditionType = conditions.Available
	KubeVirtConditionProgressing  KubeVirtConditionType = conditions.Progressing
	KubeVirtConditionDegraded     KubeVirtConditionType = conditions.Degraded
	KubeVirtConditionCreated      KubeVirtConditionType = "Created"
	KubeVirtConditionSynchronized KubeVirtConditionType = "Synchronized"

	KubeVirtReasonAllComponentsReady   = "AllComponentsReady"
	KubeVirtReasonAllResourcesCreated  = "AllResourcesCreated"
	KubeVirtReasonDeploymentInProgress = "DeploymentInProgress"
	// KubeVirtReasonUpdateInProgress: components roll to a new version
	// (Progressing=True while Available stays True).
	KubeVirtReasonUpdateInProgress   = "UpdateInProgress"
	KubeVirtReasonDeletionInProgress = "DeletionInProgress"
	KubeVirtReasonDeploymentFailed   = "DeploymentFailed"
	KubeVirtReasonExistingDeployment = "ExistingDeployment"
	// KubeVirtReasonWorkloadsExist: uninstall waits, under
	// BlockUninstallIfWorkloadsExist, for the VMs and VMIs to be gone.
	KubeVirtReasonWorkloadsExist = "WorkloadsExist"
)

// GetCondition returns the condition of that type, or nil.
func (kv *KubeVirt) GetCondition(t KubeVirtConditionType) *KubeVirtCondition {
	return conditions.Find(kv.Status.Conditions, t)
}
