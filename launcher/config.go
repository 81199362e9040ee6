package launcher

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/block"
	bootdisk "github.com/kubevmm/kubevmm/vmm/boot/disk"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// Paths are where the launcher finds what the pod gives it. Tests point
// them at temporary directories.
type Paths struct {
	SocketDir        string
	KernelBootDir    string
	ContainerDiskDir string
	// CloudInitDir is where the launcher writes the cloud-init disk, from
	// the VMI and the Secrets mounted under SecretDir.
	CloudInitDir string
	SecretDir    string
	// RunDir is scratch space (the QEMU backend's monitor socket).
	RunDir string
	// SysClassNet is /sys/class/net, where the launcher waits for the taps
	// virt-handler creates.
	SysClassNet string
	// ResolvConf is the pod's resolv.conf: the DNS settings of the
	// leases the launcher serves.
	ResolvConf string
	// PVCDiskDir holds the Filesystem PVCs' mounts, BlockDeviceDir the
	// Block PVCs' devices, EmptyDiskDir the emptyDisk images (see
	// vmispec.PVCDiskDir); PVCs is what the pod says of the claims
	// (vmispec.PVCInfoEnv), by volume name.
	PVCDiskDir     string
	BlockDeviceDir string
	EmptyDiskDir   string
	PVCs           map[string]vmispec.PVCInfo
}

// DefaultPaths are the paths in a launcher pod.
func DefaultPaths(socketDir string) Paths {
	return Paths{
		SocketDir:        socketDir,
		KernelBootDir:    vmispec.KernelBootDir,
		ContainerDiskDir: vmispec.ContainerDiskDir,
		CloudInitDir:     vmispec.CloudInitDir,
		SecretDir:        vmispec.SecretDir,
		RunDir:           "/tmp/kubevmm",
		SysClassNet:      "/sys/class/net",
		ResolvConf:       "/etc/resolv.conf",
		PVCDiskDir:       vmispec.PVCDiskDir,
		BlockDeviceDir:   vmispec.BlockDeviceDir,
		EmptyDiskDir:     vmispec.EmptyDiskDir,
	}
}

// VMConfig is the backend-neutral description of the guest the launcher
// derives from a VMI.
type VMConfig struct {
	Name      string
	CPUs      int
	MemoryMiB int
	Kernel    string // path; empty for a disk boot
	Initrd    string
	Cmdline   string
	// DiskBoot, for a disk boot on our VMM, is the boot disk's default
	// entry (read by prepare): its kernel and initrd are booted, its
	// options go before Cmdline.
	DiskBoot *bootdisk.Boot
	Disks    []DiskConfig
	NICs     []NICConfig
	RNG      bool
	// SCSI: a virtio-scsi controller for volumes hot-plugged while the
	// guest runs (switchVM.AttachVolume), on both backends. Every VMI
	// gets one, as every KubeVirt domain has its scsi0 controller.
	SCSI   bool
	EFI    bool
	HyperV bool
	// Guest integration: the RTC's offset from host UTC (both backends),
	// the timers, secure boot, the TPM and the SMBIOS UUID (QEMU's).
	RTCOffset  time.Duration
	Timers     *v1.Timer
	SecureBoot bool
	TPM        bool
	UUID       string
	// StartPaused: spec.startStrategy Paused.
	StartPaused bool
	// RebootResets: spec.domain.rebootPolicy Reboot, KubeVirt's default
	// (unset): the guest's own reboot boots it again in the same VMI.
	// Terminate ends the VMI instead.
	RebootResets bool
	// VsockSocket is the host side of the guest's vsock device (our VMM
	// only), for the guest agent and the vsock subresource.
	VsockSocket string
	// VsockCID is the guest's vsock context ID: the VMI's status.VSOCKCID
	// (autoattachVSOCK), else vmispec.GuestCID.
	VsockCID uint32
}

