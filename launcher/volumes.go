package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// KubeVirt's defaults for a Filesystem PVC's disk.img: the file system
// keeps some space for itself, so an image of the claim's full size may
// not fit. Up to lessPVCSpaceTolerationPercent less than asked is
// accepted (the image gets what is free); more is an error. The
// reserve stays free beside the image.
const (
	lessPVCSpaceTolerationPercent = 10
	pvcReserveBytes               = 1 << 20
)

// volumeImage is a PVC, ephemeral, hostDisk or emptyDisk volume's disk
// image in the launcher pod.
type volumeImage struct {
	Path     string
	Format   block.Format
	ReadOnly bool
	// Backing is an ephemeral volume's claim image, its overlay's backing
	// file.
	Backing string
}

// volumeDisk is the image of a PVC, ephemeral, hostDisk or emptyDisk
// volume; ok is false for other volumes.
func volumeDisk(p Paths, v *v1.Volume) (img volumeImage, ok bool, err error) {
	claim, readOnly, isClaim := vmispec.VolumeClaim(v)
	switch {
	case isClaim:
		info, found := p.PVCs[v.Name]
		if !found {
			return img, true, fmt.Errorf("spec.volumes[%s]: the pod says nothing of PVC %s (%s)", v.Name, claim, vmispec.PVCInfoEnv)
		}
		img = volumeImage{Path: vmispec.PVCDiskImg(p.PVCDiskDir, v.Name), Format: block.FormatRaw, ReadOnly: readOnly}
		if info.Block {
			img.Path = filepath.Join(p.BlockDeviceDir, v.Name)
		}
		if v.Ephemeral != nil {
			img = volumeImage{Path: vmispec.EphemeralOverlay(p.EmptyDiskDir, v.Name), Format: block.FormatQcow2, Backing: img.Path}
		}
		return img, true, nil
	case v.HostDisk != nil:
		return volumeImage{Path: vmispec.HostDiskImg(p.PVCDiskDir, v.Name, v.HostDisk), Format: block.FormatRaw}, true, nil
	case v.EmptyDisk != nil:
		return volumeImage{Path: vmispec.EmptyDiskImg(p.EmptyDiskDir, v.Name), Format: block.FormatRaw}, true, nil
	}
	return img, false, nil
}

// prepareVolumeDisks makes the images of the VMI's volumes that do not
// exist yet: a Filesystem claim's disk.img, a DiskOrCreate hostDisk's and
// each emptyDisk's, sparse raw files, and each ephemeral volume's qcow2
// overlay over its claim's image. An image that exists is the guest's
// data and is kept as it is; a Block claim's device, a Disk hostDisk's
// image and an ephemeral claim's image must be there.
func prepareVolumeDisks(vmi *v1.VirtualMachineInstance, p Paths, log *slog.Logger) error {
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		img, ok, err := volumeDisk(p, v)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		created, err := prepareVolumeDisk(v, p, img)
		if err != nil {
			return err
		}
		if created > 0 {
			log.Info("disk image created", "volume", v.Name, "path", img.Path, "bytes", created)
		}
	}
	return nil
}

