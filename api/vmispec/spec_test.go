package vmispec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
)

func kernelBootSpec() *v1.VirtualMachineInstanceSpec {
	g := resource.MustParse("128Mi")
	return &v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
		Memory:   &v1.Memory{Guest: &g},
		Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k", KernelPath: "/boot/vmlinux"}}},
	}}
}

func TestSelectBackend(t *testing.T) {
	s := kernelBootSpec()
	if b, _, err := SelectBackend(nil, s, nil); err != nil || b != BackendKubevmm {
		t.Fatalf("kernelBoot VMI: %s %v, want kubevmm", b, err)
	}
	if b, why, _ := SelectBackend(map[string]string{BackendAnnotation: "qemu"}, s, nil); b != BackendQEMU || !strings.Contains(why, "annotation") {
		t.Fatalf("annotation qemu: %s (%s)", b, why)
	}
	for name, mutate := range map[string]func(*v1.VirtualMachineInstanceSpec){
		"sata": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Disks = []v1.Disk{{Name: "d", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}}}
		},
		"e1000": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces = []v1.Interface{{Name: "n", Model: "e1000"}}
		},
		"hyperv":                  func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{}} },
		"efi":                     func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}} },
		"disk boot without disks": func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware = nil },
		"tpm":                     func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.TPM = &v1.TPMDevice{} },
		"uuid": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"
		},
		"hpet": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{HPET: &v1.HPETTimer{}}}
		},
		"hyperv clock": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{Hyperv: &v1.HypervTimer{Enabled: ptr.To(true)}}}
		},
		"no kvmclock": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{KVM: &v1.KVMTimer{Enabled: ptr.To(false)}}}
		},
		"rtc catching up": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{RTC: &v1.RTCTimer{TickPolicy: "catchup"}}}
		},
		"rtc on guest time": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{RTC: &v1.RTCTimer{Track: "guest"}}}
		},
		"disk boot with SMM": func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware = nil
			s.Domain.Devices.Disks = []v1.Disk{{Name: "d"}}
			s.Domain.Features = &v1.Features{SMM: &v1.FeatureState{}}
		},
	} {
		s := kernelBootSpec()
		mutate(s)
		b, why, err := SelectBackend(nil, s, nil)
		if err != nil || b != BackendQEMU {
			t.Errorf("%s: %s %v, want qemu", name, b, err)
		}
		if !strings.Contains(why, "domain.") {
			t.Errorf("%s: reason %q names no field", name, why)
		}
		if _, _, err := SelectBackend(map[string]string{BackendAnnotation: "kubevmm"}, s, nil); err == nil {
			t.Errorf("%s: forcing kubevmm was accepted", name)
		}
	}
	if _, _, err := SelectBackend(map[string]string{BackendAnnotation: "xen"}, s, nil); err == nil {
		t.Fatal("unknown backend accepted")
	}

	// A clock our VMM keeps: an offset (or zone) on its RTC, no HPET, no
	// Hyper-V clock, kvmclock, KVM's PIT delaying, an RTC on host time.
	s = kernelBootSpec()
	s.Domain.Clock = &v1.Clock{Timezone: ptr.To("Asia/Tokyo"), Timer: &v1.Timer{
		HPET: &v1.HPETTimer{Enabled: ptr.To(false)}, Hyperv: &v1.HypervTimer{Enabled: ptr.To(false)},
		KVM: &v1.KVMTimer{}, PIT: &v1.PITTimer{TickPolicy: "delay"}, RTC: &v1.RTCTimer{TickPolicy: "delay", Track: "wall"}}}
	s.Domain.Devices.TPM = &v1.TPMDevice{Enabled: ptr.To(false)}
	if b, why, err := SelectBackend(nil, s, nil); err != nil || b != BackendKubevmm {
		t.Errorf("a clock the kubevmm VMM keeps: %s (%s) %v, want kubevmm", b, why, err)
	}
}

func TestRTCOffset(t *testing.T) {
	summer, winter := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		clock *v1.Clock
		at    time.Time
		want  time.Duration
	}{
		{"no clock", nil, summer, 0},
		{"utc", &v1.Clock{UTC: &v1.ClockOffsetUTC{}}, summer, 0},
		{"utc shifted", &v1.Clock{UTC: &v1.ClockOffsetUTC{OffsetSeconds: ptr.To(-1800)}}, summer, -30 * time.Minute},
		{"Berlin in summer", &v1.Clock{Timezone: ptr.To("Europe/Berlin")}, summer, 2 * time.Hour},
		{"Berlin in winter", &v1.Clock{Timezone: ptr.To("Europe/Berlin")}, winter, time.Hour},
		{"Kolkata", &v1.Clock{Timezone: ptr.To("Asia/Kolkata")}, winter, 5*time.Hour + 30*time.Minute},
	} {
		got, err := RTCOffset(tc.clock, tc.at)
		if assert.NoError(t, err, tc.name) {
			assert.Equal(t, tc.want, got, tc.name)
		}
	}
	_, err := RTCOffset(&v1.Clock{Timezone: ptr.To("Atlantis/Capital")}, summer)
	assert.ErrorContains(t, err, "domain.clock.timezone")
}

