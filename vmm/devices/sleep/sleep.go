// Package sleep emulates the sleep control and status registers of a
// hardware-reduced ACPI platform (ACPI 6.4, 4.8.3.7): two byte-wide I/O
// ports the FADT names. A guest powers off by writing its \_S5 sleep type
// with SLP_EN to the control register; the VMM treats that as the VM's end.
// Other sleep states are not offered (the DSDT has only \_S5) and their
// writes are ignored.
package sleep

// Registers, relative to the device's base: control at 0, status at 1.
const (
	Size       = 2
	offControl = 0
	offStatus  = 1

	slpEnable   = 1 << 5
	slpTypShift = 2
	slpTypMask  = 7 << slpTypShift
)

// Device is the pair of registers. OnSleep is called with the sleep type
// the guest entered (SLP_TYP) when it sets SLP_EN.
type Device struct {
	OnSleep func(typ uint8)
}

// New returns the registers; onSleep is called for every sleep request.
func New(onSleep func(typ uint8)) *Device { return &Device{OnSleep: onSleep} }

// Read implements bus.Device: both registers read as zero (WAK_STS clear:
// the VM never wakes from a sleep state, it ends).
func (d *Device) Read(_ uint64, data []byte) { clear(data) }

// Write implements bus.Device. Writes to the status register (the guest
// clearing WAK_STS) need no action.
func (d *Device) Write(off uint64, data []byte) {
	if off != offControl || len(data) == 0 {
		return
	}
	if v := data[0]; v&slpEnable != 0 {
		d.OnSleep((v & slpTypMask) >> slpTypShift)
	}
}
