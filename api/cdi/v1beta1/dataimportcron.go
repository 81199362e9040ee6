package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// DataImportCronCRDName is the DataImportCron CRD's name.
const DataImportCronCRDName = "dataimportcrons." + GroupName

// DataImportCron keeps a DataSource pointing at the newest import of a
// registry image: on each schedule tick the image's digest is read, and a
// new digest becomes a DataVolume (named after the managed DataSource and
// the digest) from spec.template with the URL pinned to that digest.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=dataimportcrons,singular=dataimportcron,shortName=dic;dics,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type DataImportCron struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DataImportCronSpec `json:"spec"`
	// +optional
	Status DataImportCronStatus `json:"status,omitempty"`
}

// DataImportCronList is a list of DataImportCrons.
//
// +kubebuilder:object:root=true
type DataImportCronList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DataImportCron `json:"items"`
}

// DataImportCronSpec is what to import and when. The schedule is a cron
// expression the controller parses (CEL cannot): one that does not parse
// is reported by the UpToDate condition, naming spec.schedule.
//
// +kubebuilder:validation:XValidation:rule="has(self.template.spec.source) && has(self.template.spec.source.registry)",fieldPath=".template.spec.source",message="spec.template.spec.source.registry is required: a DataImportCron imports from a registry only"
type DataImportCronSpec struct {
	// Template is the DataVolume each import makes; its
	// source.registry.url is pinned to the digest read.
	Template DataVolume `json:"template"`
	// Schedule is a cron expression (five fields, or a descriptor such
	// as @daily) in UTC.
	// +kubebuilder:validation:MinLength=1
	Schedule string `json:"schedule"`
	// GarbageCollect: Outdated (the default) deletes the imports beyond
	// importsToKeep, Never keeps them all.
	// +kubebuilder:validation:Enum=Outdated;Never
	// +optional
	GarbageCollect *DataImportCronGarbageCollect `json:"garbageCollect,omitempty"`
	// ImportsToKeep is how many imports garbage collection keeps; default
	// 3.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ImportsToKeep *int32 `json:"importsToKeep,omitempty"`
	// ManagedDataSource names the DataSource (in the cron's namespace)
	// kept pointing at the newest import.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=50
	ManagedDataSource string `json:"managedDataSource"`
	// RetentionPolicy: what deleting the cron does with the DataSource
	// and the imports; RetainAll (the default) keeps them, None deletes
	// them.
	// +kubebuilder:validation:Enum=RetainAll;None
	// +optional
	RetentionPolicy *DataImportCronRetentionPolicy `json:"retentionPolicy,omitempty"`
}

// DataImportCronGarbageCollect is what happens to outdated imports.
type DataImportCronGarbageCollect string

// The garbage collection policies.
const (
	DataImportCronGarbageCollectOutdated DataImportCronGarbageCollect = "Outdated"
	DataImportCronGarbageCollectNever    DataImportCronGarbageCollect = "Never"
)

// DataImportCronRetentionPolicy is what deleting a cron leaves.
type DataImportCronRetentionPolicy string

// The retention policies.
const (
	DataImportCronRetainAll  DataImportCronRetentionPolicy = "RetainAll"
	DataImportCronRetainNone DataImportCronRetentionPolicy = "None"
)

// DefaultImportsToKeep is importsToKeep when unset (upstream's).
const DefaultImportsToKeep = 3

// DataImportCronStatus is what the controller observed.
type DataImportCronStatus struct {
	// CurrentImports are the imports in progress (or the last one), the
	// newest first.
	// +optional
	CurrentImports []ImportStatus `json:"currentImports,omitempty"`
	// LastImportedPVC is the newest import that succeeded.
	// +optional
	LastImportedPVC *DataVolumeSourcePVC `json:"lastImportedPVC,omitempty"`
	// LastExecutionTimestamp is when the source was last polled.
	// +optional
	LastExecutionTimestamp *metav1.Time `json:"lastExecutionTimestamp,omitempty"`
	// LastImportTimestamp is when the newest import succeeded.
	// +optional
	LastImportTimestamp *metav1.Time `json:"lastImportTimestamp,omitempty"`
	// SourceFormat of the imports: pvc (kubevmm keeps no snapshots).
	// +optional
	SourceFormat *DataImportCronSourceFormat `json:"sourceFormat,omitempty"`
	// +optional
	Conditions []DataImportCronCondition `json:"conditions,omitempty"`
}

// ImportStatus is one import (upstream's JSON names, capitalized).
type ImportStatus struct {
	// DataVolumeName is the import's DataVolume.
	DataVolumeName string `json:"DataVolumeName"`
	// Digest is the source digest it imports, "sha256:<hex>".
	// +optional
	Digest string `json:"Digest,omitempty"`
}

// DataImportCronSourceFormat is what the imports are kept as.
type DataImportCronSourceFormat string

// DataImportCronSourceFormatPvc is the format of imports kept as PVCs.
const DataImportCronSourceFormatPvc DataImportCronSourceFormat = "pvc"

// DataImportCronConditionType is a DataImportCron condition's type.
type DataImportCronConditionType string

// The condition types.
const (
	// DataImportCronProgressing: an import is running.
	DataImportCronProgressing DataImportCronConditionType = "Progressing"
	// DataImportCronUpToDate: the newest digest read has been imported.
	DataImportCronUpToDate DataImportCronConditionType = "UpToDate"
)

// DataImportCronCondition is one of a DataImportCron's conditions.
type DataImportCronCondition struct {
	Type           DataImportCronConditionType `json:"type"`
	ConditionState `json:",inline"`
}

// SetDataImportCronCondition sets or replaces the condition of c's type
// (conditions.Set).
func SetDataImportCronCondition(conds []DataImportCronCondition, c DataImportCronCondition, now metav1.Time) []DataImportCronCondition {
	return conditions.Set(conds, c, now)
}

// FindDataImportCronCondition is the condition of type t, nil if none.
func FindDataImportCronCondition(conds []DataImportCronCondition, t DataImportCronConditionType) *DataImportCronCondition {
	return conditions.Find(conds, t)
}