// TestSelectBackendDiskBoot: a VMI without kernelBoot boots its boot disk
// (lowest bootOrder, else the first disk) on our VMM when the image has a
// Linux boot entry, and on QEMU, saying what the image lacked, otherwise;
// EFI and QEMU-only devices go to QEMU without the image being read.
func TestSelectBackendDiskBoot(t *testing.T) {
	diskBoot := func(disks ...v1.Disk) *v1.VirtualMachineInstanceSpec {
		s := kernelBootSpec()
		s.Domain.Firmware = nil
		s.Domain.Devices.Disks = disks
		return s
	}
	noEntry := errors.New("no boot entry (no loader/entries/*.conf, grub.cfg or vmlinuz-*) on partition 1 (ext4)")
	for _, tc := range []struct {
		name    string
		spec    *v1.VirtualMachineInstanceSpec
		entry   map[int]bool // which disks' images carry an entry
		want    Backend
		checked []int // the disks whose image was read
		why     string
	}{
		{"first disk has an entry", diskBoot(v1.Disk{Name: "root"}, v1.Disk{Name: "data"}), map[int]bool{0: true}, BackendKubevmm, []int{0}, "boots its disk's Linux boot entry"},
		{"lowest bootOrder wins", diskBoot(v1.Disk{Name: "data", BootOrder: ptr.To[uint](2)}, v1.Disk{Name: "data2"}, v1.Disk{Name: "root", BootOrder: ptr.To[uint](1)}), map[int]bool{2: true}, BackendKubevmm, []int{2}, ""},
		{"bootOrder over the first disk", diskBoot(v1.Disk{Name: "data"}, v1.Disk{Name: "root", BootOrder: ptr.To[uint](3)}), map[int]bool{1: true}, BackendKubevmm, []int{1}, ""},
		{"no entry", diskBoot(v1.Disk{Name: "root"}), nil, BackendQEMU, []int{0},
			"domain.devices.disks[0]: the boot disk root has no Linux boot entry the kubevmm VMM can boot (booting it needs firmware): " + noEntry.Error()},
		{"EFI", func() *v1.VirtualMachineInstanceSpec {
			s := diskBoot(v1.Disk{Name: "root"})
			s.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{}}}
			return s
		}(), map[int]bool{0: true}, BackendQEMU, nil, "domain.firmware.bootloader.efi"},
		{"Hyper-V", func() *v1.VirtualMachineInstanceSpec {
			s := diskBoot(v1.Disk{Name: "root"})
			s.Domain.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{}}
			return s
		}(), map[int]bool{0: true}, BackendQEMU, nil, "domain.features.hyperv"},
		{"SATA", diskBoot(v1.Disk{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}}), map[int]bool{0: true}, BackendQEMU, nil, `domain.devices.disks[0].disk.bus: "sata"`},
		{"e1000", func() *v1.VirtualMachineInstanceSpec {
			s := diskBoot(v1.Disk{Name: "root"})
			s.Domain.Devices.Interfaces = []v1.Interface{{Name: "n", Model: "e1000"}}
			return s
		}(), map[int]bool{0: true}, BackendQEMU, nil, "domain.devices.interfaces[0].model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var checked []int
			check := func(i int) error {
				checked = append(checked, i)
				if tc.entry[i] {
					return nil
				}
				return noEntry
			}
			b, why, err := SelectBackend(nil, tc.spec, check)
			require.NoError(t, err)
			assert.Equal(t, tc.want, b)
			assert.Equal(t, tc.checked, checked, "the images read")
			assert.Contains(t, why, tc.why)

			_, _, err = SelectBackend(map[string]string{BackendAnnotation: "kubevmm"}, tc.spec, check)
			if tc.want == BackendQEMU {
				assert.ErrorContains(t, err, tc.why, "forcing kubevmm")
			} else {
				assert.NoError(t, err, "forcing kubevmm")
			}
		})
	}
}