// DiskConfig is one guest disk.
type DiskConfig struct {
	Name     string
	Path     string
	ReadOnly bool
	Serial   string
	Bus      v1.DiskBus
	CDROM    bool
	Boot     int
	Queues   int // virtio request queues (spec.DiskQueues)
	// Format, when set, is the image's format; otherwise it is probed.
	// A PVC's or emptyDisk's image is raw, always: the guest writes its
	// first bytes, and a qcow2 header it wrote must not become a qcow2
	// image (with a backing file of its choosing) at the next start.
	Format block.Format
}

// NICConfig is one guest NIC on a tap that virt-handler prepares.
type NICConfig struct {
	Name string
	Tap  string
	MAC  net.HardwareAddr
	// PodMAC: the NIC takes the pod interface's original MAC
	// (vmispec.PodNIC.TakesPodMAC), which virt-handler records when it wires
	// the NIC: MAC is MACFor's until readPodMACs.
	PodMAC bool
	Model  string
	// Queues of the multi-queue tap and the NIC's queue pairs (vmispec.NICQueues).
	Queues int
	// LinkDown: the interface's state is down.
	LinkDown bool
	// DHCP is the lease the launcher serves the guest (dhcp.go).
	DHCP dhcpLease
}

// BuildVMConfig turns a VMI into the guest's configuration. It checks what
// it can without the files (those are opened by the backend).
func BuildVMConfig(vmi *v1.VirtualMachineInstance, p Paths) (VMConfig, error) {
	s := &vmi.Spec
	mem, err := vmispec.GuestMemory(s)
	if err != nil {
		return VMConfig{}, err
	}
	c := VMConfig{
		Name:         vmi.Namespace + "_" + vmi.Name,
		CPUs:         vmispec.VCPUs(s),
		MemoryMiB:    int(mem.Value() >> 20),
		RNG:          s.Domain.Devices.Rng != nil,
		SCSI:         true,
		RebootResets: s.Domain.RebootPolicy == nil || *s.Domain.RebootPolicy == "Reboot",
		// under the socket directory, which is short: a unix socket
		// path has at most 107 bytes
		VsockSocket: filepath.Join(p.SocketDir, vmispec.VsockSocket),
		VsockCID:    cmp.Or(ptr.Deref(vmi.Status.VSOCKCID, 0), vmispec.GuestCID),
	}
	if c.MemoryMiB < 16 {
		return VMConfig{}, fmt.Errorf("guest memory %s: at least 16Mi is needed", mem.String())
	}
	fw := s.Domain.Firmware
	if fw != nil && fw.KernelBoot != nil {
		kb := fw.KernelBoot
		if kb.Container != nil {
			if kb.Container.KernelPath != "" {
				c.Kernel = filepath.Join(p.KernelBootDir, vmispec.KernelFile)
			}
			if kb.Container.InitrdPath != "" {
				c.Initrd = filepath.Join(p.KernelBootDir, vmispec.InitrdFile)
			}
		}
		c.Cmdline = kb.KernelArgs
	}
	if c.Kernel == "" && c.Cmdline != "" {
		return VMConfig{}, fmt.Errorf("spec.domain.firmware.kernelBoot.kernelArgs needs kernelBoot.container.kernelPath")
	}
	if err := c.guestIntegration(s, time.Now()); err != nil {
		return VMConfig{}, err
	}
	c.StartPaused = s.StartStrategy != nil && *s.StartStrategy == v1.StartStrategyPaused

	vols := map[string]*v1.Volume{}
	for i := range s.Volumes {
		vols[s.Volumes[i].Name] = &s.Volumes[i]
	}
	for i, d := range s.Domain.Devices.Disks {
		v := vols[d.Name]
		if v == nil {
			return VMConfig{}, fmt.Errorf("spec.domain.devices.disks[%d]: no volume named %q", i, d.Name)
		}
		dc := DiskConfig{Name: d.Name, Serial: d.Serial, Bus: v1.DiskBusVirtio}
		switch {
		case d.Disk != nil:
			dc.ReadOnly = d.Disk.ReadOnly
			if d.Disk.Bus != "" {
				dc.Bus = d.Disk.Bus
			}
		case d.CDRom != nil:
			dc.CDROM, dc.ReadOnly, dc.Bus = true, true, v1.DiskBusSATA
		}
		if d.BootOrder != nil {
			dc.Boot = int(*d.BootOrder)
		}
		if dc.Bus == v1.DiskBusVirtio {
			dc.Queues = vmispec.DiskQueues(s)
		}
		if err := dc.setImage(p, v); err != nil {
			return VMConfig{}, err
		}
		c.Disks = append(c.Disks, dc)
	}
	nics, masq, err := nicConfigs(vmi)
	if err != nil {
		return VMConfig{}, err
	}
	c.NICs = nics
	// Without kernelBoot this is what a disk boot on our VMM appends to
	// the entry's options (QEMU's firmware boot has no command line).
	if c.Cmdline == "" {
		c.Cmdline = machine.DefaultCmdline
	}
	// Masquerade: the guest is GuestIP behind GatewayIP, which a DHCP
	// client gets from the launcher (dhcp.go); a kernel built with IP
	// autoconfiguration takes it from ip= as well, one without ignores
	// the parameter. The guest names its NICs in device order, as
	// PodNICs orders them.
	if masq >= 0 && !strings.Contains(" "+c.Cmdline, " ip=") {
		c.Cmdline += fmt.Sprintf(" ip=%s::%s:255.255.255.0::eth%d:off", vmispec.GuestIP, vmispec.GatewayIP, masq)
	}
	return c, nil
}

