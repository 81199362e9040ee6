package virtapi

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/vmm/arch/x86"
)

// baseSpec is the e2e VM's template (kernelBoot on the kubevmm VMM) with a
// containerDisk and a masquerade NIC added, so that every section of the
// spec has something in it. It is admitted as it is.
func baseSpec(t *testing.T) *v1.VirtualMachineInstanceSpec {
	t.Helper()
	vm := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
	s := vm.Spec.Template.Spec.DeepCopy()
	s.Domain.Devices.Disks = []v1.Disk{{Name: "disk0", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	s.Volumes = []v1.Volume{{Name: "disk0", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk:1"}}}}
	s.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	s.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	require.Empty(t, validate(s, nil), "the base spec is refused")
	return s
}

// onlyMultus leaves s one NIC, bridge on a multus network: nothing on
// the pod network.
func onlyMultus(s *v1.VirtualMachineInstanceSpec) {
	s.Domain.Devices.Interfaces = []v1.Interface{{Name: "br1", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
	s.Networks = []v1.Network{{Name: "br1", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}}}
}

func validate(s *v1.VirtualMachineInstanceSpec, annotations map[string]string) field.ErrorList {
	return ValidateVMISpec(field.NewPath("spec"), s, field.NewPath("metadata"), annotations)
}

func TestValidateVMISpecRefuses(t *testing.T) {
	mi := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	cpu := func(s *v1.VirtualMachineInstanceSpec) *v1.CPU {
		if s.Domain.CPU == nil {
			s.Domain.CPU = &v1.CPU{}
		}
		return s.Domain.CPU
	}
	features := func(s *v1.VirtualMachineInstanceSpec) *v1.Features {
		if s.Domain.Features == nil {
			s.Domain.Features = &v1.Features{}
		}
		return s.Domain.Features
	}
	disk := func(s *v1.VirtualMachineInstanceSpec) *v1.Disk { return &s.Domain.Devices.Disks[0] }
	nic := func(s *v1.VirtualMachineInstanceSpec) *v1.Interface { return &s.Domain.Devices.Interfaces[0] }
	const (
		notSupported = field.ErrorTypeNotSupported
		invalid      = field.ErrorTypeInvalid
		required     = field.ErrorTypeRequired
	)
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		mutate      func(*v1.VirtualMachineInstanceSpec)
		field       string // under spec. (or metadata. when it starts so)
		typ         field.ErrorType
	}{
		// What a read found accepted and ignored.
		{name: "vmNetworkCIDR", field: "networks[0].pod.vmNetworkCIDR", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.1.0.0/24" }},
		{name: "vmIPv6NetworkCIDR", field: "networks[0].pod.vmIPv6NetworkCIDR", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMIPv6NetworkCIDR = "fd10::/120" }},
		{name: "evictionStrategy LiveMigrate", field: "evictionStrategy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.EvictionStrategy = ptr.To(v1.EvictionStrategyLiveMigrate) }},
		{name: "cpu model", field: "domain.cpu.model", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Model = "host-passthrough" }},
		{name: "cpu features", field: "domain.cpu.features", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Features = []v1.CPUFeature{{Name: "vmx"}} }},
		{name: "firmware serial", field: "domain.firmware.serial", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.Serial = "e4686d2c" }},
		{name: "disk cache", field: "domain.devices.disks[0].cache", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Cache = "none" }},
		{name: "disk io", field: "domain.devices.disks[0].io", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).IO = "native" }},
		{name: "disk errorPolicy", field: "domain.devices.disks[0].errorPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).ErrorPolicy = ptr.To("report") }},
		{name: "disk shareable", field: "domain.devices.disks[0].shareable", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Shareable = ptr.To(true) }},
		{name: "disk dedicatedIOThread", field: "domain.devices.disks[0].dedicatedIOThread", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).DedicatedIOThread = ptr.To(true) }},
		{name: "disk pciAddress", field: "domain.devices.disks[0].disk.pciAddress", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Disk.PciAddress = "0000:81:01.0" }},
		{name: "disk tag", field: "domain.devices.disks[0].tag", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Tag = "db" }},
		{name: "networkInterfaceMultiqueue without a virtio NIC", field: "domain.devices.networkInterfaceMultiqueue", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Devices.NetworkInterfaceMultiQueue = ptr.To(true)
				s.Domain.Devices.Interfaces[0].Model = "e1000"
			}},
		{name: "autoattachGraphicsDevice", field: "domain.devices.autoattachGraphicsDevice", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.AutoattachGraphicsDevice = ptr.To(true) }},
		{name: "autoattachSerialConsole off", field: "domain.devices.autoattachSerialConsole", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.AutoattachSerialConsole = ptr.To(false) }},
		{name: "autoattachMemBalloon", field: "domain.devices.autoattachMemBalloon", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.AutoattachMemBalloon = ptr.To(true) }},
		{name: "autoattachInputDevice", field: "domain.devices.autoattachInputDevice", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.AutoattachInputDevice = ptr.To(true) }},
		{name: "logSerialConsole", field: "domain.devices.logSerialConsole", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.LogSerialConsole = ptr.To(true) }},
		{name: "interface acpiIndex", field: "domain.devices.interfaces[0].acpiIndex", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { nic(s).ACPIIndex = 3 }},
		{name: "ACPI off on the kubevmm VMM", field: "domain.features.acpi.enabled", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { features(s).ACPI = &v1.FeatureState{Enabled: ptr.To(false)} }},
		{name: "ACPI off on QEMU", field: "domain.features.acpi.enabled", typ: notSupported,
			annotations: map[string]string{"kubevmm.io/backend": "qemu"},
			mutate:      func(s *v1.VirtualMachineInstanceSpec) { features(s).ACPI = &v1.FeatureState{Enabled: ptr.To(false)} }},
		{name: "two sockets", field: "domain.cpu.sockets", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Sockets = 2 }},
		{name: "two threads", field: "domain.cpu.threads", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Threads = 2 }},
		{name: "disk serial of 21 characters", field: "domain.devices.disks[0].serial", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Serial = strings.Repeat("s", 21) }},
		{name: "disk serial with a space", field: "domain.devices.disks[0].serial", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Serial = "a b" }},
		{name: "sidecar hooks", field: "metadata.annotations[hooks.kubevirt.io/hookSidecars]", typ: notSupported,
			annotations: map[string]string{SidecarHookAnnotation: `[{"image":"hook:1"}]`},
			mutate:      func(*v1.VirtualMachineInstanceSpec) {}},

		// What passed admission only to fail later.
		{name: "memory request above limit", field: "domain.resources.requests.memory", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
			}},
		{name: "guest memory under 16Mi", field: "domain.memory.guest", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory.Guest = mi("15Mi") }},
		{name: "request memory under 16Mi", field: "domain.resources.requests.memory", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Memory = nil
				s.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("8Mi")
			}},
		{name: "no memory at all", field: "domain.memory.guest", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory, s.Domain.Resources.Requests = nil, nil }},
		{name: "255 cores", field: "domain.cpu.cores", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Cores = MaxVCPUs + 1 }},
		{name: "4e9 cores", field: "domain.cpu.cores", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).Cores = 4e9 }},

		// The rest of each section.
		{name: "read-only SATA disk", field: "domain.devices.disks[0].disk.readonly", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Disk.Bus, disk(s).Disk.ReadOnly = v1.DiskBusSATA, true }},
		{name: "dnsConfig without a NIC on the pod network", field: "dnsConfig", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				onlyMultus(s)
				s.DNSPolicy, s.DNSConfig = corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
			}},
		{name: "dnsPolicy None without a NIC on the pod network", field: "dnsPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { onlyMultus(s); s.DNSPolicy = corev1.DNSNone }},
		{name: "SMM on the kubevmm VMM", field: "domain.features.smm", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { features(s).SMM = &v1.FeatureState{} }},
		{name: "SMM off on QEMU", field: "domain.features.smm.enabled", typ: notSupported,
			annotations: map[string]string{"kubevmm.io/backend": "qemu"},
			mutate:      func(s *v1.VirtualMachineInstanceSpec) { features(s).SMM = &v1.FeatureState{Enabled: ptr.To(false)} }},
		{name: "SCSI disk", field: "domain.devices.disks[0].disk.bus", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).Disk.Bus = v1.DiskBusSCSI }},
		{name: "disk and cdrom at once", field: "domain.devices.disks[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { disk(s).CDRom = &v1.CDRomTarget{} }},
		{name: "writable CD-ROM", field: "domain.devices.disks[0].cdrom.readonly", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				disk(s).Disk, disk(s).CDRom = nil, &v1.CDRomTarget{ReadOnly: ptr.To(false)}
			}},
		{name: "disk without volume", field: "domain.devices.disks[0].name", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].Name = "other" }},
		{name: "two disks of one name", field: "domain.devices.disks[1].name", typ: field.ErrorTypeDuplicate,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, s.Domain.Devices.Disks[0])
			}},
		{name: "volume without source", field: "volumes[0].containerDisk", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].ContainerDisk = nil }},
		{name: "PVC without a claim name", field: "volumes[0].persistentVolumeClaim.claimName", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].PersistentVolumeClaim = nil, &v1.PersistentVolumeClaimVolumeSource{}
			}},
		{name: "PVC with a bad claim name", field: "volumes[0].persistentVolumeClaim.claimName", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].PersistentVolumeClaim = nil, &v1.PersistentVolumeClaimVolumeSource{ClaimName: "No/Such"}
			}},
		{name: "hotpluggable PVC on a virtio disk", field: "domain.devices.disks[0].disk.bus", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].PersistentVolumeClaim = nil, &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c", Hotpluggable: true}
			}},
		{name: "PVC and containerDisk at once", field: "volumes[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].PersistentVolumeClaim = &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}
			}},
		{name: "emptyDisk without capacity", field: "volumes[0].emptyDisk.capacity", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].EmptyDisk = nil, &v1.EmptyDiskSource{}
			}},
		{name: "hotpluggable dataVolume badly named", field: "volumes[0].dataVolume.name", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].DataVolume = nil, &v1.DataVolumeSource{Name: "No/Such", Hotpluggable: true}
				disk(s).Disk.Bus = v1.DiskBusSCSI
			}},
		{name: "dataVolume without a name", field: "volumes[0].dataVolume.name", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].DataVolume = nil, &v1.DataVolumeSource{}
			}},
		{name: "dataVolume and containerDisk at once", field: "volumes[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].DataVolume = &v1.DataVolumeSource{Name: "dv"}
			}},
		{name: "hostDisk without a path", field: "volumes[0].hostDisk.path", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Type: v1.HostDiskExists}
			}},
		{name: "hostDisk with a relative path", field: "volumes[0].hostDisk.path", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Path: "d.img", Type: v1.HostDiskExists}
			}},
		{name: "hostDisk path with ..", field: "volumes[0].hostDisk.path", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Path: "/var/../d.img", Type: v1.HostDiskExists}
			}},
		{name: "hostDisk at /", field: "volumes[0].hostDisk.path", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Path: "/", Type: v1.HostDiskExists}
			}},
		{name: "hostDisk of an unknown type", field: "volumes[0].hostDisk.type", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Path: "/d.img", Type: "Directory"}
			}},
		{name: "DiskOrCreate without capacity", field: "volumes[0].hostDisk.capacity", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].HostDisk = nil, &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExistsOrCreate}
			}},
		{name: "ephemeral without a claim", field: "volumes[0].ephemeral.persistentVolumeClaim", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk, s.Volumes[0].Ephemeral = nil, &v1.EphemeralVolumeSource{}
			}},
		{name: "ephemeral with a bad claim name", field: "volumes[0].ephemeral.persistentVolumeClaim.claimName", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].ContainerDisk = nil
				s.Volumes[0].Ephemeral = &v1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "No/Such"}}
			}},
		{name: "hostDisk and containerDisk at once", field: "volumes[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].HostDisk = &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists}
			}},
		{name: "two bindings", field: "domain.devices.interfaces[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { nic(s).Bridge = &v1.InterfaceBridge{} }},
		{name: "no binding", field: "domain.devices.interfaces[0].masquerade", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { nic(s).Masquerade = nil }},
		{name: "multicast MAC", field: "domain.devices.interfaces[0].macAddress", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { nic(s).MacAddress = "01:00:5e:00:00:01" }},
		{name: "NIC bootOrder", field: "domain.devices.interfaces[0].bootOrder", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { nic(s).BootOrder = ptr.To(uint(1)) }},
		{name: "machine type pc", field: "domain.machine.type", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Machine = &v1.Machine{Type: "pc"} }},
		{name: "rebootPolicy Restart", field: "domain.rebootPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.RebootPolicy = ptr.To("Restart") }},
		{name: "hugepages", field: "domain.memory.hugepages", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"} }},
		{name: "isolateEmulatorThread", field: "domain.cpu.isolateEmulatorThread", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { cpu(s).IsolateEmulatorThread = true }},
		{name: "APIC off", field: "domain.features.apic.enabled", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { features(s).APIC = &v1.FeatureAPIC{Enabled: ptr.To(false)} }},
		{name: "Hyper-V relaxed off", field: "domain.features.hyperv.relaxed.enabled", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				features(s).Hyperv = &v1.FeatureHyperv{Relaxed: &v1.FeatureState{Enabled: ptr.To(false)}}
			}},
		{name: "Hyper-V spinlocks 4096", field: "domain.features.hyperv.spinlocks.spinlocks", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				features(s).Hyperv = &v1.FeatureHyperv{Spinlocks: &v1.FeatureSpinlocks{Retries: ptr.To(uint32(4096))}}
			}},
		{name: "Hyper-V vendor id", field: "domain.features.hyperv.vendorid", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				features(s).Hyperv = &v1.FeatureHyperv{VendorID: &v1.FeatureVendorID{VendorID: "kubevmm"}}
			}},
		{name: "secure boot without SMM", field: "domain.firmware.bootloader.efi.secureBoot", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(true)}}
			}},
		{name: "EFI, secure boot by default, without SMM", field: "domain.firmware.bootloader.efi.secureBoot", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}} }},
		{name: "a UUID that is none", field: "domain.firmware.uuid", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.UUID = "5d307ca9-b3ef-428c-8861" }},
		{name: "utc and timezone", field: "domain.clock", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{}, Timezone: ptr.To("Europe/Berlin")}
			}},
		{name: "an unknown timezone", field: "domain.clock.timezone", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Clock = &v1.Clock{Timezone: ptr.To("Mars/Olympus")} }},
		{name: "the launcher's local zone", field: "domain.clock.timezone", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Clock = &v1.Clock{Timezone: ptr.To("Local")} }},
		{name: "an offset beyond a century", field: "domain.clock.utc.offsetSeconds", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{OffsetSeconds: ptr.To(-1 << 40)}}
			}},
		{name: "no PIT", field: "domain.clock.timer.pit.present", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{PIT: &v1.PITTimer{Enabled: ptr.To(false)}}}
			}},
		{name: "PIT catching up", field: "domain.clock.timer.pit.tickPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{PIT: &v1.PITTimer{TickPolicy: "catchup"}}}
			}},
		{name: "RTC merging", field: "domain.clock.timer.rtc.tickPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{RTC: &v1.RTCTimer{TickPolicy: "merge"}}}
			}},
		{name: "HPET tick policy", field: "domain.clock.timer.hpet.tickPolicy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{HPET: &v1.HPETTimer{TickPolicy: "delay"}}}
			}},
		{name: "synthetic timers without the Hyper-V clock", field: "domain.clock.timer.hyperv.present", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{Hyperv: &v1.HypervTimer{Enabled: ptr.To(false)}}}
				features(s).Hyperv = &v1.FeatureHyperv{SyNICTimer: &v1.SyNICTimer{}}
			}},
		{name: "persistent TPM", field: "domain.devices.tpm.persistent", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.TPM = &v1.TPMDevice{Persistent: ptr.To(true)} }},
		{name: "kernelBoot without kernelPath", field: "domain.firmware.kernelBoot.container.kernelPath", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.KernelBoot.Container.KernelPath = "" }},
		{name: "startStrategy Running", field: "startStrategy", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.StartStrategy = ptr.To(v1.StartStrategy("Running")) }},
		{name: "GPU (unmodeled)", field: "domain.devices.gpus[0]", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Domain.Devices.GPUs = []v1.Unmodeled{{Raw: []byte(`{"name":"gpu1"}`)}}
			}},
		// Cloud-init, as KubeVirt checks it (volumes[1] is the cloud-init volume).
		{name: "cloud-init: two user data sources", field: "volumes[1].cloudInitNoCloud", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s).UserDataBase64 = base64.StdEncoding.EncodeToString([]byte("#cloud-config"))
			}},
		{name: "cloud-init: user data over 2048 bytes", field: "volumes[1].cloudInitNoCloud.userData", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { noCloud(s).UserData = strings.Repeat("x", 2049) }},
		{name: "cloud-init: base64 user data over 2048 bytes", field: "volumes[1].cloudInitConfigDrive.userData", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s)
				s.Volumes[1].CloudInitNoCloud = nil
				s.Volumes[1].CloudInitConfigDrive = &v1.CloudInitConfigDriveSource{UserDataBase64: base64.StdEncoding.EncodeToString(make([]byte, 2049))}
			}},
		{name: "cloud-init: network data over 16384 bytes", field: "volumes[1].cloudInitNoCloud.networkData", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { noCloud(s).NetworkData = strings.Repeat("x", 16385) }},
		{name: "cloud-init: bad base64", field: "volumes[1].cloudInitNoCloud.networkDataBase64", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { noCloud(s).NetworkDataBase64 = "not base64!" }},
		{name: "cloud-init: no data", field: "volumes[1].cloudInitNoCloud.userData", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { noCloud(s).UserData = "" }},
		{name: "cloud-init: Secret without a name", field: "volumes[1].cloudInitNoCloud.secretRef.name", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s).UserData, noCloud(s).UserDataSecretRef = "", &v1.LocalObjectReference{}
			}},
		{name: "cloud-init: two volumes", field: "volumes[2]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s)
				s.Volumes = append(s.Volumes, v1.Volume{Name: "ci2", VolumeSource: v1.VolumeSource{
					CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "#cloud-config"}}})
			}},
		{name: "cloud-init and containerDisk in one volume", field: "volumes[0]", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				s.Volumes[0].CloudInitNoCloud = &v1.CloudInitNoCloudSource{UserData: "#cloud-config"}
			}},
		{name: "ssh key: noCloud without a noCloud volume", field: "accessCredentials[0].sshPublicKey.propagationMethod.noCloud", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.AccessCredentials = []v1.AccessCredential{sshKey("keys")} }},
		{name: "ssh key: configDrive without a configDrive volume", field: "accessCredentials[0].sshPublicKey.propagationMethod.configDrive", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s)
				c := sshKey("keys")
				c.SSHPublicKey.PropagationMethod = v1.SSHPublicKeyAccessCredentialPropagationMethod{ConfigDrive: &v1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}}
				s.AccessCredentials = []v1.AccessCredential{c}
			}},
		{name: "ssh key: two propagation methods", field: "accessCredentials[0].sshPublicKey.propagationMethod", typ: invalid,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s)
				c := sshKey("keys")
				c.SSHPublicKey.PropagationMethod.ConfigDrive = &v1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}
				s.AccessCredentials = []v1.AccessCredential{c}
			}},
		{name: "ssh key: no Secret", field: "accessCredentials[0].sshPublicKey.source.secret", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				noCloud(s)
				c := sshKey("keys")
				c.SSHPublicKey.Source.Secret = nil
				s.AccessCredentials = []v1.AccessCredential{c}
			}},
		{name: "ssh key: through the guest agent", field: "accessCredentials[0].sshPublicKey.propagationMethod.qemuGuestAgent", typ: notSupported,
			mutate: func(s *v1.VirtualMachineInstanceSpec) {
				c := sshKey("keys")
				c.SSHPublicKey.PropagationMethod = v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: &v1.Unmodeled{Raw: []byte(`{"users":["root"]}`)}}
				s.AccessCredentials = []v1.AccessCredential{c}
			}},
		{name: "access credential without a type", field: "accessCredentials[0].sshPublicKey", typ: required,
			mutate: func(s *v1.VirtualMachineInstanceSpec) { s.AccessCredentials = []v1.AccessCredential{{}} }},
		{name: "unknown backend", field: "metadata.annotations[kubevmm.io/backend]", typ: invalid,
			annotations: map[string]string{"kubevmm.io/backend": "xen"}, mutate: func(*v1.VirtualMachineInstanceSpec) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(t)
			tc.mutate(s)
			want := tc.field
			if !strings.HasPrefix(want, "metadata.") {
				want = "spec." + want
			}
			errs := validate(s, tc.annotations)
			var got *field.Error
			for _, e := range errs {
				if e.Field == want {
					got = e
				}
			}
			require.NotNil(t, got, "no error for %s in %v", want, errs)
			assert.Equal(t, tc.typ, got.Type, "%v", got)
			if tc.typ == notSupported {
				assert.Contains(t, got.Detail, "not supported by kubevmm")
			}
		})
	}
}