func TestPodNICsAndMAC(t *testing.T) {
	s := kernelBootSpec()
	s.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}, {Name: "other", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "x"}}}}
	s.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "other", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}},
		{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}},
	}
	s.Domain.Devices.Interfaces[1].Ports = []v1.Port{{Port: 80}}
	// Interfaces in spec order, taps numbered in it; a multus network's
	// pod interface is named as KubeVirt names it (sha256("other")).
	assert.Equal(t, []PodNIC{
		{Index: 0, Name: "other", Model: "virtio", Tap: "tap0", Queues: 1, Binding: BindingBridge, PodInterface: "podd9298a10d1b", Multus: "x"},
		{Index: 1, Name: "default", Model: "virtio", Tap: "tap1", Queues: 1, Binding: BindingMasquerade, PodInterface: "eth0", Ports: []v1.Port{{Port: 80}}},
	}, PodNICs(s))
	assert.Equal(t, "k6t-d9298a10d1b", BridgeName(MultusInterfaceName("other")))
	assert.Equal(t, "k6t-eth0", BridgeName(PodInterface))
	assert.False(t, PodNICs(s)[0].PodBridge(), "bridge on a multus network")
	// Bridge on the pod network: the pod's eth0, in-pod bridge k6t-eth0.
	podBridge := s.DeepCopy()
	podBridge.Domain.Devices.Interfaces[1] = v1.Interface{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}
	pb := PodNICs(podBridge)[1]
	assert.Equal(t, PodNIC{Index: 1, Name: "default", Model: "virtio", Tap: "tap1", Queues: 1, Binding: BindingBridge, PodInterface: "eth0"}, pb)
	assert.True(t, pb.PodBridge())
	// Bindings kubevmm lacks (virt-api refuses them) are no NICs.
	s.Domain.Devices.Interfaces[0] = v1.Interface{Name: "other", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}
	nics := PodNICs(s)
	if len(nics) != 1 || nics[0].Index != 1 || nics[0].Tap != "tap0" || nics[0].Model != "virtio" {
		t.Fatalf("PodNICs = %+v", nics)
	}
	a, err := nics[0].MACFor("uid-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := nics[0].MACFor("uid-1")
	c, _ := nics[0].MACFor("uid-2")
	if a.String() != b.String() || a.String() == c.String() || a[0] != 0x02 {
		t.Fatalf("derived MACs %s %s %s: want stable per VMI, distinct across VMIs, locally administered", a, b, c)
	}
	nics[0].MAC = "01:00:00:00:00:01"
	if _, err := nics[0].MACFor("u"); err == nil {
		t.Fatal("multicast MAC accepted")
	}
}

func TestVCPUsAndMemory(t *testing.T) {
	s := kernelBootSpec()
	if VCPUs(s) != 1 {
		t.Fatal("default vCPUs")
	}
	s.Domain.CPU = &v1.CPU{Sockets: 2, Cores: 2}
	if VCPUs(s) != 4 {
		t.Fatalf("2 sockets x 2 cores = %d", VCPUs(s))
	}
	s.Domain.Memory = nil
	if _, err := GuestMemory(s); err == nil {
		t.Fatal("no memory accepted")
	}
}

// The exit words GuestExitFailed knows are the backends' own: this fails
// when a backend adds or renames one.
func TestGuestExitFailedAgreesWithBackends(t *testing.T) {
	for _, r := range []machine.ExitReason{machine.ExitReset, machine.ExitShutdown, machine.ExitStopped, machine.ExitMigrated,
		machine.ExitTripleFault, machine.ExitPanic, machine.ExitError} {
		assert.Equal(t, machine.Exit{Reason: r}.Failed(), GuestExitFailed(string(r)), "vmm exit %q", r)
	}
	for r, failed := range map[qemu.ExitReason]bool{qemu.ExitGuestShutdown: false, qemu.ExitHostShutdown: false, qemu.ExitKilled: false,
		qemu.ExitCrashed: true, qemu.ExitFailed: true, qemu.ExitExited: true} {
		assert.Equal(t, failed, GuestExitFailed(string(r)), "qemu exit %q", r)
	}
	assert.True(t, GuestExitFailed(""), "no exit word")
	assert.True(t, GuestExitFailed("no-such-exit"), "an unknown exit word")
}

func TestGracePeriodSeconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  *int64
		want int64
	}{
		{"unset: the default", nil, v1.DefaultGracePeriodSeconds},
		{"zero: stop at once", ptr.To(int64(0)), 0},
		{"set", ptr.To(int64(90)), 90},
		{"negative (the API server refuses it; never trusted): the default", ptr.To(int64(-1)), v1.DefaultGracePeriodSeconds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, GracePeriodSeconds(&v1.VirtualMachineInstanceSpec{TerminationGracePeriodSeconds: tc.set}))
		})
	}
}

