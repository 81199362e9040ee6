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
	"github.com/kubevmm/kubevmm/launcher/spec"
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

// volumeDisk is the path of a PVC or emptyDisk volume's image, and
// whether the volume makes the disk read-only; ok is false for other
// volumes.
func volumeDisk(p Paths, v *v1.Volume) (path string, readOnly bool, ok bool, err error) {
	switch {
	case v.PersistentVolumeClaim != nil:
		info, found := p.PVCs[v.Name]
		switch {
		case !found:
			return "", false, true, fmt.Errorf("spec.volumes[%s]: the pod says nothing of PVC %s (%s)", v.Name, v.PersistentVolumeClaim.ClaimName, spec.PVCInfoEnv)
		case info.Block:
			return filepath.Join(p.BlockDeviceDir, v.Name), v.PersistentVolumeClaim.ReadOnly, true, nil
		}
		return spec.PVCDiskImg(p.PVCDiskDir, v.Name), v.PersistentVolumeClaim.ReadOnly, true, nil
	case v.EmptyDisk != nil:
		return spec.EmptyDiskImg(p.EmptyDiskDir, v.Name), false, true, nil
	}
	return "", false, false, nil
}

// prepareVolumeDisks makes the images of the VMI's PVC and emptyDisk
// volumes that do not exist yet: a Filesystem claim's disk.img and each
// emptyDisk's, sparse raw files. An image that exists is the guest's data
// and is kept as it is; a Block claim's device must be there.
func prepareVolumeDisks(vmi *v1.VirtualMachineInstance, p Paths, log *slog.Logger) error {
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		path, readOnly, ok, err := volumeDisk(p, v)
		if err != nil {
			return err
		}
		switch {
		case !ok:
		case v.PersistentVolumeClaim != nil && p.PVCs[v.Name].Block:
			st, err := os.Stat(path)
			if err != nil {
				return fmt.Errorf("volume %s: the Block PVC's device: %w", v.Name, err)
			}
			if st.Mode()&fs.ModeDevice == 0 {
				return fmt.Errorf("volume %s: %s is not a block device", v.Name, path)
			}
		case v.PersistentVolumeClaim != nil:
			created, err := createPVCDiskImg(path, p.PVCs[v.Name].Size, readOnly)
			if err != nil {
				return fmt.Errorf("volume %s (PVC %s): %w", v.Name, v.PersistentVolumeClaim.ClaimName, err)
			}
			if created > 0 {
				log.Info("disk image created", "volume", v.Name, "path", path, "bytes", created)
			}
		default:
			if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if _, err := createSparse(path, v.EmptyDisk.Capacity.Value()); err != nil {
				return fmt.Errorf("volume %s (emptyDisk): %w", v.Name, err)
			}
		}
	}
	return nil
}

// createPVCDiskImg creates a Filesystem claim's disk.img of size bytes
// (spec.DiskImgSize) unless it exists, shrunk to what the file system has
// free within the toleration; it returns the size it created (0: the
// image was there). A read-only claim must have its image already.
func createPVCDiskImg(path string, size int64, readOnly bool) (int64, error) {
	if _, err := os.Stat(path); err == nil {
		return 0, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if readOnly {
		return 0, fmt.Errorf("%s does not exist and the claim is read-only", path)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, fmt.Errorf("the claim's file system: %w", err)
	}
	free := int64(st.Bavail)*st.Bsize - pvcReserveBytes
	if size > free {
		if size-free > size*lessPVCSpaceTolerationPercent/100 {
			return 0, fmt.Errorf("no room for %s: %d bytes asked, %d free, more than %d%% less", path, size, max(free, 0), lessPVCSpaceTolerationPercent)
		}
		size = free &^ (1<<20 - 1)
	}
	if size <= 0 {
		return 0, fmt.Errorf("no room for %s: the claim is smaller than a MiB", path)
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
