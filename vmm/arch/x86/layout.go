// Package x86 holds what is specific to booting an x86-64 guest: the guest
// physical memory map, the e820 table, CPUID policy, MP tables and the
// initial vCPU state for the Linux 64-bit boot protocol.
package x86

import (
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Guest-physical memory map. Low memory holds the boot structures the VMM
// writes; RAM above 3 GiB is moved past the 32-bit MMIO hole (IOAPIC, LAPIC,
// PCI BARs).
const (
	GDTAddr         = 0x500
	IDTAddr         = 0x530 // after the 5-entry (40-byte) GDT, 16-byte aligned
	BootParamsAddr  = 0x7000
	BootStackTop    = 0x8ff0
	PML4Addr        = 0x9000
	PDPTAddr        = 0xa000
	PDAddr          = 0xb000 // four pages: identity map of the first 4 GiB with 2 MiB pages
	CmdlineAddr     = 0x20000
	CmdlineMax      = 0x10000 // including the terminating NUL
	EBDAStart       = 0x9fc00 // MP floating pointer and table live here
	HighMemStart    = 0x100000
	MMIOHoleStart   = 0xc0000000
	MMIOHoleEnd     = 0x100000000
	IOAPICAddr      = 0xfec00000
	LAPICAddr       = 0xfee00000
	TSSAddr         = 0xfffbd000 // three pages used by Intel VT for real mode
	IdentityMapAddr = 0xfffbc000
)

// MinMemory is the least guest RAM the boot layout works with: low memory
// for the boot structures plus room for a small kernel.
const MinMemory = 32 << 20

// RAMLayout splits size bytes of guest RAM around the MMIO hole.
func RAMLayout(size uint64) ([]memory.Layout, error) {
	if size < MinMemory {
		return nil, fmt.Errorf("guest memory %d MiB is too small: at least %d MiB", size>>20, MinMemory>>20)
	}
	if size%memory.PageSize != 0 {
		return nil, fmt.Errorf("guest memory %d bytes is not a multiple of %d", size, memory.PageSize)
	}
	if size <= MMIOHoleStart {
		return []memory.Layout{{GPA: 0, Size: size}}, nil
	}
	return []memory.Layout{
		{GPA: 0, Size: MMIOHoleStart},
		{GPA: MMIOHoleEnd, Size: size - MMIOHoleStart},
	}, nil
}

// E820 memory types.
const (
	E820RAM      = 1
	E820Reserved = 2
)

// E820Entry is one BIOS memory map entry.
type E820Entry struct {
	Addr, Size uint64
	Type       uint32
}

// E820 is the memory map the guest is told about: RAM minus the legacy
// EBDA/VGA/BIOS area below 1 MiB.
func E820(regions []memory.Layout) []E820Entry {
	var out []E820Entry
	for _, r := range regions {
		if r.GPA == 0 {
			out = append(out,
				E820Entry{0, EBDAStart, E820RAM},
				E820Entry{EBDAStart, HighMemStart - EBDAStart, E820Reserved})
			if r.Size > HighMemStart {
				out = append(out, E820Entry{HighMemStart, r.Size - HighMemStart, E820RAM})
			}
			continue
		}
		out = append(out, E820Entry{r.GPA, r.Size, E820RAM})
	}
	return out
}
