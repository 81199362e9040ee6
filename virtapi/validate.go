package virtapi

import (
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// What the VMM can run, checked at admission so that a VMI never passes
// only to fail in its launcher.
const (
	// MaxVCPUs is the most vCPUs a guest can have: the kubevmm VMM's MP
	// table describes at most 254 (8-bit APIC IDs, one taken by the
	// IOAPIC: vmm/arch/x86.MaxCPUs); QEMU allows 255.
	MaxVCPUs = 254
	// MaxDiskSerial is the length of a virtio-blk serial (VIRTIO_BLK_ID_BYTES);
	// QEMU's SATA serial has the same limit.
	MaxDiskSerial = 20
	// SidecarHookAnnotation asks KubeVirt for hook sidecars in the launcher
	// pod; kubevmm's launcher has no hook points.
	SidecarHookAnnotation = "hooks.kubevirt.io/hookSidecars"
)

// MinGuestMemory is the least guest memory the VMM boots (launcher.BuildVMConfig).
var MinGuestMemory = resource.MustParse("16Mi")

// ValidateVMISpec returns what kubevmm refuses in a VMI spec, as KubeVirt's
// webhooks do: one error per field, with its full path under p ("spec" for
// a VMI, "spec.template.spec" for a VM); meta is the path of the object
// metadata holding the annotations. A field kubevmm does not honour is
// refused rather than ignored: a user applying a KubeVirt manifest either
// gets what it says or is told which field we cannot do. What only the QEMU
// backend provides (SATA, e1000, Hyper-V, EFI and secure boot, a TPM,
// clock timers, booting a disk without a Linux boot entry) is accepted: the launcher routes such VMIs to QEMU
// (vmispec.SelectBackend).
//
// Hotpluggable volumes (and their disks) are checked as addvolume checks
// them, the rest of the spec without them (they are appended, so the
// indexes of the others stay).
func ValidateVMISpec(p *field.Path, s *v1.VirtualMachineInstanceSpec, meta *field.Path, annotations map[string]string) field.ErrorList {
	errs := validateHotplugVolumes(p, s)
	s = s.WithoutHotplugVolumes()
	for _, f := range v1.UnmodeledFields(s) {
		errs = append(errs, unsupported(p, f, ""))
	}
	backend, bErrs := validateAnnotations(meta.Child("annotations"), s, annotations)
	errs = append(errs, bErrs...)
	errs = append(errs, validateTopLevel(p, s)...)
	d := p.Child("domain")
	errs = append(errs, validateResources(d, s)...)
	errs = append(errs, validateCPU(d.Child("cpu"), s.Domain.CPU)...)
	errs = append(errs, validateMemory(d.Child("memory"), s.Domain.Memory)...)
	errs = append(errs, validateMachine(d.Child("machine"), s.Domain.Machine)...)
	errs = append(errs, validateFirmware(d.Child("firmware"), s.Domain.Firmware)...)
	errs = append(errs, validateFeatures(d.Child("features"), s.Domain.Features, backend)...)
	errs = append(errs, validateQEMUDevices(d.Child("devices"), &s.Domain.Devices, backend)...)
	errs = append(errs, validateClock(d.Child("clock"), s.Domain.Clock, s.Domain.Features)...)
	errs = append(errs, validateTPM(d.Child("devices", "tpm"), s.Domain.Devices.TPM)...)
	errs = append(errs, validateSecureBoot(d.Child("firmware", "bootloader", "efi", "secureBoot"), s)...)
	errs = append(errs, validateDevices(d.Child("devices"), &s.Domain.Devices)...)
	errs = append(errs, validateDisks(d.Child("devices", "disks"), s.Domain.Devices.Disks, s.Volumes)...)
	errs = append(errs, validateInterfaces(d.Child("devices", "interfaces"), s.Domain.Devices.Interfaces, s.Networks)...)
	errs = append(errs, validateNetworks(p.Child("networks"), s.Networks)...)
	errs = append(errs, validateVolumes(p.Child("volumes"), s.Volumes)...)
	errs = append(errs, validateAccessCredentials(p.Child("accessCredentials"), s.AccessCredentials, s.Volumes)...)
	if v := s.Domain.IOThreadsPolicy; v != nil {
		errs = append(errs, unsupported(d, "ioThreadsPolicy", ""))
	}
	if v := s.Domain.RebootPolicy; v != nil && *v != "Terminate" && *v != "Reboot" {
		errs = append(errs, notSupported(d.Child("rebootPolicy"), *v, "Reboot or Terminate"))
	}
	return errs
}

// unsupported is a field kubevmm does not implement at all; f is its path
// under p ("" for p itself), why an optional explanation.
func unsupported(p *field.Path, f, why string) *field.Error {
	if f != "" {
		p = child(p, f)
	}
	d := "is not supported by kubevmm"
	if why != "" {
		d += ": " + why
	}
	return &field.Error{Type: field.ErrorTypeNotSupported, Field: p.String(), BadValue: field.OmitValueType{}, Detail: d}
}

// notSupported is a value kubevmm does not implement.
func notSupported(p *field.Path, value any, why string) *field.Error {
	d := fmt.Sprintf("%v is not supported by kubevmm", value)
	if s, ok := value.(string); ok {
		d = fmt.Sprintf("%q is not supported by kubevmm", s)
	}
	if why != "" {
		d += " (" + why + ")"
	}
	return &field.Error{Type: field.ErrorTypeNotSupported, Field: p.String(), BadValue: value, Detail: d}
}

func invalid(p *field.Path, value any, format string, a ...any) *field.Error {
	return field.Invalid(p, value, fmt.Sprintf(format, a...))
}

func required(p *field.Path, format string, a ...any) *field.Error {
	return field.Required(p, fmt.Sprintf(format, a...))
}

// child appends a dotted path relative to p; indexes ("gpus[0]") are kept
// as written, which is how field.Path prints them too.
func child(p *field.Path, rel string) *field.Path {
	return field.NewPath(p.String() + "." + rel)
}

func isTrue(b *bool) bool { return b != nil && *b }

func isFalse(b *bool) bool { return b != nil && !*b }

// validateAnnotations checks the annotations that steer the launcher and
// returns the backend that will run the VMI ("" if the choice is invalid).
func validateAnnotations(p *field.Path, s *v1.VirtualMachineInstanceSpec, annotations map[string]string) (vmispec.Backend, field.ErrorList) {
	var errs field.ErrorList
	// Without the boot disk's image (only the launcher reads it), a disk
	// boot counts as possible for our VMM.
	backend, _, err := vmispec.SelectBackend(annotations, s, nil)
	if err != nil {
		errs = append(errs, invalid(p.Key(vmispec.BackendAnnotation), annotations[vmispec.BackendAnnotation], "%v", err))
	}
	if _, err := vmispec.QEMUAccel(annotations); err != nil {
		errs = append(errs, invalid(p.Key(vmispec.QEMUAccelAnnotation), annotations[vmispec.QEMUAccelAnnotation], "%v", err))
	}
	if _, ok := annotations[SidecarHookAnnotation]; ok {
		errs = append(errs, unsupported(p.Key(SidecarHookAnnotation), "", "the launcher has no hook points for sidecars"))
	}
	return backend, errs
}

// validateTopLevel checks the spec's own fields; those copied to the
// launcher pod (node selection, DNS, hostname, ...) need nothing here.
func validateTopLevel(p *field.Path, s *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	// None is what kubevmm does: a drain evicts the launcher pod, which
	// shuts the guest down. Nothing live-migrates a VMI off a drained node.
	if e := s.EvictionStrategy; e != nil && *e != v1.EvictionStrategyNone {
		errs = append(errs, notSupported(p.Child("evictionStrategy"), string(*e), "None only: nothing migrates VMIs off a drained node"))
	}
	if st := s.StartStrategy; st != nil && *st != v1.StartStrategyPaused {
		errs = append(errs, notSupported(p.Child("startStrategy"), string(*st), "Paused"))
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, invalid(p.Child("terminationGracePeriodSeconds"), *g, "must not be negative"))
	}
	// KubeVirt hands the pod's DNS settings to the guest over DHCP, as the
	// launcher does for masquerade and bridge on the pod network; without
	// such a NIC they would only reach the launcher.
	dhcp := false
	for _, n := range vmispec.PodNICs(s) {
		dhcp = dhcp || n.ServesDHCP()
	}
	const why = "the guest gets no DNS settings: kubevmm serves DHCP only to masquerade and bridge on the pod network"
	if dp := s.DNSPolicy; !dhcp && dp != "" && dp != corev1.DNSClusterFirst {
		errs = append(errs, notSupported(p.Child("dnsPolicy"), string(dp), why))
	}
	if s.DNSConfig != nil && !dhcp {
		errs = append(errs, unsupported(p, "dnsConfig", why))
	}
	if a := s.Architecture; a != "" && a != "amd64" {
		errs = append(errs, notSupported(p.Child("architecture"), a, "amd64"))
	}
	return errs
}

