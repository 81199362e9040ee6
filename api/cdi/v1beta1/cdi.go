package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// CDI is the CDI operator's CR: one per cluster (HCO creates
// cdi-kubevirt-hyperconverged). A second one is refused: Degraded, nothing
// deployed for it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=cdis,singular=cdi,shortName=cdi;cdis,scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
type CDI struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CDISpec `json:"spec"`
	// +optional
	Status CDIStatus `json:"status,omitempty"`
}

// CDIList is a list of CDIs.
//
// +kubebuilder:object:root=true
type CDIList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CDI `json:"items"`
}

// CDISpec is what the CDI operator deploys. Upstream's other fields
// (infra, workload, customizeComponents, cloneStrategyOverride,
// certConfig, priorityClass) are kept by the API server and refused by
// the operator, naming them.
// +kubebuilder:pruning:PreserveUnknownFields
type CDISpec struct {
	// ImagePullPolicy of the deployed components.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// UninstallStrategy: what deleting the CDI CR does with DataVolumes.
	// +kubebuilder:validation:Enum=RemoveWorkloads;BlockUninstallIfWorkloadsExist
	// +optional
	UninstallStrategy *CDIUninstallStrategy `json:"uninstallStrategy,omitempty"`
	// Config is copied into CDIConfig `config`'s spec.
	// +optional
	Config *CDIConfigSpec `json:"config,omitempty"`
}

// CDIUninstallStrategy is what deleting the CDI CR does with workloads.
type CDIUninstallStrategy string

// The uninstall strategies.
const (
	UninstallRemoveWorkloads                CDIUninstallStrategy = "RemoveWorkloads"
	UninstallBlockUninstallIfWorkloadsExist CDIUninstallStrategy = "BlockUninstallIfWorkloadsExist"
)

// CDIStatus is what the operator observed (the
// controller-lifecycle-operator-sdk's status, as upstream).
type CDIStatus struct {
	// Phase: Deploying, Deployed, Deleting, Error.
	// +optional
	Phase CDIPhase `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []Condition `json:"conditions,omitempty"`
	// +optional
	OperatorVersion string `json:"operatorVersion,omitempty"`
	// +optional
	TargetVersion string `json:"targetVersion,omitempty"`
	// +optional
	ObservedVersion string `json:"observedVersion,omitempty"`
}

// CDIPhase is the phase of a CDI.
type CDIPhase string

// The phases.
const (
	CDIPhaseDeploying CDIPhase = "Deploying"
	CDIPhaseDeployed  CDIPhase = "Deployed"
	CDIPhaseDeleting  CDIPhase = "Deleting"
	CDIPhaseError     CDIPhase = "Error"
)

// ConditionType of a CDI's condition.
type ConditionType string

// The operator's condition types (openshift/custom-resource-status's).
const (
	ConditionAvailable   ConditionType = conditions.Available
	ConditionProgressing ConditionType = conditions.Progressing
	ConditionDegraded    ConditionType = conditions.Degraded
)

// Condition is one of the operator's conditions
// (openshift/custom-resource-status conditions/v1).
type Condition struct {
	Type           ConditionType `json:"type"`
	ConditionState `json:",inline"`
}

// ConditionState is a condition less its type (upstream's, shared by the
// kinds' conditions).
type ConditionState struct {
	Status corev1.ConditionStatus `json:"status"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	LastHeartbeatTime metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// fields are the conditions.Fields of the condition of type t whose
// state s is: both times are stamped.
func (s *ConditionState) fields(t string) conditions.Fields {
	return conditions.Fields{Type: t, Status: s.Status, Reason: s.Reason, Message: s.Message,
		LastTransitionTime: &s.LastTransitionTime, LastHeartbeatTime: &s.LastHeartbeatTime}
}

// ConditionFields make the kinds' conditions (each a type of its own and
// the ConditionState they share) conditions.Kinds: set and found by
// conditions.Set and Find.
func (c *Condition) ConditionFields() conditions.Fields { return c.fields(string(c.Type)) }

// ConditionFields is as Condition's.
func (c *DataVolumeCondition) ConditionFields() conditions.Fields { return c.fields(string(c.Type)) }

// ConditionFields is as Condition's.
func (c *DataSourceCondition) ConditionFields() conditions.Fields { return c.fields(string(c.Type)) }

// ConditionFields is as Condition's.
func (c *DataImportCronCondition) ConditionFields() conditions.Fields {
	return c.fields(string(c.Type))
}

// SetCondition sets or replaces the condition of c's type
// (conditions.Set).
func SetCondition(conds []Condition, c Condition, now metav1.Time) []Condition {
	return conditions.Set(conds, c, now)
}

// FindCondition is the condition of type t, nil if none.
func FindCondition(conds []Condition, t ConditionType) *Condition {
	return conditions.Find(conds, t)
}

// CDIConfigName is the one CDIConfig's name.
const CDIConfigName = "config"

// CDIConfig is CDI's cluster configuration: the operator makes the one
// named `config` and keeps its status, which the CDI controllers read.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=cdiconfigs,singular=cdiconfig,scope=Cluster
// +kubebuilder:subresource:status
type CDIConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CDIConfigSpec `json:"spec"`
	// +optional
	Status CDIConfigStatus `json:"status,omitempty"`
}