// setImage points the disk at its volume's image.
func (dc *DiskConfig) setImage(p Paths, v *v1.Volume) error {
	img, isVolumeDisk, err := volumeDisk(p, v)
	if err != nil {
		return err
	}
	switch {
	case isVolumeDisk:
		dc.Path, dc.ReadOnly, dc.Format = img.Path, dc.ReadOnly || img.ReadOnly, img.Format
	case v.ContainerDisk != nil:
		dc.Path = containerDiskPath(p, dc.Name)
	case v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil:
		// Rendered at start (prepare); the guest only reads it.
		dc.Path = cloudInitDisk(p, dc.Name)
		dc.ReadOnly = true
	default:
		return fmt.Errorf("spec.volumes[%s]: only containerDisk, cloud-init, persistentVolumeClaim, ephemeral, hostDisk and emptyDisk volumes are supported by the launcher", dc.Name)
	}
	return nil
}

// nicConfigs are the VMI's NICs (vmispec.PodNICs) and the index of the
// masquerade one among them (-1: none).
func nicConfigs(vmi *v1.VirtualMachineInstance) ([]NICConfig, int, error) {
	var out []NICConfig
	masq := -1
	for _, n := range vmispec.PodNICs(&vmi.Spec) {
		mac, err := n.MACFor(string(vmi.UID))
		if err != nil {
			return nil, 0, err
		}
		lease := noLease
		switch {
		case n.Binding == vmispec.BindingMasquerade:
			masq, lease = len(out), masqueradeLease
		case n.ServesDHCP(): // the other one: bridge on the pod network
			lease = podBridgeLease
		}
		out = append(out, NICConfig{Name: n.Name, Tap: n.Tap, MAC: mac, PodMAC: n.TakesPodMAC(), Model: n.Model, Queues: n.Queues, LinkDown: n.LinkDown, DHCP: lease})
	}
	return out, masq, nil
}

// readPodMACs gives the NICs that take the pod interface's MAC the one
// virt-handler recorded on the in-pod bridge (vmispec.PodBridgeRecord). A
// record without one (an older virt-handler's) leaves MACFor's.
func readPodMACs(sysClassNet string, nics []NICConfig) error {
	for i := range nics {
		if !nics[i].PodMAC {
			continue
		}
		rec, err := podBridgeRecord(sysClassNet)
		if err != nil {
			return fmt.Errorf("interface %s: the pod interface's MAC: %w", nics[i].Name, err)
		}
		mac, err := rec.GuestMAC(nics[i].MAC)
		if err != nil {
			return fmt.Errorf("interface %s: %w", nics[i].Name, err)
		}
		nics[i].MAC = mac
	}
	return nil
}

