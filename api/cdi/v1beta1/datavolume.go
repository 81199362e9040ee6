package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// DataVolume is a PVC and where its data comes from: the DataVolume
// controller makes the PVC (named as the DataVolume) and has it filled.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=datavolumes,singular=datavolume,shortName=dv;dvs,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase",description="The phase the data volume is in"
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=".status.progress",description="Transfer progress in percentage if known, N/A otherwise"
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=".status.restartCount",description="The number of times the transfer has been restarted."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type DataVolume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DataVolumeSpec `json:"spec"`
	// +optional
	Status DataVolumeStatus `json:"status,omitempty"`
}

// DataVolumeList is a list of DataVolumes.
//
// +kubebuilder:object:root=true
type DataVolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DataVolume `json:"items"`
}

// DataVolumeSpec is the PVC a DataVolume makes and its source. The CEL
// rules are what upstream's admission webhook refuses that needs no
// lookup, each naming the field.
//
// +kubebuilder:validation:XValidation:rule="has(self.source) || has(self.sourceRef)",message="one of spec.source and spec.sourceRef is required"
// +kubebuilder:validation:XValidation:rule="!(has(self.source) && has(self.sourceRef))",message="spec.source and spec.sourceRef are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="has(self.pvc) != has(self.storage)",message="exactly one of spec.pvc and spec.storage is required"
// +kubebuilder:validation:XValidation:rule="!has(self.pvc) || has(self.sourceRef) || (has(self.source) && has(self.source.pvc)) || (has(self.pvc.resources) && has(self.pvc.resources.requests) && 'storage' in self.pvc.resources.requests)",fieldPath=".pvc",message="spec.pvc.resources.requests.storage is required (but for a clone, which takes its source's)"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || has(self.sourceRef) || (has(self.source) && has(self.source.pvc)) || (has(self.storage.resources) && has(self.storage.resources.requests) && 'storage' in self.storage.resources.requests)",fieldPath=".storage",message="spec.storage.resources.requests.storage is required (but for a clone, which takes its source's)"
// +kubebuilder:validation:XValidation:rule="!has(self.pvc) || (!has(self.pvc.dataSource) && !has(self.pvc.dataSourceRef))",fieldPath=".pvc",message="spec.pvc.dataSource and spec.pvc.dataSourceRef are not supported (the DataVolume's source fills the PVC)"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || (!has(self.storage.dataSource) && !has(self.storage.dataSourceRef))",fieldPath=".storage",message="spec.storage.dataSource and spec.storage.dataSourceRef are not supported (the DataVolume's source fills the PVC)"
// +kubebuilder:validation:XValidation:rule="!has(self.contentType) || self.contentType == 'kubevirt'",fieldPath=".contentType",message="spec.contentType: only kubevirt is supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.preallocation) || !self.preallocation",fieldPath=".preallocation",message="spec.preallocation is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.checkpoints) || size(self.checkpoints) == 0",fieldPath=".checkpoints",message="spec.checkpoints (multi-stage import) is not supported by kubevmm"
type DataVolumeSpec struct {
	// Source is where the data comes from: exactly one of its fields.
	// +optional
	Source *DataVolumeSource `json:"source,omitempty"`
	// SourceRef names a DataSource holding the source.
	// +optional
	SourceRef *DataVolumeSourceRef `json:"sourceRef,omitempty"`
	// PVC is the PVC's spec, as it is.
	// +optional
	PVC *corev1.PersistentVolumeClaimSpec `json:"pvc,omitempty"`
	// Storage is the PVC's spec with what it leaves out taken from the
	// StorageProfile, and the filesystem overhead added.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`
	// PriorityClassName of the importer pod.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// ContentType: kubevirt (a disk image; the only one kubevmm imports)
	// or archive.
	// +kubebuilder:validation:Enum=kubevirt;archive
	// +optional
	ContentType DataVolumeContentType `json:"contentType,omitempty"`
	// Checkpoints of a multi-stage import (refused).
	// +optional
	Checkpoints []DataVolumeCheckpoint `json:"checkpoints,omitempty"`
	// FinalCheckpoint of a multi-stage import.
	// +optional
	FinalCheckpoint bool `json:"finalCheckpoint,omitempty"`
	// Preallocation (refused when true).
	// +optional
	Preallocation *bool `json:"preallocation,omitempty"`
}

