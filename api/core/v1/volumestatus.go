package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// VolumeStatus is KubeVirt's status.volumeStatus entry: how far a volume
// (here: a hot-plugged one) got on its way into the guest.
type VolumeStatus struct {
	// Name is the volume's name in spec.volumes.
	Name string `json:"name"`
	// Target is the guest's device name (sda, ...) once known.
	// +optional
	Target string `json:"target"`
	// +optional
	Phase VolumePhase `json:"phase,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	PersistentVolumeClaimInfo *PersistentVolumeClaimInfo `json:"persistentVolumeClaimInfo,omitempty"`
	// +optional
	HotplugVolume *HotplugVolumeStatus `json:"hotplugVolume,omitempty"`
	// Size is the volume's size in bytes, once attached.
	// +optional
	Size int64 `json:"size,omitempty"`
}

// HotplugVolumeStatus names the attachment pod that has the volume
// published on the VMI's node.
type HotplugVolumeStatus struct {
	// +optional
	AttachPodName string `json:"attachPodName,omitempty"`
	// +optional
	AttachPodUID types.UID `json:"attachPodUID,omitempty"`
}

// PersistentVolumeClaimInfo is what the volume's claim said.
type PersistentVolumeClaimInfo struct {
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// +optional
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// +optional
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	FilesystemOverhead *resource.Quantity `json:"filesystemOverhead,omitempty"`
}

// VolumePhase is a volume's phase (KubeVirt's names).
type VolumePhase string

// The phases of a hot-plugged volume, in order: virt-controller moves it
// to AttachedToNode once its attachment pod runs; virt-handler on to
// MountedToPod and Ready, and Detaching on its way out.
const (
	VolumePending               VolumePhase = "Pending"
	VolumeBound                 VolumePhase = "Bound"
	HotplugVolumeAttachedToNode VolumePhase = "AttachedToNode"
	HotplugVolumeMounted        VolumePhase = "MountedToPod"
	VolumeReady                 VolumePhase = "Ready"
	HotplugVolumeDetaching      VolumePhase = "Detaching"
)
