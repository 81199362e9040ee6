package vmispec

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Persistent and scratch volumes, where KubeVirt's launcher pod has them.
const (
	// PVCDiskDir holds one mount per Filesystem PVC volume, named after
	// the volume; the guest's disk is the image DiskImgName in it.
	PVCDiskDir = "/var/run/kubevirt-private/vmi-disks"
	// DiskImgName is a Filesystem PVC's disk image, created sparse by the
	// launcher when absent.
	DiskImgName = "disk.img"
	// BlockDeviceDir is where a Block PVC's device appears in the
	// launcher container, named after the volume.
	BlockDeviceDir = "/dev"
	// EmptyDiskDir is the emptyDir holding the emptyDisk images, one
	// directory per volume; they live and die with the pod.
	EmptyDiskDir = "/var/run/kubevirt-ephemeral-disks/disk-data"
	// EmptyDiskName is an emptyDisk volume's (sparse raw) image.
	EmptyDiskName = "disk.img"
	// EphemeralOverlayName is an ephemeral volume's qcow2 overlay, in
	// EmptyDiskDir/<volume>: its backing file is the claim's image.
	EphemeralOverlayName = "disk.qcow2"
	// PVCInfoEnv, on the launcher, is what virt-controller read of the
	// VMI's PVCs (JSON, volume name -> PVCInfo): the launcher has no API
	// access and needs each claim's mode and size.
	PVCInfoEnv = "KUBEVMM_PVCS"
)

// PVCInfo is what the launcher and the LiveMigratable decision need of a
// PersistentVolumeClaim volume (KubeVirt's volumeStatus
// persistentVolumeClaimInfo, reduced).
type PVCInfo struct {
	ClaimName string `json:"claimName"`
	// Block: the claim's volumeMode is Block (its device is the disk);
	// otherwise the disk is DiskImgName on its filesystem.
	Block bool `json:"block,omitempty"`
	// Shared: the claim is ReadWriteMany, the same data on every node.
	Shared bool `json:"shared,omitempty"`
	// Size is the disk.img size a Filesystem claim gets (DiskImgSize).
	Size int64 `json:"size,omitempty"`
}

// NewPVCInfo reads a claim.
func NewPVCInfo(pvc *corev1.PersistentVolumeClaim) PVCInfo {
	modes := pvc.Status.AccessModes
	if len(modes) == 0 {
		modes = pvc.Spec.AccessModes
	}
	return PVCInfo{
		ClaimName: pvc.Name,
		Block:     pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock,
		Shared:    slices.Contains(modes, corev1.ReadWriteMany),
		Size:      DiskImgSize(pvc),
	}
}

// DiskImgSize is the size of the disk.img a Filesystem claim gets, as
// KubeVirt sizes it: the smaller of the claim's capacity and its request
// (a provisioner may give more than asked; the guest sees what was
// asked), rounded down to a MiB. An unbound claim (WaitForFirstConsumer)
// has no capacity yet: its request then.
func DiskImgSize(pvc *corev1.PersistentVolumeClaim) int64 {
	size := pvc.Spec.Resources.Requests.Storage().Value()
	if c, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && (size == 0 || c.Value() < size) {
		size = c.Value()
	}
	return size &^ (1<<20 - 1)
}

// PVCDiskImg is the disk image of a Filesystem PVC volume.
func PVCDiskImg(dir, volume string) string { return filepath.Join(dir, volume, DiskImgName) }

// EmptyDiskImg is the image of an emptyDisk volume.
func EmptyDiskImg(dir, volume string) string { return filepath.Join(dir, volume, EmptyDiskName) }

// EphemeralOverlay is the overlay of an ephemeral volume.
func EphemeralOverlay(dir, volume string) string {
	return filepath.Join(dir, volume, EphemeralOverlayName)
}

// HostDiskImg is a hostDisk's image in the launcher pod: the directory of
// its path is mounted at PVCDiskDir/<volume>, as KubeVirt mounts it.
func HostDiskImg(dir, volume string, hd *v1.HostDisk) string {
	return filepath.Join(dir, volume, filepath.Base(hd.Path))
}

