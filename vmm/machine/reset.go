package machine

import (
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/devices/i8042"
	"github.com/kubevmm/kubevmm/vmm/devices/rtc"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
)

// powerOn is the machine as built, before the guest's first instruction:
// what a reset returns KVM's objects and the legacy devices to. KVM has no
// "reset this vCPU" call, so the state of the freshly created vCPUs
// (MSRs, LAPIC, FPU, events) is captured and loaded back, as QEMU's reset
// puts its own power-on values.
type powerOn struct {
	vm     *VMState
	vcpus  []*VCPUState
	serial serial.State
	kbd    i8042.State
	rtc    rtc.State
}

// capturePowerOn records the power-on state, for Reset. Called by build,
// after the vCPUs are set up and before a restore loads a saved state.
func (m *Machine) capturePowerOn() error {
	p := &powerOn{serial: m.Serial.Save(), kbd: m.kbd.Save(), rtc: m.clock.Save()}
	var err error
	if p.vm, err = m.saveVM(); err != nil {
		return fmt.Errorf("power-on state: %w", err)
	}
	for _, v := range m.vcpus {
		s, err := m.saveVCPU(v)
		if err != nil {
			return fmt.Errorf("power-on state of vCPU %d: %w", v.id, err)
		}
		p.vcpus = append(p.vcpus, s)
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
	for _, d := range m.virtio {
		d.Transport.Reset()
	}
	if err := m.Mem.Clear(); err != nil {
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
	for i, v := range m.vcpus {
		// KVM refuses to change a vCPU's CPUID once it has run: the guest
		// keeps the CPUID it has (a restored guest's is the saved one),
		// and its TSC frequency.
		s := *m.powerOn.vcpus[i]
		cpuid, err := v.c.GetCPUID2()
		if err != nil {
			return fmt.Errorf("reset: vCPU %d: %w", i, err)
		}
		s.CPUID, s.TSCKHz = cpuid, 0
		if err := restoreVCPU(v.c, &s); err != nil {
			return fmt.Errorf("reset: vCPU %d: %w", i, err)
		}
	}
	if err := x86.SetupLongMode(m.vcpus[0].c, m.Loaded.Entry); err != nil {
		return fmt.Errorf("reset: vCPU 0: %w", err)
	}
	if err := m.Serial.Restore(m.powerOn.serial); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := m.kbd.Restore(m.powerOn.kbd); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := m.clock.Restore(m.powerOn.rtc); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	m.rebootOnPowerOff.Store(false)
	m.resetAsked.Store(false)

	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	for _, v := range m.vcpus {
		v.mu.Lock()
		v.req, v.paused, v.exited, v.started, v.tid = reqNone, false, false, false, 0
		v.mu.Unlock()
	}
	m.ending = false
	m.Log().Info("VM reset: the guest boots again", "entry", hex(m.Loaded.Entry))
	return nil
}
