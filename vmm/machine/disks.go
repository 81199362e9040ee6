package machine

import (
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/block"
)

// The device manager's disks: the virtio-blk images and the SCSI
// controller's hot-plugged volumes, as snapshots, migrations and restores
// need them.

// openDeferredDisks opens (and locks) the images of an incoming
// migration's disks, at the switchover: the source has stopped, flushed
// them and let go of their locks.
func (d *deviceManager) openDeferredDisks() error {
	for i, disk := range d.disks {
		if dd, ok := disk.(*block.Deferred); ok {
			if err := dd.Open(); err != nil {
				return fmt.Errorf("disk %d: %w", i, err)
			}
		}
	}
	return nil
}

// checkDisks refuses images that are not the ones a saved VM used.
func (d *deviceManager) checkDisks(saved []savedDisk) error {
	if len(saved) != len(d.disks) {
		return fmt.Errorf("the saved VM has %d disks, this one %d", len(saved), len(d.disks))
	}
	for i, disk := range d.disks {
		if err := saved[i].Image.Check(block.Identify(disk)); err != nil {
			return fmt.Errorf("disk %d (%s): %w", i, d.cfg.disks[i].Path, err)
		}
	}
	return nil
}

// namedDisk is an open image and what errors call it.
type namedDisk struct {
	name string
	disk block.Disk
}

// allDisks are the virtio disks' images and the hot-plugged volumes'.
func (d *deviceManager) allDisks() []namedDisk {
	var out []namedDisk
	for i, disk := range d.disks {
		out = append(out, namedDisk{fmt.Sprintf("disk %d (%s)", i, d.cfg.disks[i].Path), disk})
	}
	if d.scsi != nil {
		disks := d.scsi.Disks()
		for _, v := range d.scsi.Volumes() {
			out = append(out, namedDisk{fmt.Sprintf("volume %q (%s)", v.Name, v.Path), disks[v.Name]})
		}
	}
	return out
}

// flushDisks makes every write the guest's disks completed durable.
func (d *deviceManager) flushDisks() error {
	for _, nd := range d.allDisks() {
		if nd.disk.ReadOnly() {
			continue
		}
		if err := nd.disk.Flush(); err != nil {
			return fmt.Errorf("%s: %w", nd.name, err)
		}
	}
	return nil
}

// releaseDisks flushes the disks and lets go of the writable images'
// locks, so a migration target can open them. Devices must be held.
func (d *deviceManager) releaseDisks() error {
	if err := d.flushDisks(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, nd := range d.allDisks() {
		l, ok := nd.disk.(block.Locker)
		if !ok || nd.disk.ReadOnly() { // shared locks don't stand in the target's way
			continue
		}
		if err := l.Unlock(); err != nil {
			return fmt.Errorf("%s: %w", nd.name, err)
		}
		d.released = append(d.released, l)
	}
	return nil
}

// retakeDisks locks the images releaseDisks let go of again.
func (d *deviceManager) retakeDisks() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.released) > 0 {
		if err := d.released[0].Lock(); err != nil {
			return err
		}
		d.released = d.released[1:]
	}
	return nil
}

// diskIdentity is what the guest saw of disk i's image (its saved
// configuration records it).
func (d *deviceManager) diskIdentity(i int) block.Identity { return block.Identify(d.disks[i]) }