// prepareVolumeDisk makes one volume's image (prepareVolumeDisks); it
// returns the size it created (0: the image was there, or is not ours to
// make).
func prepareVolumeDisk(v *v1.Volume, p Paths, img volumeImage) (int64, error) {
	claim, _, _ := vmispec.VolumeClaim(v)
	switch {
	case v.Ephemeral != nil:
		if err := checkClaimImage(img.Backing, p.PVCs[v.Name].Block); err != nil {
			return 0, fmt.Errorf("volume %s (ephemeral, PVC %s): %w", v.Name, claim, err)
		}
		if err := os.MkdirAll(filepath.Dir(img.Path), 0o750); err != nil {
			return 0, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		err := block.CreateQcow2Overlay(img.Path, img.Backing, block.FormatRaw)
		if errors.Is(err, fs.ErrExist) {
			return 0, nil // this pod's overlay already: the guest's writes
		}
		if err != nil {
			return 0, fmt.Errorf("volume %s (ephemeral, PVC %s): %w", v.Name, claim, err)
		}
		return 0, nil
	case (v.PersistentVolumeClaim != nil || v.DataVolume != nil) && p.PVCs[v.Name].Block:
		if err := checkClaimImage(img.Path, true); err != nil {
			return 0, fmt.Errorf("volume %s (PVC %s): %w", v.Name, claim, err)
		}
		return 0, nil
	case v.PersistentVolumeClaim != nil || v.DataVolume != nil:
		created, err := createDiskImg(img.Path, p.PVCs[v.Name].Size, img.ReadOnly)
		if err != nil {
			return 0, fmt.Errorf("volume %s (PVC %s): %w", v.Name, claim, err)
		}
		return created, nil
	case v.HostDisk != nil && v.HostDisk.Type == v1.HostDiskExistsOrCreate:
		created, err := createDiskImg(img.Path, v.HostDisk.Capacity.Value(), false)
		if err != nil {
			return 0, fmt.Errorf("volume %s (hostDisk %s): %w", v.Name, v.HostDisk.Path, err)
		}
		return created, nil
	case v.HostDisk != nil:
		st, err := os.Stat(img.Path)
		if err == nil && !st.Mode().IsRegular() {
			err = errors.New("not a regular file")
		}
		if err != nil {
			return 0, fmt.Errorf("volume %s (hostDisk %s, type Disk): %w", v.Name, v.HostDisk.Path, err)
		}
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(img.Path), 0o750); err != nil {
		return 0, fmt.Errorf("volume %s: %w", v.Name, err)
	}
	created, err := createSparse(img.Path, v.EmptyDisk.Capacity.Value())
	if err != nil {
		return 0, fmt.Errorf("volume %s (emptyDisk): %w", v.Name, err)
	}
	return created, nil
}

// checkClaimImage checks that a claim's image is there: a Block claim's
// device, a Filesystem claim's disk.img.
func checkClaimImage(path string, blockMode bool) error {
	st, err := os.Stat(path)
	switch {
	case err != nil && blockMode:
		return fmt.Errorf("the Block PVC's device: %w", err)
	case err != nil:
		return fmt.Errorf("the PVC's image: %w", err)
	case blockMode && st.Mode()&fs.ModeDevice == 0:
		return fmt.Errorf("%s is not a block device", path)
	case !blockMode && !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}

// createDiskImg creates a Filesystem claim's disk.img of size bytes
// (vmispec.DiskImgSize), or a DiskOrCreate hostDisk's image of its capacity,
// unless it exists, shrunk to what the file system has free within the
// toleration (KubeVirt's, for both); it returns the size it created (0:
// the image was there). A read-only volume must have its image already.
func createDiskImg(path string, size int64, readOnly bool) (int64, error) {
	if _, err := os.Stat(path); err == nil {
		return 0, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if readOnly {
		return 0, fmt.Errorf("%s does not exist and the volume is read-only", path)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, fmt.Errorf("the image's file system: %w", err)
	}
	free := int64(st.Bavail)*st.Bsize - pvcReserveBytes
	if size > free {
		if size-free > size*lessPVCSpaceTolerationPercent/100 {
			return 0, fmt.Errorf("no room for %s: %d bytes asked, %d free, more than %d%% less", path, size, max(free, 0), lessPVCSpaceTolerationPercent)
		}
		size = free &^ (1<<20 - 1)
	}
	if size <= 0 {
		return 0, fmt.Errorf("no room for %s: smaller than a MiB", path)
	}
	return createSparse(path, size)
}

// createSparse creates a sparse file of size bytes unless one is there
// (returning 0 then): it never truncates an image.
func createSparse(path string, size int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o660)
	if errors.Is(err, fs.ErrExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return 0, fmt.Errorf("sizing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("closing %s: %w", path, err)
	}
	return size, nil
}