// TestValidateVMISpecAccepts: values that say what kubevmm does anyway.
func TestValidateVMISpecAccepts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		mutate      func(*v1.VirtualMachineInstanceSpec)
	}{
		{"cores only, up to the VMM's limit", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.CPU = &v1.CPU{Sockets: 1, Cores: MaxVCPUs, Threads: 1}
		}},
		{"evictionStrategy None", nil, func(s *v1.VirtualMachineInstanceSpec) { s.EvictionStrategy = ptr.To(v1.EvictionStrategyNone) }},
		{"the default vmNetworkCIDR", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0/24" }},
		{"interface state up", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].State = "up" }},
		{"switches at what kubevmm does", nil, func(s *v1.VirtualMachineInstanceSpec) {
			d := &s.Domain.Devices
			d.AutoattachSerialConsole, d.AutoattachGraphicsDevice, d.AutoattachMemBalloon = ptr.To(true), ptr.To(false), ptr.To(false)
			d.BlockMultiQueue, d.NetworkInterfaceMultiQueue, d.AutoattachVSOCK = ptr.To(false), ptr.To(false), ptr.To(false)
			d.Disks[0].Shareable, d.Disks[0].DedicatedIOThread = ptr.To(false), ptr.To(false)
		}},
		{"multi-queue NICs and disks", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.CPU = &v1.CPU{Cores: 2}
			s.Domain.Devices.BlockMultiQueue, s.Domain.Devices.NetworkInterfaceMultiQueue = ptr.To(true), ptr.To(true)
		}},
		{"ACPI on the kubevmm VMM", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Features = &v1.Features{ACPI: &v1.FeatureState{}}
		}},
		{"ACPI and SMM on QEMU", map[string]string{"kubevmm.io/backend": "qemu"}, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Features = &v1.Features{ACPI: &v1.FeatureState{}, SMM: &v1.FeatureState{Enabled: ptr.To(true)}}
		}},
		{"KubeVirt's vmi-windows.yaml domain (QEMU)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{}, Timer: &v1.Timer{
				HPET: &v1.HPETTimer{Enabled: ptr.To(false)}, Hyperv: &v1.HypervTimer{},
				PIT: &v1.PITTimer{TickPolicy: "delay"}, RTC: &v1.RTCTimer{TickPolicy: "catchup"}}}
			s.Domain.Devices.TPM = &v1.TPMDevice{}
			s.Domain.Features = &v1.Features{ACPI: &v1.FeatureState{}, APIC: &v1.FeatureAPIC{}, SMM: &v1.FeatureState{},
				Hyperv: &v1.FeatureHyperv{Relaxed: &v1.FeatureState{}, VAPIC: &v1.FeatureState{}, Spinlocks: &v1.FeatureSpinlocks{Retries: ptr.To(uint32(8191))}}}
			s.Domain.Firmware = &v1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223",
				Bootloader: &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(true)}}}
		}},
		{"EFI without secure boot needs no SMM (QEMU)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(false)}}
		}},
		{"a timezone and an offset clock on the kubevmm VMM", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timezone: ptr.To("America/New_York"), Timer: &v1.Timer{
				HPET: &v1.HPETTimer{Enabled: ptr.To(false)}, Hyperv: &v1.HypervTimer{Enabled: ptr.To(false)},
				PIT: &v1.PITTimer{TickPolicy: "delay"}, RTC: &v1.RTCTimer{TickPolicy: "delay", Track: "wall"}}}
		}},
		{"dnsPolicy ClusterFirst", nil, func(s *v1.VirtualMachineInstanceSpec) { s.DNSPolicy = corev1.DNSClusterFirst }},
		{"dnsPolicy None and dnsConfig with bridge on the pod network (its DHCP hands them to the guest)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
			s.DNSPolicy, s.DNSConfig = corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
		}},
		{"dnsPolicy None and dnsConfig with masquerade (its DHCP too)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.DNSPolicy, s.DNSConfig = corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
		}},
		{"a 20-character serial", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Serial = strings.Repeat("s", 20) }},
		{"16Mi", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory.Guest = ptr.To(resource.MustParse("16Mi")) }},
		{"a PVC (read-only) and an emptyDisk", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Volumes = append(s.Volumes,
				v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-pvc", ReadOnly: true}}},
				v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}})
			s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "data"}, v1.Disk{Name: "scratch"})
		}},
		{"an ephemeral volume and hostDisks (KubeVirt's vmi-host-disk.yaml)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Volumes = append(s.Volumes,
				v1.Volume{Name: "base", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden"}}}},
				v1.Volume{Name: "host-disk", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{
					Path: "/data/disk.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}},
				v1.Volume{Name: "shared", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{
					Path: "/mnt/nfs/vm.img", Type: v1.HostDiskExists, Shared: ptr.To(true)}}})
			s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "base"}, v1.Disk{Name: "host-disk"}, v1.Disk{Name: "shared"})
		}},
		{"rebootPolicy Terminate", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.RebootPolicy = ptr.To("Terminate") }},
		{"rebootPolicy Reboot", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.RebootPolicy = ptr.To("Reboot") }},
		{"cloud-init NoCloud with 2048 bytes, network data and an SSH key", nil, func(s *v1.VirtualMachineInstanceSpec) {
			noCloud(s).UserData = strings.Repeat("x", 2048)
			noCloud(s).NetworkDataSecretRef = &v1.LocalObjectReference{Name: "net"}
			s.AccessCredentials = []v1.AccessCredential{sshKey("keys")}
		}},
		{"cloud-init ConfigDrive from a Secret, on a CD-ROM (QEMU)", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Volumes = append(s.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{
				UserDataSecretRef: &v1.LocalObjectReference{Name: "ud"}, NetworkDataBase64: base64.StdEncoding.EncodeToString([]byte("{}"))}}})
			s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "ci", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(t)
			tc.mutate(s)
			assert.Empty(t, validate(s, tc.annotations))
		})
	}
}

