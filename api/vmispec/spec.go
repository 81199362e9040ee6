// Package vmispec is what virt-controller, virt-launcher, virt-handler,
// virt-api and the operators agree on about a VMI beyond the API types:
// which backend runs it, how much CPU and memory the guest gets, which
// NICs sit on the pod network, and where in the launcher pod things live.
// It sits with the API types, below every component that reads a VMI,
// and depends only on them and on net/dhcp's lease, so every component
// can import it without linking the VMM.
package vmispec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Annotations on VMIs (and VM templates).
const (
	// BackendAnnotation, set by the user, forces a backend: "qemu" or
	// "kubevmm". Without it the launcher picks one (SelectBackend).
	BackendAnnotation = "kubevmm.io/backend"
	// ActiveBackendAnnotation is written by virt-handler with the backend
	// the launcher reports it runs the guest on.
	ActiveBackendAnnotation = "kubevmm.io/active-backend"
	// ActiveBackendReasonAnnotation, written with it, says why the
	// launcher chose that backend (SelectBackend's reason: the
	// annotation, the field that needs QEMU, or what a boot disk's image
	// lacks).
	ActiveBackendReasonAnnotation = "kubevmm.io/active-backend-reason"
	// QEMUAccelAnnotation chooses how the QEMU backend runs guest code:
	// "kvm" (hardware virtualization through /dev/kvm), "tcg" (QEMU's own
	// emulator: slow, but independent of the host's KVM) or "auto" (the
	// default): tcg on hosts whose KVM emulates guest kernel mode (the
	// kvm_pvm module, nested without VT-x/SVM, where QEMU+KVM stalls for
	// minutes in a kernel's decompressor), kvm elsewhere.
	QEMUAccelAnnotation = "kubevmm.io/qemu-accel"
	// SeccompAnnotation sets what the kubevmm backend's seccomp filter
	// does with a system call outside the VMM's list: "kill" (the
	// default: the pod's VMM dies of SIGSYS), "log" (the kernel logs it
	// and it runs: for finding what a new path needs) or "off".
	SeccompAnnotation = "kubevmm.io/seccomp"
)

// QEMU accelerator choices (QEMUAccelAnnotation).
const (
	QEMUAccelAuto = "auto"
	QEMUAccelKVM  = "kvm"
	QEMUAccelTCG  = "tcg"
)

// QEMUAccel is the QEMUAccelAnnotation's value, "auto" when unset.
func QEMUAccel(annotations map[string]string) (string, error) {
	switch a := annotations[QEMUAccelAnnotation]; a {
	case "", QEMUAccelAuto:
		return QEMUAccelAuto, nil
	case QEMUAccelKVM, QEMUAccelTCG:
		return a, nil
	default:
		return "", fmt.Errorf("annotation %s: %q is not an accelerator (want kvm, tcg or auto)", QEMUAccelAnnotation, a)
	}
}

// Backend is what runs the guest.
type Backend string

const (
	// BackendKubevmm is our own VMM, in the launcher process.
	BackendKubevmm Backend = "kubevmm"
	// BackendQEMU is QEMU driven over QMP (launcher/qemu).
	BackendQEMU Backend = "qemu"
)

// StateStarting is the control API's state (vmm/api.Info.State) of a
// launcher whose guest does not run yet: it waits for the pod network, or
// loads the kernel.
const StateStarting = "Starting"

// GuestCID is the vsock context ID of a guest on our VMM whose VMI has no
// status.VSOCKCID (no autoattachVSOCK), and the lowest that virt-controller
// allocates (0-2 are the hypervisor's, local and the host's). Each VM's
// vsock device is its own, with a unix socket as its host side (no host
// kernel vsock), so CIDs need not be unique on a node for it to work; the
// allocated ones are cluster-unique as in KubeVirt, for host software that
// tells guests apart by CID. The device is always there: it carries the
// guest agent's channel, as KubeVirt's virtio-serial channel is always
// there.
const GuestCID = 3

// Files and sockets inside the launcher pod (and, for the socket
// directory, on the node).
const (
	// ControlSocket is the VMM control API (vmm/api) in the socket dir.
	ControlSocket = "vmm.sock"
	// HotplugSocket takes hot-plugged volumes' images from virt-handler,
	// as open descriptors (vmm/api.ServeVolumeFiles).
	HotplugSocket = "hotplug.sock"
	// ConsoleSocket is the guest's serial console in the socket dir.
	ConsoleSocket = "console.sock"
	// VsockSocket is the host end of the guest's vsock device (our VMM
	// only): the launcher reaches the guest agent through it.
	VsockSocket = "vsock.sock"
	// ExitFile in the socket dir records how the guest ended (JSON
	// vmm/api.Info), so the end is known after the launcher is gone.
	ExitFile = "exit.json"

	// KernelBootDir holds the kernel and initrd copied out of the
	// kernelBoot container image by an init container.
	KernelBootDir = "/var/run/kubevmm/kernel-boot"
	// KernelFile and InitrdFile are their names inside KernelBootDir.
	KernelFile = "kernel"
	InitrdFile = "initrd"
	// ContainerDiskDir holds one copied image per containerDisk volume,
	// named after the volume (ContainerDiskFile).
	ContainerDiskDir = "/var/run/kubevmm/container-disks"
	// CloudInitDir is where the launcher writes the VMI's cloud-init disk
	// (an emptyDir).
	CloudInitDir = "/var/run/kubevmm/cloud-init"
	// SecretDir holds the Secrets the cloud-init disk is made of, one
	// directory each (launcher/cloudinit names them).
	SecretDir = "/var/run/kubevmm/secrets"
	// BinDir holds a copy of the virt-launcher binary, which the init
	// containers of foreign images run to copy their files out.
	BinDir = "/var/run/kubevmm/bin"

	// LauncherUIDBase and LauncherUIDCount are the range of the users the
	// launchers run as (LauncherUID): from 2^30, far above the users and
	// the subordinate-UID ranges of a node, 2^24 of them.
	LauncherUIDBase  = 1 << 30
	LauncherUIDCount = 1 << 24
	// SeccompProfile is the launcher pods' seccomp profile, relative to
	// the kubelet's seccomp directory (a Localhost profile), which
	// virt-handler installs on its node.
	SeccompProfile = "kubevmm/launcher.json"
)

// LauncherUID is the user (and group) the launchers of the VMI vmiUID run
// as: one of its own, not root, so that the launchers of two VMIs cannot
// touch each other's files or processes; the source and target launchers
// of a migration share it. It is a stable hash (FNV-1a) of the VMI's UID
// into the LauncherUIDBase range: two VMIs share a user only by collision
// (for 100 VMIs on a node, about 3 in 10,000 chances).
func LauncherUID(vmiUID types.UID) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(vmiUID)) // a hash.Hash never fails
	return LauncherUIDBase + int(h.Sum32()%LauncherUIDCount)
}

// ContainerDiskFile is the path of a containerDisk volume's copy.
func ContainerDiskFile(volume string) string {
	return ContainerDiskDir + "/" + volume + ".img"
}

// Masquerade addressing (KubeVirt's defaults): the guest is 10.0.2.2 behind
// the pod IP, its gateway 10.0.2.1 is the tap in the pod.
const (
	DefaultVMNetworkCIDR = "10.0.2.0/24"
	GatewayIP            = "10.0.2.1"
	GuestIP              = "10.0.2.2"
	PodInterface         = "eth0"
)

// GuestHostname is the guest's hostname as KubeVirt gives it, in its
// cloud-init metadata and its DHCP lease alike: spec.hostname, else the
// VMI's name up to its first dot, at most 63 characters.
func GuestHostname(vmi *v1.VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	h, _, _ := strings.Cut(vmi.Name, ".")
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// TapName is the tap device of the i-th pod-network NIC.
func TapName(i int) string { return "tap" + strconv.Itoa(i) }

// GuestMemory is the memory the guest sees: domain.memory.guest, else the
// memory request, else the memory limit (KubeVirt's defaulting order).
func GuestMemory(s *v1.VirtualMachineInstanceSpec) (resource.Quantity, error) {
	d := s.Domain
	if d.Memory != nil && d.Memory.Guest != nil {
		return d.Memory.Guest.DeepCopy(), nil
	}
	if q, ok := d.Resources.Requests[corev1.ResourceMemory]; ok {
		return q.DeepCopy(), nil
	}
	if q, ok := d.Resources.Limits[corev1.ResourceMemory]; ok {
		return q.DeepCopy(), nil
	}
	return resource.Quantity{}, fmt.Errorf("no guest memory: set spec.domain.memory.guest or spec.domain.resources.requests.memory")
}

// VCPUs is sockets*cores*threads, each defaulting to 1.
func VCPUs(s *v1.VirtualMachineInstanceSpec) int {
	c := s.Domain.CPU
	if c == nil {
		return 1
	}
	n := 1
	for _, v := range []uint32{c.Sockets, c.Cores, c.Threads} {
		if v > 0 {
			n *= int(v)
		}
	}
	return n
}

// MaxQueues bounds the queues of one NIC or disk: KubeVirt caps its one
// per vCPU at 256 (a tap's limit), the kubevmm VMM serves at most 64 per
// device (vnet.MaxPairs, blk.MaxQueues), and both backends get the same.
const MaxQueues = 64

// NICQueues is how many queue pairs a NIC of model gets: as KubeVirt does,
// one per vCPU for a virtio NIC with networkInterfaceMultiqueue (up to
// MaxQueues), else one. The tap virt-handler creates has that many queues.
func NICQueues(s *v1.VirtualMachineInstanceSpec, model string) int {
	if m := s.Domain.Devices.NetworkInterfaceMultiQueue; m == nil || !*m || model != "virtio" {
		return 1
	}
	return min(VCPUs(s), MaxQueues)
}

// DiskQueues is how many request queues a virtio disk gets: one per vCPU
// with blockMultiQueue (up to MaxQueues), else one.
func DiskQueues(s *v1.VirtualMachineInstanceSpec) int {
	if m := s.Domain.Devices.BlockMultiQueue; m == nil || !*m {
		return 1
	}
	return min(VCPUs(s), MaxQueues)
}

// GracePeriodSeconds is how long the guest of a deleted (or stopped) VMI
// gets to end by itself before it is stopped: the VMI's
// terminationGracePeriodSeconds, else the default.
func GracePeriodSeconds(s *v1.VirtualMachineInstanceSpec) int64 {
	if g := s.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		return *g
	}
	return v1.DefaultGracePeriodSeconds
}

// Interface bindings kubevmm implements (spec.domain.devices.interfaces[]).
const (
	// BindingMasquerade NATs the guest behind the pod IP (handler network.go).
	BindingMasquerade = "masquerade"
	// BindingBridge puts the guest's tap and the pod interface on one
	// in-pod Linux bridge (KubeVirt's k6t-<pod interface>): the guest is
	// on the pod interface's layer 2 network.
	BindingBridge = "bridge"
)

// PodNIC is a guest NIC and the pod interface virt-handler wires it to.
type PodNIC struct {
	Index int    // position in spec.domain.devices.interfaces
	Name  string // interface (= network) name
	Model string // virtio or e1000
	MAC   string // from the spec; empty: the launcher derives one
	Tap   string
	// Queues of the tap and queue pairs of the NIC (NICQueues): above
	// 1, the tap is a multi-queue tap.
	Queues int
	// Binding is BindingMasquerade or BindingBridge.
	Binding string
	// PodInterface is the pod's interface the NIC is wired to:
	// PodInterface (eth0) for the pod network, MultusInterfaceName for a
	// multus network.
	PodInterface string
	// Multus is the NetworkAttachmentDefinition of a multus network, as
	// the spec names it (<name> or <namespace>/<name>); empty for the
	// pod network.
	Multus string
	// LinkDown: state: down, the guest sees the NIC's link down.
	LinkDown bool
	// Ports are the only ports masquerade forwards to the guest; none:
	// every port.
	Ports []v1.Port
}

// PodNICs are the VMI's NICs in spec order, the one on the pod network
// (masquerade or bridge) and those on multus networks (bridge); TapName
// numbers them in this order, which is also the order of their devices
// in the guest, so a migration target builds the same machine. virt-api
// refuses every other combination.
func PodNICs(s *v1.VirtualMachineInstanceSpec) []PodNIC {
	nets := map[string]v1.Network{}
	for _, n := range s.Networks {
		nets[n.Name] = n
	}
	var out []PodNIC
	for i, ifc := range s.Domain.Devices.Interfaces {
		n, ok := nets[ifc.Name]
		if !ok {
			continue
		}
		nic := PodNIC{Index: i, Name: ifc.Name, Model: ifc.Model, MAC: ifc.MacAddress, LinkDown: ifc.State == "down"}
		switch {
		case n.Pod != nil && ifc.Masquerade != nil:
			nic.Binding, nic.PodInterface, nic.Ports = BindingMasquerade, PodInterface, ifc.Ports
		case n.Pod != nil && ifc.Bridge != nil:
			nic.Binding, nic.PodInterface = BindingBridge, PodInterface
		case n.Multus != nil && !n.Multus.Default && ifc.Bridge != nil:
			nic.Binding, nic.PodInterface, nic.Multus = BindingBridge, MultusInterfaceName(n.Name), n.Multus.NetworkName
		default:
			continue
		}
		if nic.Model == "" {
			nic.Model = "virtio"
		}
		nic.Tap, nic.Queues = TapName(len(out)), NICQueues(s, nic.Model)
		out = append(out, nic)
	}
	return out
}

// MultusInterfaceName is the name of the pod interface Multus creates for
// the secondary network network, as KubeVirt names it (its hashed scheme):
// "pod" and the first 11 hex digits of the SHA-256 of the network's name.
func MultusInterfaceName(network string) string {
	h := sha256.Sum256([]byte(network))
	return multusPrefix + hex.EncodeToString(h[:])[:11]
}

const multusPrefix = "pod"

// BridgeName is the in-pod bridge of a bridge-bound NIC on podInterface:
// "k6t-" and the interface name without MultusInterfaceName's prefix, as
// KubeVirt names it, which fits the kernel's 15 bytes.
func BridgeName(podInterface string) string {
	return "k6t-" + strings.TrimPrefix(podInterface, multusPrefix)
}

// MACFor is the NIC's MAC address: its macAddress, else one derived from the
// VMI UID and the interface name, stable across launcher restarts and
// locally administered (02:6b:76 = "kv"). A NIC that TakesPodMAC has it
// only where the pod interface's is not recorded (PodBridgeRecord.GuestMAC).
func (n PodNIC) MACFor(vmiUID string) (net.HardwareAddr, error) {
	if n.MAC != "" {
		m, err := net.ParseMAC(n.MAC)
		if err != nil || len(m) != 6 || m[0]&1 != 0 {
			return nil, fmt.Errorf("spec.domain.devices.interfaces[%d].macAddress %q: not a unicast MAC address", n.Index, n.MAC)
		}
		return m, nil
	}
	h := sha256.Sum256([]byte(vmiUID + "/" + n.Name))
	return net.HardwareAddr{0x02, 0x6b, 0x76, h[0], h[1], h[2]}, nil
}

// QEMUReason is one thing in a VMI that only the QEMU backend provides, with
// the field (relative to the VMI spec) that asks for it.
type QEMUReason struct {
	Field string
	Why   string
}

func (r QEMUReason) String() string { return r.Field + ": " + r.Why }

// BootDisk is the index in domain.devices.disks of the disk a VMI without
// kernelBoot boots from, as KubeVirt's BIOS boots: the disk with the
// lowest bootOrder, else the first disk; -1 if it has no disks.
func BootDisk(s *v1.VirtualMachineInstanceSpec) int {
	best := -1
	for i, d := range s.Domain.Devices.Disks {
		switch {
		case best < 0:
			best = i
		case d.BootOrder == nil:
		case s.Domain.Devices.Disks[best].BootOrder == nil || *d.BootOrder < *s.Domain.Devices.Disks[best].BootOrder:
			best = i
		}
	}
	return best
}

// DiskBootCheck reads the image of the VMI's boot disk (BootDisk gives
// its index) and says whether our VMM can boot it without firmware: nil if
// the image carries a Linux boot entry (vmm/boot/disk), else an error
// naming what is missing. Only the launcher has the image; callers
// without it pass nil, and a disk boot then counts as possible.
type DiskBootCheck func(disk int) error

// NeedsQEMU lists what in the spec our VMM cannot do but QEMU can: SATA
// disks, e1000 NICs, Hyper-V enlightenments, EFI firmware (secure boot
// included), a TPM, the clock's timers our VMM lacks, and booting a
// disk whose image has no Linux boot entry, which needs firmware and its
// boot loader (check reads the image; see DiskBootCheck). A VMI with BIOS
// firmware (KubeVirt's default) and no kernelBoot boots its boot disk; our
// VMM boots the disk's default Linux entry directly. The image is read
// only when nothing else sends the VMI to QEMU.
func NeedsQEMU(s *v1.VirtualMachineInstanceSpec, check DiskBootCheck) []QEMUReason {
	var out []QEMUReason
	add := func(field, why string) { out = append(out, QEMUReason{Field: field, Why: why}) }
	for i, d := range s.Domain.Devices.Disks {
		base := "domain.devices.disks[" + strconv.Itoa(i) + "]"
		switch {
		case d.Disk != nil && d.Disk.Bus == v1.DiskBusSATA:
			add(base+".disk.bus", `"sata" is not supported by the kubevmm VMM`)
		case d.CDRom != nil:
			add(base+".cdrom", "CD-ROMs are not supported by the kubevmm VMM")
		}
	}
	for i, ifc := range s.Domain.Devices.Interfaces {
		if ifc.Model == "e1000" {
			add("domain.devices.interfaces["+strconv.Itoa(i)+"].model", `"e1000" is not supported by the kubevmm VMM`)
		}
	}
	if f := s.Domain.Features; f != nil && f.Hyperv != nil {
		add("domain.features.hyperv", "Hyper-V enlightenments are not supported by the kubevmm VMM")
	}
	fw := s.Domain.Firmware
	if fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		add("domain.firmware.bootloader.efi", "EFI firmware is not supported by the kubevmm VMM")
	}
	out = append(out, guestIntegrationNeeds(s)...)
	if fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		return out
	}
	// A disk boot asking for SMM (KubeVirt templates with secure boot do)
	// keeps QEMU, which ran every disk boot before our VMM could; with
	// kernelBoot virt-api refuses it instead.
	if f := s.Domain.Features; f != nil && f.SMM != nil && (f.SMM.Enabled == nil || *f.SMM.Enabled) {
		add("domain.features.smm", "the kubevmm VMM has no SMM")
	}
	if len(out) > 0 {
		return out
	}
	switch i := BootDisk(s); {
	case i < 0:
		add("domain.firmware.kernelBoot", "no kernelBoot and no disk to boot: the kubevmm VMM boots a kernel or a disk's Linux boot entry")
	case check != nil:
		if err := check(i); err != nil {
			add("domain.devices.disks["+strconv.Itoa(i)+"]", "the boot disk "+s.Domain.Devices.Disks[i].Name+" has no Linux boot entry the kubevmm VMM can boot (booting it needs firmware): "+err.Error())
		}
	}
	return out
}

// SelectBackend decides which backend runs the VMI: the annotation if set,
// else QEMU when NeedsQEMU says so, else our VMM. The reason says why.
// check reads the boot disk's image (DiskBootCheck; nil without it).
func SelectBackend(annotations map[string]string, s *v1.VirtualMachineInstanceSpec, check DiskBootCheck) (Backend, string, error) {
	switch a := annotations[BackendAnnotation]; a {
	case "":
	case string(BackendQEMU):
		return BackendQEMU, "requested by the " + BackendAnnotation + " annotation", nil
	case string(BackendKubevmm):
		if need := NeedsQEMU(s, check); len(need) > 0 {
			return "", "", fmt.Errorf("annotation %s: %q cannot run this VMI: %s", BackendAnnotation, a, need[0])
		}
		return BackendKubevmm, "requested by the " + BackendAnnotation + " annotation", nil
	default:
		return "", "", fmt.Errorf("annotation %s: %q is not a backend (want qemu or kubevmm)", BackendAnnotation, a)
	}
	if need := NeedsQEMU(s, check); len(need) > 0 {
		return BackendQEMU, need[0].String(), nil
	}
	if fw := s.Domain.Firmware; fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		return BackendKubevmm, "the kubevmm VMM supports every device of this VMI and boots its disk's Linux boot entry", nil
	}
	return BackendKubevmm, "the kubevmm VMM supports every device of this VMI", nil
}

// GuestExitFailed reports whether a launcher's exit word (api.Info.Exit:
// how the guest ended) means the guest failed. Clean ends are those of our
// VMM (vmm/machine: the guest reset or powered off, the VMM was stopped or
// the guest migrated away) and of the QEMU backend (launcher/qemu: guest
// or host shutdown, killed on purpose); anything else, an unknown word
// included, is a failure. Kept here as words so that virt-handler judges
// an exit without linking the VMM.
func GuestExitFailed(exit string) bool {
	switch exit {
	case "reset", "shutdown", "stopped", "migrated", // vmm/machine
		"guest-shutdown", "host-shutdown", "killed": // launcher/qemu
		return false
	}
	return true
}

// PodBridge says whether the NIC is bridge-bound on the pod network:
// the guest has the pod's IPv4 address, handed out by the launcher's
// DHCP server, and the pod keeps none of its own.
func (n PodNIC) PodBridge() bool { return n.Binding == BindingBridge && n.Multus == "" }

// PodBridgeFakeIP is the address of the in-pod bridge of a NIC
// bridge-bound on the pod network (KubeVirt's link-local "fake IP"): the
// pod's own, from which the launcher's DHCP server answers and the pod
// (port-forward) reaches the guest, whose pod IP it no longer has.
const PodBridgeFakeIP = "169.254.75.10"
