package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevmm/kubevmm/api/conditions"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// ConditionDeprecated is the one condition the SSP operator sets on a
// TektonTasks CR: True, reason Deprecated.
const ConditionDeprecated sspv1beta3.ConditionType = "Deprecated"

// TektonTasks is tekton-tasks-operator's CR, a documented no-op here.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=tektontasks,singular=tektontasks
// +kubebuilder:subresource:status
type TektonTasks struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is kept as written (upstream: pipelines, tasks, featureGates);
	// nothing reads it.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec,omitempty"`
	// +optional
	Status TektonTasksStatus `json:"status,omitempty"`
}

// TektonTasksList is a list of TektonTasks.
//
// +kubebuilder:object:root=true
type TektonTasksList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TektonTasks `json:"items"`
}

// TektonTasksStatus is upstream's lifecycle status; only the conditions
// and observedGeneration are written.
type TektonTasksStatus struct {
	// +optional
	Phase sspv1beta3.Phase `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []conditions.Condition `json:"conditions,omitempty"`
	// +optional
	Paused bool `json:"paused,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}