// EncodePVCInfo is PVCInfoEnv's value.
func EncodePVCInfo(pvcs map[string]PVCInfo) (string, error) {
	b, err := json.Marshal(pvcs)
	if err != nil {
		return "", fmt.Errorf("encoding PVC info: %w", err)
	}
	return string(b), nil
}

// DecodePVCInfo reads PVCInfoEnv's value ("" is none).
func DecodePVCInfo(s string) (map[string]PVCInfo, error) {
	out := map[string]PVCInfo{}
	if s == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", PVCInfoEnv, err)
	}
	return out, nil
}

// VolumeClaim is the claim of a persistentVolumeClaim, dataVolume or
// ephemeral volume and whether the pod mounts it read-only: an ephemeral
// volume's always is (its writes go to the overlay). A dataVolume's claim
// is named as the DataVolume (CDI names it so; virt-controller takes a
// DataVolume's status.claimName when it says otherwise). ok is false for
// other volumes.
func VolumeClaim(v *v1.Volume) (claim string, readOnly, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly, true
	case v.DataVolume != nil:
		return v.DataVolume.Name, false, true
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		return v.Ephemeral.PersistentVolumeClaim.ClaimName, true, true
	}
	return "", false, false
}

// PVCVolumes are the VMI's volumes on a claim (VolumeClaim).
func PVCVolumes(s *v1.VirtualMachineInstanceSpec) []v1.Volume {
	var out []v1.Volume
	for _, v := range s.Volumes {
		if _, _, ok := VolumeClaim(&v); ok {
			out = append(out, v)
		}
	}
	return out
}

// disksNotMigratable names the first volume that keeps the VMI where it
// is (KubeVirt's DisksNotLiveMigratable): a PVC that is not
// ReadWriteMany (its data stays on the node) or that could not be read, a
// hostDisk not marked shared (as KubeVirt rules), and scratch disks
// (writable containerDisk, emptyDisk, an ephemeral volume's overlay),
// which are local to the launcher pod: KubeVirt block-migrates those,
// kubevmm has no block migration to copy them. Read-only containerDisks
// are the same image on both ends.
func disksNotMigratable(s *v1.VirtualMachineInstanceSpec, pvcs map[string]PVCInfo) string {
	vols := map[string]*v1.Volume{}
	for i := range s.Volumes {
		vols[s.Volumes[i].Name] = &s.Volumes[i]
	}
	for _, d := range s.Domain.Devices.Disks {
		v := vols[d.Name]
		switch {
		case v == nil:
		case v.IsHotplug():
			return "volume " + d.Name + " is hot-plugged: kubevmm does not carry hot-plugged volumes over a migration yet"
		case v.ContainerDisk != nil && (d.Disk == nil || !d.Disk.ReadOnly):
			return "disk " + d.Name + " is a writable containerDisk: its data is local to the launcher pod and kubevmm has no block migration"
		case v.EmptyDisk != nil:
			return "disk " + d.Name + " is an emptyDisk: its data is local to the launcher pod and kubevmm has no block migration"
		case v.Ephemeral != nil:
			return "disk " + d.Name + " is ephemeral: its overlay is local to the launcher pod and kubevmm has no block migration"
		case v.HostDisk != nil && (v.HostDisk.Shared == nil || !*v.HostDisk.Shared):
			return "disk " + d.Name + " is a hostDisk that is not shared: its image is on this node only"
		case v.PersistentVolumeClaim != nil || v.DataVolume != nil:
			claim, _, _ := VolumeClaim(v)
			info, ok := pvcs[d.Name]
			switch {
			case !ok:
				return fmt.Sprintf("volume %s: PVC %s was not read", d.Name, claim)
			case !info.Shared:
				return fmt.Sprintf("volume %s: PVC %s is not shared, live migration requires ReadWriteMany", d.Name, info.ClaimName)
			}
		}
	}
	return ""
}