func TestPodEndedAndDown(t *testing.T) {
	deleting := metav1.Now()
	for _, tc := range []struct {
		name        string
		phase       corev1.PodPhase
		deleting    bool
		ended, down bool
	}{
		{"pending", corev1.PodPending, false, false, false},
		{"running", corev1.PodRunning, false, false, false},
		{"running, being deleted", corev1.PodRunning, true, false, true},
		{"succeeded", corev1.PodSucceeded, false, true, true},
		{"failed", corev1.PodFailed, false, true, true},
		{"unknown (node lost)", corev1.PodUnknown, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase}}
			if tc.deleting {
				p.DeletionTimestamp = &deleting
			}
			assert.Equal(t, tc.ended, PodEnded(p), "ended")
			assert.Equal(t, tc.down, PodDown(p), "down")
		})
	}
}

// TestLiveMigratableFollowsTheActiveBackend: a disk boot's backend is
// known once the launcher has read the image and reported it.
func TestLiveMigratableFollowsTheActiveBackend(t *testing.T) {
	s := kernelBootSpec()
	s.Domain.Firmware = nil
	s.Domain.Devices.Disks = []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{ReadOnly: true}}}}
	s.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk"}}}}
	ok, _, msg := LiveMigratable(map[string]string{ActiveBackendAnnotation: "kubevmm"}, s, nil)
	assert.True(t, ok, msg)
	ok, reason, _ := LiveMigratable(map[string]string{ActiveBackendAnnotation: "qemu"}, s, nil)
	assert.False(t, ok)
	assert.Equal(t, ReasonBackendNotLiveMigratable, reason)

	// A NIC bridge-bound on the pod network: the guest has the pod's IP.
	s.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	s.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	ok, _, msg = LiveMigratable(map[string]string{ActiveBackendAnnotation: "kubevmm"}, s, nil)
	assert.True(t, ok, msg)
	s.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	ok, reason, msg = LiveMigratable(map[string]string{ActiveBackendAnnotation: "kubevmm"}, s, nil)
	assert.False(t, ok)
	assert.Equal(t, ReasonInterfaceNotLiveMigratable, reason)
	assert.Contains(t, msg, "interface default")
}

// KubeVirt's rule: with networkInterfaceMultiqueue a virtio NIC gets one
// queue pair per vCPU, with blockMultiQueue a disk one queue per vCPU,
// within what the VMM serves; otherwise one.
func TestQueues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cpu         *v1.CPU
		nicMQ, blkQ *bool
		model       string
		nic, disk   int
	}{
		{name: "off by default", cpu: &v1.CPU{Cores: 4}, model: "virtio", nic: 1, disk: 1},
		{name: "false", cpu: &v1.CPU{Cores: 4}, nicMQ: ptr.To(false), blkQ: ptr.To(false), model: "virtio", nic: 1, disk: 1},
		{name: "one per vCPU", cpu: &v1.CPU{Sockets: 2, Cores: 2, Threads: 1}, nicMQ: ptr.To(true), blkQ: ptr.To(true), model: "virtio", nic: 4, disk: 4},
		{name: "one vCPU", nicMQ: ptr.To(true), blkQ: ptr.To(true), model: "virtio", nic: 1, disk: 1},
		{name: "e1000 has one", cpu: &v1.CPU{Cores: 2}, nicMQ: ptr.To(true), model: "e1000", nic: 1, disk: 1},
		{name: "capped", cpu: &v1.CPU{Sockets: 2, Cores: 50}, nicMQ: ptr.To(true), blkQ: ptr.To(true), model: "virtio", nic: MaxQueues, disk: MaxQueues},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := kernelBootSpec()
			s.Domain.CPU = tc.cpu
			s.Domain.Devices.NetworkInterfaceMultiQueue, s.Domain.Devices.BlockMultiQueue = tc.nicMQ, tc.blkQ
			assert.Equal(t, tc.nic, NICQueues(s, tc.model))
			assert.Equal(t, tc.disk, DiskQueues(s))
		})
	}
	assert.LessOrEqual(t, MaxQueues, vnet.MaxPairs, "the VMM serves as many queue pairs")
	assert.LessOrEqual(t, MaxQueues, blk.MaxQueues, "the VMM serves as many disk queues")

	s := kernelBootSpec()
	s.Domain.CPU = &v1.CPU{Cores: 2}
	s.Domain.Devices.NetworkInterfaceMultiQueue = ptr.To(true)
	s.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	s.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	nics := PodNICs(s)
	require.Len(t, nics, 1)
	assert.Equal(t, 2, nics[0].Queues, "the pod NIC's tap gets a queue per vCPU")
}

// The guest's hostname, in its cloud-init metadata and its DHCP lease:
// KubeVirt's rule.
func TestGuestHostname(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, tc := range []struct{ name, hostname, want string }{
		{"vm1", "", "vm1"},
		{"vm1", "web", "web"},
		{"db.prod", "", "db"},
		{long, "", long[:63]},
	} {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: v1.VirtualMachineInstanceSpec{Hostname: tc.hostname}}
		assert.Equal(t, tc.want, GuestHostname(vmi), "%+v", tc)
	}
}
