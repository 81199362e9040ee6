package x86

import (
	"encoding/binary"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// MP table (Intel MultiProcessor Specification 1.4): how a guest kernel
// built without ACPI learns its processors, its IOAPIC and how ISA
// interrupts are wired. It is always written, beside the ACPI tables
// (package acpi), so that such kernels still boot.
const (
	mpFloatingSize = 16
	mpHeaderSize   = 44
	mpCPUSize      = 20
	mpEntrySize    = 8 // bus, IOAPIC, I/O interrupt, local interrupt entries

	mpEntryCPU       = 0
	mpEntryBus       = 1
	mpEntryIOAPIC    = 2
	mpEntryIOIntr    = 3
	mpEntryLocalIntr = 4

	mpIntINT    = 0
	mpIntNMI    = 1
	mpIntExtINT = 3

	mpSpecRev     = 4
	lapicVersion  = 0x14
	ioapicVersion = 0x11
	isaBusID      = 0
	// IRQs 0-23 go to IOAPIC pins 0-23: KVM's default GSI routing is the
	// identity (unlike PC firmware, which moves the PIT to pin 2). Pins
	// 16-23 are described as ISA interrupts too, as Firecracker does, so
	// that virtio-mmio devices announced on the command line can use them.
	ioapicPins = 24
)

// MaxCPUs is the most vCPUs an MP table can describe: APIC IDs are 8 bits
// and one ID goes to the IOAPIC.
const MaxCPUs = 254

// WriteMPTable writes the MP floating pointer and configuration table for
// ncpus processors at EBDAStart and returns its size.
func WriteMPTable(mem *memory.Guest, ncpus int) (int, error) {
	if ncpus < 1 || ncpus > MaxCPUs {
		return 0, fmt.Errorf("MP table: %d vCPUs, must be 1..%d", ncpus, MaxCPUs)
	}
	b := BuildMPTable(EBDAStart, ncpus)
	if EBDAStart+uint64(len(b)) > HighMemStart {
		return 0, fmt.Errorf("MP table of %d bytes does not fit below 1 MiB", len(b))
	}
	if err := mem.WriteAt(b, EBDAStart); err != nil {
		return 0, fmt.Errorf("write MP table: %w", err)
	}
	return len(b), nil
}

// BuildMPTable returns the floating pointer followed by the configuration
// table, laid out for guest-physical address base.
func BuildMPTable(base uint64, ncpus int) []byte {
	ioapicID := byte(ncpus)
	le := binary.LittleEndian
	var cfg []byte
	entries := 0
	add := func(e []byte) { cfg = append(cfg, e...); entries++ }

	for id := 0; id < ncpus; id++ {
		e := make([]byte, mpCPUSize)
		e[0] = mpEntryCPU
		e[1] = byte(id)
		e[2] = lapicVersion
		e[3] = 0x01 // enabled
		if id == 0 {
			e[3] |= 0x02 // bootstrap processor
		}
		le.PutUint32(e[4:], 0x600) // CPU signature: family 6
		le.PutUint32(e[8:], 0x201) // feature flags: FPU, APIC
		add(e)
	}
	add([]byte{mpEntryBus, isaBusID, 'I', 'S', 'A', ' ', ' ', ' '})
	ioapic := []byte{mpEntryIOAPIC, ioapicID, ioapicVersion, 0x01, 0, 0, 0, 0}
	le.PutUint32(ioapic[4:], IOAPICAddr)
	add(ioapic)
	for irq := 0; irq < ioapicPins; irq++ {
		// flags 0: polarity and trigger conform to the bus (ISA: edge, active high)
		add([]byte{mpEntryIOIntr, mpIntINT, 0, 0, isaBusID, byte(irq), ioapicID, byte(irq)})
	}
	add([]byte{mpEntryLocalIntr, mpIntExtINT, 0, 0, isaBusID, 0, 0xff, 0})
	add([]byte{mpEntryLocalIntr, mpIntNMI, 0, 0, isaBusID, 0, 0xff, 1})

	hdr := make([]byte, mpHeaderSize)
	copy(hdr[0:], "PCMP")
	le.PutUint16(hdr[4:], uint16(mpHeaderSize+len(cfg)))
	hdr[6] = mpSpecRev
	copy(hdr[8:], "KUBEVMM ")
	copy(hdr[16:], "VIRTUAL-CPU ")
	le.PutUint16(hdr[34:], uint16(entries))
	le.PutUint32(hdr[36:], LAPICAddr)
	table := hdr
	table = append(table, cfg...)
	table[7] = checksum(table)

	fp := make([]byte, mpFloatingSize)
	copy(fp[0:], "_MP_")
	le.PutUint32(fp[4:], uint32(base+mpFloatingSize))
	fp[8] = 1 // length in 16-byte units
	fp[9] = mpSpecRev
	fp[10] = checksum(fp)
	return append(fp, table...)
}

// checksum returns the byte that makes b sum to zero (b's checksum byte
// must be zero when called).
func checksum(b []byte) byte {
	var s byte
	for _, c := range b {
		s += c
	}
	return -s
}
