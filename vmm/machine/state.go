package machine

import (
	"fmt"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// VCPUState is everything KVM keeps for one vCPU. Binary KVM structs are
// kept as their exact kernel ABI bytes (see vmm/kvm), so a state written by
// one VMM build restores in another as long as the kernel ABI is the same.
type VCPUState struct {
	ID        int              `json:"id"`
	Regs      []byte           `json:"regs"`
	Sregs     []byte           `json:"sregs"`
	XSave     []byte           `json:"xsave"`
	XCRs      []byte           `json:"xcrs"`
	LAPIC     []byte           `json:"lapic"`
	Events    []byte           `json:"events"`
	MPState   uint32           `json:"mp_state"`
	DebugRegs []byte           `json:"debug_regs"`
	MSRs      []kvm.MSREntry   `json:"msrs"`
	CPUID     []kvm.CPUIDEntry `json:"cpuid"`
	TSCKHz    uint32           `json:"tsc_khz,omitempty"`
}

// VMState is the in-kernel irqchip, PIT and kvmclock.
type VMState struct {
	PICMaster []byte `json:"pic_master"`
	PICSlave  []byte `json:"pic_slave"`
	IOAPIC    []byte `json:"ioapic"`
	PIT       []byte `json:"pit"`
	Clock     uint64 `json:"clock_ns"`
}

func raw[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

func fromRaw[T any](b []byte, name string) (*T, error) {
	var v T
	if len(b) != int(unsafe.Sizeof(v)) {
		return nil, fmt.Errorf("%s state is %d bytes, this kernel ABI needs %d", name, len(b), unsafe.Sizeof(v))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), len(b)), b)
	return &v, nil
}

// savedMSRs lists the MSRs this host's KVM lets us read back, probed once:
// KVM_GET_MSRS stops at the first MSR it refuses, so each is tried alone.
func (m *Machine) savedMSRs(c *kvm.VCPU) ([]uint32, error) {
	if m.msrList != nil {
		return m.msrList, nil
	}
	all, err := m.sys.MSRIndexList()
	if err != nil {
		return nil, err
	}
	var ok []uint32
	for _, idx := range all {
		if _, err := c.GetMSR(idx); err == nil {
			ok = append(ok, idx)
		}
	}
	m.msrList = ok
	return ok, nil
}

