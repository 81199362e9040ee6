package x86

import (
	"os"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// CPUID feature bits the policy touches.
const (
	leaf1ECXFMA        = 1 << 12
	leaf1ECXCX16       = 1 << 13
	leaf1ECXPCID       = 1 << 17
	leaf1ECXPOPCNT     = 1 << 23
	leaf1ECXXSAVE      = 1 << 26
	leaf1ECXAVX        = 1 << 28
	leaf1ECXRDRAND     = 1 << 30
	leaf1ECXHypervisor = 1 << 31
	leaf1EDXHTT        = 1 << 28
	leaf7EBXAVX512F    = 1 << 16

	// KVM paravirtual features (leaf 0x40000001 EAX) that make hypercalls.
	kvmFeaturePVUnhalt   = 1 << 7
	kvmFeaturePVSendIPI  = 1 << 11
	kvmFeaturePVSchedYld = 1 << 13
	kvmFeatureHypercalls = kvmFeaturePVUnhalt | kvmFeaturePVSendIPI | kvmFeaturePVSchedYld

	// XSAVE state components guest user code can use natively on a host
	// whose XCR0 is 0xe7: x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM.
	xsaveAssistMask = 0xe7
)

// EmulatedKernelMode reports whether this host's KVM runs guest kernel
// mode in its instruction emulator (the kvm_pvm module, nested without
// VT-x/SVM). Such a host needs the instruction assists, a CPUID policy that
// keeps guests off hypercalls, and a few guest kernel arguments.
func EmulatedKernelMode() bool {
	_, err := os.Stat("/sys/module/kvm_pvm")
	return err == nil
}

// CPUIDPolicy shapes the CPUID table of each vCPU.
type CPUIDPolicy struct {
	NumCPUs int
	// EmulatedKernelMode applies the nested-host profile (see
	// EmulatedKernelMode and README "Hosts without hardware virtualization").
	EmulatedKernelMode bool
}

// ForVCPU returns the CPUID table of vCPU id, derived from what KVM supports.
func (p CPUIDPolicy) ForVCPU(supported []kvm.CPUIDEntry, id int) []kvm.CPUIDEntry {
	out := make([]kvm.CPUIDEntry, 0, len(supported))
	for _, e := range supported {
		switch e.Function {
		case 1:
			e.EBX = uint32(id)<<24 | uint32(p.NumCPUs)<<16 | 8<<8 | e.EBX&0xff // APIC ID, logical CPUs, CLFLUSH 64 B
			e.ECX |= leaf1ECXHypervisor
			if p.NumCPUs > 1 {
				e.EDX |= leaf1EDXHTT
			}
		case 4:
			// one core per vCPU, one package; no cache is shared between threads
			e.EAX = e.EAX&0x3fff | uint32(p.NumCPUs-1)<<26
		case 0xa:
			// no PMU: guests would program counters the VMM doesn't save
			e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
		case 0xb:
			e = p.topologyLeaf(e, id)
		}
		if p.EmulatedKernelMode {
			var keep bool
			if e, keep = nestedProfile(e); !keep {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

func (p CPUIDPolicy) topologyLeaf(e kvm.CPUIDEntry, id int) kvm.CPUIDEntry {
	shift := uint32(0)
	for 1<<shift < p.NumCPUs {
		shift++
	}
	switch e.Index {
	case 0: // SMT level: one thread per core
		e.EAX, e.EBX, e.ECX = 0, 1, 1<<8 // level type SMT (1) in ECX[15:8], level number 0
	case 1: // core level: all vCPUs in one package
		e.EAX, e.EBX, e.ECX = shift, uint32(p.NumCPUs), 2<<8|1
	default:
		e.EAX, e.EBX, e.ECX = 0, 0, e.Index
	}
	e.EDX = uint32(id)
	return e
}

// nestedProfile is the CPUID profile for hosts that emulate guest kernel
// mode. Measured there (README, "Hosts without hardware virtualization"):
//   - hypercalls hang inside the host's KVM, so paravirtual features that
//     make them (PV unhalt/spinlock kick, PV IPI, PV sched-yield) are hidden;
//   - guest user mode runs with the host's XSAVE state (XCR0 0xe7), so the
//     guest kernel must context-switch all of it: XSAVE/AVX/AVX-512F stay
//     visible, leaf 0xD is limited to those components, and the optimized
//     forms (XSAVEOPT/XSAVEC/XSAVES) are hidden so the kernel uses the
//     XSAVE/XRSTOR the VMM completes;
//   - instructions the emulator can't run are hidden where the kernel looks
//     at CPUID for them. The host honours this table only in part; the
//     guest's clearcpuid= argument does the rest (HostKernelArgs).
func nestedProfile(e kvm.CPUIDEntry) (kvm.CPUIDEntry, bool) {
	switch {
	case e.Function == 1:
		e.ECX &^= leaf1ECXFMA | leaf1ECXCX16 | leaf1ECXPCID | leaf1ECXPOPCNT | leaf1ECXRDRAND
	case e.Function == 7 && e.Index == 0:
		e.EBX &^= 1<<0 | 1<<5 | 1<<7 | 1<<9 | 1<<10 | 1<<17 | 1<<18 | 1<<20 | 1<<28 | 1<<30 | 1<<31
		e.ECX &^= 1<<2 | 1<<22 // UMIP, RDPID
		e.EDX &^= 1 << 4       // FSRM
	case e.Function == 0xd && e.Index == 0:
		e.EAX &= xsaveAssistMask
		e.EDX = 0
	case e.Function == 0xd && e.Index == 1:
		e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
	case e.Function == 0xd && e.Index >= 2:
		if e.Index >= 32 || xsaveAssistMask&(1<<e.Index) == 0 {
			return e, false
		}
	case e.Function == 0x40000001:
		e.EAX &^= kvmFeatureHypercalls
	}
	return e, true
}

// HostKernelArgs are guest kernel arguments this host needs, appended to
// the user's command line. Empty on hosts with hardware virtualization.
func HostKernelArgs(emulatedKernelMode bool) string {
	if !emulatedKernelMode {
		return ""
	}
	// Hide from the guest kernel what the host emulator can't run or runs
	// slowly (string ops cost ~0.7 µs per iteration there), and skip
	// mitigations that only cost emulated time. rodata=off skips making
	// the kernel's text and read-only data read-only and freeing the gaps
	// between them, page-table work that took ~3.5 s of a 34 s boot of the
	// test guest here (10%): hosts like this are development and CI
	// machines, never where a guest's kernel needs that protection.
	return "clearcpuid=cx16,smap,smep,pcid,invpcid,umip,erms,fsrm,fsgsbase,popcnt nopti mitigations=off random.trust_cpu=on rodata=off"
}

// XSaveLayout is where each XSAVE state component lives in the standard
// (non-compacted) format, from CPUID leaf 0xD.
type XSaveLayout struct {
	Offset, Size [64]uint32
	Align64      [64]bool // component is 64-byte aligned in the compacted format
	Mask         uint64   // components the guest may enable in XCR0
}

// XSaveLayoutOf extracts the XSAVE layout from a vCPU's CPUID table.
func XSaveLayoutOf(entries []kvm.CPUIDEntry) XSaveLayout {
	var l XSaveLayout
	for _, e := range entries {
		if e.Function != 0xd {
			continue
		}
		switch {
		case e.Index == 0:
			l.Mask = uint64(e.EAX) | uint64(e.EDX)<<32
		case e.Index >= 2 && e.Index < 64:
			l.Size[e.Index] = e.EAX
			l.Offset[e.Index] = e.EBX
			l.Align64[e.Index] = e.ECX&2 != 0
		}
	}
	return l
}
