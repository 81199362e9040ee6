// Package qemu is the launcher's fallback backend: it runs one VM in a QEMU
// process and drives it over QMP (launcher/qmp). It is for guests needing
// devices our own VMM does not emulate (Windows: SATA, e1000, Hyper-V
// enlightenments, UEFI, VNC). Config is backend-neutral; the QEMU command
// line is derived from it here and nowhere else.
package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Firmware the guest boots with.
type Firmware string

// The Firmware values.
const (
	FirmwareBIOS Firmware = "bios" // SeaBIOS, QEMU's default
	FirmwareEFI  Firmware = "efi"  // OVMF, from Debian's ovmf package
)

// Accel is how QEMU runs guest code.
type Accel string

// The Accel values.
const (
	AccelKVM Accel = "kvm"
	// AccelTCG is QEMU's emulator: slow, but independent of the host's KVM
	// (the nested CI hosts' KVM stalls QEMU in a bzImage decompressor).
	AccelTCG Accel = "tcg"
)

// DiskFormat is the image format of a disk's file.
type DiskFormat string

// The DiskFormat values.
const (
	FormatRaw   DiskFormat = "raw"
	FormatQCOW2 DiskFormat = "qcow2"
)

// DiskBus is how a disk is attached.
type DiskBus string

// The DiskBus values.
const (
	BusVirtio DiskBus = "virtio" // virtio-blk-pci
	BusSATA   DiskBus = "sata"   // ICH9 AHCI controller, ide-hd / ide-cd
)

// NICModel is the emulated network card.
type NICModel string

// The NICModel values.
const (
	NICVirtio NICModel = "virtio" // virtio-net-pci
	NICE1000  NICModel = "e1000"  // Intel 82540EM, driver in every Windows
)

// Default paths of Debian's ovmf package.
const (
	DefaultOVMFCode = "/usr/share/OVMF/OVMF_CODE.fd"
	DefaultOVMFVars = "/usr/share/OVMF/OVMF_VARS.fd"
)

// DefaultCommandTimeout bounds each monitor command when Config leaves
// CommandTimeout zero, so a hung QEMU never hangs a caller that passed a
// context without a deadline.
const DefaultCommandTimeout = 30 * time.Second

// Config describes one VM.
type Config struct {
	Name      string // shown in ps/top and errors; letters, digits, '-', '_', '.'
	CPUs      int
	MemoryMiB int

	// Direct Linux boot (optional). Initrd and Cmdline need Kernel.
	Kernel  string
	Initrd  string
	Cmdline string

	Firmware Firmware // "" is bios
	// OVMF images for FirmwareEFI; empty means the Debian ovmf package's.
	// The vars template is copied into RunDir, the VM's own NVRAM.
	OVMFCode, OVMFVars string

	Disks []Disk
	NICs  []NIC
	// SCSI adds a virtio-scsi-pci controller (id scsi0), empty, for disks
	// hot-plugged while the VM runs (VM.AttachSCSIDisk).
	SCSI bool

	// SecureBoot boots OVMF's secure-boot build (DefaultOVMFSecureCode,
	// with Microsoft's keys: DefaultOVMFSecureVars) with SMM; needs
	// FirmwareEFI.
	SecureBoot bool
	// UUID is the SMBIOS system UUID; "" leaves QEMU's.
	UUID string
	// Clock: the RTC and timers; the zero value is QEMU's defaults.
	Clock Clock
	// TPM gives the guest a TPM 2.0, emulated by a swtpm process Start
	// runs beside QEMU, its state in TPMStateDir ("" is RunDir/tpm): it
	// survives QEMU restarts as long as that directory does.
	TPM         bool
	TPMStateDir string
	// SwtpmBinary is the swtpm executable; "" is swtpm from PATH.
	SwtpmBinary string

	// HyperV adds the Hyper-V enlightenments Windows uses to run well as a
	// guest (relaxed timing, virtual APIC, spinlock hints, reference time;
	// with KVM also vpindex, runtime, synic, stimer, reset, frequencies,
	// tlbflush and ipi, which QEMU can only offer with KVM).
	HyperV bool

	SerialSocket string // unix socket for the first serial port (ttyS0 / COM1), server side
	VNCSocket    string // unix socket for a VNC server on a standard VGA display

	Accel    Accel  // "" is kvm
	CPUModel string // "" is host with KVM, qemu64 with TCG

	// Incoming makes this VM the target of a live migration instead of
	// booting: "defer" (then VM.MigrateIncoming chooses the address), or a
	// tcp:HOST:PORT / unix:PATH URI to listen on at once.
	Incoming string

	// NoReboot ends QEMU when the guest reboots instead of resetting the VM.
	NoReboot bool
	// StartPaused leaves the VM paused after Start (vCPUs never ran), so a
	// caller can attach to the console before the first guest output;
	// Resume starts it.
	StartPaused bool

	// RunDir holds the QMP socket (qmp.sock), the EFI NVRAM and the TPM's
	// socket and state; created if missing.
	RunDir string
	// Binary is the QEMU executable; "" is qemu-system-x86_64 from PATH.
	Binary string
	// CommandTimeout bounds every monitor command; 0 is DefaultCommandTimeout.
	CommandTimeout time.Duration
	// SurviveLauncherExit leaves QEMU running if the process that started
	// it dies (for a launcher that re-attaches through RunDir's monitor
	// socket); by default the kernel kills QEMU then.
	SurviveLauncherExit bool
}

