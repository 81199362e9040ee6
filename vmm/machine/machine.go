// Package machine assembles a VM from the pieces under vmm/: KVM, guest
// memory, the boot loader, vCPUs and devices, and runs it until the guest
// ends. A Machine is a CPU manager, a memory manager and a device manager
// with the Machine orchestrating them (managers.go says who owns what).
package machine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/arch/x86/acpi"
	"github.com/kubevmm/kubevmm/vmm/assist"
	"github.com/kubevmm/kubevmm/vmm/boot"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/procmem"
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

// Machine is a built VM: its CPU, memory and device managers (see
// managers.go) and what ties them together: the configuration, the KVM
// system and VM handles, boot, vCPU exits and how the VM ends, reset, the
// build phases, the profiler and the exit metrics.
type Machine struct {
	cfg     Config
	sys     *kvm.System
	vm      *kvm.VM
	cpus    *cpuManager
	memory  *memoryManager
	devices *deviceManager

	// Serial is COM1, the device manager's: where a console sends the
	// guest its input.
	Serial   *serial.Serial
	Assist   *assist.Assister
	Loaded   *boot.Loaded
	Cmdline  string
	Nested   bool
	Metrics  Metrics
	profiler atomic.Pointer[Profiler]

	created time.Time
	phases  []Phase // build and restore steps
	started time.Time

	exitMu sync.Mutex
	ending bool // an exit is recorded; the vCPUs are leaving
	exitCh chan Exit

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
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	m := &Machine{cfg: cfg, created: time.Now(), exitCh: make(chan Exit, 1)}
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
	m.memory = &memoryManager{vm: m.vm}
	if err := m.memory.setup(cfg.MemoryBytes, from); err != nil {
		return nil, err
	}
	m.mark("memory")
	if err := m.setupVM(); err != nil {
		return nil, err
	}
	m.mark("irqchip")
	m.devices = newDeviceManager(deviceConfig{
		cpus: cfg.CPUs, disks: cfg.Disks, nics: cfg.NICs, rng: cfg.RNG, vsock: cfg.Vsock, scsi: cfg.SCSI,
		console: cfg.Console, rtcOffset: cfg.RTCOffset, deferDisks: cfg.deferDisks,
	}, m.vm, m.memory.Guest(), m, m.Log())
	if err := m.devices.addVirtio(); err != nil {
		return nil, err
	}
	m.mark("virtio")
	var entry *uint64
	if booting {
		// Without ACPI the guest learns of its virtio devices from its
		// command line; a restored guest booted with them already there.
		if cfg.NoACPI {
			for _, arg := range m.devices.kernelArgs() {
				m.Cmdline += " " + arg
			}
		}
		if err := m.loadGuest(); err != nil {
			return nil, err
		}
		// the images are in guest RAM now; holding them would double
		// the VMM's own memory (the kernel is most of it)
		m.cfg.Kernel, m.cfg.Initrd = nil, nil
		m.mark("kernel")
		entry = &m.Loaded.Entry
	}
	if err := m.devices.addLegacy(); err != nil {
		return nil, err
	}
	m.Serial = m.devices.com1()
	m.cpus = newCPUManager(m.sys, m.vm, cfg.CPUs, m.Nested, m, m.Log())
	cpuid, err := m.cpus.create(entry)
	if err != nil {
		return nil, err
	}
	m.Assist = assist.New(m.memory.Guest(), x86.XSaveLayoutOf(cpuid))
	if cfg.Reload != nil {
		if err := m.capturePowerOn(); err != nil {
			return nil, err
		}
	}
	m.mark("vcpus")
	built = true
	return m, nil
}

