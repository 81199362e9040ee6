// Package machine assembles a VM from the pieces under vmm/: KVM, guest
// memory, the boot loader, vCPUs and legacy devices, and runs it until the
// guest ends.
package machine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/arch/x86/acpi"
	"github.com/kubevmm/kubevmm/vmm/assist"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/boot"
	"github.com/kubevmm/kubevmm/vmm/devices/bus"
	"github.com/kubevmm/kubevmm/vmm/devices/i8042"
	"github.com/kubevmm/kubevmm/vmm/devices/rtc"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
	"github.com/kubevmm/kubevmm/vmm/devices/sleep"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/procmem"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// DefaultCmdline is the kernel command line when the user gives none.
const DefaultCmdline = "console=ttyS0 reboot=k panic=-1"

// ErrConfig is wrapped by errors caused by the VM's configuration or its
// inputs (kernel, memory size, missing KVM) rather than by the guest.
var ErrConfig = errors.New("invalid VM configuration")

// Config describes a VM to build.
type Config struct {
	CPUs        int
	MemoryBytes uint64
	Kernel      []byte
	Initrd      []byte
	Cmdline     string
	// Reload reads the kernel and initrd again for a reset, which
	// restarts the guest in this process (see Machine.Reset): the VMM does
	// not keep them once loaded. Without it a reset ends the VM (Run
	// returns ExitReset), as a reboot always did.
	Reload func() (kernel, initrd []byte, err error)
	// RebootResets makes the guest's own reboot (its reset line, a KVM
	// reset event) restart it in place, as a PC's reset does; without it
	// the guest's reboot ends the VM, as in Firecracker. RequestReset and
	// SoftReboot restart in place either way. Both need Reload.
	RebootResets bool
	// NoACPI boots a guest kernel built without ACPI: it learns its CPUs
	// from the MP table alone (always written) and its virtio devices from
	// the command line. With ACPI (the default) the DSDT lists them, so
	// they are not on the command line: a kernel that got both would find
	// each device twice.
	NoACPI bool
	// RTCOffset starts the guest's RTC at host UTC plus this (a clock in
	// another zone or time); snapshots and migrations carry it.
	RTCOffset time.Duration
	KVMPath   string    // default /dev/kvm
	Console   io.Writer // guest serial output; the console hub in practice
	// HostProfile forces (true/false) the nested-host profile; nil detects it.
	HostProfile *bool
	// Logger receives the VMM's structured log: one line per state
	// change of the VM and per diagnostic; nil discards it.
	Logger *slog.Logger

	// Virtio devices (see virtio.go).
	Disks []DiskConfig
	NICs  []NICConfig
	RNG   bool
	Vsock *VsockConfig
	// SCSI adds a virtio-scsi controller for hot-plugged volumes
	// (AttachVolume); it starts empty.
	SCSI bool

	// deferDisks, set for an incoming migration, are the virtual sizes of
	// Disks: their devices are built without opening the images, which
	// the source still writes (Incoming.Restore opens them).
	deferDisks []uint64
}

// Machine is a built VM.
type Machine struct {
	cfg      Config
	sys      *kvm.System
	vm       *kvm.VM
	Mem      *memory.Guest
	vcpus    []*vcpu
	pio      bus.Bus
	mmio     bus.Bus
	Serial   *serial.Serial
	kbd      *i8042.Device
	clock    *rtc.Device
	Assist   *assist.Assister
	Loaded   *boot.Loaded
	Cmdline  string
	Nested   bool
	Metrics  Metrics
	msrList  []uint32 // MSRs saved in snapshots, probed on first use
	panics   *panicWatch
	virtio   []*VirtioDevice
	disks    []block.Disk   // cfg.Disks' images, in order
	scsi     *scsi.Device   // the hot-plug controller (cfg.SCSI)
	released []block.Locker // disks a migration source let go of
	profiler atomic.Pointer[Profiler]

	// live migration (migrate.go)
	manualProtect  bool // KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 enabled
	dirtyMu        sync.Mutex
	dirtyBufs      [][]uint64
	throttleMu     sync.Mutex
	throttleStop   chan struct{}
	throttleDone   chan struct{}
	releaseDevices func()
	created        time.Time
	phases         []Phase // build and restore steps
	started        time.Time
	exitMu         sync.Mutex
	ending         bool                      // an exit is recorded; the vCPUs are leaving
	entered        atomic.Pointer[time.Time] // first KVM_RUN of any vCPU
	enteredCh      chan struct{}             // closed then
	exitCh         chan Exit
	running        sync.WaitGroup

	// reset (reset.go)
	powerOn          *powerOn    // nil: the VM cannot reset in place
	rebootOnPowerOff atomic.Bool // a soft reboot is under way
	resetAsked       atomic.Bool // RequestReset or a soft reboot's poweroff
}