// DataVolumeContentType is what the imported data is.
type DataVolumeContentType string

// The content types.
const (
	ContentTypeKubeVirt DataVolumeContentType = "kubevirt"
	ContentTypeArchive  DataVolumeContentType = "archive"
)

// DataVolumeCheckpoint is one stage of a multi-stage import.
type DataVolumeCheckpoint struct {
	Previous string `json:"previous"`
	Current  string `json:"current"`
}

// StorageSpec is a PVC spec whose unset access modes and volume mode come
// from the StorageProfile of its class.
type StorageSpec struct {
	// +optional
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// +optional
	Resources corev1.VolumeResourceRequirements `json:"resources,omitempty"`
	// +optional
	VolumeName string `json:"volumeName,omitempty"`
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// +optional
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`
	// +optional
	DataSource *corev1.TypedLocalObjectReference `json:"dataSource,omitempty"`
	// +optional
	DataSourceRef *corev1.TypedObjectReference `json:"dataSourceRef,omitempty"`
}

// PersistentVolumeFromStorageProfile as a StorageSpec's volume mode asks
// for the StorageProfile's.
const PersistentVolumeFromStorageProfile corev1.PersistentVolumeMode = "FromStorageProfile"

// DataVolumeSource is where a DataVolume's data comes from. The sources
// kubevmm does not import yet are declared (so that the API server keeps
// them) and refused by a rule naming each.
//
// +kubebuilder:validation:XValidation:rule="[has(self.http), has(self.s3), has(self.gcs), has(self.registry), has(self.pvc), has(self.upload), has(self.blank), has(self.imageio), has(self.vddk), has(self.snapshot)].filter(x, x).size() == 1",message="spec.source must set exactly one source"
// +kubebuilder:validation:XValidation:rule="!has(self.s3)",fieldPath=".s3",message="spec.source.s3 is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.gcs)",fieldPath=".gcs",message="spec.source.gcs is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.imageio)",fieldPath=".imageio",message="spec.source.imageio is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.vddk)",fieldPath=".vddk",message="spec.source.vddk is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshot)",fieldPath=".snapshot",message="spec.source.snapshot is not supported by kubevmm yet"
type DataVolumeSource struct {
	// +optional
	HTTP *DataVolumeSourceHTTP `json:"http,omitempty"`
	// +optional
	S3 *UnsupportedSource `json:"s3,omitempty"`
	// +optional
	GCS *UnsupportedSource `json:"gcs,omitempty"`
	// +optional
	Registry *DataVolumeSourceRegistry `json:"registry,omitempty"`
	// +optional
	PVC *DataVolumeSourcePVC `json:"pvc,omitempty"`
	// +optional
	Upload *DataVolumeSourceUpload `json:"upload,omitempty"`
	// +optional
	Blank *DataVolumeBlankImage `json:"blank,omitempty"`
	// +optional
	Imageio *UnsupportedSource `json:"imageio,omitempty"`
	// +optional
	VDDK *UnsupportedSource `json:"vddk,omitempty"`
	// +optional
	Snapshot *UnsupportedSource `json:"snapshot,omitempty"`
}

// UnsupportedSource is a source kubevmm does not import: kept as written
// so that the rule refusing it sees it.
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:Type=object
type UnsupportedSource struct {
	runtime.RawExtension `json:",inline"`
}

// DataVolumeSourceHTTP is an http(s) URL of a raw or qcow2 image, either
// possibly gz or xz compressed.
type DataVolumeSourceHTTP struct {
	// URL of the image.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// SecretRef names a Secret with accessKeyId (user) and secretKey
	// (password) for basic authentication.
	// +optional
	SecretRef string `json:"secretRef,omitempty"`
	// CertConfigMap names a ConfigMap whose values are PEM CA
	// certificates the server's certificate is checked against.
	// +optional
	CertConfigMap string `json:"certConfigMap,omitempty"`
	// ExtraHeaders are "Name: value" headers sent with the request.
	// +optional
	ExtraHeaders []string `json:"extraHeaders,omitempty"`
	// SecretExtraHeaders name Secrets each of whose values is such a
	// header.
	// +optional
	SecretExtraHeaders []string `json:"secretExtraHeaders,omitempty"`
	// Checksum of the downloaded bytes, "algorithm:hex" (md5, sha1,
	// sha256, sha512).
	// +optional
	// +kubebuilder:validation:Pattern=`^(md5|sha1|sha256|sha512):[0-9a-fA-F]+$`
	Checksum string `json:"checksum,omitempty"`
}

// DataVolumeSourcePVC is a PVC to clone; its namespace defaults to the
// DataVolume's (the DataSource's in a DataSource).
type DataVolumeSourcePVC struct {
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// DataVolumeSourceUpload is a PVC filled by an upload.
type DataVolumeSourceUpload struct{}

// DataVolumeBlankImage is an empty disk image.
type DataVolumeBlankImage struct{}

// DataVolumeSourceRef names a DataSource.
type DataVolumeSourceRef struct {
	// +kubebuilder:validation:Enum=DataSource
	Kind string `json:"kind"`
	// +optional
	Namespace *string `json:"namespace,omitempty"`
	Name      string  `json:"name"`
}

// DataVolumeStatus is how filling the PVC goes.
type DataVolumeStatus struct {
	// ClaimName is the PVC's name.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// +optional
	Phase DataVolumePhase `json:"phase,omitempty"`
	// Progress is "N/A" or a percentage ("45.50%").
	// +optional
	Progress DataVolumeProgress `json:"progress,omitempty"`
	// RestartCount is how often the pod filling the PVC restarted.
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`
	// +optional
	Conditions []DataVolumeCondition `json:"conditions,omitempty"`
}

