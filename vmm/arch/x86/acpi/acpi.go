// Package acpi builds the ACPI tables of a VM (ACPI 6.4): RSDP -> XSDT ->
// FADT (hardware-reduced) -> DSDT, and the MADT. Hardware-reduced ACPI has
// no PM1 blocks, SCI or fixed-feature power button; what the guest needs
// instead is in the DSDT:
//
//   - the virtio-mmio devices (LNRO0005, memory window and interrupt), so
//     the kernel command line need not list them;
//   - COM1 (PNP0501);
//   - a power button (PNP0C0C) and a Generic Event Device (ACPI0013) whose
//     interrupt's _EVT notifies the button: the VMM pulses that interrupt
//     to press it;
//   - \_S5, the sleep type the guest writes to the FADT's sleep control
//     register (an I/O port) to power off.
//
// Layouts follow the ACPI specification; tests read the tables back with
// ACPICA's disassembler.
package acpi

import (
	"encoding/binary"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Where the tables go: the BIOS read-only area below 1 MiB, which Linux
// scans for the RSDP on 16-byte boundaries (and which the e820 map reserves).
const (
	RSDPAddr  = 0xe0000
	tablesEnd = 0x100000
)

// The platform's power management, as the FADT and DSDT describe it.
const (
	// SleepControlPort is the FADT's SLEEP_CONTROL_REG: the guest writes
	// SLP_TYP<<2 | SLP_EN (bit 5) to enter a sleep state.
	SleepControlPort = 0x600
	// SleepStatusPort is the FADT's SLEEP_STATUS_REG (WAK_STS, bit 7),
	// which the guest clears before sleeping and polls after.
	SleepStatusPort = 0x601
	// SleepTypeS5 is \_S5's SLP_TYP: soft off.
	SleepTypeS5 = 5
	// PowerButtonGSI is the Generic Event Device's interrupt: ISA IRQ 3
	// (COM2's, which the VM doesn't have), edge-triggered, active high.
	PowerButtonGSI = 3
)

// MaxCPUs is the most vCPUs the MADT describes: one Processor Local APIC
// entry each, with 8-bit APIC IDs, and one ID goes to the IOAPIC.
const MaxCPUs = 254

// Serial is a 16550 UART on an ISA I/O port and IRQ.
type Serial struct {
	Port uint16
	IRQ  uint8
}

// MMIODevice is a virtio-mmio device: its register window and interrupt.
type MMIODevice struct {
	Base, Size uint32
	GSI        uint32
}

// Config says what the tables describe.
type Config struct {
	CPUs       int
	LAPICAddr  uint32
	IOAPICAddr uint32
	Serial     []Serial
	Virtio     []MMIODevice
}

// Table header fields the VMM identifies itself with.
var (
	oemID      = []byte("KUBVMM")
	oemTableID = []byte("KUBEVMM ")
	creatorID  = []byte("KVMM")
)

const (
	headerSize = 36
	rsdpSize   = 36
	fadtSize   = 276 // revision 6
)

// Write builds the tables and writes them to guest memory at RSDPAddr.
func Write(mem *memory.Guest, cfg Config) error {
	b, err := Build(cfg, RSDPAddr)
	if err != nil {
		return err
	}
	if RSDPAddr+len(b) > tablesEnd {
		return fmt.Errorf("ACPI tables of %d bytes do not fit below 1 MiB", len(b))
	}
	if err := mem.WriteAt(b, RSDPAddr); err != nil {
		return fmt.Errorf("write ACPI tables: %w", err)
	}
	return nil
}

// Build lays the tables out from guest-physical address base: the RSDP
// first, then the XSDT, FADT, DSDT and MADT, each 16-byte aligned.
func Build(cfg Config, base uint64) ([]byte, error) {
	if cfg.CPUs < 1 || cfg.CPUs > MaxCPUs {
		return nil, fmt.Errorf("ACPI: %d vCPUs, must be 1..%d", cfg.CPUs, MaxCPUs)
	}
	dsdt := DSDT(cfg)
	madt := MADT(cfg)

	out := make([]byte, rsdpSize)
	place := func(t []byte) uint64 {
		for len(out)%16 != 0 {
			out = append(out, 0)
		}
		at := base + uint64(len(out))
		out = append(out, t...)
		return at
	}
	// the XSDT's entries are known only once the tables after it are
	// placed: reserve it, then fill it in
	xsdtAt := place(make([]byte, headerSize+8*2))
	dsdtAt := place(dsdt)
	fadtAt := place(FADT(dsdtAt))
	madtAt := place(madt)
	xsdt := table("XSDT", 1, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, fadtAt), madtAt))
	copy(out[xsdtAt-base:], xsdt)

	rsdp := out[:rsdpSize]
	copy(rsdp, "RSD PTR ")
	copy(rsdp[9:], oemID)
	rsdp[15] = 2 // ACPI 2.0+: the XSDT's address follows
	binary.LittleEndian.PutUint32(rsdp[20:], rsdpSize)
	binary.LittleEndian.PutUint64(rsdp[24:], xsdtAt)
	rsdp[8] = checksum(rsdp[:20])
	rsdp[32] = checksum(rsdp)
	return out, nil
}