// noCloud adds a cloud-init volume (volumes[1], attached by a virtio disk)
// on the first call and returns its source.
func noCloud(s *v1.VirtualMachineInstanceSpec) *v1.CloudInitNoCloudSource {
	if len(s.Volumes) < 2 {
		s.Volumes = append(s.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{
			CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config"}}})
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	}
	return s.Volumes[1].CloudInitNoCloud
}

func sshKey(secret string) v1.AccessCredential {
	return v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
		Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
		PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}},
	}}
}

// TestMaxVCPUsIsTheVMMs: the admission bound is the VMM's.
func TestMaxVCPUsIsTheVMMs(t *testing.T) {
	assert.Equal(t, x86.MaxCPUs, MaxVCPUs)
}

// TestE2EManifestsAdmitted: every manifest the e2e applies is admitted by
// its webhook, the one meant to be refused is refused with its field.
func TestE2EManifestsAdmitted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "test", "e2e", "testdata", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			// One object per file, or several separated by "---".
			for _, doc := range strings.Split(string(b), "\n---\n") {
				var tm metav1.TypeMeta
				require.NoError(t, yaml.Unmarshal([]byte(doc), &tm))
				if tm.Kind == "" || !strings.HasPrefix(tm.APIVersion, "kubevirt.io/") {
					continue // a leading comment, or another API group's (instance types, NADs, the HyperConverged CR): not virt-api's
				}
				path := map[string]string{"VirtualMachine": PathValidateVM, "VirtualMachineInstance": PathValidateVMI}[tm.Kind]
				require.NotEmpty(t, path, "kind %q", tm.Kind)
				j, err := yaml.YAMLToJSON([]byte(doc))
				require.NoError(t, err)
				r := review(t, path, admissionv1.Create, j)
				if name == "vm-unsupported.yaml" {
					require.False(t, r.Allowed)
					assert.Contains(t, r.Result.Details.Causes, metav1.StatusCause{
						Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec.template.spec.domain.devices.disks[0].disk.bus",
						Message: `spec.template.spec.domain.devices.disks[0].disk.bus: "scsi" is not supported by kubevmm (virtio, sata)`,
					})
					continue
				}
				assert.True(t, r.Allowed, "refused: %+v", r.Result)
			}
		})
	}
}