// cloudInitDisk is the path of the disk rendered for a cloud-init volume.
func cloudInitDisk(p Paths, volume string) string {
	return filepath.Join(p.CloudInitDir, volume+".img")
}

// containerDiskPath is where the init container put a containerDisk's image.
func containerDiskPath(p Paths, disk string) string {
	return filepath.Join(p.ContainerDiskDir, disk+".img")
}

// readBootEntry reads the default boot entry of the image of the VMI's
// disk i (vmispec.DiskBootCheck), read-only.
func readBootEntry(vmi *v1.VirtualMachineInstance, p Paths, i int) (*bootdisk.Boot, error) {
	d := vmi.Spec.Domain.Devices.Disks[i]
	for _, v := range vmi.Spec.Volumes {
		if v.Name == d.Name && v.ContainerDisk == nil {
			return nil, fmt.Errorf("volume %s is not a containerDisk", d.Name)
		}
	}
	path := containerDiskPath(p, d.Name)
	f, err := probeFormat(path)
	if err != nil {
		return nil, err
	}
	img, err := block.Open(path, block.Options{Format: f, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = img.Close() }() // read-only: nothing to flush
	b, err := bootdisk.Find(img, int64(img.Size()))
	if err != nil {
		return nil, fmt.Errorf("%s image: %w", f, err)
	}
	return b, nil
}

// MachineConfig is the VMM configuration of c, with the kernel and initrd
// read from disk (or taken from the boot disk's entry).
func (c VMConfig) MachineConfig(console io.Writer) (machine.Config, error) {
	mc := machine.Config{
		CPUs: c.CPUs, MemoryBytes: uint64(c.MemoryMiB) << 20,
		Cmdline: c.Cmdline, Console: console, RNG: c.RNG, RTCOffset: c.RTCOffset,
		RebootResets: c.RebootResets, SCSI: c.SCSI,
	}
	if c.VsockSocket != "" {
		mc.Vsock = &machine.VsockConfig{CID: uint64(c.VsockCID), Socket: c.VsockSocket}
	}
	var err error
	mc.Reload = c.reload()
	switch {
	case c.DiskBoot != nil:
		mc.Kernel, mc.Initrd = c.DiskBoot.Kernel, c.DiskBoot.Initrd
		mc.Cmdline = strings.TrimSpace(c.DiskBoot.Cmdline + " " + c.Cmdline)
	case c.Kernel == "":
		return machine.Config{}, fmt.Errorf("the kubevmm VMM needs a kernel (kernelBoot) or a boot disk with a Linux boot entry")
	default:
		if mc.Kernel, mc.Initrd, err = readBootFiles(c.Kernel, c.Initrd); err != nil {
			return machine.Config{}, err
		}
	}
	for _, d := range c.Disks {
		if d.Bus != v1.DiskBusVirtio || d.CDROM {
			return machine.Config{}, fmt.Errorf("disk %s: bus %s is not supported by the kubevmm VMM", d.Name, d.Bus)
		}
		f, err := d.format()
		if err != nil {
			return machine.Config{}, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		serial := d.Serial
		if len(serial) > 20 {
			serial = serial[:20]
		}
		mc.Disks = append(mc.Disks, machine.DiskConfig{Path: d.Path, Format: f, ReadOnly: d.ReadOnly, Serial: serial, Queues: d.Queues})
	}
	for _, n := range c.NICs {
		if n.Model != "virtio" {
			return machine.Config{}, fmt.Errorf("interface %s: model %s is not supported by the kubevmm VMM", n.Name, n.Model)
		}
		mc.NICs = append(mc.NICs, machine.NICConfig{Tap: n.Tap, MAC: n.MAC, Queues: n.Queues, LinkDown: n.LinkDown})
	}
	return mc, nil
}

// reload is how the VMM gets the kernel and initrd again when the guest
// resets (machine.Config.Reload): the kernelBoot files are read again; a
// disk boot's entry, read from its image before the guest started, is
// kept (the image is the guest's disk by then). nil, for a migration
// target booting a disk (it has no entry), makes a reset end the VM.
func (c VMConfig) reload() func() ([]byte, []byte, error) {
	switch {
	case c.DiskBoot != nil:
		b := c.DiskBoot
		return func() ([]byte, []byte, error) { return b.Kernel, b.Initrd, nil }
	case c.Kernel != "":
		kernel, initrd := c.Kernel, c.Initrd
		return func() ([]byte, []byte, error) { return readBootFiles(kernel, initrd) }
	}
	return nil
}

func readBootFiles(kernel, initrd string) (k, i []byte, err error) {
	if k, err = os.ReadFile(kernel); err != nil {
		return nil, nil, fmt.Errorf("reading the kernel: %w", err)
	}
	if initrd != "" {
		if i, err = os.ReadFile(initrd); err != nil {
			return nil, nil, fmt.Errorf("reading the initrd: %w", err)
		}
	}
	return k, i, nil
}

// format is the disk's Format, else its image's probed.
func (d DiskConfig) format() (block.Format, error) {
	if d.Format != "" {
		return d.Format, nil
	}
	return probeFormat(d.Path)
}

// probeFormat reads a containerDisk's format from its header. The image
// comes from the container image, not from the guest, so probing it before
// the guest ever ran is safe (the reason vmm/block wants it said).
func probeFormat(path string) (block.Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }() // read-only
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", err
	}
	if bytes.Equal(magic, []byte{'Q', 'F', 'I', 0xfb}) {
		return block.FormatQcow2, nil
	}
	return block.FormatRaw, nil
}

// QEMUConfig is the QEMU backend's configuration of c.
func (c VMConfig) QEMUConfig(p Paths, consoleSocket string) (qemu.Config, error) {
	qc := qemu.Config{
		Name: strings.ReplaceAll(c.Name, "_", "."), CPUs: c.CPUs, MemoryMiB: c.MemoryMiB,
		Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: c.Cmdline,
		HyperV: c.HyperV, SerialSocket: consoleSocket, RunDir: p.RunDir,
		StartPaused: c.StartPaused, NoReboot: !c.RebootResets, SCSI: c.SCSI,
	}
	if c.Kernel == "" {
		qc.Cmdline = ""
	}
	if c.EFI {
		qc.Firmware = qemu.FirmwareEFI
	}
	c.qemuGuestIntegration(&qc, time.Now())
	for _, d := range c.Disks {
		f, err := d.format()
		if err != nil {
			return qemu.Config{}, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		qd := qemu.Disk{Path: d.Path, Format: qemu.DiskFormat(f), ReadOnly: d.ReadOnly, CDROM: d.CDROM, Serial: d.Serial, BootOrder: d.Boot, Queues: d.Queues}
		switch d.Bus {
		case v1.DiskBusSATA:
			qd.Bus = qemu.BusSATA
		case v1.DiskBusVirtio, "":
			qd.Bus = qemu.BusVirtio
		default:
			return qemu.Config{}, fmt.Errorf("disk %s: bus %s is not supported", d.Name, d.Bus)
		}
		if qd.Bus == qemu.BusSATA && !qd.CDROM {
			qd.ReadOnly = false // QEMU's ide-hd cannot be read-only
		}
		qc.Disks = append(qc.Disks, qd)
	}
	for _, n := range c.NICs {
		if n.LinkDown {
			// QEMU sets a link down only over QMP (set_link) once it
			// runs, which a migration would not carry to the target.
			return qemu.Config{}, fmt.Errorf("interface %s: state down is not supported by the QEMU backend", n.Name)
		}
		qn := qemu.NIC{Tap: n.Tap, MAC: n.MAC.String(), Model: qemu.NICVirtio, Queues: n.Queues}
		if n.Model == "e1000" {
			qn.Model = qemu.NICE1000
		}
		qc.NICs = append(qc.NICs, qn)
	}
	if err := qc.Validate(); err != nil {
		return qemu.Config{}, err
	}
	return qc, nil
}
