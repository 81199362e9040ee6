package scsi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
)

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the controller's part of a snapshot or a migration: the
// driver-set sizes, the events not yet delivered, and the attached
// volumes. The images are not in it: the restoring VMM opens the same
// paths (shared storage for a migration) and refuses an image that is not
// the one saved.
type State struct {
	Version   int
	Features  uint64
	SenseSize uint32
	CDBSize   uint32
	Volumes   []SavedVolume `json:",omitempty"`
	Pending   []SavedEvent  `json:",omitempty"`
	Missed    bool          `json:",omitempty"`
}

// SavedVolume is an attached volume and what the guest saw of its image.
type SavedVolume struct {
	Volume
	Target int
	Image  block.Identity
}

// SavedEvent is an event the driver has not taken yet.
type SavedEvent struct {
	Event  uint32
	Target uint8
	Reason uint32
}

// Save captures the controller; its worker must be held still.
func (d *Device) Save() State {
	s := State{Version: StateVersion, Features: d.features, SenseSize: d.senseSize.Load(), CDBSize: d.cdbSize.Load(), Missed: d.missed}
	d.volMu.Lock()
	for i, x := range d.targets {
		if x != nil {
			s.Volumes = append(s.Volumes, SavedVolume{Volume: x.vol, Target: i, Image: block.Identify(x.lun.Disk)})
		}
	}
	d.volMu.Unlock()
	for _, e := range d.pending {
		s.Pending = append(s.Pending, SavedEvent(e))
	}
	return s
}

// Restore loads s into a new controller, opening every saved volume's
// image. A missing image, or one that is not the image saved, is refused
// naming the volume; nothing stays open then.
func (d *Device) Restore(s State) error {
	switch {
	case s.Version != StateVersion:
		return fmt.Errorf("virtio-scsi state version %d, want %d", s.Version, StateVersion)
	case s.Features != d.features:
		return fmt.Errorf("virtio-scsi state offers features %#x, this controller %#x", s.Features, d.features)
	case s.SenseSize > maxSenseSize || s.CDBSize > maxCDBSize:
		return fmt.Errorf("virtio-scsi state has sense size %d and CDB size %d: at most %d and %d", s.SenseSize, s.CDBSize, maxSenseSize, maxCDBSize)
	case len(s.Pending) > maxPending:
		return fmt.Errorf("virtio-scsi state has %d pending events: at most %d", len(s.Pending), maxPending)
	case len(s.Volumes) > MaxTargets:
		return fmt.Errorf("virtio-scsi state has %d volumes: at most %d", len(s.Volumes), MaxTargets)
	}
	for _, e := range s.Pending {
		if int(e.Target) >= MaxTargets {
			return fmt.Errorf("virtio-scsi state has an event for target %d: at most %d", e.Target, MaxTargets-1)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	d.Quiesce(func() {
		for _, x := range d.targets {
			if x != nil {
				err = errors.New("virtio-scsi: restore into a controller with volumes attached")
				return
			}
		}
		for _, v := range s.Volumes {
			if err = d.restoreVolume(v); err != nil {
				break
			}
		}
		if err != nil {
			d.volMu.Lock()
			for i, x := range d.targets {
				if x != nil {
					_ = x.lun.Disk.Close() // the guest has not run: nothing written
					d.targets[i] = nil
				}
			}
			d.volMu.Unlock()
			return
		}
		d.senseSize.Store(s.SenseSize)
		d.cdbSize.Store(s.CDBSize)
		d.missed = s.Missed
		d.pending = nil
		for _, e := range s.Pending {
			d.pending = append(d.pending, event(e))
		}
	})
	return err
}

func (d *Device) restoreVolume(v SavedVolume) error {
	if v.Target < 0 || v.Target >= MaxTargets {
		return fmt.Errorf("virtio-scsi volume %q at target %d: at most %d", v.Name, v.Target, MaxTargets-1)
	}
	if err := checkVolume(v.Volume); err != nil {
		return err
	}
	disk, err := block.Open(v.Path, block.Options{Format: v.Format, ReadOnly: v.ReadOnly})
	if err != nil {
		return fmt.Errorf("%w: virtio-scsi volume %q: %w", ErrBadVolume, v.Name, err)
	}
	if err := v.Image.Check(block.Identify(disk)); err != nil {
		_ = disk.Close() // not attached: nothing written
		return fmt.Errorf("%w: virtio-scsi volume %q (%s): %w", ErrBadVolume, v.Name, v.Path, err)
	}
	if _, err := d.place(v.Volume, disk, v.Target); err != nil {
		_ = disk.Close() // not attached: nothing written
		return err
	}
	return nil
}

// SaveState implements virtio.Device.
func (d *Device) SaveState() (json.RawMessage, error) { return json.Marshal(d.Save()) }

// RestoreState implements virtio.Device.
func (d *Device) RestoreState(b json.RawMessage) error { return virtio.RestoreJSON(b, d.Restore) }
