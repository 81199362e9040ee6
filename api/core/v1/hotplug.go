package v1

import (
	"errors"
	"fmt"
	"slices"
)

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

// VirtualMachineVolumeRequest is a pending addvolume or removevolume on a
// VirtualMachine (status.volumeRequests): virt-controller applies it to
// the VM's template and to its running VMI.
type VirtualMachineVolumeRequest struct {
	// +optional
	AddVolumeOptions *AddVolumeOptions `json:"addVolumeOptions,omitempty"`
	// +optional
	RemoveVolumeOptions *RemoveVolumeOptions `json:"removeVolumeOptions,omitempty"`
}

// The refusals of AddHotplugVolume and RemoveHotplugVolume.
var (
	ErrVolumeExists        = errors.New("a volume or disk of that name exists")
	ErrNoVolume            = errors.New("no volume of that name")
	ErrVolumeNotHotplugged = errors.New("the volume is not hotpluggable: only hot-plugged volumes can be removed")
)

// IsHotplug is a volume marked hotpluggable (a claim or DataVolume).
func (v *Volume) IsHotplug() bool {
	return (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable) ||
		(v.DataVolume != nil && v.DataVolume.Hotpluggable)
}

// AddHotplugVolume adds a checked addvolume request to s: the volume, and
// its disk on the SCSI bus. A name some volume or disk has is refused.
func (s *VirtualMachineInstanceSpec) AddHotplugVolume(opts *AddVolumeOptions) error {
	for _, v := range s.Volumes {
		if v.Name == opts.Name {
			return fmt.Errorf("volume %q: %w", opts.Name, ErrVolumeExists)
		}
	}
	for _, d := range s.Domain.Devices.Disks {
		if d.Name == opts.Name {
			return fmt.Errorf("disk %q: %w", opts.Name, ErrVolumeExists)
		}
	}
	vol := Volume{Name: opts.Name}
	if c := opts.VolumeSource.PersistentVolumeClaim; c != nil {
		vol.PersistentVolumeClaim = c.DeepCopy()
	} else {
		vol.DataVolume = opts.VolumeSource.DataVolume.DeepCopy()
	}
	disk := *opts.Disk.DeepCopy()
	disk.Name = opts.Name
	if disk.Disk == nil {
		disk.Disk = &DiskTarget{}
	}
	disk.Disk.Bus = DiskBusSCSI
	s.Volumes = append(s.Volumes, vol)
	s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, disk)
	return nil
}

// RemoveHotplugVolume takes a hot-plugged volume and its disk out of s; a
// volume the VMI started with stays (the guest cannot lose it).
func (s *VirtualMachineInstanceSpec) RemoveHotplugVolume(name string) error {
	i := slices.IndexFunc(s.Volumes, func(v Volume) bool { return v.Name == name })
	if i < 0 {
		return fmt.Errorf("volume %q: %w", name, ErrNoVolume)
	}
	if !s.Volumes[i].IsHotplug() {
		return fmt.Errorf("volume %q: %w", name, ErrVolumeNotHotplugged)
	}
	s.Volumes = slices.Delete(s.Volumes, i, i+1)
	s.Domain.Devices.Disks = slices.DeleteFunc(s.Domain.Devices.Disks, func(d Disk) bool { return d.Name == name })
	return nil
}

// WithoutHotplugVolumes is a copy of s without its hotpluggable volumes
// and their disks: the spec a VMI's launcher boots.
func (s *VirtualMachineInstanceSpec) WithoutHotplugVolumes() *VirtualMachineInstanceSpec {
	c := s.DeepCopy()
	hot := map[string]bool{}
	c.Volumes = slices.DeleteFunc(c.Volumes, func(v Volume) bool {
		hot[v.Name] = v.IsHotplug()
		return hot[v.Name]
	})
	c.Domain.Devices.Disks = slices.DeleteFunc(c.Domain.Devices.Disks, func(d Disk) bool { return hot[d.Name] })
	return c
}
