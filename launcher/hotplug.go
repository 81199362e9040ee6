package launcher

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// Hot-plugged volumes (KubeVirt's addvolume/removevolume): disk images
// attached to the guest's SCSI controller while it runs, one per target,
// LUN 0. Our VMM's runner serves them itself (kubevmmBackend embeds it);
// the QEMU backend through QMP (blockdev-add + device_add scsi-hd on its
// virtio-scsi-pci, device_del + blockdev-del). A volume's format is
// raw unless the request names another: never probed, as a guest that
// wrote a qcow2 header into a raw volume would otherwise choose what the
// host opens next time.

var (
	_ fileVolumeVM = (*kubevmmBackend)(nil)
	_ fileVolumeVM = (*qemuBackend)(nil)
	_ api.VolumeVM = (*switchVM)(nil)
	_ api.VolumeVM = (*kubevmmBackend)(nil)
	_ api.VolumeVM = (*qemuBackend)(nil)
)

func (s *switchVM) volumes() (api.VolumeVM, error) {
	b, err := s.get()
	if err != nil {
		return nil, err
	}
	v, ok := b.(api.VolumeVM)
	if !ok {
		return nil, fmt.Errorf("%w: this backend takes no hot-plugged volumes", api.ErrConflict)
	}
	return v, nil
}

// AttachVolume hot-plugs a volume into the running guest.
func (s *switchVM) AttachVolume(r api.VolumeRequest) (api.Volume, error) {
	v, err := s.volumes()
	if err != nil {
		return api.Volume{}, err
	}
	return v.AttachVolume(r)
}

// fileVolumeVM is a backend that takes a hot-plugged volume's image as
// an open file (both do).
type fileVolumeVM interface {
	// AttachVolumeFile is AttachVolume for the image open at f; the
	// caller keeps and closes f.
	AttachVolumeFile(api.VolumeRequest, *os.File) (api.Volume, error)
}

// AttachVolumeFile hot-plugs the image open at f, which virt-handler
// opened where this pod cannot see (api.ServeVolumeFiles), and closes f:
// the backend holds its own copy of the descriptor. It is never reopened
// by a path: a Block claim's device node is not one this pod's container
// may open.
func (s *switchVM) AttachVolumeFile(r api.VolumeRequest, f *os.File) (api.Volume, error) {
	defer func() { _ = f.Close() }()
	b, err := s.get()
	if err != nil {
		return api.Volume{}, err
	}
	v, ok := b.(fileVolumeVM)
	if !ok {
		return api.Volume{}, fmt.Errorf("%w: this backend takes no hot-plugged volumes", api.ErrConflict)
	}
	return v.AttachVolumeFile(r, f)
}

// DetachVolume unplugs one.
func (s *switchVM) DetachVolume(name string) (api.Volume, error) {
	v, err := s.volumes()
	if err != nil {
		return api.Volume{}, err
	}
	return v.DetachVolume(name)
}

// Volumes lists them.
func (s *switchVM) Volumes() ([]api.Volume, error) {
	v, err := s.volumes()
	if err != nil {
		return nil, err
	}
	return v.Volumes()
}

// qemuHotplugTimeout bounds one hot-plug: a few monitor commands, and an
// unplug waits for QEMU to let go of the device.
const qemuHotplugTimeout = 30 * time.Second

// AttachVolume plugs the volume in at the lowest free target.
func (q *qemuBackend) AttachVolume(r api.VolumeRequest) (api.Volume, error) {
	return q.attach(r, qemu.SCSIDisk{Path: r.Path})
}

// AttachVolumeFile plugs in the image open at f as AttachVolume does, by
// the descriptor itself (QEMU gets a copy), so that a block device this
// process may not open by name can be attached. f stays the caller's to
// close. r.Path, if set, names the volume's image; else f's name does.
func (q *qemuBackend) AttachVolumeFile(r api.VolumeRequest, f *os.File) (api.Volume, error) {
	path := r.Path
	if path == "" {
		path = f.Name()
	}
	return q.attach(r, qemu.SCSIDisk{Path: path, File: f})
}

// attach plugs disk (its image: Path, or File named by Path) in for r at
// the lowest free target.
func (q *qemuBackend) attach(r api.VolumeRequest, disk qemu.SCSIDisk) (api.Volume, error) {
	format := block.FormatRaw
	if r.Format != "" {
		f, err := block.ParseFormat(r.Format)
		if err != nil {
			return api.Volume{}, fmt.Errorf("%w: volume %q: %v", api.ErrBadRequest, r.Name, err)
		}
		format = f
	}
	q.hpMu.Lock()
	defer q.hpMu.Unlock()
	target := -1
	for i := len(q.hotplugged) - 1; i >= 0; i-- {
		switch v := q.hotplugged[i]; {
		case v == nil:
			target = i
		case v.Name == r.Name:
			return api.Volume{}, fmt.Errorf("%w: a volume named %q is attached already", api.ErrBadRequest, r.Name)
		}
	}
	if target < 0 {
		return api.Volume{}, fmt.Errorf("%w: all %d SCSI targets are in use", api.ErrBadRequest, len(q.hotplugged))
	}
	ctx, cancel := context.WithTimeout(context.Background(), qemuHotplugTimeout)
	defer cancel()
	disk.Target, disk.Format, disk.ReadOnly, disk.Serial = target, qemu.DiskFormat(format), r.ReadOnly, r.Name
	size, err := q.vm.AttachSCSIDisk(ctx, disk)
	if err != nil {
		return api.Volume{}, fmt.Errorf("volume %q: %w", r.Name, err)
	}
	v := &api.Volume{Name: r.Name, Path: disk.Path, Format: string(format), ReadOnly: r.ReadOnly, Target: target, SizeBytes: size}
	q.hotplugged[target] = v
	return *v, nil
}

// DetachVolume unplugs the named volume; QEMU flushes and closes its image.
func (q *qemuBackend) DetachVolume(name string) (api.Volume, error) {
	q.hpMu.Lock()
	defer q.hpMu.Unlock()
	for i, v := range q.hotplugged {
		if v == nil || v.Name != name {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), qemuHotplugTimeout)
		defer cancel()
		if err := q.vm.DetachSCSIDisk(ctx, i); err != nil {
			return api.Volume{}, fmt.Errorf("volume %q: %w", name, err)
		}
		q.hotplugged[i] = nil
		return *v, nil
	}
	return api.Volume{}, fmt.Errorf("%w: no such volume: %q", api.ErrConflict, name)
}

// Volumes lists the attached volumes by target.
func (q *qemuBackend) Volumes() ([]api.Volume, error) {
	q.hpMu.Lock()
	defer q.hpMu.Unlock()
	var out []api.Volume
	for _, v := range q.hotplugged {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out, nil
}
