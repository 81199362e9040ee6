package machine

import (
	"errors"
	"fmt"
)

// powerOn is the machine as built, before the guest's first instruction:
// what a reset returns KVM's objects and the legacy devices to. KVM has no
// "reset this vCPU" call, so the state of the freshly created vCPUs
// (MSRs, LAPIC, FPU, events) is captured and loaded back, as QEMU's reset
// puts its own power-on values.
type powerOn struct {
	vm      *VMState
	vcpus   []*VCPUState
	devices DeviceState // the legacy devices'
}

// capturePowerOn records the power-on state, for Reset. Called by build,
// after the vCPUs are set up and before a restore loads a saved state.
func (m *Machine) capturePowerOn() error {
	p := &powerOn{devices: m.devices.legacyState()}
	var err error
	if p.vm, err = m.saveVM(); err != nil {
		return fmt.Errorf("power-on state: %w", err)
	}
	if p.vcpus, err = m.cpus.Save(); err != nil {
		return fmt.Errorf("power-on state of %w", err)
	}
	m.powerOn = p
	return nil
}

// CanReset says whether a reset can restart the guest in this process:
// the configuration says how to get the kernel again (Config.Reload).
func (m *Machine) CanReset() bool { return m.powerOn != nil }

// WillReset says whether Run's exit e is one the guest boots again from
// (after Reset): a reset asked for (RequestReset, SoftReboot), or the
// guest's own reboot with Config.RebootResets. Other resets end the VM.
func (m *Machine) WillReset(e Exit) bool {
	return e.Reason == ExitReset && m.CanReset() && (m.resetAsked.Load() || m.cfg.RebootResets)
}

// RequestReset resets the VM as a press of its reset button would: the
// vCPUs stop and Run returns ExitReset, for the caller to Reset and Run
// again.
func (m *Machine) RequestReset() {
	m.resetAsked.Store(true)
	m.stop(Exit{Reason: ExitReset})
}

// SoftReboot presses the power button and turns the guest's next poweroff
// into a reset (Run returns ExitReset rather than ExitShutdown), as
// libvirt's reboot of a guest without an agent does.
func (m *Machine) SoftReboot() error {
	m.rebootOnPowerOff.Store(true)
	if err := m.PowerButton(); err != nil {
		m.rebootOnPowerOff.Store(false)
		return err
	}
	return nil
}

// Reset puts a machine whose Run returned ExitReset back at power-on, for
// Run to boot the guest again: every virtio device reset (its backend,
// disk image or tap, kept open), RAM cleared, the kernel and initrd read
// again (Config.Reload) and loaded with the same command line and boot
// tables, the irqchip, PIT, vCPUs and legacy devices at their power-on
// state. RAM is cleared rather than kept: the next boot then finds what
// the first did, nothing of the previous guest survives into it, and the
// host gets the pages back. The kvmclock keeps counting.
func (m *Machine) Reset() error {
	if m.powerOn == nil {
		return errors.New("reset: this VM cannot reset in place (no way to reload its kernel)")
	}
	kernel, initrd, err := m.cfg.Reload()
	if err != nil {
		return fmt.Errorf("reset: reloading the kernel: %w", err)
	}
	m.devices.resetVirtio()
	if err := m.memory.clear(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	m.cfg.Kernel, m.cfg.Initrd = kernel, initrd
	err = m.loadGuest()
	m.cfg.Kernel, m.cfg.Initrd = nil, nil // as after the first load
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	vs := *m.powerOn.vm
	clk, err := m.vm.GetClock()
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	vs.Clock = clk.Clock
	if err := m.restoreVM(&vs); err != nil {
		return fmt.Errorf("reset: irqchip and PIT: %w", err)
	}
	if err := m.cpus.reset(m.powerOn.vcpus, m.Loaded.Entry); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := m.devices.restoreLegacy(m.powerOn.devices); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	m.rebootOnPowerOff.Store(false)
	m.resetAsked.Store(false)

	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	m.cpus.rearm()
	m.ending = false
	m.Log().Info("VM reset: the guest boots again", "entry", hex(m.Loaded.Entry))
	return nil
}