// Disk is one block device.
type Disk struct {
	Path     string
	Format   DiskFormat // "" is raw
	Bus      DiskBus    // "" is virtio
	ReadOnly bool
	// CDROM attaches the image as a read-only SATA CD-ROM (an installer
	// ISO). QEMU's SATA hard disk (ide-hd) cannot be read-only.
	CDROM  bool
	Serial string // up to 20 characters, visible to the guest
	// BootOrder: 1 boots first; 0 leaves the disk out of the boot order.
	BootOrder int
	// Queues above 1: a virtio disk's request queues (num-queues).
	Queues int
}

// NIC is one network card on an existing host tap device.
type NIC struct {
	Model NICModel // "" is virtio
	Tap   string   // host tap interface name; QEMU opens it, no scripts run
	MAC   string   // "" lets QEMU choose
	// Queues above 1: a virtio NIC's queue pairs on a multi-queue tap.
	Queues int
}

// MaxQueues bounds a disk's or NIC's queues: a tap has at most 256.
const MaxQueues = 256

const (
	qmpFD         = 3 // the monitor's listening socket, passed to QEMU
	maxSocketPath = 107
	portsPerAHCI  = 6
)

// QMPPath is where the VM's monitor socket is.
func (c Config) QMPPath() string { return filepath.Join(c.RunDir, "qmp.sock") }

// efiVarsPath is the VM's own copy of the EFI variable store.
func (c Config) efiVarsPath() string { return filepath.Join(c.RunDir, "efivars.fd") }

func (c Config) accel() Accel {
	if c.Accel == "" {
		return AccelKVM
	}
	return c.Accel
}

func (c Config) firmware() Firmware {
	if c.Firmware == "" {
		return FirmwareBIOS
	}
	return c.Firmware
}

func (c Config) ovmfCode() string {
	switch {
	case c.OVMFCode != "":
		return c.OVMFCode
	case c.SecureBoot:
		return DefaultOVMFSecureCode
	}
	return DefaultOVMFCode
}

func (c Config) ovmfVars() string {
	switch {
	case c.OVMFVars != "":
		return c.OVMFVars
	case c.SecureBoot:
		return DefaultOVMFSecureVars
	}
	return DefaultOVMFVars
}

func (c Config) commandTimeout() time.Duration {
	if c.CommandTimeout <= 0 {
		return DefaultCommandTimeout
	}
	return c.CommandTimeout
}