// table prefixes body with an ACPI table header and sets its checksum.
func table(sig string, rev byte, body []byte) []byte {
	t := make([]byte, headerSize, headerSize+len(body))
	copy(t, sig)
	binary.LittleEndian.PutUint32(t[4:], uint32(headerSize+len(body)))
	t[8] = rev
	copy(t[10:], oemID)
	copy(t[16:], oemTableID)
	binary.LittleEndian.PutUint32(t[24:], 1) // OEM revision
	copy(t[28:], creatorID)
	binary.LittleEndian.PutUint32(t[32:], 1) // creator revision
	t = append(t, body...)
	t[9] = checksum(t)
	return t
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

// gas is a Generic Address Structure for an 8-bit I/O port.
func gas(port uint16) []byte {
	const systemIO, byteAccess = 1, 1
	b := []byte{systemIO, 8, 0, byteAccess}
	return binary.LittleEndian.AppendUint64(b, uint64(port))
}

// FADT flags and boot architecture flags.
const (
	fadtWBINVD        = 1 << 0
	fadtPowerButton   = 1 << 4 // no fixed-feature power button (ours is a device)
	fadtSleepButton   = 1 << 5 // no fixed-feature sleep button
	fadtHWReduced     = 1 << 20
	bootVGANotPresent = 1 << 2
)

// FADT is the Fixed ACPI Description Table, revision 6, hardware-reduced:
// the legacy PM blocks, SCI and FACS are all zero; sleep goes through the
// sleep control and status registers.
func FADT(dsdt uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, fadtSize-headerSize)
	at := func(off int) []byte { return b[off-headerSize:] }
	le.PutUint32(at(40), uint32(dsdt))
	le.PutUint16(at(109), bootVGANotPresent)
	le.PutUint32(at(112), fadtWBINVD|fadtPowerButton|fadtSleepButton|fadtHWReduced)
	at(131)[0] = 4 // FADT minor version: ACPI 6.4
	le.PutUint64(at(140), dsdt)
	copy(at(244), gas(SleepControlPort))
	copy(at(256), gas(SleepStatusPort))
	copy(at(268), "KUBEVMM\x00") // hypervisor vendor identity
	return table("FACP", 6, b)
}

// MADT entry types and flags.
const (
	madtLocalAPIC    = 0
	madtIOAPIC       = 1
	madtOverride     = 2
	madtLocalAPICNMI = 4
	madtPCATCompat   = 1 << 0
	madtEnabled      = 1 << 0
	madtEdgeHigh     = 1<<2 | 1 // trigger edge, polarity active high
)

// MADT is the Multiple APIC Description Table: one Processor Local APIC per
// vCPU (APIC IDs 0..n-1), the IOAPIC (ID n, GSIs from 0), and the ISA
// wiring the MP table describes: IRQ n on IOAPIC pin n, the PIT on pin 0
// too (KVM's routing, not PC firmware's pin 2), NMI on every LINT1.
func MADT(cfg Config) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, cfg.LAPICAddr)
	b = le.AppendUint32(b, madtPCATCompat)
	for id := 0; id < cfg.CPUs; id++ {
		b = append(b, madtLocalAPIC, 8, byte(id), byte(id))
		b = le.AppendUint32(b, madtEnabled)
	}
	b = append(b, madtIOAPIC, 12, byte(cfg.CPUs), 0)
	b = le.AppendUint32(b, cfg.IOAPICAddr)
	b = le.AppendUint32(b, 0) // GSI base
	// ISA IRQ 0 -> GSI 0, edge, active high
	b = append(b, madtOverride, 10, 0, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, madtEdgeHigh)
	// NMI on LINT1 of every processor (UID 0xff), polarity and trigger as the bus
	b = append(b, madtLocalAPICNMI, 6, 0xff, 0, 0, 1)
	return table("APIC", 5, b)
}

// DSDT is the Differentiated System Description Table: the devices above,
// as AML.
func DSDT(cfg Config) []byte {
	var devs [][]byte
	for i, s := range cfg.Serial {
		devs = append(devs, device(fmt.Sprintf("COM%d", i+1),
			name("_HID", eisaID("PNP0501")),
			name("_UID", integer(uint64(i+1))),
			name("_CRS", resources(ioPort(s.Port, 8), irqNoFlags(s.IRQ)))))
	}
	devs = append(devs,
		device("PWRB",
			name("_HID", eisaID("PNP0C0C")),
			name("_UID", integer(0))),
		device("GED0",
			name("_HID", str("ACPI0013")),
			name("_UID", integer(0)),
			name("_CRS", resources(interrupt(PowerButtonGSI))),
			// one event only: any interrupt is the power button
			method("_EVT", 1, notify(`\_SB_.PWRB`, 0x80))))
	for i, d := range cfg.Virtio {
		devs = append(devs, device(fmt.Sprintf("VR%02X", i),
			name("_HID", str("LNRO0005")),
			name("_UID", integer(uint64(i))),
			name("_CCA", integer(1)), // cache-coherent DMA
			name("_CRS", resources(memory32Fixed(d.Base, d.Size), interrupt(d.GSI)))))
	}
	aml := cat(
		scope(`\_SB_`, devs...),
		name(`\_S5_`, pkg(integer(SleepTypeS5), integer(SleepTypeS5))),
	)
	return table("DSDT", 2, aml)
}