// CDIConfigList is a list of CDIConfigs.
//
// +kubebuilder:object:root=true
type CDIConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CDIConfig `json:"items"`
}

// CDIConfigSpec is the user's configuration. Upstream's other fields
// (importProxy, featureGates, preallocation, tlsSecurityProfile,
// imagePullSecrets, logVerbosity, dataVolumeTTLSeconds) are kept and refused by the operator, naming them.
// +kubebuilder:pruning:PreserveUnknownFields
type CDIConfigSpec struct {
	// UploadProxyURLOverride is the URL clients upload through.
	// +optional
	UploadProxyURLOverride *string `json:"uploadProxyURLOverride,omitempty"`
	// ScratchSpaceStorageClass overrides the storage class of scratch
	// PVCs (default: the cluster's default class).
	// +optional
	ScratchSpaceStorageClass *string `json:"scratchSpaceStorageClass,omitempty"`
	// PodResourceRequirements of importer and upload pods.
	// +optional
	PodResourceRequirements *corev1.ResourceRequirements `json:"podResourceRequirements,omitempty"`
	// FilesystemOverhead is the share of a Filesystem PVC kept free for
	// the filesystem (default 0.06).
	// +optional
	FilesystemOverhead *FilesystemOverhead `json:"filesystemOverhead,omitempty"`
	// InsecureRegistries are registries ("host" or "host:port") a
	// pullMethod pod registry import reaches without verifying TLS (or
	// over plain http).
	// +optional
	InsecureRegistries []string `json:"insecureRegistries,omitempty"`
}

// Percent is a fraction in [0, 1] written as a string ("0.06").
// +kubebuilder:validation:Pattern=`^(0(?:\.\d{1,3})?|1)$`
type Percent string

// FilesystemOverhead is the space of a Filesystem PVC kept for the
// filesystem: Global unless StorageClass names the PVC's class.
type FilesystemOverhead struct {
	// +optional
	Global Percent `json:"global,omitempty"`
	// +optional
	StorageClass map[string]Percent `json:"storageClass,omitempty"`
}

// CDIConfigStatus is the configuration in effect.
type CDIConfigStatus struct {
	// UploadProxyURL is where clients upload to.
	// +optional
	UploadProxyURL *string `json:"uploadProxyURL,omitempty"`
	// ScratchSpaceStorageClass is the class of scratch PVCs.
	// +optional
	ScratchSpaceStorageClass string `json:"scratchSpaceStorageClass,omitempty"`
	// DefaultPodResourceRequirements of importer and upload pods.
	// +optional
	DefaultPodResourceRequirements *corev1.ResourceRequirements `json:"defaultPodResourceRequirements,omitempty"`
	// FilesystemOverhead in effect.
	// +optional
	FilesystemOverhead *FilesystemOverhead `json:"filesystemOverhead,omitempty"`
}

// StorageProfile is CDI's advice for PVCs of the StorageClass it is
// named after: the access and volume modes a DataVolume's `storage` gets
// when it names none.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=storageprofiles,singular=storageprofile,scope=Cluster
// +kubebuilder:subresource:status
type StorageProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              StorageProfileSpec `json:"spec"`
	// +optional
	Status StorageProfileStatus `json:"status,omitempty"`
}

// StorageProfileList is a list of StorageProfiles.
//
// +kubebuilder:object:root=true
type StorageProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageProfile `json:"items"`
}

// StorageProfileSpec is what a user says of the class: its property sets
// replace the ones CDI knows.
type StorageProfileSpec struct {
	// +optional
	// +kubebuilder:validation:Enum=copy;snapshot;csi-clone
	CloneStrategy *string `json:"cloneStrategy,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=8
	ClaimPropertySets []ClaimPropertySet `json:"claimPropertySets,omitempty"`
}

// StorageProfileStatus is the advice in effect.
type StorageProfileStatus struct {
	// +optional
	StorageClass *string `json:"storageClass,omitempty"`
	// +optional
	Provisioner *string `json:"provisioner,omitempty"`
	// +optional
	CloneStrategy *string `json:"cloneStrategy,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=8
	ClaimPropertySets []ClaimPropertySet `json:"claimPropertySets,omitempty"`
}

// ClaimPropertySet is one access modes + volume mode pair the class
// supports; the first is the default.
type ClaimPropertySet struct {
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:XValidation:rule="self.all(am, am in ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'])",message="Illegal AccessMode"
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes"`
	// +kubebuilder:validation:Enum=Block;Filesystem
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode"`
}