func (d Disk) format() DiskFormat {
	if d.Format == "" {
		return FormatRaw
	}
	return d.Format
}

func (d Disk) bus() DiskBus {
	if d.Bus == "" {
		return BusVirtio
	}
	return d.Bus
}

func (n NIC) model() NICModel {
	if n.Model == "" {
		return NICVirtio
	}
	return n.Model
}

// Validate checks the configuration without touching the file system.
// Start also checks that the files it names exist.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Name == "" {
		bad("name is empty")
	}
	for _, r := range c.Name {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_' && r != '.' {
			bad("name %q: only letters, digits, '-', '_' and '.' are allowed", c.Name)
			break
		}
	}
	if c.CPUs < 1 || c.CPUs > 255 {
		bad("cpus %d: must be 1..255", c.CPUs)
	}
	if c.MemoryMiB < 16 {
		bad("memory %d MiB: must be at least 16", c.MemoryMiB)
	}
	if c.Kernel == "" && (c.Initrd != "" || c.Cmdline != "") {
		bad("initrd and cmdline need a kernel")
	}
	switch c.firmware() {
	case FirmwareBIOS, FirmwareEFI:
	default:
		bad("firmware %q: must be bios or efi", c.Firmware)
	}
	switch c.accel() {
	case AccelKVM, AccelTCG:
	default:
		bad("accel %q: must be kvm or tcg", c.Accel)
	}
	if strings.ContainsAny(c.CPUModel, ", ") {
		bad("cpu model %q: one model name, no options", c.CPUModel)
	}
	switch {
	case c.RunDir == "":
		bad("run dir is empty")
	case !filepath.IsAbs(c.RunDir):
		bad("run dir %q: must be absolute", c.RunDir)
	case len(c.QMPPath()) > maxSocketPath:
		bad("run dir %q: too long for a unix socket path (%d > %d bytes)", c.RunDir, len(c.QMPPath()), maxSocketPath)
	}
	for _, s := range []struct{ what, path string }{{"serial socket", c.SerialSocket}, {"vnc socket", c.VNCSocket}} {
		if s.path == "" {
			continue
		}
		if !filepath.IsAbs(s.path) {
			bad("%s %q: must be absolute", s.what, s.path)
		}
		if len(s.path) > maxSocketPath {
			bad("%s %q: too long for a unix socket path (%d > %d bytes)", s.what, s.path, len(s.path), maxSocketPath)
		}
	}
	if c.Incoming != "" && c.Incoming != "defer" {
		if err := checkMigrationURI(c.Incoming); err != nil {
			bad("incoming: %w", err)
		}
	}
	if c.CommandTimeout < 0 {
		bad("command timeout %v: must not be negative", c.CommandTimeout)
	}

	c.validateGuest(bad)
	for i, d := range c.Disks {
		d.validate(i, bad)
	}
	for i, n := range c.NICs {
		n.validate(i, bad)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qemu config: %w", err)
	}
	return nil
}

// validate reports what is wrong with disk i through bad.
func (d Disk) validate(i int, bad func(string, ...any)) {
	if d.Path == "" {
		bad("disk %d: path is empty", i)
	}
	switch d.format() {
	case FormatRaw, FormatQCOW2:
	default:
		bad("disk %d: format %q: must be raw or qcow2", i, d.Format)
	}
	switch d.bus() {
	case BusVirtio:
		if d.CDROM {
			bad("disk %d: a CD-ROM must be on the sata bus", i)
		}
	case BusSATA:
		if d.ReadOnly && !d.CDROM {
			bad("disk %d: QEMU's SATA hard disk cannot be read-only: make it a CD-ROM or use the virtio bus", i)
		}
	default:
		bad("disk %d: bus %q: must be virtio or sata", i, d.Bus)
	}
	if len(d.Serial) > 20 {
		bad("disk %d: serial %q: at most 20 characters", i, d.Serial)
	}
	for _, r := range d.Serial {
		if r < 0x21 || r > 0x7e {
			bad("disk %d: serial %q: printable ASCII without spaces only", i, d.Serial)
			break
		}
	}
	if d.Queues < 0 || d.Queues > MaxQueues || d.Queues > 1 && d.bus() != BusVirtio {
		bad("disk %d: %d queues: 1..%d, and more than one only on the virtio bus", i, d.Queues, MaxQueues)
	}
	if d.BootOrder < 0 {
		bad("disk %d: boot order %d: must not be negative", i, d.BootOrder)
	}
}