// Metrics counts VM exits the VMM handled.
type Metrics struct {
	ExitsIO, ExitsMMIO, ExitsIntr, ExitsOther atomic.Uint64
	UnknownPIO, UnknownMMIO                   atomic.Uint64
}

// ExitReason says how the guest ended.
type ExitReason string

// How a guest can end.
const (
	ExitReset       ExitReason = "reset"        // guest rebooted (i8042 reset line, reboot=k)
	ExitShutdown    ExitReason = "shutdown"     // guest powered off
	ExitStopped     ExitReason = "stopped"      // the VMM was asked to stop
	ExitMigrated    ExitReason = "migrated"     // the guest now runs on a migration target
	ExitTripleFault ExitReason = "triple-fault" // guest crashed the CPU
	ExitPanic       ExitReason = "guest-panic"
	ExitError       ExitReason = "error" // the VMM could not continue (Err says why)
)

// Exit is the end of a VM.
type Exit struct {
	Reason ExitReason
	VCPU   int
	Err    error
}

// Failed reports whether the exit means the guest failed.
func (e Exit) Failed() bool {
	switch e.Reason {
	case ExitReset, ExitShutdown, ExitStopped, ExitMigrated:
		return false
	}
	return true
}

func (e Exit) String() string {
	if e.Err != nil {
		return fmt.Sprintf("%s on vCPU %d: %v", e.Reason, e.VCPU, e.Err)
	}
	return string(e.Reason)
}

func configErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

// New builds the VM: KVM objects, guest RAM with the kernel loaded, vCPUs
// in their boot state and the legacy devices. Nothing runs until Run.
func New(cfg Config) (*Machine, error) { return build(cfg, nil) }

// build makes a machine. With mem == nil it is a fresh boot: new RAM, the
// kernel loaded, the BSP at the kernel's entry. Otherwise (restore,
// incoming migration) RAM is mem (or new, empty RAM if mem is the
// sentinel fresh), nothing is loaded, and the caller restores the state.
func build(cfg Config, from *memory.Guest) (*Machine, error) {
	booting := from == nil
	if cfg.CPUs < 1 || cfg.CPUs > x86.MaxCPUs {
		return nil, configErr("%d vCPUs: must be between 1 and %d", cfg.CPUs, x86.MaxCPUs)
	}
	if _, err := x86.RAMLayout(cfg.MemoryBytes); err != nil {
		return nil, configErr("%v", err)
	}
	if cfg.KVMPath == "" {
		cfg.KVMPath = "/dev/kvm"
	}
	if cfg.Console == nil {
		cfg.Console = io.Discard
	}
	if cfg.Cmdline == "" {
		cfg.Cmdline = DefaultCmdline
	}
	m := &Machine{cfg: cfg, created: time.Now(), exitCh: make(chan Exit, 1), enteredCh: make(chan struct{})}
	built := false
	defer func() {
		if !built {
			_ = m.Close() // the build error is the one to report
		}
	}()
	m.Nested = x86.EmulatedKernelMode()
	if cfg.HostProfile != nil {
		m.Nested = *cfg.HostProfile
	}
	m.Cmdline = cfg.Cmdline
	if extra := x86.HostKernelArgs(m.Nested); extra != "" && booting {
		m.Cmdline += " " + extra
	}

	var err error
	if m.sys, err = kvm.Open(cfg.KVMPath); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if max, err := m.sys.CheckExtension(kvm.CapMaxVCPUs); err == nil && max > 0 && cfg.CPUs > max {
		return nil, configErr("%d vCPUs: KVM on this host allows %d", cfg.CPUs, max)
	}
	if m.vm, err = m.sys.CreateVM(); err != nil {
		return nil, err
	}
	// RAM before the interrupt controllers: once a VM has an in-kernel
	// irqchip, adding a memory slot waits for KVM's SRCU grace periods
	// (7 ms of the 9 ms to a restored guest's vCPU entry on this CI
	// host, 0.1 ms without).
	if err := m.setupMemory(from); err != nil {
		return nil, err
	}
	m.mark("memory")
	if err := m.setupVM(); err != nil {
		return nil, err
	}
	m.mark("irqchip")
	cmdline := m.Cmdline
	if err := m.setupVirtio(); err != nil {
		return nil, err
	}
	m.mark("virtio")
	if booting {
		if err := m.loadGuest(); err != nil {
			return nil, err
		}
		// the images are in guest RAM now; holding them would double
		// the VMM's own memory (the kernel is most of it)
		m.cfg.Kernel, m.cfg.Initrd = nil, nil
		m.mark("kernel")
	} else {
		m.Cmdline = cmdline // the restored guest booted with the saved one
	}
	if err := m.setupDevices(); err != nil {
		return nil, err
	}
	if err := m.setupVCPUs(booting); err != nil {
		return nil, err
	}
	if cfg.Reload != nil {
		if err := m.capturePowerOn(); err != nil {
			return nil, err
		}
	}
	m.mark("vcpus")
	built = true
	return m, nil
}

// Log is the machine's logger (never nil).
func (m *Machine) Log() *slog.Logger {
	if m.cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.cfg.Logger
}

func (m *Machine) setupVM() error {
	if err := m.vm.SetTSSAddr(x86.TSSAddr); err != nil {
		return err
	}
	if err := m.vm.SetIdentityMapAddr(x86.IdentityMapAddr); err != nil {
		return err
	}
	if err := m.vm.CreateIRQChip(); err != nil {
		return err
	}
	// With manual protection, reading the dirty log doesn't write-protect
	// every page at once; migration re-protects just the pages it sends.
	if n, _ := m.vm.CheckExtension(kvm.CapManualDirtyLogProtect2); n != 0 {
		if err := m.vm.EnableCap(kvm.CapManualDirtyLogProtect2, kvm.DirtyLogManualProtectEnable); err == nil {
			m.manualProtect = true
		}
	}
	return m.vm.CreatePIT2(kvm.PITSpeakerDummy)
}

// setupMemory gives the VM its RAM: mem if given (a snapshot's mapping),
// else new, empty RAM for the configured size.
func (m *Machine) setupMemory(mem *memory.Guest) error {
	layout, err := x86.RAMLayout(m.cfg.MemoryBytes)
	if err != nil {
		return configErr("%v", err)
	}
	if mem != nil && mem != freshRAM {
		if err := sameLayout(mem, layout); err != nil {
			return err
		}
		m.Mem = mem
	} else if m.Mem, err = memory.New(layout); err != nil {
		return err
	}
	for _, r := range m.Mem.Regions() {
		err := m.vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{
			Slot:          r.Slot,
			GuestPhysAddr: r.GPA,
			MemorySize:    r.Size,
			UserspaceAddr: uint64(uintptrOf(r.Data)),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *Machine) loadGuest() error {
	if err := x86.WriteBootTables(m.Mem); err != nil {
		return err
	}
	if _, err := x86.WriteMPTable(m.Mem, m.cfg.CPUs); err != nil {
		return err
	}
	if !m.cfg.NoACPI {
		if err := acpi.Write(m.Mem, m.acpiConfig()); err != nil {
			return err
		}
	}
	layout, _ := x86.RAMLayout(m.cfg.MemoryBytes)
	l, err := boot.Load(m.Mem, boot.Params{
		Kernel:  m.cfg.Kernel,
		Initrd:  m.cfg.Initrd,
		Cmdline: m.Cmdline,
		E820:    x86.E820(layout),
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	m.Loaded = l
	m.Log().Info("kernel loaded", "format", l.Format, "start", hex(l.KernelStart), "end", hex(l.KernelEnd),
		"entry", hex(l.Entry), "initrd_bytes", len(m.cfg.Initrd), "initrd_at", hex(l.InitrdAddr), "cmdline", m.Cmdline)
	return nil
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

func (m *Machine) setupDevices() error {
	m.panics = &panicWatch{w: m.cfg.Console}
	m.Serial = serial.New(m.panics, func(level bool) {
		if err := m.vm.IRQLine(com1IRQ, level); err != nil {
			m.stop(Exit{Reason: ExitError, Err: err})
		}
	})
	m.kbd = i8042.New(func() {
		// with panic=-1 a kernel panic ends in this reset too
		if line, ok := m.panics.panicked(); ok {
			m.stop(Exit{Reason: ExitPanic, Err: fmt.Errorf("guest kernel panicked: %s", line)})
			return
		}
		m.stop(Exit{Reason: ExitReset})
	})
	m.clock = rtc.New(m.cfg.RTCOffset)
	var sleepWarned atomic.Bool
	sleeper := sleep.New(func(typ uint8) {
		if typ == acpi.SleepTypeS5 {
			if m.rebootOnPowerOff.Load() {
				m.resetAsked.Store(true)
				m.stop(Exit{Reason: ExitReset})
				return
			}
			m.stop(Exit{Reason: ExitShutdown})
			return
		}
		// Once: the guest can write the port in a loop.
		if !sleepWarned.Swap(true) {
			m.Log().Warn("guest asked for a sleep state the VM does not offer; ignored (logged once)", "slp_typ", typ)
		}
	})
	for _, d := range []struct {
		name       string
		base, size uint64
		dev        bus.Device
	}{
		{"serial0", com1Port, serial.Size, m.Serial},
		{"i8042", i8042.Base, i8042.Size, m.kbd},
		{"rtc", rtc.Base, rtc.Size, m.clock},
		{"post", postPort, 1, sink{}},
		{"acpi-sleep", acpi.SleepControlPort, sleep.Size, sleeper},
	} {
		if err := m.pio.Insert(d.name, d.base, d.size, d.dev); err != nil {
			return err
		}
	}
	return nil
}

// acpiConfig is what the ACPI tables describe: the vCPUs, interrupt
// controllers, COM1 and the virtio devices.
func (m *Machine) acpiConfig() acpi.Config {
	c := acpi.Config{
		CPUs:       m.cfg.CPUs,
		LAPICAddr:  x86.LAPICAddr,
		IOAPICAddr: x86.IOAPICAddr,
		Serial:     []acpi.Serial{{Port: com1Port, IRQ: com1IRQ}},
	}
	for _, d := range m.virtio {
		c.Virtio = append(c.Virtio, acpi.MMIODevice{Base: uint32(d.Transport.Base()), Size: mmio.Size, GSI: d.Transport.GSI()})
	}
	return c
}

// PowerButton presses the guest's ACPI power button: an edge on the
// Generic Event Device's interrupt. A guest with ACPI is then asked to
// shut down (what it does about it is up to it); one without ignores it.
func (m *Machine) PowerButton() error {
	if err := m.vm.IRQLine(acpi.PowerButtonGSI, true); err != nil {
		return fmt.Errorf("power button: %w", err)
	}
	if err := m.vm.IRQLine(acpi.PowerButtonGSI, false); err != nil {
		return fmt.Errorf("power button: %w", err)
	}
	m.Log().Info("power button pressed")
	return nil
}

// Close releases everything. A VM still running is stopped first, and its
// vCPU threads are waited for: they must not touch kvm_run pages or guest
// RAM once those are unmapped.
func (m *Machine) Close() error {
	m.stop(Exit{Reason: ExitStopped})
	m.running.Wait()
	m.Throttle(0)
	// A migrated-away VM still holds its devices still (the stop-and-copy
	// never resumed them); let go so they can be stopped and closed.
	if m.releaseDevices != nil {
		m.releaseDevices()
		m.releaseDevices = nil
	}
	// Disks flush their metadata here: their errors are the caller's.
	err := m.closeVirtio()
	for _, v := range m.vcpus {
		v.c.Close()
	}
	m.vcpus = nil
	if m.Mem != nil {
		m.Mem.Close()
		m.Mem = nil
	}
	if m.vm != nil {
		m.vm.Close()
		m.vm = nil
	}
	if m.sys != nil {
		m.sys.Close()
		m.sys = nil
	}
	return err
}

// stop records the first reason the VM ends and kicks every vCPU out.
func (m *Machine) stop(e Exit) {
	m.exitMu.Lock()
	defer m.exitMu.Unlock()
	if m.ending {
		return
	}
	m.ending = true
	m.exitCh <- e
	for _, v := range m.vcpus {
		v.request(reqStop)
	}
}

// Stop asks the VM to stop; Run returns ExitStopped.
func (m *Machine) Stop() { m.stop(Exit{Reason: ExitStopped}) }

// EndMigrated ends a VM whose guest a migration handed to its target; Run
// returns ExitMigrated.
func (m *Machine) EndMigrated() { m.stop(Exit{Reason: ExitMigrated}) }

// Run starts every vCPU and blocks until the guest ends or Stop is called.
// All vCPU threads have exited when it returns. After ExitReset, Reset
// prepares the machine to Run again.
func (m *Machine) Run() Exit {
	if m.started.IsZero() {
		m.started = time.Now()
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-m.enteredCh:
		case <-done:
			return
		}
		select {
		case <-time.After(releaseDelay):
			m.releaseSetup()
		case <-done:
		}
	}()
	for _, v := range m.vcpus {
		m.running.Add(1)
		go v.loop()
	}
	e := <-m.exitCh
	m.running.Wait()
	return e
}

// releaseDelay is how long after the first vCPU entry the setup's memory
// is given back: not at once, where the collection and the code faulted
// back in would compete with a restored guest's first steps for the CPU.
const releaseDelay = time.Second

// releaseSetup gives back, once the guest runs, the memory only setting
// the VM up needed. The kernel and initrd images (or a snapshot's state)
// were read into the heap and are garbage now, but the runtime keeps
// freed heap for reuse: a booted VMM would hold ~20 MiB for good. And
// the binary's code that start-up and setup ran leaves its pages mapped.
func (m *Machine) releaseSetup() {
	debug.FreeOSMemory()
	if err := procmem.DropText(); err != nil {
		m.Log().Warn("releasing setup memory", "error", err)
	}
}

// Started is when Run began.
func (m *Machine) Started() time.Time { return m.started }

// Stats is a summary for logs and benchmarks.
func (m *Machine) Stats() map[string]any {
	return map[string]any{
		"exits_io":     m.Metrics.ExitsIO.Load(),
		"exits_mmio":   m.Metrics.ExitsMMIO.Load(),
		"exits_intr":   m.Metrics.ExitsIntr.Load(),
		"exits_other":  m.Metrics.ExitsOther.Load(),
		"unknown_pio":  m.Metrics.UnknownPIO.Load(),
		"unknown_mmio": m.Metrics.UnknownMMIO.Load(),
		"assists":      m.Assist.Counts(),
		"serial_tx":    m.Serial.Metrics.TxBytes.Load(),
		"virtio":       m.virtioStats(),
		"vcpu_seconds": m.vcpuSeconds(),
	}
}

// vcpuSeconds is the CPU time of each running vCPU's thread, by vCPU id:
// the guest's time in KVM_RUN and the VMM's exit handling on that thread
// (what libvirt reports as a vCPU's time for QEMU's vCPU threads).
func (m *Machine) vcpuSeconds() map[string]float64 {
	out := map[string]float64{}
	for _, v := range m.vcpus {
		v.mu.Lock()
		tid, live := v.tid, v.started && !v.exited
		v.mu.Unlock()
		if !live {
			continue
		}
		// The thread's CPU clock: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
		// of <linux/posix-timers.h>, valid for threads of this process.
		var ts unix.Timespec
		if unix.ClockGettime(int32(^tid<<3|6), &ts) == nil {
			out[strconv.Itoa(v.id)] = float64(ts.Nano()) / 1e9
		}
	}
	return out
}

// Config is the configuration the machine was built with (for a restored
// or migrated machine, the saved one).
func (m *Machine) Config() Config { return m.cfg }

// hex formats a guest address for the log.
func hex(v uint64) string { return fmt.Sprintf("%#x", v) }
