package v1

// The bodies of the addvolume and removevolume subresources (KubeVirt's
// JSON names), the volume hot-plug API.

// AddVolumeOptions is the body of PUT .../virtualmachineinstances/NAME/addvolume.
type AddVolumeOptions struct {
	// Name is the volume's (and its disk's) name in the VMI's spec.
	Name string `json:"name"`
	// Disk is how the guest sees it; the bus must be scsi.
	Disk *Disk `json:"disk"`
	// VolumeSource is the claim or DataVolume, marked hotpluggable.
	VolumeSource *HotplugVolumeSource `json:"volumeSource"`
	// DryRun ("All") checks the request without writing.
	// +optional
	DryRun []string `json:"dryRun,omitempty"`
}

// HotplugVolumeSource is what a hot-plugged volume can be: a claim or a
// DataVolume.
type HotplugVolumeSource struct {
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`
}

// RemoveVolumeOptions is the body of PUT .../removevolume.
type RemoveVolumeOptions struct {
	// Name is the hot-plugged volume to remove.
	Name string `json:"name"`
	// +optional
	DryRun []string `json:"dryRun,omitempty"`
}
