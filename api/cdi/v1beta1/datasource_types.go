package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// DataSource names a PVC that DataVolumes clone through their sourceRef
// (a golden image, often kept current by a DataImportCron). Its Ready
// condition, computed by cdi-controller, says whether the PVC is there
// and filled.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=datasources,singular=datasource,shortName=das,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type DataSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DataSourceSpec `json:"spec"`
	// +optional
	Status DataSourceStatus `json:"status,omitempty"`
}

// DataSourceList is a list of DataSources.
//
// +kubebuilder:object:root=true
type DataSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DataSource `json:"items"`
}

// DataSourceSpec is where the DataSource's data is.
type DataSourceSpec struct {
	Source DataSourceSource `json:"source"`
}

// DataSourceSource is the PVC a DataSource names (upstream also allows a
// VolumeSnapshot, which kubevmm has no snapshot controller for: refused
// naming the field rather than kept and never served).
//
// +kubebuilder:validation:XValidation:rule="!has(self.snapshot)",fieldPath=".snapshot",message="spec.source.snapshot is not supported by kubevmm"
type DataSourceSource struct {
	// PVC is the claim DataVolumes clone; its namespace defaults to the
	// DataSource's.
	// +optional
	PVC *DataVolumeSourcePVC `json:"pvc,omitempty"`
	// +optional
	Snapshot *UnsupportedSource `json:"snapshot,omitempty"`
}

// DataSourceStatus is the source as last seen and whether it can be
// cloned.
type DataSourceStatus struct {
	// Source is the spec's source the conditions were computed for.
	// +optional
	Source DataSourceSource `json:"source,omitempty"`
	// +optional
	Conditions []DataSourceCondition `json:"conditions,omitempty"`
}

// DataSourceConditionType is a DataSource condition's type.
type DataSourceConditionType string

// DataSourceReady is True when the source PVC exists and is filled.
const DataSourceReady DataSourceConditionType = "Ready"

// DataSourceCondition is one of a DataSource's conditions.
type DataSourceCondition struct {
	Type           DataSourceConditionType `json:"type"`
	ConditionState `json:",inline"`
}

// SetDataSourceCondition sets or replaces the condition of c's type
// (conditions.Set).
func SetDataSourceCondition(conds []DataSourceCondition, c DataSourceCondition, now metav1.Time) []DataSourceCondition {
	return conditions.Set(conds, c, now)
}

// FindDataSourceCondition is the condition of type t, nil if none.
func FindDataSourceCondition(conds []DataSourceCondition, t DataSourceConditionType) *DataSourceCondition {
	return conditions.Find(conds, t)
}
