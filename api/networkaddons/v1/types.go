package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// NetworkAddonsConfig says which network add-ons the cluster runs: one
// per cluster, named "cluster" (the CRD refuses any other name at
// admission; upstream's operator ignores them).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=networkaddonsconfigs,singular=networkaddonsconfig,scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'cluster'",message="there is one NetworkAddonsConfig per cluster and its name is cluster"
type NetworkAddonsConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NetworkAddonsConfigSpec `json:"spec,omitempty"`
	// +optional
	Status NetworkAddonsConfigStatus `json:"status,omitempty"`
}

// NetworkAddonsConfigList is a list of NetworkAddonsConfigs.
//
// +kubebuilder:object:root=true
type NetworkAddonsConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NetworkAddonsConfig `json:"items"`
}

// NetworkAddonsConfigSpec says which components run: each while its key is
// present (an empty object is enough) and removed when the key goes.
// Upstream's other keys are kept by the API server and refused by the
// operator, naming them.
// +kubebuilder:pruning:PreserveUnknownFields
type NetworkAddonsConfigSpec struct {
	// Multus deploys the Multus-compatible meta-plugin (kubevmm-multus) on
	// every node and the NetworkAttachmentDefinition CRD.
	// +optional
	Multus *Multus `json:"multus,omitempty"`
	// LinuxBridge installs the bridge and tuning CNI plugins on every node
	// and runs bridge-marker, which publishes each node's bridges as
	// bridge.network.kubevirt.io/<bridge> resources.
	// +optional
	LinuxBridge *LinuxBridge `json:"linuxBridge,omitempty"`
	// KubeMacPool deploys kubemacpool, which gives VMs' interfaces MAC
	// addresses from its range.
	// +optional
	KubeMacPool *KubeMacPool `json:"kubeMacPool,omitempty"`
	// SelfSignConfiguration is the lifetimes of the certificates the
	// operator makes for the components (kubemacpool's webhook): Go
	// durations; the HCO fills it from its certConfig.
	// +optional
	SelfSignConfiguration *SelfSignConfiguration `json:"selfSignConfiguration,omitempty"`
	// ImagePullPolicy of the components' containers; default IfNotPresent.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// Multus has no settings.
// +kubebuilder:pruning:PreserveUnknownFields
type Multus struct{}

// LinuxBridge has no settings.
// +kubebuilder:pruning:PreserveUnknownFields
type LinuxBridge struct{}

// KubeMacPool is kubemacpool's MAC range: both ends or neither (then the
// operator picks a random 02:XX:XX:00:00:00-02:XX:XX:FF:FF:FF and keeps
// it); unicast, the end after the start.
// +kubebuilder:pruning:PreserveUnknownFields
type KubeMacPool struct {
	// +optional
	RangeStart string `json:"rangeStart,omitempty"`
	// +optional
	RangeEnd string `json:"rangeEnd,omitempty"`
}

// SelfSignConfiguration is upstream's: each a Go duration ("168h"), unset
// ones upstream's defaults. A rotate interval is how long a new CA or
// certificate is valid, an overlap interval how long before its expiry
// the next one is made (both then valid and trusted).
// +kubebuilder:pruning:PreserveUnknownFields
type SelfSignConfiguration struct {
	// +optional
	CARotateInterval string `json:"caRotateInterval,omitempty"`
	// +optional
	CAOverlapInterval string `json:"caOverlapInterval,omitempty"`
	// +optional
	CertRotateInterval string `json:"certRotateInterval,omitempty"`
	// +optional
	CertOverlapInterval string `json:"certOverlapInterval,omitempty"`
}

// NetworkAddonsConfigStatus is what the operator observed (upstream's).
type NetworkAddonsConfigStatus struct {
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
	// Containers are the deployed components' containers.
	// +optional
	// +listType=atomic
	Containers []Container `json:"containers,omitempty"`
	// ObservedGeneration is the spec's generation the status is about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Container is one deployed container and the object that runs it.
type Container struct {
	Namespace  string `json:"namespace"`
	ParentKind string `json:"parentKind"`
	ParentName string `json:"parentName"`
	Name       string `json:"name"`
	Image      string `json:"image"`
}

// ConditionType of a NetworkAddonsConfig's condition.
type ConditionType = conditions.Type

// The condition types (openshift/custom-resource-status's, as upstream).
const (
	ConditionAvailable   ConditionType = conditions.Available
	ConditionProgressing ConditionType = conditions.Progressing
	ConditionDegraded    ConditionType = conditions.Degraded
)

// Condition is one of the operator's conditions (api/conditions).
type Condition = conditions.Condition
