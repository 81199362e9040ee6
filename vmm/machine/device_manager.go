package machine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubevmm/kubevmm/vmm/arch/x86/acpi"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/devices/bus"
	"github.com/kubevmm/kubevmm/vmm/devices/i8042"
	"github.com/kubevmm/kubevmm/vmm/devices/rtc"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
	"github.com/kubevmm/kubevmm/vmm/devices/sleep"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// deviceManager owns the VM's devices: the port I/O and MMIO buses the
// vCPUs' exits are dispatched on, the legacy PC devices (COM1, the i8042's
// reset line, the RTC, the POST port, the ACPI sleep registers and power
// button), the virtio devices behind their MMIO transports with the
// disks and taps under them, the SCSI controller's hot-plugged volumes,
// and the devices' part of the VM's state.
type deviceManager struct {
	cfg    deviceConfig
	vm     *kvm.VM       // interrupt lines, the transports' irqfds and ioeventfds
	mem    *memory.Guest // where the virtio devices' queues are
	events platformEvents
	log    *slog.Logger

	pio, mmio bus.Bus // each locks itself

	panics *panicWatch // COM1's output, watched for a kernel panic
	serial *serial.Serial
	kbd    *i8042.Device
	clock  *rtc.Device

	virtio      []*VirtioDevice // set up at build, then fixed
	disks       []block.Disk    // cfg.disks' images, in order
	scsi        *scsi.Device    // the hot-plug controller (cfg.scsi)
	cmdline     []string        // the virtio-mmio devices, for a guest without ACPI
	sleepWarned atomic.Bool     // a sleep state the VM does not offer was logged

	mu       sync.Mutex     // guards held and released: what a snapshot or migration took
	held     []*event.Loop  // device workers held still by Pause
	released []block.Locker // disks a migration source let go of
}

// deviceConfig is the part of Config the device manager builds from
// (never the kernel and initrd, which the machine drops once loaded).
type deviceConfig struct {
	cpus      int // a disk has at most one queue per vCPU
	disks     []DiskConfig
	nics      []NICConfig
	rng       bool
	vsock     *VsockConfig
	scsi      bool
	console   io.Writer
	rtcOffset time.Duration
	// deferDisks, for an incoming migration, are the disks' virtual
	// sizes: their devices are built without opening the images.
	deferDisks []uint64
}

// platformEvents is what the legacy devices report to the machine.
type platformEvents interface {
	// stop ends the VM: COM1's interrupt line failed, the guest pulled
	// the i8042's reset line (maybe after a panic).
	stop(e Exit)
	// powerOff: the guest entered ACPI S5.
	powerOff()
}

func newDeviceManager(cfg deviceConfig, vm *kvm.VM, mem *memory.Guest, events platformEvents, log *slog.Logger) *deviceManager {
	return &deviceManager{cfg: cfg, vm: vm, mem: mem, events: events, log: log}
}

// Legacy PC ports.
const (
	com1Port  = 0x3f8
	com1IRQ   = 4
	postPort  = 0x80 // POST diagnostic port, written as an I/O delay
	pciConfig = 0xcf8
)

type sink struct{}

func (sink) Read(_ uint64, data []byte) { clear(data) }
func (sink) Write(uint64, []byte)       {}

// addLegacy puts the legacy PC devices on the port I/O bus.
func (d *deviceManager) addLegacy() error {
	d.panics = &panicWatch{w: d.cfg.console}
	d.serial = serial.New(d.panics, func(level bool) {
		if err := d.vm.IRQLine(com1IRQ, level); err != nil {
			d.events.stop(Exit{Reason: ExitError, Err: err})
		}
	})
	d.kbd = i8042.New(func() {
		// with panic=-1 a kernel panic ends in this reset too
		if line, ok := d.panics.panicked(); ok {
			d.events.stop(Exit{Reason: ExitPanic, Err: fmt.Errorf("guest kernel panicked: %s", line)})
			return
		}
		d.events.stop(Exit{Reason: ExitReset})
	})
	d.clock = rtc.New(d.cfg.rtcOffset)
	sleeper := sleep.New(func(typ uint8) {
		if typ == acpi.SleepTypeS5 {
			d.events.powerOff()
			return
		}
		// Once: the guest can write the port in a loop.
		if !d.sleepWarned.Swap(true) {
			d.log.Warn("guest asked for a sleep state the VM does not offer; ignored (logged once)", "slp_typ", typ)
		}
	})
	for _, dev := range []struct {
		name       string
		base, size uint64
		dev        bus.Device
	}{
		{"serial0", com1Port, serial.Size, d.serial},
		{"i8042", i8042.Base, i8042.Size, d.kbd},
		{"rtc", rtc.Base, rtc.Size, d.clock},
		{"post", postPort, 1, sink{}},
		{"acpi-sleep", acpi.SleepControlPort, sleep.Size, sleeper},
	} {
		if err := d.pio.Insert(dev.name, dev.base, dev.size, dev.dev); err != nil {
			return err
		}
	}
	return nil
}

// com1 is the serial port a console attaches to.
func (d *deviceManager) com1() *serial.Serial { return d.serial }

// virtioDevices are the attached virtio devices, in the order of their
// MMIO windows.
func (d *deviceManager) virtioDevices() []*VirtioDevice { return d.virtio }