// DataVolumePhase is the phase of a DataVolume.
type DataVolumePhase string

// DataVolumeProgress is "N/A" or "NN.NN%".
type DataVolumeProgress string

// The phases (upstream's names; kubevmm reaches the ones listed).
const (
	PhaseUnset           DataVolumePhase = ""
	Pending              DataVolumePhase = "Pending"
	PVCBound             DataVolumePhase = "PVCBound"
	ImportScheduled      DataVolumePhase = "ImportScheduled"
	ImportInProgress     DataVolumePhase = "ImportInProgress"
	UploadScheduled      DataVolumePhase = "UploadScheduled"
	UploadReady          DataVolumePhase = "UploadReady"
	CloneScheduled       DataVolumePhase = "CloneScheduled"
	CloneInProgress      DataVolumePhase = "CloneInProgress"
	WaitForFirstConsumer DataVolumePhase = "WaitForFirstConsumer"
	Succeeded            DataVolumePhase = "Succeeded"
	Failed               DataVolumePhase = "Failed"
	Unknown              DataVolumePhase = "Unknown"
)

// DataVolumeConditionType is a DataVolume condition's type.
type DataVolumeConditionType string

// The condition types.
const (
	DataVolumeReady   DataVolumeConditionType = "Ready"
	DataVolumeBound   DataVolumeConditionType = "Bound"
	DataVolumeRunning DataVolumeConditionType = "Running"
)

// DataVolumeCondition is one of a DataVolume's conditions.
type DataVolumeCondition struct {
	Type           DataVolumeConditionType `json:"type"`
	ConditionState `json:",inline"`
}

// SetDataVolumeCondition sets or replaces the condition of c's type
// (conditions.Set).
func SetDataVolumeCondition(conds []DataVolumeCondition, c DataVolumeCondition, now metav1.Time) []DataVolumeCondition {
	return conditions.Set(conds, c, now)
}

// FindDataVolumeCondition is the condition of type t, nil if none.
func FindDataVolumeCondition(conds []DataVolumeCondition, t DataVolumeConditionType) *DataVolumeCondition {
	return conditions.Find(conds, t)
}
