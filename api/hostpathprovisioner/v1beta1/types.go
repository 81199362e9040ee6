package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// HostPathProvisioner deploys the hostpath provisioner's CSI driver on the
// nodes, serving the storage pools it names.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=hostpathprovisioners,singular=hostpathprovisioner,shortName=hpp,scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
type HostPathProvisioner struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HostPathProvisionerSpec `json:"spec"`
	// +optional
	Status HostPathProvisionerStatus `json:"status,omitempty"`
}

// HostPathProvisionerList is a list of HostPathProvisioners.
//
// +kubebuilder:object:root=true
type HostPathProvisionerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HostPathProvisioner `json:"items"`
}

// HostPathProvisionerSpec names the storage pools (or upstream's legacy
// pathConfig: exactly one of the two) and where the driver runs.
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:XValidation:rule="has(self.storagePools) != has(self.pathConfig)",message="exactly one of spec.storagePools and spec.pathConfig must be set"
type HostPathProvisionerSpec struct {
	// ImagePullPolicy of the driver's containers; default the operator's.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// PathConfig is upstream's legacy provisioner's one directory; kubevmm
	// does not implement it (the operator refuses it, naming it).
	// +optional
	PathConfig *PathConfig `json:"pathConfig,omitempty"`
	// StoragePools are the directories, the same on every node the driver
	// runs on, that volumes are made in: a StorageClass names one with
	// parameters.storagePool.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	StoragePools []StoragePool `json:"storagePools,omitempty"`
	// Workload is where the driver's pods run.
	// +optional
	Workload NodePlacement `json:"workload,omitempty"`
	// FeatureGates of upstream's; kubevmm implements none (the operator
	// refuses any, naming it).
	// +optional
	// +listType=atomic
	FeatureGates []string `json:"featureGates,omitempty"`
}

// PathConfig is upstream's legacy provisioner's directory.
// +kubebuilder:pruning:PreserveUnknownFields
type PathConfig struct {
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	UseNamingPrefix bool `json:"useNamingPrefix,omitempty"`
}

// StoragePool is one pool: a name StorageClasses select and the
// directory on the nodes its volumes are made in (<path>/csi/<volume>).
// Upstream's pvcTemplate (a pool on a claim of another class) is kept by
// the CRD and refused by the operator.
// +kubebuilder:pruning:PreserveUnknownFields
type StoragePool struct {
	// Name, which a StorageClass's parameters.storagePool names.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	Name string `json:"name"`
	// Path is the pool's directory on every node, absolute; made if
	// missing.
	// +kubebuilder:validation:Pattern=`^/[^,=]*$`
	// +kubebuilder:validation:XValidation:rule="self != '/'",message="a pool cannot be the root directory"
	Path string `json:"path"`
}

// NodePlacement is where the driver's pods run (upstream's
// api/v1beta1 NodePlacement).
type NodePlacement struct {
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
}

// HostPathProvisionerStatus is what the operator observed (upstream's).
type HostPathProvisionerStatus struct {
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
	// StoragePoolStatuses are the pools' states, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	StoragePoolStatuses []StoragePoolStatus `json:"storagePoolStatuses,omitempty"`
}

// StoragePoolPhase is a pool's state.
type StoragePoolPhase string

// The pool phases (upstream's).
const (
	// StoragePoolReady: the driver serves the pool on every node it
	// should run on.
	StoragePoolReady StoragePoolPhase = "Ready"
	// StoragePoolPending: the driver is not running everywhere yet.
	StoragePoolPending StoragePoolPhase = "Pending"
)

// StoragePoolStatus is one pool's state.
type StoragePoolStatus struct {
	Name string `json:"name"`
	// +optional
	Phase StoragePoolPhase `json:"phase,omitempty"`
}

// ConditionType of a HostPathProvisioner's condition.
type ConditionType = conditions.Type

// The condition types (openshift/custom-resource-status's, as upstream).
const (
	ConditionAvailable   ConditionType = conditions.Available
	ConditionProgressing ConditionType = conditions.Progressing
	ConditionDegraded    ConditionType = conditions.Degraded
)

// Condition is one of the operator's conditions (api/conditions).
type Condition = conditions.Condition
