package net

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"

	"github.com/kubevmm/kubevmm/vmm/virtio"
)

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the device's part of a snapshot. The tap is not in it: the
// restoring VMM opens its own. A frame received but not yet delivered is
// dropped (the network may lose frames).
type State struct {
	Version  int
	MAC      net.HardwareAddr
	Features uint64
	// Acked are the negotiated features, to restore the tap's offloads.
	Acked uint64
	// Pairs is the device's queue pairs (0 in states saved before
	// multi-queue: one), ActivePairs how many the driver uses.
	Pairs       int `json:",omitempty"`
	ActivePairs int `json:",omitempty"`
}

// Save captures the device.
func (d *Device) Save() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return State{Version: StateVersion, MAC: append(net.HardwareAddr(nil), d.mac...), Features: d.features, Acked: d.acked,
		Pairs: len(d.pairs), ActivePairs: d.active}
}

// Restore checks s against a device built with the same configuration
// and takes the queue pairs the driver was using.
func (d *Device) Restore(s State) error {
	pairs, active := max(s.Pairs, 1), max(s.ActivePairs, 1)
	switch {
	case s.Version != StateVersion:
		return fmt.Errorf("virtio-net state version %d, want %d", s.Version, StateVersion)
	case !bytes.Equal(s.MAC, d.mac):
		return fmt.Errorf("virtio-net state has MAC %s, this device %s", s.MAC, d.mac)
	case s.Features != d.features:
		return fmt.Errorf("virtio-net state offers features %#x, this device %#x", s.Features, d.features)
	case pairs != len(d.pairs):
		return fmt.Errorf("virtio-net state has %d queue pairs, this device %d", pairs, len(d.pairs))
	case active > pairs:
		return fmt.Errorf("virtio-net state uses %d of %d queue pairs", active, pairs)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setActive(active) // the tap queues follow at activation
	return nil
}

// SaveState implements virtio.Device.
func (d *Device) SaveState() (json.RawMessage, error) { return json.Marshal(d.Save()) }

// RestoreState implements virtio.Device.
func (d *Device) RestoreState(b json.RawMessage) error { return virtio.RestoreJSON(b, d.Restore) }