// kernelArgs announce the virtio devices on the kernel command line
// (virtio_mmio.device=), for a guest without ACPI.
func (d *deviceManager) kernelArgs() []string { return d.cmdline }

// ioBus and mmioBus are where the vCPUs' port I/O and MMIO exits go.
func (d *deviceManager) ioBus() *bus.Bus   { return &d.pio }
func (d *deviceManager) mmioBus() *bus.Bus { return &d.mmio }

// acpiDevices are the devices the ACPI tables describe: COM1 and the
// virtio devices.
func (d *deviceManager) acpiDevices() ([]acpi.Serial, []acpi.MMIODevice) {
	var vs []acpi.MMIODevice
	for _, v := range d.virtio {
		vs = append(vs, acpi.MMIODevice{Base: uint32(v.Transport.Base()), Size: mmio.Size, GSI: v.Transport.GSI()})
	}
	return []acpi.Serial{{Port: com1Port, IRQ: com1IRQ}}, vs
}

// pressPowerButton sends an edge on the Generic Event Device's interrupt.
func (d *deviceManager) pressPowerButton() error {
	if err := d.vm.IRQLine(acpi.PowerButtonGSI, true); err != nil {
		return fmt.Errorf("power button: %w", err)
	}
	if err := d.vm.IRQLine(acpi.PowerButtonGSI, false); err != nil {
		return fmt.Errorf("power button: %w", err)
	}
	return nil
}

// Pause keeps every virtio device's worker idle until Resume, so no
// device touches guest RAM or its queues while a snapshot or the end of a
// migration saves them. vCPUs must be paused (no guest MMIO can activate
// or reset a device meanwhile). Devices already held stay so.
func (d *deviceManager) Pause() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held != nil {
		return nil
	}
	d.held = []*event.Loop{}
	for _, v := range d.virtio {
		if w, ok := v.Device.(interface{ Loop() *event.Loop }); ok {
			if l := w.Loop(); l != nil {
				l.Hold()
				d.held = append(d.held, l)
			}
		}
	}
	return nil
}

// Resume lets the held device workers run again.
func (d *deviceManager) Resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.held {
		l.Release()
	}
	d.held = nil
}

// legacyState is the legacy devices' state (a reset's power-on state).
func (d *deviceManager) legacyState() DeviceState {
	return DeviceState{Serial: d.serial.Save(), I8042: d.kbd.Save(), RTC: d.clock.Save()}
}

// restoreLegacy loads the legacy devices' state from s.
func (d *deviceManager) restoreLegacy(s DeviceState) error {
	if err := d.serial.Restore(s.Serial); err != nil {
		return err
	}
	if err := d.kbd.Restore(s.I8042); err != nil {
		return err
	}
	return d.clock.Restore(s.RTC)
}

// Save captures every device. vCPUs must be paused and devices held.
func (d *deviceManager) Save() (DeviceState, error) {
	s := d.legacyState()
	for _, v := range d.virtio {
		b, err := v.Device.SaveState()
		if err != nil {
			return s, fmt.Errorf("%s: %w", v.Name, err)
		}
		s.Virtio = append(s.Virtio, VirtioState{Name: v.Name, Transport: v.Transport.Save(), Device: b})
	}
	return s, nil
}

// Restore loads s into the devices as built from the same SavedConfig:
// each virtio device's own state, then its transport's (which re-activates
// an active device on its queues).
func (d *deviceManager) Restore(s DeviceState) error {
	if len(s.Virtio) != len(d.virtio) {
		return fmt.Errorf("state has %d virtio devices, the VM %d", len(s.Virtio), len(d.virtio))
	}
	if err := d.restoreLegacy(s); err != nil {
		return err
	}
	for i, vs := range s.Virtio {
		v := d.virtio[i]
		if vs.Name != v.Name {
			return fmt.Errorf("virtio device %d is %s in the state, %s in the VM", i, vs.Name, v.Name)
		}
		if err := v.Device.RestoreState(vs.Device); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		if err := v.Transport.Restore(vs.Transport); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	return nil
}

// stats are the devices' counters for Machine.Stats.
func (d *deviceManager) stats() (serialTx uint64, virtio map[string]map[string]uint64) {
	virtio = map[string]map[string]uint64{}
	for _, v := range d.virtio {
		virtio[v.Name] = v.Metrics()
	}
	return d.serial.Metrics.TxBytes.Load(), virtio
}

// close lets go of held devices, stops every virtio device (before guest
// RAM goes away) and closes their disks and taps; the disks flush their
// metadata here, and their errors are the caller's.
func (d *deviceManager) close() error {
	// A migrated-away VM still holds its devices (the stop-and-copy
	// never resumed them); let go so they can be stopped and closed.
	d.Resume()
	var errs []error
	for _, v := range d.virtio {
		d.mmio.Remove(v.Transport.Base())
		errs = append(errs, v.Transport.Close())
		for _, c := range v.closers {
			errs = append(errs, c.Close())
		}
	}
	d.mu.Lock()
	d.released = nil
	d.mu.Unlock()
	d.virtio, d.disks, d.scsi = nil, nil, nil
	return errors.Join(errs...)
}
