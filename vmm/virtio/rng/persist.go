package rng

import "fmt"

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
