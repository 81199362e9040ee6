package machine

import (
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// ErrNoSCSI is returned by the hot-plug methods of a VM built without a
// SCSI controller (Config.SCSI).
var ErrNoSCSI = errors.New("the VM has no SCSI controller for hot-plugged volumes")

// AttachVolume opens the image v names, or the file v holds open (and
// locks it, as a disk's) and
// plugs it into the running guest's SCSI controller at the lowest free
// target: the guest is told to rescan it and sees a new disk. The caller
// serialises hot-plug with snapshots and migrations (the runner does).
func (m *Machine) AttachVolume(v scsi.Volume) (scsi.Attached, error) {
	return m.devices.attachVolume(v)
}

// DetachVolume unplugs the named volume: the guest is told it is removed,
// and once no request uses it its image is flushed and closed.
func (m *Machine) DetachVolume(name string) (scsi.Attached, error) {
	return m.devices.detachVolume(name)
}

// Volumes lists the hot-plugged volumes (none without a controller).
func (m *Machine) Volumes() []scsi.Attached { return m.devices.volumes() }

func (d *deviceManager) attachVolume(v scsi.Volume) (scsi.Attached, error) {
	if d.scsi == nil {
		return scsi.Attached{}, ErrNoSCSI
	}
	if v.Format == "" {
		v.Format = block.FormatRaw
	}
	var disk block.Disk
	var err error
	if v.File != nil {
		disk, err = block.OpenFile(v.File, block.Options{Format: v.Format, ReadOnly: v.ReadOnly})
	} else {
		disk, err = block.Open(v.Path, block.Options{Format: v.Format, ReadOnly: v.ReadOnly})
	}
	if err != nil {
		return scsi.Attached{}, fmt.Errorf("%w: volume %q: %w", scsi.ErrBadVolume, v.Name, err)
	}
	at, err := d.scsi.Attach(v, disk)
	if err != nil {
		return scsi.Attached{}, err
	}
	d.log.Info("volume attached", "name", at.Name, "path", at.Path, "target", at.Target, "size", at.Size, "read_only", at.ReadOnly)
	return at, nil
}

func (d *deviceManager) detachVolume(name string) (scsi.Attached, error) {
	if d.scsi == nil {
		return scsi.Attached{}, ErrNoSCSI
	}
	at, err := d.scsi.Detach(name)
	if errors.Is(err, scsi.ErrNotAttached) {
		return at, err
	}
	d.log.Info("volume detached", "name", at.Name, "path", at.Path, "target", at.Target)
	return at, err
}

func (d *deviceManager) volumes() []scsi.Attached {
	if d.scsi == nil {
		return nil
	}
	return d.scsi.Volumes()
}