// withDefaults checks the parts of cfg every VM needs and fills in the
// defaults of those left out.
func withDefaults(cfg Config) (Config, error) {
	if cfg.CPUs < 1 || cfg.CPUs > x86.MaxCPUs {
		return cfg, configErr("%d vCPUs: must be between 1 and %d", cfg.CPUs, x86.MaxCPUs)
	}
	if _, err := x86.RAMLayout(cfg.MemoryBytes); err != nil {
		return cfg, configErr("%v", err)
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
	return cfg, nil
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
	m.memory.enableManualProtect()
	return m.vm.CreatePIT2(kvm.PITSpeakerDummy)
}

// loadGuest writes the boot tables (MP, ACPI) and loads the kernel and
// initrd into guest RAM.
func (m *Machine) loadGuest() error {
	mem := m.memory.Guest()
	if err := x86.WriteBootTables(mem); err != nil {
		return err
	}
	if _, err := x86.WriteMPTable(mem, m.cfg.CPUs); err != nil {
		return err
	}
	if !m.cfg.NoACPI {
		if err := acpi.Write(mem, m.acpiConfig()); err != nil {
			return err
		}
	}
	layout, _ := x86.RAMLayout(m.cfg.MemoryBytes)
	l, err := boot.Load(mem, boot.Params{
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

// acpiConfig is what the ACPI tables describe: the vCPUs, interrupt
// controllers, COM1 and the virtio devices.
func (m *Machine) acpiConfig() acpi.Config {
	serial, virtio := m.devices.acpiDevices()
	return acpi.Config{
		CPUs:       m.cfg.CPUs,
		LAPICAddr:  x86.LAPICAddr,
		IOAPICAddr: x86.IOAPICAddr,
		Serial:     serial,
		Virtio:     virtio,
	}
}

// PowerButton presses the guest's ACPI power button: an edge on the
// Generic Event Device's interrupt. A guest with ACPI is then asked to
// shut down (what it does about it is up to it); one without ignores it.
func (m *Machine) PowerButton() error {
	if err := m.devices.pressPowerButton(); err != nil {
		return err
	}
	m.Log().Info("power button pressed")
	return nil
}

// Close releases everything. A VM still running is stopped first, and its
// vCPU threads are waited for: they must not touch kvm_run pages or guest
// RAM once those are unmapped.
func (m *Machine) Close() error {
	m.stop(Exit{Reason: ExitStopped})
	var err error
	if m.cpus != nil {
		m.cpus.wait()
		m.cpus.Throttle(0)
	}
	if m.devices != nil {
		err = m.devices.close()
	}
	if m.cpus != nil {
		m.cpus.close()
	}
	if m.memory != nil {
		m.memory.close()
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
	if m.cpus != nil {
		m.cpus.stop()
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
		case <-m.cpus.firstEntry():
		case <-done:
			return
		}
		select {
		case <-time.After(releaseDelay):
			m.releaseSetup()
		case <-done:
		}
	}()
	m.cpus.start()
	e := <-m.exitCh
	m.cpus.wait()
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
	serialTx, virtio := m.devices.stats()
	return map[string]any{
		"exits_io":     m.Metrics.ExitsIO.Load(),
		"exits_mmio":   m.Metrics.ExitsMMIO.Load(),
		"exits_intr":   m.Metrics.ExitsIntr.Load(),
		"exits_other":  m.Metrics.ExitsOther.Load(),
		"unknown_pio":  m.Metrics.UnknownPIO.Load(),
		"unknown_mmio": m.Metrics.UnknownMMIO.Load(),
		"assists":      m.Assist.Counts(),
		"serial_tx":    serialTx,
		"virtio":       virtio,
		"vcpu_seconds": m.cpus.threadSeconds(),
	}
}

// Pause stops every vCPU at an instruction boundary and returns once none
// is executing guest code. Devices keep their state; callers that need a
// quiescent machine (snapshots) pause devices separately.
func (m *Machine) Pause() error { return m.cpus.Pause() }

// Resume lets paused vCPUs run again.
func (m *Machine) Resume() { m.cpus.Resume() }

// Paused reports whether every vCPU is parked.
func (m *Machine) Paused() bool { return m.cpus.Paused() }

// Memory is the guest's RAM.
func (m *Machine) Memory() *memory.Guest { return m.memory.Guest() }

// Virtio lists the attached virtio devices.
func (m *Machine) Virtio() []*VirtioDevice { return m.devices.virtioDevices() }

// powerOff is the guest entering ACPI S5: the VM shuts down, or resets
// when a soft reboot asked for it.
func (m *Machine) powerOff() {
	if m.rebootOnPowerOff.Load() {
		m.resetAsked.Store(true)
		m.stop(Exit{Reason: ExitReset})
		return
	}
	m.stop(Exit{Reason: ExitShutdown})
}

// Config is the configuration the machine was built with (for a restored
// or migrated machine, the saved one).
func (m *Machine) Config() Config { return m.cfg }

// hex formats a guest address for the log.
func hex(v uint64) string { return fmt.Sprintf("%#x", v) }
