package vsock

import (
	"encoding/json"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/virtio"
)

// StateVersion is the version of State this code reads and writes.
const StateVersion = 1

// State is the device's part of a snapshot. Streams do not survive it:
// their host sockets stay with the old VMM, and the guest learns of that
// through a transport reset event, as with Firecracker: Restore makes one
// due, and it goes out when the restored transport has the device look at
// its queues.
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
	d.resetDue = true // the guest's streams had their host ends in the old VMM
	return nil
}

// SaveState implements virtio.Device.
func (d *Device) SaveState() (json.RawMessage, error) { return json.Marshal(d.Save()) }

// RestoreState implements virtio.Device.
func (d *Device) RestoreState(b json.RawMessage) error { return virtio.RestoreJSON(b, d.Restore) }