// validateResources checks requests against limits: the launcher pod
// carries both, and the API server would refuse the pod, not the VMI.
func validateResources(d *field.Path, s *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	r := s.Domain.Resources
	p := d.Child("resources")
	for _, name := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		req, okReq := r.Requests[name]
		lim, okLim := r.Limits[name]
		if okReq && okLim && req.Cmp(lim) > 0 {
			errs = append(errs, invalid(p.Child("requests", string(name)), req.String(), "must not exceed limits.%s (%s)", name, lim.String()))
		}
	}
	mem, err := vmispec.GuestMemory(s)
	switch {
	case err != nil:
		errs = append(errs, required(d.Child("memory", "guest"), "set domain.memory.guest or domain.resources.requests.memory"))
	case mem.Cmp(MinGuestMemory) < 0:
		// Name the field the guest memory came from (KubeVirt's order).
		mp := p.Child("limits", string(corev1.ResourceMemory))
		if s.Domain.Memory != nil && s.Domain.Memory.Guest != nil {
			mp = d.Child("memory", "guest")
		} else if _, ok := r.Requests[corev1.ResourceMemory]; ok {
			mp = p.Child("requests", string(corev1.ResourceMemory))
		}
		errs = append(errs, invalid(mp, mem.String(), "guest memory must be at least %s", MinGuestMemory.String()))
	}
	return errs
}

