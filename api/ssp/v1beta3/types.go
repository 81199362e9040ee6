package v1beta3

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// OperatorPausedAnnotation set to "true" on an SSP pauses its operator:
// nothing is deployed or reverted until it is removed (status.paused).
const OperatorPausedAnnotation = "kubevirt.io/operator.paused"

// Finalizer keeps an SSP until the operator removed what it deployed
// outside the SSP's namespace (upstream's name).
const Finalizer = "ssp.kubevirt.io/finalizer"

// SSP is the Scheduling, Scale and Performance operator's CR: one per
// cluster (HCO creates ssp-kubevirt-hyperconverged). A second one is
// refused: Degraded, nothing deployed for it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=ssps,singular=ssp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
type SSP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SSPSpec `json:"spec,omitempty"`
	// +optional
	Status SSPStatus `json:"status,omitempty"`
}

// SSPList is a list of SSPs.
//
// +kubebuilder:object:root=true
type SSPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SSP `json:"items"`
}

// SSPSpec is what the SSP operator deploys. Upstream's other fields
// (enableMultipleArchitectures, cluster, tlsSecurityProfile,
// tokenGenerationService) are kept by the API server and refused by the
// operator, naming them.
// +kubebuilder:pruning:PreserveUnknownFields
type SSPSpec struct {
	// TemplateValidator configures virt-template-validator.
	// +optional
	TemplateValidator *TemplateValidator `json:"templateValidator,omitempty"`
	// CommonTemplates configures the common templates.
	CommonTemplates CommonTemplates `json:"commonTemplates"`
}

// TemplateValidator configures virt-template-validator's Deployment.
// +kubebuilder:pruning:PreserveUnknownFields
type TemplateValidator struct {
	// Replicas of the validator; default 2.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=2
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Placement of the validator's pods.
	// +optional
	Placement *NodePlacement `json:"placement,omitempty"`
}

// NodePlacement is where a component's pods may run (the
// controller-lifecycle-operator-sdk's type, as upstream uses it).
type NodePlacement struct {
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// CommonTemplates configures the common templates.
// +kubebuilder:pruning:PreserveUnknownFields
type CommonTemplates struct {
	// Namespace the common templates are deployed into.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// DataImportCronTemplates are the golden images' DataImportCrons: the
	// operator keeps one DataImportCron per entry (created, drift
	// reverted, deleted when dropped from the list). At most 64: the
	// entries' CEL rules (DataVolume's) have a cost budget per list.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	DataImportCronTemplates []DataImportCronTemplate `json:"dataImportCronTemplates,omitempty"`
}

// SSPStatus is what the operator observed (upstream's lifecycle status).
type SSPStatus struct {
	// Phase: Deploying, Deployed, Deleting, Deleted.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []conditions.Condition `json:"conditions,omitempty"`
	// OperatorVersion is the operator's version.
	// +optional
	OperatorVersion string `json:"operatorVersion,omitempty"`
	// TargetVersion is the version being deployed.
	// +optional
	TargetVersion string `json:"targetVersion,omitempty"`
	// ObservedVersion is the version deployed and available.
	// +optional
	ObservedVersion string `json:"observedVersion,omitempty"`
	// Paused is true while the OperatorPausedAnnotation holds.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// ObservedGeneration is the spec's generation the status is about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Phase of an SSP.
type Phase string

// The phases.
const (
	PhaseDeploying Phase = "Deploying"
	PhaseDeployed  Phase = "Deployed"
	PhaseDeleting  Phase = "Deleting"
	PhaseDeleted   Phase = "Deleted"
)

// ConditionType of an SSP's condition.
type ConditionType = conditions.Type

// The condition types (openshift/custom-resource-status's, as upstream;
// the reason of each is its type's name, as upstream sets them).
const (
	ConditionAvailable   ConditionType = conditions.Available
	ConditionProgressing ConditionType = conditions.Progressing
	ConditionDegraded    ConditionType = conditions.Degraded
)

// Condition is one of the operator's conditions (api/conditions).
type Condition = conditions.Condition
