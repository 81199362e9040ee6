package machine

import (
	"fmt"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
)

// A migration header and a snapshot's state.json come from outside this
// process: a migration source on the network or a file anyone may have
// edited. Everything in them is checked here, before a machine is built
// from them or they are loaded into one, so that bad input ends in an
// error and never in a panic or a half-built VM.

// maxMemory is the most guest RAM a migrated or restored VM may have: it
// bounds what a migration header can make the target allocate.
const maxMemory = 1 << 40

// KVM refuses more than this many CPUID leaves or MSRs in one call
// (KVM_MAX_CPUID_ENTRIES, MAX_IO_MSRS); a state with more is not ours.
const (
	maxCPUIDEntries = 256
	maxMSRs         = 256
)

// validateConfig checks a saved configuration before a machine is built
// from it.
func validateConfig(sc *SavedConfig) error {
	if sc.CPUs < 1 || sc.CPUs > x86.MaxCPUs {
		return fmt.Errorf("%d vCPUs: must be between 1 and %d", sc.CPUs, x86.MaxCPUs)
	}
	if sc.MemoryBytes > maxMemory {
		return fmt.Errorf("%d MiB of RAM: more than the %d MiB a VM may have", sc.MemoryBytes>>20, maxMemory>>20)
	}
	if _, err := x86.RAMLayout(sc.MemoryBytes); err != nil {
		return err
	}
	n := len(sc.Disks) + len(sc.NICs)
	if sc.RNG {
		n++
	}
	if sc.Vsock != nil {
		n++
	}
	if sc.SCSI {
		n++
	}
	if n > len(virtioGSIs) {
		return fmt.Errorf("%d virtio devices: at most %d", n, len(virtioGSIs))
	}
	for i, d := range sc.Disks {
		if d.Path == "" {
			return fmt.Errorf("disk %d has no path", i)
		}
		if d.Queues < 0 || d.Queues > blk.MaxQueues {
			return fmt.Errorf("disk %d has %d queues: at most %d", i, d.Queues, blk.MaxQueues)
		}
	}
	for i, nic := range sc.NICs {
		if nic.Tap == "" {
			return fmt.Errorf("NIC %d has no tap", i)
		}
		if nic.Queues < 0 || nic.Queues > vnet.MaxPairs {
			return fmt.Errorf("NIC %d has %d queues: at most %d", i, nic.Queues, vnet.MaxPairs)
		}
	}
	return nil
}

// validateState checks that s has the shape this VMM writes: a known
// version, a valid configuration, one complete entry per vCPU with every
// binary KVM structure of this kernel ABI's size, and an entry per virtio
// device. Device states check their own contents and versions when
// restored.
func validateState(s *State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("VM state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	if err := validateConfig(&s.Config); err != nil {
		return fmt.Errorf("VM configuration: %w", err)
	}
	if s.VM == nil {
		return fmt.Errorf("state has no irqchip/PIT/clock section")
	}
	for _, f := range []struct {
		name string
		b    []byte
		want uintptr
	}{
		{"PIC master", s.VM.PICMaster, unsafe.Sizeof(kvm.IRQChip{})},
		{"PIC slave", s.VM.PICSlave, unsafe.Sizeof(kvm.IRQChip{})},
		{"IOAPIC", s.VM.IOAPIC, unsafe.Sizeof(kvm.IRQChip{})},
		{"PIT", s.VM.PIT, unsafe.Sizeof(kvm.PITState2{})},
	} {
		if uintptr(len(f.b)) != f.want {
			return fmt.Errorf("%s state is %d bytes, this kernel ABI needs %d", f.name, len(f.b), f.want)
		}
	}
	if len(s.VCPUs) != s.Config.CPUs {
		return fmt.Errorf("state has %d vCPUs, its configuration %d", len(s.VCPUs), s.Config.CPUs)
	}
	for i, v := range s.VCPUs {
		if err := validateVCPU(i, v); err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	for i, v := range s.Virtio {
		if v.Name == "" || len(v.Device) == 0 {
			return fmt.Errorf("virtio device %d: no name or no device state", i)
		}
	}
	return nil
}

func validateVCPU(i int, v *VCPUState) error {
	if v == nil {
		return fmt.Errorf("no state")
	}
	if v.ID != i {
		return fmt.Errorf("state is for vCPU %d", v.ID)
	}
	for _, f := range []struct {
		name string
		b    []byte
		want uintptr
	}{
		{"regs", v.Regs, unsafe.Sizeof(kvm.Regs{})},
		{"sregs", v.Sregs, unsafe.Sizeof(kvm.Sregs{})},
		{"xsave", v.XSave, unsafe.Sizeof(kvm.XSave{})},
		{"xcrs", v.XCRs, unsafe.Sizeof(kvm.XCRs{})},
		{"lapic", v.LAPIC, unsafe.Sizeof(kvm.LAPICState{})},
		{"events", v.Events, unsafe.Sizeof(kvm.VCPUEvents{})},
		{"debugregs", v.DebugRegs, unsafe.Sizeof(kvm.DebugRegs{})},
	} {
		if uintptr(len(f.b)) != f.want {
			return fmt.Errorf("%s state is %d bytes, this kernel ABI needs %d", f.name, len(f.b), f.want)
		}
	}
	if len(v.CPUID) == 0 || len(v.CPUID) > maxCPUIDEntries {
		return fmt.Errorf("%d CPUID leaves: want 1 to %d", len(v.CPUID), maxCPUIDEntries)
	}
	if len(v.MSRs) > maxMSRs {
		return fmt.Errorf("%d MSRs: at most %d", len(v.MSRs), maxMSRs)
	}
	return nil
}
