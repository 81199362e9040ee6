package rng

import (
	"encoding/json"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/virtio"
)

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the device's part of a snapshot (it has no state of its own
// beyond its queue, which the transport saves).
type State struct {
	Version int
}

// Save captures the device.
func (d *Device) Save() State { return State{Version: StateVersion} }

// Restore loads s into a new device.
func (d *Device) Restore(s State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("virtio-rng state version %d, want %d", s.Version, StateVersion)
	}
	return nil
}

// SaveState implements virtio.Device.
func (d *Device) SaveState() (json.RawMessage, error) { return json.Marshal(d.Save()) }

// RestoreState implements virtio.Device.
func (d *Device) RestoreState(b json.RawMessage) error { return virtio.RestoreJSON(b, d.Restore) }