// validateCPU: both backends show the guest one socket of cores with one
// thread each (the kubevmm VMM's CPUID leaves 4 and 0xb; QEMU's -smp N,
// which prefers cores since its 6.2 machine types), so only cores is
// honoured as a topology; sockets and threads above 1 are refused rather
// than flattened into a count.
func validateCPU(p *field.Path, c *v1.CPU) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	flat := "the guest sees one socket with one thread per core: use cores"
	if c.Sockets > 1 {
		errs = append(errs, notSupported(p.Child("sockets"), c.Sockets, flat))
	}
	if c.Threads > 1 {
		errs = append(errs, notSupported(p.Child("threads"), c.Threads, flat))
	}
	if c.Cores > MaxVCPUs {
		errs = append(errs, invalid(p.Child("cores"), c.Cores, "at most %d vCPUs", MaxVCPUs))
	}
	if c.MaxSockets > 0 {
		errs = append(errs, unsupported(p, "maxSockets", "CPU hotplug"))
	}
	if c.Model != "" {
		errs = append(errs, unsupported(p, "model", "the guest gets the backend's CPU model"))
	}
	if len(c.Features) > 0 {
		errs = append(errs, unsupported(p, "features", "the guest gets the backend's CPU features"))
	}
	if c.DedicatedCPUPlacement {
		errs = append(errs, unsupported(p, "dedicatedCpuPlacement", ""))
	}
	if c.IsolateEmulatorThread {
		errs = append(errs, unsupported(p, "isolateEmulatorThread", ""))
	}
	return errs
}

func validateMemory(p *field.Path, m *v1.Memory) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	if m.Hugepages != nil {
		errs = append(errs, unsupported(p, "hugepages", ""))
	}
	if m.MaxGuest != nil {
		errs = append(errs, unsupported(p, "maxGuest", "memory hotplug"))
	}
	return errs
}

// validateMachine accepts q35, which the mutating webhook defaults to (and
// which the QEMU backend runs); other machine types are refused.
func validateMachine(p *field.Path, m *v1.Machine) field.ErrorList {
	if m == nil || m.Type == "" || m.Type == DefaultMachineType {
		return nil
	}
	return field.ErrorList{notSupported(p.Child("type"), m.Type, DefaultMachineType)}
}

func validateFirmware(p *field.Path, fw *v1.Firmware) field.ErrorList {
	if fw == nil {
		return nil
	}
	var errs field.ErrorList
	if fw.UUID != "" && !vmispec.ValidUUID(string(fw.UUID)) {
		errs = append(errs, invalid(p.Child("uuid"), string(fw.UUID), "not a UUID (8-4-4-4-12 hex digits)"))
	}
	if fw.Serial != "" {
		errs = append(errs, unsupported(p, "serial", ""))
	}
	if bl := fw.Bootloader; bl != nil {
		bp := p.Child("bootloader")
		if bl.BIOS != nil && bl.EFI != nil {
			errs = append(errs, invalid(bp, "bios, efi", "only one of bios and efi"))
		}
		if bl.BIOS != nil && isTrue(bl.BIOS.UseSerial) {
			errs = append(errs, unsupported(bp, "bios.useSerial", ""))
		}
		if bl.EFI != nil {
			if isTrue(bl.EFI.Persistent) {
				errs = append(errs, unsupported(bp, "efi.persistent", "EFI variables live as long as the VMI"))
			}
		}
	}
	if kb := fw.KernelBoot; kb != nil {
		kp := p.Child("kernelBoot")
		switch c := kb.Container; c {
		case nil:
			errs = append(errs, required(kp.Child("container"), "the kernel comes from a container image"))
		default:
			if c.Image == "" {
				errs = append(errs, required(kp.Child("container", "image"), "the image holding the kernel"))
			}
			if c.KernelPath == "" {
				errs = append(errs, required(kp.Child("container", "kernelPath"), "the kernel's path in the image"))
			}
		}
	}
	return errs
}

// validateFeatures: both backends always have ACPI (the kubevmm VMM's
// tables, QEMU's q35) and an APIC. Hyper-V
// is served by QEMU with a fixed set of enlightenments (launcher/qemu:
// relaxed, vapic, spinlocks 8191 with any accelerator; vpindex, runtime,
// synic, synictimer, reset, frequencies, tlbflush, ipi on KVM), so a
// request outside that set, or to switch one off, is refused.
func validateFeatures(p *field.Path, f *v1.Features, backend vmispec.Backend) field.ErrorList {
	if f == nil {
		return nil
	}
	var errs field.ErrorList
	if a := f.ACPI; a != nil && isFalse(a.Enabled) {
		errs = append(errs, notSupported(p.Child("acpi", "enabled"), false, "the guest always has ACPI"))
	}
	if a := f.APIC; a != nil {
		if isFalse(a.Enabled) {
			errs = append(errs, notSupported(p.Child("apic", "enabled"), false, "the guest always has an APIC"))
		}
		if a.EndOfInterrupt {
			errs = append(errs, unsupported(p, "apic.endOfInterrupt", ""))
		}
	}
	// QEMU's q35 has SMM with either accelerator (smm=auto); the kubevmm
	// VMM has none.
	if m := f.SMM; m != nil {
		on := m.Enabled == nil || *m.Enabled
		switch {
		case backend == vmispec.BackendKubevmm && on:
			errs = append(errs, unsupported(p, "smm", "the kubevmm VMM has no SMM"))
		case backend == vmispec.BackendQEMU && !on:
			errs = append(errs, notSupported(p.Child("smm", "enabled"), false, "the QEMU backend always has SMM"))
		}
	}
	if f.KVM != nil && f.KVM.Hidden {
		errs = append(errs, unsupported(p, "kvm.hidden", ""))
	}
	if f.Pvspinlock != nil {
		errs = append(errs, unsupported(p, "pvspinlock", ""))
	}
	if h := f.Hyperv; h != nil {
		errs = append(errs, validateHyperv(p.Child("hyperv"), h)...)
	}
	return errs
}

// hypervSpinlocks is the spinlock retry count QEMU is given (0x1fff).
const hypervSpinlocks = 8191

func validateHyperv(p *field.Path, h *v1.FeatureHyperv) field.ErrorList {
	var errs field.ErrorList
	// off refuses switching off an enlightenment QEMU is given anyway.
	off := func(name string, on *bool) {
		if isFalse(on) {
			errs = append(errs, notSupported(p.Child(name, "enabled"), false, "the QEMU backend gives a fixed set of enlightenments"))
		}
	}
	for _, f := range []struct {
		name string
		s    *v1.FeatureState
	}{
		{"relaxed", h.Relaxed}, {"vapic", h.VAPIC}, {"vpindex", h.VPIndex}, {"runtime", h.Runtime},
		{"synic", h.SyNIC}, {"reset", h.Reset}, {"frequencies", h.Frequencies}, {"ipi", h.IPI},
	} {
		if f.s != nil {
			off(f.name, f.s.Enabled)
		}
	}
	if sl := h.Spinlocks; sl != nil {
		off("spinlocks", sl.Enabled)
		if r := sl.Retries; r != nil && *r != hypervSpinlocks {
			errs = append(errs, notSupported(p.Child("spinlocks", "spinlocks"), *r, fmt.Sprintf("QEMU is given %d", hypervSpinlocks)))
		}
	}
	if t := h.SyNICTimer; t != nil {
		off("synictimer", t.Enabled)
		if t.Direct != nil {
			errs = append(errs, unsupported(p, "synictimer.direct", ""))
		}
	}
	if t := h.TLBFlush; t != nil {
		off("tlbflush", t.Enabled)
		if t.Direct != nil {
			errs = append(errs, unsupported(p, "tlbflush.direct", ""))
		}
		if t.Extended != nil {
			errs = append(errs, unsupported(p, "tlbflush.extended", ""))
		}
	}
	if h.VendorID != nil {
		errs = append(errs, unsupported(p, "vendorid", ""))
	}
	if h.Reenlightenment != nil {
		errs = append(errs, unsupported(p, "reenlightenment", ""))
	}
	if h.EVMCS != nil {
		errs = append(errs, unsupported(p, "evmcs", ""))
	}
	return errs
}

// validateDevices checks the device switches. A switch whose value says
// what kubevmm does anyway is accepted (no balloon, no graphics, a serial
// console, no hotplug); one asking for what it does not is refused.
// autoattachVSOCK is not among them: our VMM's guests always have a vsock
// device, and with it the VMI gets a cluster-unique status.VSOCKCID and
// the vsock subresource (on QEMU it is refused: validateQEMUDevices).
func validateDevices(p *field.Path, d *v1.Devices) field.ErrorList {
	var errs field.ErrorList
	for _, sw := range []struct {
		name string
		v    *bool
		want bool
		why  string
	}{
		{"useVirtioTransitional", d.UseVirtioTransitional, false, ""},
		{"autoattachGraphicsDevice", d.AutoattachGraphicsDevice, false, "the guest has no graphics device"},
		{"autoattachSerialConsole", d.AutoattachSerialConsole, true, "the guest always has its serial console"},
		{"logSerialConsole", d.LogSerialConsole, false, ""},
		{"autoattachMemBalloon", d.AutoattachMemBalloon, false, "the guest has no memory balloon"},
		{"autoattachInputDevice", d.AutoattachInputDevice, false, "the guest has no input device"},
	} {
		if sw.v != nil && *sw.v != sw.want {
			errs = append(errs, notSupported(p.Child(sw.name), *sw.v, sw.why))
		}
	}
	if len(d.Inputs) > 0 {
		errs = append(errs, unsupported(p, "inputs", ""))
	}
	return append(errs, validateMultiQueue(p, d)...)
}

// validateQEMUDevices refuses, on the QEMU backend, what only our VMM
// gives the guest: a vsock device (autoattachVSOCK would get the VMI a CID
// that no device carries) and a NIC whose link starts down (QEMU sets a
// link down only over QMP once it runs, and the launcher refuses it).
func validateQEMUDevices(p *field.Path, d *v1.Devices, backend vmispec.Backend) field.ErrorList {
	if backend != vmispec.BackendQEMU {
		return nil
	}
	var errs field.ErrorList
	if isTrue(d.AutoattachVSOCK) {
		errs = append(errs, notSupported(p.Child("autoattachVSOCK"), true, "the QEMU backend gives the guest no vsock device"))
	}
	for i, ifc := range d.Interfaces {
		if ifc.State == "down" {
			errs = append(errs, notSupported(p.Child("interfaces").Index(i).Child("state"), ifc.State, "the QEMU backend starts every link up"))
		}
	}
	return errs
}

// validateMultiQueue: networkInterfaceMultiqueue and blockMultiQueue give
// virtio NICs and disks a queue per vCPU (vmispec.NICQueues, DiskQueues). As
// in KubeVirt, multi-queue NICs with only non-virtio interfaces are refused.
func validateMultiQueue(p *field.Path, d *v1.Devices) field.ErrorList {
	if m := d.NetworkInterfaceMultiQueue; m == nil || !*m || len(d.Interfaces) == 0 {
		return nil
	}
	for _, ifc := range d.Interfaces {
		if ifc.Model == "" || ifc.Model == "virtio" {
			return nil
		}
	}
	return field.ErrorList{invalid(p.Child("networkInterfaceMultiqueue"), true, "virtio-net multiqueue request, but there are no virtio interfaces defined")}
}

func validateDisks(p *field.Path, disks []v1.Disk, volumes []v1.Volume) field.ErrorList {
	var errs field.ErrorList
	vols := map[string]bool{}
	for _, v := range volumes {
		vols[v.Name] = true
	}
	seen := map[string]bool{}
	for i, d := range disks {
		dp := p.Index(i)
		// Two disks of one name would both be the volume's: KubeVirt
		// refuses the second, naming it.
		errs = append(errs, uniqueName(dp.Child("name"), d.Name, seen, "disk")...)
		if d.Name != "" && !vols[d.Name] {
			errs = append(errs, invalid(dp.Child("name"), d.Name, "no volume named %q", d.Name))
		}
		n := 0
		for _, set := range []bool{d.Disk != nil, d.LUN != nil, d.CDRom != nil} {
			if set {
				n++
			}
		}
		if n > 1 {
			errs = append(errs, invalid(dp, d.Name, "only one of disk, lun and cdrom"))
		}
		if d.Disk != nil {
			switch d.Disk.Bus {
			case "", v1.DiskBusVirtio, v1.DiskBusSATA:
			default:
				errs = append(errs, notSupported(dp.Child("disk", "bus"), string(d.Disk.Bus), "virtio, sata"))
			}
			if d.Disk.ReadOnly && d.Disk.Bus == v1.DiskBusSATA {
				errs = append(errs, notSupported(dp.Child("disk", "readonly"), true, "QEMU's SATA disks are writable"))
			}
			if d.Disk.PciAddress != "" {
				errs = append(errs, unsupported(dp, "disk.pciAddress", "disks are virtio-mmio devices in the kubevmm VMM"))
			}
		}
		if d.LUN != nil {
			errs = append(errs, unsupported(dp, "lun", ""))
		}
		if c := d.CDRom; c != nil {
			if c.Bus != "" && c.Bus != v1.DiskBusSATA {
				errs = append(errs, notSupported(dp.Child("cdrom", "bus"), string(c.Bus), "sata"))
			}
			if isFalse(c.ReadOnly) {
				errs = append(errs, notSupported(dp.Child("cdrom", "readonly"), false, "CD-ROMs are read-only"))
			}
			if c.Tray != "" && c.Tray != "closed" {
				errs = append(errs, notSupported(dp.Child("cdrom", "tray"), c.Tray, "closed"))
			}
		}
		if b := d.BootOrder; b != nil && *b == 0 {
			errs = append(errs, invalid(dp.Child("bootOrder"), *b, "must be greater than 0"))
		}
		if len(d.Serial) > MaxDiskSerial {
			errs = append(errs, invalid(dp.Child("serial"), d.Serial, "at most %d characters (the virtio-blk serial's size)", MaxDiskSerial))
		} else if strings.ContainsFunc(d.Serial, func(r rune) bool { return r <= ' ' || r > '~' }) {
			errs = append(errs, invalid(dp.Child("serial"), d.Serial, "printable ASCII without spaces only"))
		}
		for _, s := range []struct{ name, v string }{{"cache", d.Cache}, {"io", d.IO}, {"tag", d.Tag}} {
			if s.v != "" {
				errs = append(errs, unsupported(dp, s.name, ""))
			}
		}
		if d.ErrorPolicy != nil {
			errs = append(errs, unsupported(dp, "errorPolicy", ""))
		}
		if isTrue(d.Shareable) {
			errs = append(errs, unsupported(dp, "shareable", ""))
		}
		if isTrue(d.DedicatedIOThread) {
			errs = append(errs, unsupported(dp, "dedicatedIOThread", ""))
		}
		if isTrue(d.ChangedBlockTracking) {
			errs = append(errs, unsupported(dp, "changedBlockTracking", ""))
		}
	}
	return errs
}

// uniqueName checks that a list entry (a network, a volume) has a name no
// earlier entry took, recording it in seen.
func uniqueName(p *field.Path, name string, seen map[string]bool, what string) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{required(p, "every %s needs a name", what)}
	case seen[name]:
		return field.ErrorList{field.Duplicate(p, name)}
	}
	seen[name] = true
	return nil
}

func validateVolumes(p *field.Path, volumes []v1.Volume) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	cloudInitVolume := ""
	for i, v := range volumes {
		vp := p.Index(i)
		errs = append(errs, uniqueName(vp.Child("name"), v.Name, seen, "volume")...)
		other := len(v1.UnmodeledFields(&v.VolumeSource)) > 0
		if v.DataVolume != nil {
			errs = append(errs, validateDataVolumeVolume(vp, v.DataVolume)...)
		}
		disk := v.PersistentVolumeClaim != nil || v.DataVolume != nil || v.EmptyDisk != nil || v.Ephemeral != nil || v.HostDisk != nil
		errs = append(errs, validateDiskVolume(vp, &v)...)
		cloudInit := v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil
		if cloudInit {
			if cloudInitVolume != "" {
				errs = append(errs, invalid(vp, v.Name, "only one cloud-init volume: the guest reads one (%s)", cloudInitVolume))
			}
			cloudInitVolume = vp.String()
			errs = append(errs, validateCloudInit(vp, &v)...)
		}
		n := 0
		for _, set := range []bool{v.ContainerDisk != nil, v.CloudInitNoCloud != nil, v.CloudInitConfigDrive != nil, v.PersistentVolumeClaim != nil, v.DataVolume != nil, v.EmptyDisk != nil, v.Ephemeral != nil, v.HostDisk != nil} {
			if set {
				n++
			}
		}
		if n > 1 {
			errs = append(errs, invalid(vp, v.Name, "must have exactly one source type set"))
		}
		switch c := v.ContainerDisk; {
		case c == nil && !other && !cloudInit && !disk:
			errs = append(errs, required(vp.Child("containerDisk"), "the volume needs a source"))
		case c != nil && c.Image == "":
			errs = append(errs, required(vp.Child("containerDisk", "image"), "the image holding the disk"))
		}
	}
	return errs
}

// KubeVirt's limits on inline cloud-init data: larger data goes in a
// Secret (secretRef, networkDataSecretRef), which the webhook never reads.
const (
	CloudInitUserDataMaxLen    = 2048
	CloudInitNetworkDataMaxLen = 16384
)

// validateCloudInit checks a cloudInitNoCloud or cloudInitConfigDrive
// volume as KubeVirt does: at most one source each of user data and
// network data, at least one of the two, base64 that decodes, inline data
// within the limits.
func validateCloudInit(vp *field.Path, v *v1.Volume) field.ErrorList {
	var errs field.ErrorList
	kind, d, _ := v.CloudInit()
	cp := vp.Child(kind)
	sources := 0
	check := func(what, raw, b64 string, ref *v1.LocalObjectReference, refField string, limit int) {
		n, size := 0, 0
		if ref != nil {
			n++
			if ref.Name == "" {
				errs = append(errs, required(cp.Child(refField, "name"), "the Secret holding the %s", what))
			}
		}
		if b64 != "" {
			n++
			b, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				errs = append(errs, invalid(cp.Child(what+"Base64"), field.OmitValueType{}, "not valid base64: %v", err))
			}
			size = len(b)
		}
		if raw != "" {
			n++
			size = len(raw)
		}
		if n > 1 {
			errs = append(errs, invalid(cp, field.OmitValueType{}, "only one of %s, %sBase64 and %s", what, what, refField))
		}
		if size > limit {
			errs = append(errs, invalid(cp.Child(what), field.OmitValueType{}, "%d bytes: at most %d inline, larger data goes in a Secret (%s)", size, limit, refField))
		}
		sources += n
	}
	check("userData", d.UserData, d.UserDataBase64, d.UserDataSecretRef, "secretRef", CloudInitUserDataMaxLen)
	check("networkData", d.NetworkData, d.NetworkDataBase64, d.NetworkDataSecretRef, "networkDataSecretRef", CloudInitNetworkDataMaxLen)
	if sources == 0 {
		errs = append(errs, required(cp.Child("userData"), "user data or network data"))
	}
	return errs
}

// validateAccessCredentials checks SSH public keys as KubeVirt does; they
// reach the guest through the cloud-init volume they name (qemuGuestAgent
// and userPassword are refused as unmodeled: the launcher does not push
// keys or passwords through the guest agent).
func validateAccessCredentials(p *field.Path, creds []v1.AccessCredential, volumes []v1.Volume) field.ErrorList {
	var errs field.ErrorList
	var noCloud, configDrive bool
	for _, v := range volumes {
		noCloud = noCloud || v.CloudInitNoCloud != nil
		configDrive = configDrive || v.CloudInitConfigDrive != nil
	}
	for i, c := range creds {
		cp := p.Index(i)
		k := c.SSHPublicKey
		if k == nil {
			if c.UserPassword == nil {
				errs = append(errs, required(cp.Child("sshPublicKey"), "exactly one access credential type"))
			}
			continue
		}
		if c.UserPassword != nil {
			errs = append(errs, invalid(cp, field.OmitValueType{}, "exactly one access credential type"))
		}
		switch s := k.Source.Secret; {
		case s == nil:
			errs = append(errs, required(cp.Child("sshPublicKey", "source", "secret"), "the Secret holding the keys"))
		case s.SecretName == "":
			errs = append(errs, required(cp.Child("sshPublicKey", "source", "secret", "secretName"), "the Secret holding the keys"))
		}
		m := k.PropagationMethod
		mp := cp.Child("sshPublicKey", "propagationMethod")
		n := 0
		for _, set := range []bool{m.NoCloud != nil, m.ConfigDrive != nil, m.QemuGuestAgent != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, invalid(mp, field.OmitValueType{}, "exactly one propagationMethod"))
		}
		if m.NoCloud != nil && !noCloud {
			errs = append(errs, invalid(mp.Child("noCloud"), field.OmitValueType{}, "needs a cloudInitNoCloud volume"))
		}
		if m.ConfigDrive != nil && !configDrive {
			errs = append(errs, invalid(mp.Child("configDrive"), field.OmitValueType{}, "needs a cloudInitConfigDrive volume"))
		}
	}
	return errs
}
