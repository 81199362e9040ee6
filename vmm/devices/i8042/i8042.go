// Package i8042 emulates the PC keyboard controller just far enough for a
// guest to reset the machine through it (command 0xfe on port 0x64), which
// is how Linux reboots with reboot=k. The VMM treats that reset as the VM's
// end, as Firecracker does.
package i8042

import (
	"fmt"
	"sync"
)

// Ports, relative to the device's base (0x60): data at 0, command/status at 4.
const (
	Base       = 0x60
	Size       = 5
	offData    = 0
	offCommand = 4

	cmdReadCtr   = 0x20
	cmdWriteCtr  = 0x60
	cmdSelfTest  = 0xaa
	cmdDisableKb = 0xad
	cmdEnableKb  = 0xae
	cmdReset     = 0xfe

	statusOBF     = 0x01 // output buffer full: data for the guest at port 0x60
	statusSysFlag = 0x04
	statusCmdData = 0x08 // last write was a command
	selfTestOK    = 0x55
)

// Device is the controller. OnReset is called (outside the lock) when the
// guest pulses the reset line.
type Device struct {
	mu       sync.Mutex
	ctr      byte // controller configuration byte
	status   byte
	out      byte
	pending  byte // command waiting for its data byte
	OnReset  func()
	ResetCnt int
}

// New returns a controller with keyboard interrupt and translation enabled.
func New(onReset func()) *Device {
	return &Device{ctr: 0x41, status: statusSysFlag, OnReset: onReset}
}

// Read implements bus.Device.
func (d *Device) Read(off uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(data)
	if len(data) == 0 { // as Write: never index an empty access
		return
	}
	switch off {
	case offData:
		data[0] = d.out
		d.status &^= statusOBF
	case offCommand:
		data[0] = d.status
	}
}

// Write implements bus.Device.
func (d *Device) Write(off uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	reset := false
	d.mu.Lock()
	v := data[0]
	switch off {
	case offData:
		d.status &^= statusCmdData
		if d.pending == cmdWriteCtr {
			d.ctr = v
		}
		d.pending = 0
	case offCommand:
		d.status |= statusCmdData
		switch v {
		case cmdReadCtr:
			d.put(d.ctr)
		case cmdWriteCtr:
			d.pending = v
		case cmdSelfTest:
			d.put(selfTestOK)
		case cmdDisableKb:
			d.ctr |= 0x10
		case cmdEnableKb:
			d.ctr &^= 0x10
		case cmdReset:
			d.ResetCnt++
			reset = true
		}
	}
	d.mu.Unlock()
	if reset && d.OnReset != nil {
		d.OnReset()
	}
}

func (d *Device) put(b byte) {
	d.out = b
	d.status |= statusOBF
}

// StateVersion is the version of State this code writes and reads.
const StateVersion = 1

// State is the controller's state for snapshots.
type State struct {
	Version                   int
	Ctr, Status, Out, Pending byte
}

// Save returns the controller's state.
func (d *Device) Save() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return State{Version: StateVersion, Ctr: d.ctr, Status: d.status, Out: d.out, Pending: d.pending}
}

// Restore loads a saved state.
func (d *Device) Restore(s State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("i8042 state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctr, d.status, d.out, d.pending = s.Ctr, s.Status, s.Out, s.Pending
	return nil
}