// validate reports what is wrong with NIC i through bad.
func (n NIC) validate(i int, bad func(string, ...any)) {
	switch n.model() {
	case NICVirtio, NICE1000:
	default:
		bad("nic %d: model %q: must be virtio or e1000", i, n.Model)
	}
	if n.Tap == "" || len(n.Tap) > 15 || strings.ContainsAny(n.Tap, "/ \t\n") {
		bad("nic %d: tap %q: must be an interface name of 1..15 characters", i, n.Tap)
	}
	if n.Queues < 0 || n.Queues > MaxQueues || n.Queues > 1 && n.model() != NICVirtio {
		bad("nic %d: %d queues: 1..%d, and more than one only with the virtio model", i, n.Queues, MaxQueues)
	}
	if n.MAC != "" {
		hw, err := net.ParseMAC(n.MAC)
		if err != nil || len(hw) != 6 {
			bad("nic %d: mac %q: not a 6-byte MAC address", i, n.MAC)
		} else if hw[0]&1 != 0 {
			bad("nic %d: mac %q: multicast address", i, n.MAC)
		}
	}
}

// checkFiles checks that the files the VM needs exist, so the error names
// the file and what it is for rather than being a line of QEMU's stderr.
func (c Config) checkFiles() error {
	var errs []error
	need := func(what, path string) {
		if path == "" {
			return
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	need("kernel", c.Kernel)
	need("initrd", c.Initrd)
	for i, d := range c.Disks {
		need(fmt.Sprintf("disk %d", i), d.Path)
	}
	if c.firmware() == FirmwareEFI {
		for _, p := range []string{c.ovmfCode(), c.ovmfVars()} {
			if _, err := os.Stat(p); err != nil {
				errs = append(errs, fmt.Errorf("firmware efi needs OVMF (Debian package ovmf): %w", err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qemu config: %w", err)
	}
	return nil
}

// checkMigrationURI accepts the transports the launcher uses. exec: is
// refused: it would run a shell command inside the launcher.
func checkMigrationURI(uri string) error {
	switch {
	case strings.HasPrefix(uri, "tcp:"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(uri, "tcp:"))
		if err != nil {
			return fmt.Errorf("migration uri %q: %w", uri, err)
		}
		if host == "" {
			return fmt.Errorf("migration uri %q: no host", uri)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("migration uri %q: port %q is not a number in 0..65535", uri, port)
		}
	case strings.HasPrefix(uri, "unix:"):
		if !filepath.IsAbs(strings.TrimPrefix(uri, "unix:")) {
			return fmt.Errorf("migration uri %q: socket path must be absolute", uri)
		}
	default:
		return fmt.Errorf("migration uri %q: only tcp:HOST:PORT and unix:PATH are supported", uri)
	}
	return nil
}

// hypervBase are the enlightenments QEMU offers with any accelerator.
var hypervBase = []string{"hv-relaxed=on", "hv-vapic=on", "hv-spinlocks=0x1fff", "hv-time=on"}

// hypervKVM need KVM (vpindex is refused by TCG, and synic, stimer,
// tlbflush and ipi depend on it).
var hypervKVM = []string{"hv-vpindex=on", "hv-runtime=on", "hv-synic=on", "hv-stimer=on",
	"hv-reset=on", "hv-frequencies=on", "hv-tlbflush=on", "hv-ipi=on"}

// Args is the QEMU command line (without the binary) for the VM. The
// monitor's listening socket is expected as file descriptor 3.
func (c Config) Args() ([]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var jsonErr error
	jsonArg := func(v map[string]any) string {
		s, err := jsonArg(v)
		if err != nil && jsonErr == nil {
			jsonErr = err
		}
		return s
	}
	a := []string{
		"-name", "guest=" + c.Name + ",debug-threads=on",
		"-machine", c.machineArg(),
		"-accel", string(c.accel()),
		"-nodefaults", "-no-user-config",
		"-display", "none",
		// timestamps on QEMU's own messages: they end up in Exit.Stderr
		"-msg", "timestamp=on",
		"-smp", strconv.Itoa(c.CPUs),
		"-m", strconv.Itoa(c.MemoryMiB) + "M",
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", qmpFD),
		"-mon", "chardev=qmp,mode=control",
	}

	a = append(a, "-cpu", c.cpuArg())
	a = append(a, c.clockArgs()...)

	// Start with vCPUs stopped, so the launcher is subscribed to events
	// before the guest runs; Start continues unless asked to stay paused.
	// An incoming migration starts the guest itself when it completes.
	if c.Incoming == "" || c.StartPaused {
		a = append(a, "-S")
	}
	if c.Incoming != "" {
		a = append(a, "-incoming", c.Incoming)
	}
	if c.NoReboot {
		a = append(a, "-no-reboot")
	}

	if c.firmware() == FirmwareEFI {
		a = append(a,
			"-blockdev", jsonArg(map[string]any{"driver": "file", "filename": c.ovmfCode(), "node-name": "ovmf-code-file", "read-only": true}),
			"-blockdev", jsonArg(map[string]any{"driver": "raw", "file": "ovmf-code-file", "node-name": "ovmf-code", "read-only": true}),
			"-blockdev", jsonArg(map[string]any{"driver": "file", "filename": c.efiVarsPath(), "node-name": "ovmf-vars-file"}),
			"-blockdev", jsonArg(map[string]any{"driver": "raw", "file": "ovmf-vars-file", "node-name": "ovmf-vars"}),
		)
		a = append(a, c.secureBootArgs()...)
	}
	a = append(a, c.tpmArgs()...)

	if c.Kernel != "" {
		// -kernel/-initrd/-append take their value whole: no option parsing.
		a = append(a, "-kernel", c.Kernel)
		if c.Initrd != "" {
			a = append(a, "-initrd", c.Initrd)
		}
		if c.Cmdline != "" {
			a = append(a, "-append", c.Cmdline)
		}
	}

	if c.SerialSocket != "" {
		a = append(a,
			"-chardev", "socket,id=serial0,path="+optEscape(c.SerialSocket)+",server=on,wait=off",
			"-device", "isa-serial,chardev=serial0,id=serial0-dev")
	}
	if c.VNCSocket != "" {
		// -nodefaults removed the display adapter; VNC needs one.
		a = append(a, "-device", "VGA,id=video0", "-vnc", "unix:"+optEscape(c.VNCSocket))
	}

	a = append(a, c.diskArgs(jsonArg)...)
	if c.SCSI {
		a = append(a, "-device", jsonArg(map[string]any{"driver": "virtio-scsi-pci", "id": SCSIController}))
	}
	a = append(a, c.nicArgs(jsonArg)...)
	if jsonErr != nil {
		return nil, fmt.Errorf("qemu config: %w", jsonErr)
	}
	return a, nil
}

// cpuArg is -cpu's value: the configured model, or the host's (QEMU's
// generic one under TCG), with the Hyper-V enlightenments if asked.
func (c Config) cpuArg() string {
	cpu := c.CPUModel
	if cpu == "" {
		cpu = "host"
		if c.accel() == AccelTCG {
			cpu = "qemu64"
		}
	}
	var hv []string
	if c.HyperV {
		hv = append(hv, hypervBase...)
		if c.accel() == AccelKVM {
			hv = append(hv, hypervKVM...)
		}
	}
	if on := c.Clock.HyperVClock; on != nil {
		// hv-time as asked; the synthetic timers need it.
		hv = slices.DeleteFunc(hv, func(f string) bool { return !*on && (f == "hv-time=on" || f == "hv-stimer=on") })
		if *on && !slices.Contains(hv, "hv-time=on") {
			hv = append(hv, "hv-time=on")
		}
	}
	if len(hv) > 0 {
		cpu += "," + strings.Join(hv, ",")
	}
	if k := c.Clock.KVMClock; k != nil && !*k {
		cpu += ",kvmclock=off"
	}
	return cpu
}

// diskArgs are the disks' block nodes and devices, with an AHCI controller
// for every portsPerAHCI SATA disks.
func (c Config) diskArgs(jsonArg func(map[string]any) string) []string {
	var a []string
	sata := 0
	for i, d := range c.Disks {
		file := fmt.Sprintf("disk%d-file", i)
		node := fmt.Sprintf("disk%d", i)
		ro := d.ReadOnly || d.CDROM
		a = append(a,
			"-blockdev", jsonArg(map[string]any{"driver": "file", "filename": d.Path, "node-name": file, "read-only": ro}),
			"-blockdev", jsonArg(map[string]any{"driver": string(d.format()), "file": file, "node-name": node, "read-only": ro}),
		)
		dev := map[string]any{"drive": node, "id": node + "-dev"}
		if d.Serial != "" {
			dev["serial"] = d.Serial
		}
		if d.BootOrder > 0 {
			dev["bootindex"] = d.BootOrder
		}
		switch d.bus() {
		case BusVirtio:
			dev["driver"] = "virtio-blk-pci"
			if d.Queues > 1 {
				dev["num-queues"] = d.Queues
			}
		case BusSATA:
			ctrl, port := sata/portsPerAHCI, sata%portsPerAHCI
			if port == 0 {
				a = append(a, "-device", jsonArg(map[string]any{"driver": "ich9-ahci", "id": fmt.Sprintf("sata%d", ctrl)}))
			}
			sata++
			dev["bus"] = fmt.Sprintf("sata%d.%d", ctrl, port)
			dev["driver"] = "ide-hd"
			if d.CDROM {
				dev["driver"] = "ide-cd"
			}
		}
		a = append(a, "-device", jsonArg(dev))
	}
	return a
}

// nicArgs are the NICs' tap netdevs and devices.
func (c Config) nicArgs(jsonArg func(map[string]any) string) []string {
	var a []string
	for i, n := range c.NICs {
		id := fmt.Sprintf("net%d", i)
		netdev := map[string]any{"type": "tap", "id": id, "ifname": n.Tap, "script": "no", "downscript": "no"}
		dev := map[string]any{"netdev": id, "id": id + "-dev", "driver": "virtio-net-pci"}
		if n.Queues > 1 {
			// a multi-queue tap, and one MSI-X vector per queue plus
			// the control queue and config changes
			netdev["queues"] = n.Queues
			dev["mq"], dev["vectors"] = true, 2*n.Queues+2
		}
		a = append(a, "-netdev", jsonArg(netdev))
		if n.model() == NICE1000 {
			dev["driver"] = "e1000"
		}
		if n.MAC != "" {
			dev["mac"] = n.MAC
		}
		a = append(a, "-device", jsonArg(dev))
	}
	return a
}

// jsonArg renders an option value in QEMU's JSON syntax (-device,
// -blockdev, -netdev), which needs no escaping of paths.
func jsonArg(v map[string]any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding option %v: %w", v, err)
	}
	return string(b), nil
}

// optEscape escapes a value for QEMU's key=value,... option syntax, where
// a comma is written as two.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }
