package blk

import (
	"encoding/json"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/virtio"
)

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the device's part of a snapshot. The disk itself is not in it:
// the restoring VMM opens the same image (shared storage for migration)
// and the state checks that it is the same size.
type State struct {
	Version  int
	Features uint64
	Sectors  uint64
	Serial   string
	// Queues is the number of request queues (0 in states saved before
	// multi-queue: one).
	Queues int `json:",omitempty"`
}

// Save captures the device.
func (d *Device) Save() State {
	return State{Version: StateVersion, Features: d.features, Sectors: d.Sectors(), Serial: string(d.serial), Queues: len(d.queues)}
}

// Restore checks s against a device built for the same disk: the guest
// negotiated features and saw a capacity that must not change under it.
func (d *Device) Restore(s State) error {
	switch {
	case s.Version != StateVersion:
		return fmt.Errorf("virtio-blk state version %d, want %d", s.Version, StateVersion)
	case max(s.Queues, 1) != len(d.queues):
		return fmt.Errorf("virtio-blk state has %d queues, this disk %d", max(s.Queues, 1), len(d.queues))
	case s.Features != d.features:
		return fmt.Errorf("virtio-blk state offers features %#x, this disk %#x", s.Features, d.features)
	case s.Sectors != d.Sectors():
		return fmt.Errorf("virtio-blk state has %d sectors, this disk %d", s.Sectors, d.Sectors())
	case s.Serial != string(d.serial):
		return fmt.Errorf("virtio-blk state has serial %q, this disk %q", s.Serial, d.serial)
	}
	return nil
}

// SaveState implements virtio.Device.
func (d *Device) SaveState() (json.RawMessage, error) { return json.Marshal(d.Save()) }

// RestoreState implements virtio.Device.
func (d *Device) RestoreState(b json.RawMessage) error { return virtio.RestoreJSON(b, d.Restore) }
