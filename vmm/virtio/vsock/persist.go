package vsock

import "fmt"

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the device's part of a snapshot. Streams do not survive it:
// their host sockets stay with the old VMM, and the guest learns of that
// through a transport reset event (TransportReset, sent by the machine
// once the transport is restored), as with Firecracker.
type State struct {
	Version int
	CID     uint64
}

// Save captures the device.
func (d *Device) Save() State { return State{Version: StateVersion, CID: d.cid} }

// Restore checks s against a device built with the same CID.
func (d *Device) Restore(s State) error {
	switch {
	case s.Version != StateVersion:
		return fmt.Errorf("virtio-vsock state version %d, want %d", s.Version, StateVersion)
	case s.CID != d.cid:
		return fmt.Errorf("virtio-vsock state has CID %d, this device %d", s.CID, d.cid)
	}
	return nil
}