// saveVCPU captures one vCPU. Its thread must be parked.
func (m *Machine) saveVCPU(v *vcpu) (*VCPUState, error) {
	c := v.c
	s := &VCPUState{ID: v.id}
	// MP state first: reading it flushes pending APIC events into state
	// the later reads see.
	mp, err := c.GetMPState()
	if err != nil {
		return nil, err
	}
	s.MPState = mp.State
	regs, err := c.GetRegs()
	if err != nil {
		return nil, err
	}
	s.Regs = raw(regs)
	sregs, err := c.GetSregs()
	if err != nil {
		return nil, err
	}
	s.Sregs = raw(sregs)
	xs, err := c.GetXSave()
	if err != nil {
		return nil, err
	}
	s.XSave = raw(xs)
	xcrs, err := c.GetXCRs()
	if err != nil {
		return nil, err
	}
	s.XCRs = raw(xcrs)
	dr, err := c.GetDebugRegs()
	if err != nil {
		return nil, err
	}
	s.DebugRegs = raw(dr)
	lapic, err := c.GetLAPIC()
	if err != nil {
		return nil, err
	}
	s.LAPIC = raw(lapic)
	if khz, err := c.GetTSCKHz(); err == nil {
		s.TSCKHz = khz
	}
	list, err := m.savedMSRs(c)
	if err != nil {
		return nil, err
	}
	msrs := make([]kvm.MSREntry, len(list))
	for i, idx := range list {
		msrs[i].Index = idx
	}
	n, err := c.GetMSRs(msrs)
	if err != nil {
		return nil, err
	}
	if n != len(msrs) {
		return nil, fmt.Errorf("vCPU %d: read %d of %d MSRs (MSR %#x refused)", v.id, n, len(msrs), msrs[n].Index)
	}
	s.MSRs = msrs
	ev, err := c.GetVCPUEvents()
	if err != nil {
		return nil, err
	}
	s.Events = raw(ev)
	if s.CPUID, err = c.GetCPUID2(); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreVCPU loads a saved state into a fresh vCPU, in the order KVM
// needs: CPUID before anything that depends on features, MSRs after the
// LAPIC (TSC deadline), events last (they reference the restored state).
func restoreVCPU(c *kvm.VCPU, s *VCPUState) error {
	if err := c.SetCPUID2(s.CPUID); err != nil {
		return err
	}
	if s.TSCKHz != 0 {
		if cur, err := c.GetTSCKHz(); err == nil && cur != s.TSCKHz {
			if err := c.SetTSCKHz(s.TSCKHz); err != nil {
				return fmt.Errorf("vCPU %d: TSC runs at %d kHz here, the guest expects %d kHz: %w", s.ID, cur, s.TSCKHz, err)
			}
		}
	}
	if err := c.SetMPState(kvm.MPState{State: s.MPState}); err != nil {
		return err
	}
	regs, err := fromRaw[kvm.Regs](s.Regs, "regs")
	if err != nil {
		return err
	}
	if err := c.SetRegs(regs); err != nil {
		return err
	}
	sregs, err := fromRaw[kvm.Sregs](s.Sregs, "sregs")
	if err != nil {
		return err
	}
	if err := c.SetSregs(sregs); err != nil {
		return err
	}
	xs, err := fromRaw[kvm.XSave](s.XSave, "xsave")
	if err != nil {
		return err
	}
	if err := c.SetXSave(xs); err != nil {
		return err
	}
	xcrs, err := fromRaw[kvm.XCRs](s.XCRs, "xcrs")
	if err != nil {
		return err
	}
	if err := c.SetXCRs(xcrs); err != nil {
		return err
	}
	dr, err := fromRaw[kvm.DebugRegs](s.DebugRegs, "debugregs")
	if err != nil {
		return err
	}
	if err := c.SetDebugRegs(dr); err != nil {
		return err
	}
	lapic, err := fromRaw[kvm.LAPICState](s.LAPIC, "lapic")
	if err != nil {
		return err
	}
	if err := c.SetLAPIC(lapic); err != nil {
		return err
	}
	n, err := c.SetMSRs(s.MSRs)
	if err != nil {
		return err
	}
	if n != len(s.MSRs) {
		return fmt.Errorf("vCPU %d: KVM refused MSR %#x", s.ID, s.MSRs[n].Index)
	}
	ev, err := fromRaw[kvm.VCPUEvents](s.Events, "vcpu events")
	if err != nil {
		return err
	}
	ev.Flags = kvm.VCPUEventValidNMIPending | kvm.VCPUEventValidSIPIVector | kvm.VCPUEventValidShadow
	return c.SetVCPUEvents(ev)
}

func (m *Machine) saveVM() (*VMState, error) {
	s := &VMState{}
	for _, chip := range []struct {
		id  uint32
		dst *[]byte
	}{{kvm.IRQChipPICMaster, &s.PICMaster}, {kvm.IRQChipPICSlave, &s.PICSlave}, {kvm.IRQChipIOAPIC, &s.IOAPIC}} {
		c, err := m.vm.GetIRQChip(chip.id)
		if err != nil {
			return nil, err
		}
		*chip.dst = raw(c)
	}
	pit, err := m.vm.GetPIT2()
	if err != nil {
		return nil, err
	}
	s.PIT = raw(pit)
	clk, err := m.vm.GetClock()
	if err != nil {
		return nil, err
	}
	s.Clock = clk.Clock
	return s, nil
}

func (m *Machine) restoreVM(s *VMState) error {
	for _, b := range [][]byte{s.PICMaster, s.PICSlave, s.IOAPIC} {
		c, err := fromRaw[kvm.IRQChip](b, "irqchip")
		if err != nil {
			return err
		}
		if err := m.vm.SetIRQChip(c); err != nil {
			return err
		}
	}
	pit, err := fromRaw[kvm.PITState2](s.PIT, "pit")
	if err != nil {
		return err
	}
	if err := m.vm.SetPIT2(pit); err != nil {
		return err
	}
	// kvmclock continues from where the guest left it: no jump forward by
	// the time the VM spent saved or in transit.
	return m.vm.SetClock(&kvm.ClockData{Clock: s.Clock})
}
