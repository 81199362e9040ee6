package fields_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/launcher"
	"github.com/kubevmm/kubevmm/launcher/cloudinit"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/test/fields"
	"github.com/kubevmm/kubevmm/virtapi"
	bootdisk "github.com/kubevmm/kubevmm/vmm/boot/disk"
)

// repoRoot is the module's root, from this package's folder.
const repoRoot = "../.."

// baseVMI is an admitted VMI on our VMM: the e2e VM's template (kernelBoot
// of the test guest) with a containerDisk and a masquerade NIC on the pod
// network, as virtapi's baseSpec.
func baseVMI(t *testing.T) *v1.VirtualMachineInstance {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "test", "e2e", "testdata", "vm.yaml"))
	require.NoError(t, err)
	vm := &v1.VirtualMachine{}
	require.NoError(t, yaml.Unmarshal(b, vm))
	s := vm.Spec.Template.Spec.DeepCopy()
	s.Domain.Devices.Disks = []v1.Disk{{Name: "disk0", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	s.Volumes = []v1.Volume{{Name: "disk0", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk:1"}}}}
	s.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
	s.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	vmi := &v1.VirtualMachineInstance{Spec: *s}
	vmi.Name, vmi.Namespace, vmi.UID = "testvm", "ns", "6f1c1d0e-0000-4000-8000-000000000001"
	vmi.Annotations = map[string]string{}
	return vmi
}

// rendering is what kubevmm makes of a VMI: the mutating webhook's patch,
// the launcher pod virt-controller renders (without the annotation that
// carries the VMI to the launcher: it changes with every field), the
// backend the launcher picks and that backend's configuration (our VMM's
// machine.Config and what the launcher keeps beside it, or QEMU's command
// line), and the cloud-init disk.
type rendering struct {
	Patch     string
	Pod       *corev1.Pod
	Backend   vmispec.Backend
	VMM       *vmmRendering
	QEMU      []string
	CloudInit []byte
}

// vmmRendering is what our VMM gets: the machine's configuration and what
// the launcher does beside it (pause at start, the NICs' DHCP leases, the
// disk a disk boot reads its entry from).
type vmmRendering struct {
	Machine     any // machine.Config
	StartPaused bool
	NICs        []launcher.NICConfig
	BootDisk    int
}

// diff names the parts of the renderings a and b that differ.
func (a rendering) diff(b rendering) []string {
	var out []string
	for _, c := range []struct {
		name string
		x, y any
	}{
		{"the webhook's patch", a.Patch, b.Patch},
		{"the launcher pod", a.Pod, b.Pod},
		{"the backend", a.Backend, b.Backend},
		{"our VMM's configuration", a.VMM, b.VMM},
		{"the QEMU command line", a.QEMU, b.QEMU},
		{"the cloud-init disk", a.CloudInit, b.CloudInit},
	} {
		if !reflect.DeepEqual(c.x, c.y) {
			out = append(out, c.name)
		}
	}
	return out
}

// renderer renders VMIs with the launcher's files under one directory: the
// kernel, the disks' images, the Secrets a cloud-init disk is made of.
type renderer struct {
	t     *testing.T
	paths launcher.Paths
}

func newRenderer(t *testing.T) *renderer {
	d := t.TempDir()
	p := launcher.Paths{
		SocketDir: filepath.Join(d, "sockets"), KernelBootDir: filepath.Join(d, "kernel"), ContainerDiskDir: filepath.Join(d, "disks"),
		CloudInitDir: filepath.Join(d, "cloud-init"), SecretDir: filepath.Join(d, "secrets"),
		// QEMU's run directory is only named (its sockets' paths must be short).
		RunDir:     "/run/kubevmm-fields",
		PVCDiskDir: filepath.Join(d, "pvcs"), BlockDeviceDir: filepath.Join(d, "blocks"), EmptyDiskDir: filepath.Join(d, "empty"),
	}
	r := &renderer{t: t, paths: p}
	r.write(filepath.Join(p.KernelBootDir, vmispec.KernelFile), "kernel")
	r.write(filepath.Join(p.KernelBootDir, vmispec.InitrdFile), "initrd")
	return r
}

func (r *renderer) write(path, content string) {
	r.t.Helper()
	require.NoError(r.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(r.t, os.WriteFile(path, []byte(content), 0o644))
}

// secret mounts a Secret's keys under dir (a cloud-init volume's or an
// access credential's, cloudinit.*Dir).
func (r *renderer) secret(dir string, keys map[string]string) {
	for k, v := range keys {
		r.write(filepath.Join(dir, k), v)
	}
}

// render admits vmi (errs: virt-api's refusal) and renders it as the
// components do: the webhook defaults it, virt-controller renders its pod
// from the defaulted VMI, the launcher reads the VMI the pod carries and
// builds its backend's configuration and the cloud-init disk. A
// renderer's error is err.
func (r *renderer) render(vmi *v1.VirtualMachineInstance) (out rendering, errs field.ErrorList, err error) {
	if errs = validate(vmi); len(errs) > 0 {
		return out, errs, nil
	}
	defaulted, err := virtapi.Defaulted(&vmi.Spec)
	if err != nil {
		return out, nil, err
	}
	before, _ := json.Marshal(vmi.Spec)
	after, _ := json.Marshal(defaulted)
	patch, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return out, nil, fmt.Errorf("the webhook's patch: %w", err)
	}
	out.Patch = string(patch)
	stored := vmi.DeepCopy()
	stored.Spec = *defaulted
	if out.Pod, err = controller.RenderLauncherPod(stored, controller.LauncherConfig{Image: "launcher:1"}); err != nil {
		return out, nil, fmt.Errorf("the launcher pod: %w", err)
	}
	lv := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal([]byte(out.Pod.Annotations[controller.VMIAnnotation]), lv); err != nil {
		return out, nil, fmt.Errorf("the launcher's VMI: %w", err)
	}
	delete(out.Pod.Annotations, controller.VMIAnnotation)
	if out.Backend, _, err = vmispec.SelectBackend(lv.Annotations, &lv.Spec, nil); err != nil {
		return out, nil, err
	}
	if out.CloudInit, err = r.cloudInit(lv); err != nil {
		return out, nil, err
	}
	err = r.backend(lv, &out)
	return out, nil, err
}

// cloudInit renders the VMI's cloud-init disk, where the launcher does.
func (r *renderer) cloudInit(lv *v1.VirtualMachineInstance) ([]byte, error) {
	img, ok, err := cloudinit.Image(lv, r.paths.SecretDir)
	if err != nil || !ok {
		return nil, err
	}
	v := cloudinit.Volume(&lv.Spec)
	r.write(filepath.Join(r.paths.CloudInitDir, v.Name+".img"), string(img))
	return img, nil
}

// backend renders the configuration of the backend the launcher picked.
func (r *renderer) backend(lv *v1.VirtualMachineInstance, out *rendering) error {
	p := r.paths
	p.PVCs = map[string]vmispec.PVCInfo{}
	for _, v := range vmispec.PVCVolumes(&lv.Spec) {
		claim, _, _ := vmispec.VolumeClaim(&v)
		p.PVCs[v.Name] = vmispec.PVCInfo{ClaimName: claim, Size: 64 << 20}
	}
	cfg, err := launcher.BuildVMConfig(lv, p)
	if err != nil {
		return fmt.Errorf("launcher.BuildVMConfig: %w", err)
	}
	for _, d := range cfg.Disks {
		if _, err := os.Stat(d.Path); err != nil {
			r.write(d.Path, strings.Repeat("\x00", 512)) // a raw image
		}
	}
	if out.Backend == vmispec.BackendQEMU {
		qc, err := cfg.QEMUConfig(p, filepath.Join(p.RunDir, "serial.sock"))
		if err != nil {
			return fmt.Errorf("VMConfig.QEMUConfig: %w", err)
		}
		qc.Accel = qemu.AccelKVM
		if out.QEMU, err = qc.Args(); err != nil {
			return fmt.Errorf("qemu.Config.Args: %w", err)
		}
		return nil
	}
	boot := -1
	if cfg.Kernel == "" {
		// A disk boot: the launcher reads the boot disk's entry first.
		boot = vmispec.BootDisk(&lv.Spec)
		cfg.DiskBoot = &bootdisk.Boot{Kernel: []byte("the boot disk's kernel")}
	}
	mc, err := cfg.MachineConfig(nil)
	if err != nil {
		return fmt.Errorf("VMConfig.MachineConfig: %w", err)
	}
	mc.Reload = nil // a function: its behaviour is Kernel's and Initrd's
	out.VMM = &vmmRendering{Machine: mc, StartPaused: cfg.StartPaused, NICs: cfg.NICs, BootDisk: boot}
	return nil
}

// fieldCase is how a listed leaf is set where the walk's value is refused
// or means nothing: what the base VMI needs for it (on both sides of the
// comparison), the value, or a set that sets it along with what must come
// with it. same names the backends on which the field changes nothing,
// and why: what it asks for is what that backend does anyway.
// notHonoured names the backends on which the field is admitted and
// changes nothing although it should: known gaps, each with what fixing
// it takes; the case fails once the field acts there, so that the entry
// goes.
type fieldCase struct {
	prepare     func(*v1.VirtualMachineInstance)
	value       any
	set         func(*v1.VirtualMachineInstance)
	same        map[vmispec.Backend]string
	notHonoured map[vmispec.Backend]string
}

// elsewhere is a listed leaf whose effect no pure rendering shows, and the
// test that checks it ("folder.TestName"). ourVMMOnly: the leaf acts on
// our VMM only, and virt-api must refuse it, by name, on QEMU.
type elsewhere struct {
	test       string
	ourVMMOnly bool
	why        string
}

// checkedElsewhere is short on purpose: everything a rendering can show is
// checked by rendering.
var checkedElsewhere = map[string]elsewhere{
	"domain.devices.disableHotplug": {test: "virtapi.TestDisableHotplugRefusesAddVolume",
		why: "addvolume's refusal (virt-api's subresource), not a rendering"},
	"domain.devices.autoattachVSOCK": {test: "controller.TestVMIVsockCID", ourVMMOnly: true,
		why: "virt-controller assigns status.VSOCKCID, which the launcher pod then carries"},
	"domain.devices.interfaces[0].ports[0].port": {test: "handler.TestMasqueradePorts",
		why: "virt-handler's nftables DNAT in the pod"},
	"domain.devices.interfaces[0].ports[0].protocol": {test: "handler.TestMasqueradePorts",
		why: "virt-handler's nftables DNAT in the pod (its test forwards TCP only)"},
	"domain.devices.interfaces[0].ports[0].name": {test: "virtapi.TestValidateNetworksAccepts",
		why: "a label, as in KubeVirt: admitted, unique per interface"},
	"networks[0].multus.networkName": {test: "controller.TestWithNetworks",
		why: "the pod's networks annotation, which virt-controller adds after reading the NetworkAttachmentDefinition"},
	"volumes[0].persistentVolumeClaim.claimName": {test: "controller.TestVMIDiskVolumes",
		why: "the pod's volume of the claim, which virt-controller adds after reading the claim"},
	"volumes[0].dataVolume.name": {test: "controller.TestVMDataVolumeTemplates",
		why: "the claim of the DataVolume's name, mounted once CDI has filled it"},
	"volumes[0].emptyDisk.capacity": {test: "launcher.TestPrepareCreatesVolumeImages",
		why: "the size of the image the launcher creates at start"},
	"volumes[0].hostDisk.type": {test: "launcher.TestPrepareHostDisks",
		why: "whether the launcher creates the image at start"},
	"volumes[0].hostDisk.capacity": {test: "launcher.TestPrepareHostDisks",
		why: "the size of the image the launcher creates at start"},
	"volumes[0].hostDisk.shared": {test: "api/vmispec.TestLiveMigratableDisks",
		why: "the LiveMigratable condition virt-controller reports"},
}

func qemuVMI(vmi *v1.VirtualMachineInstance) {
	vmi.Annotations[vmispec.BackendAnnotation] = string(vmispec.BackendQEMU)
}

func cores(n uint32) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU = &v1.CPU{Cores: n} }
}

// diskBootWithSMM boots the containerDisk with firmware on QEMU, with SMM
// (secure boot, EFI's default, needs it).
func diskBootWithSMM(vmi *v1.VirtualMachineInstance) {
	vmi.Spec.Domain.Firmware = nil
	vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{}}
}

func pvcSource(claim string) v1.VolumeSource {
	return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
}

// hostDisk replaces the containerDisk by a hostDisk of the type, 1Gi.
func hostDisk(typ v1.HostDiskType) func(*v1.VirtualMachineInstance) {
	return firstVolume(v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/srv/vm.img", Type: typ, Capacity: resource.MustParse("1Gi")}})
}

// ports forwards port 80 only.
func ports(vmi *v1.VirtualMachineInstance) {
	vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 80}}
}

// hotplug makes the volume "data" hot-plugged: hotpluggable, on SCSI.
func hotplug(mark func(*v1.Volume)) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) {
		mark(&vmi.Spec.Volumes[0])
		vmi.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSCSI
	}
}

// firstVolume replaces the containerDisk by src, as volume 0 (the walk's
// volumes[0]) and the disk of the same name.
func firstVolume(src v1.VolumeSource) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Volumes[0].VolumeSource = src }
}

// cloudInit puts a cloud-init volume first (the walk's volumes[0]), with
// data from the user (noCloud or configDrive, with userData and
// networkData as given: the leaf set must not be one of them).
func cloudInit(configDrive bool, data v1.CloudInitData) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) {
		src := v1.VolumeSource{}
		if configDrive {
			src.CloudInitConfigDrive = &v1.CloudInitConfigDriveSource{UserData: data.UserData, UserDataBase64: data.UserDataBase64, UserDataSecretRef: data.UserDataSecretRef,
				NetworkData: data.NetworkData, NetworkDataBase64: data.NetworkDataBase64, NetworkDataSecretRef: data.NetworkDataSecretRef}
		} else {
			src.CloudInitNoCloud = &v1.CloudInitNoCloudSource{UserData: data.UserData, UserDataBase64: data.UserDataBase64, UserDataSecretRef: data.UserDataSecretRef,
				NetworkData: data.NetworkData, NetworkDataBase64: data.NetworkDataBase64, NetworkDataSecretRef: data.NetworkDataSecretRef}
		}
		vmi.Spec.Volumes = append([]v1.Volume{{Name: "ci", VolumeSource: src}}, vmi.Spec.Volumes...)
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	}
}

// sshKeys propagates the Secret's keys to the cloud-init volume.
func sshKeys(secret string, configDrive bool) v1.AccessCredential {
	m := v1.SSHPublicKeyAccessCredentialPropagationMethod{}
	if configDrive {
		m.ConfigDrive = &v1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}
	} else {
		m.NoCloud = &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}
	}
	return v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
		Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
		PropagationMethod: m,
	}}
}

func both(fs ...func(*v1.VirtualMachineInstance)) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) {
		for _, f := range fs {
			f(vmi)
		}
	}
}

const userData = "#cloud-config\n"

var b64 = base64.StdEncoding.EncodeToString

// cases are the listed leaves the walk's value does not show.
var cases = map[string]fieldCase{
	"dnsPolicy":                 {value: corev1.DNSDefault},
	"domain.resources.requests": {value: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
	"domain.resources.limits":   {value: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
	"domain.firmware.kernelBoot.container.imagePullPolicy": {value: corev1.PullAlways},

	"domain.devices.autoattachPodInterface": {value: false, prepare: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Networks = nil, nil
	}},
	"domain.devices.rng": {notHonoured: map[vmispec.Backend]string{vmispec.BackendQEMU: "QEMU gets no virtio-rng device (launcher/qemu has none). " +
		"Refusing it on QEMU would refuse every VM of the fedora cluster preference (preferredRng with EFI, which runs on QEMU); " +
		"honouring it takes qemu.Config.RNG (-object rng-random,filename=/dev/urandom -device virtio-rng-pci) and a look at " +
		"live migration from launchers without it"}},
	"domain.devices.blockMultiQueue":            {prepare: cores(2)},
	"domain.devices.networkInterfaceMultiqueue": {prepare: cores(2)},

	"domain.clock.timezone":          {value: "Asia/Kolkata"},
	"domain.clock.timer.kvm.present": {value: false},
	"domain.clock.timer.pit.tickPolicy": {value: vmispec.TickPolicyDelay, same: map[vmispec.Backend]string{
		vmispec.BackendKubevmm: "our VMM's PIT is KVM's in-kernel one, which delays lost ticks"}},
	"domain.clock.timer.rtc.tickPolicy": {value: vmispec.TickPolicyCatchup},
	"domain.clock.timer.rtc.track":      {value: vmispec.RTCTrackGuest},

	"domain.firmware.uuid":           {value: "0b7a6f5e-1c2d-4e3f-8a9b-0c1d2e3f4a5b"},
	"domain.firmware.bootloader.efi": {prepare: diskBootWithSMM},
	"domain.firmware.bootloader.efi.secureBoot": {value: true, prepare: both(diskBootWithSMM, func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(false)}}}
	})},

	"domain.devices.disks[0].name": {set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Disks[0].Name, vmi.Spec.Volumes[0].Name = "x", "x"
	}},
	"volumes[0].name": {set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Disks[0].Name, vmi.Spec.Volumes[0].Name = "x", "x"
	}},
	"domain.devices.disks[0].bootOrder": {same: map[vmispec.Backend]string{
		vmispec.BackendKubevmm: "a kernelBoot guest boots its kernel, no disk; a disk boot reads the entry of the disk vmispec.BootDisk picks (launcher)"}},
	"domain.devices.interfaces[0].name": {set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].Name, vmi.Spec.Networks[0].Name = "x", "x"
	}},
	"networks[0].name": {set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].Name, vmi.Spec.Networks[0].Name = "x", "x"
	}},
	"domain.devices.interfaces[0].masquerade": {prepare: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	}},
	"domain.devices.interfaces[0].macAddress":        {value: "02:00:00:00:00:01"},
	"domain.devices.interfaces[0].ports[0].port":     {value: 80},
	"domain.devices.interfaces[0].ports[0].protocol": {value: "UDP", prepare: ports},
	"domain.devices.interfaces[0].ports[0].name":     {prepare: ports},
	"networks[0].multus.networkName": {prepare: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "br1", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
		vmi.Spec.Networks = []v1.Network{{Name: "br1", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}}}
	}},
	"domain.devices.interfaces[0].state": {value: "down"},

	"volumes[0].containerDisk.imagePullPolicy":  {value: corev1.PullAlways},
	"volumes[0].persistentVolumeClaim.readOnly": {prepare: firstVolume(pvcSource("c"))},
	"volumes[0].persistentVolumeClaim.hotpluggable": {prepare: firstVolume(pvcSource("c")),
		set: hotplug(func(v *v1.Volume) { v.PersistentVolumeClaim.Hotpluggable = true })},
	"volumes[0].dataVolume.hotpluggable": {prepare: firstVolume(v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}),
		set: hotplug(func(v *v1.Volume) { v.DataVolume.Hotpluggable = true })},
	"volumes[0].ephemeral.persistentVolumeClaim": {prepare: firstVolume(pvcSource("c")),
		value: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}},
	"volumes[0].persistentVolumeClaim.claimName": {prepare: firstVolume(pvcSource("c"))},
	"volumes[0].dataVolume.name":                 {prepare: firstVolume(v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}})},
	"volumes[0].emptyDisk.capacity": {value: resource.MustParse("2Gi"),
		prepare: firstVolume(v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}})},
	"volumes[0].hostDisk.path":     {value: "/srv/other.img", prepare: hostDisk(v1.HostDiskExists)},
	"volumes[0].hostDisk.type":     {value: v1.HostDiskExistsOrCreate, prepare: hostDisk(v1.HostDiskExists)},
	"volumes[0].hostDisk.capacity": {value: resource.MustParse("2Gi"), prepare: hostDisk(v1.HostDiskExistsOrCreate)},
	"volumes[0].hostDisk.shared":   {prepare: hostDisk(v1.HostDiskExists)},

	"volumes[0].cloudInitNoCloud.userData":                      {prepare: cloudInit(false, v1.CloudInitData{NetworkData: "version: 2"})},
	"volumes[0].cloudInitNoCloud.userDataBase64":                {value: b64([]byte(userData)), prepare: cloudInit(false, v1.CloudInitData{NetworkData: "version: 2"})},
	"volumes[0].cloudInitNoCloud.secretRef.name":                {prepare: cloudInit(false, v1.CloudInitData{UserDataSecretRef: &v1.LocalObjectReference{Name: "ud"}})},
	"volumes[0].cloudInitNoCloud.networkData":                   {prepare: cloudInit(false, v1.CloudInitData{UserData: userData})},
	"volumes[0].cloudInitNoCloud.networkDataBase64":             {value: b64([]byte("version: 2")), prepare: cloudInit(false, v1.CloudInitData{UserData: userData})},
	"volumes[0].cloudInitNoCloud.networkDataSecretRef.name":     {prepare: cloudInit(false, v1.CloudInitData{UserData: userData, NetworkDataSecretRef: &v1.LocalObjectReference{Name: "nd"}})},
	"volumes[0].cloudInitConfigDrive.userData":                  {prepare: cloudInit(true, v1.CloudInitData{NetworkData: "{}"})},
	"volumes[0].cloudInitConfigDrive.userDataBase64":            {value: b64([]byte(userData)), prepare: cloudInit(true, v1.CloudInitData{NetworkData: "{}"})},
	"volumes[0].cloudInitConfigDrive.secretRef.name":            {prepare: cloudInit(true, v1.CloudInitData{UserDataSecretRef: &v1.LocalObjectReference{Name: "ud"}})},
	"volumes[0].cloudInitConfigDrive.networkData":               {prepare: cloudInit(true, v1.CloudInitData{UserData: userData})},
	"volumes[0].cloudInitConfigDrive.networkDataBase64":         {value: b64([]byte("{}")), prepare: cloudInit(true, v1.CloudInitData{UserData: userData})},
	"volumes[0].cloudInitConfigDrive.networkDataSecretRef.name": {prepare: cloudInit(true, v1.CloudInitData{UserData: userData, NetworkDataSecretRef: &v1.LocalObjectReference{Name: "nd"}})},

	"accessCredentials[0].sshPublicKey.source.secret.secretName": {prepare: both(cloudInit(false, v1.CloudInitData{UserData: userData}), func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.AccessCredentials = []v1.AccessCredential{sshKeys("keys", false)}
	})},
	"accessCredentials[0].sshPublicKey.propagationMethod.noCloud": {prepare: cloudInit(false, v1.CloudInitData{UserData: userData}), set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.AccessCredentials = []v1.AccessCredential{sshKeys("keys", false)}
	}},
	"accessCredentials[0].sshPublicKey.propagationMethod.configDrive": {prepare: cloudInit(true, v1.CloudInitData{UserData: userData}), set: func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.AccessCredentials = []v1.AccessCredential{sshKeys("keys", true)}
	}},
}

// secrets mounts, for every Secret the cases name, its keys where the
// launcher pod mounts them.
func secrets(r *renderer) {
	for _, vol := range []string{"ci"} {
		r.secret(cloudinit.UserDataSecretDir(r.paths.SecretDir, vol), map[string]string{"userdata": userData + "# from the Secret\n"})
		r.secret(cloudinit.NetworkDataSecretDir(r.paths.SecretDir, vol), map[string]string{"networkdata": "version: 2\n"})
	}
	for _, name := range []string{"keys", "x"} {
		r.secret(cloudinit.AccessCredentialDir(r.paths.SecretDir, name), map[string]string{"key1": "ssh-ed25519 AAAA" + name})
	}
}

// value is x as a value of the leaf's type (a *T leaf takes a T).
func value(l fields.Leaf, x any) reflect.Value {
	xv := reflect.ValueOf(x)
	if xv.Type() == l.Type {
		return xv
	}
	if l.Type.Kind() == reflect.Pointer {
		p := reflect.New(l.Type.Elem())
		p.Elem().Set(xv.Convert(l.Type.Elem()))
		return p
	}
	return xv.Convert(l.Type)
}

// TestImplementedFieldsAct proves fields.Implemented: each leaf listed is
// set on an admitted VMI (the walk's value, or the case's) and must be
// admitted there, and must change at least one of what kubevmm renders
// from the VMI; on QEMU (the backend annotation) it must change it too,
// or be refused naming it. A field that routes the VMI to QEMU is
// compared with the base VMI on QEMU. A renderer's error fails the case.
// Leaves no rendering shows name the test that checks them.
func TestImplementedFieldsAct(t *testing.T) {
	leaves := map[string]fields.Leaf{}
	for _, l := range fields.Leaves(reflect.TypeOf(v1.VirtualMachineInstanceSpec{})) {
		leaves[l.Path] = l
	}
	for p := range cases {
		if _, ok := fields.Implemented[p]; !ok {
			t.Errorf("a case sets %s, which fields.Implemented does not list", p)
		}
	}
	for p := range checkedElsewhere {
		if _, ok := fields.Implemented[p]; !ok {
			t.Errorf("%s is checked elsewhere, but fields.Implemented does not list it", p)
		}
	}
	paths := make([]string, 0, len(fields.Implemented))
	for p := range fields.Implemented {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		l, ok := leaves[p]
		if !ok {
			t.Errorf("fields.Implemented lists %s, which is no leaf of the VMI spec", p)
			continue
		}
		t.Run(p, func(t *testing.T) {
			if e, ok := checkedElsewhere[p]; ok {
				checkElsewhere(t, l, cases[p], e)
				return
			}
			for _, b := range []vmispec.Backend{"", vmispec.BackendQEMU} {
				checkActs(t, l, cases[p], b)
			}
		})
	}
}

// mutate sets the leaf on a copy of base as the case says, and checks that
// it is set there and differs from base.
func mutate(t *testing.T, l fields.Leaf, c fieldCase, base *v1.VirtualMachineInstance) (*v1.VirtualMachineInstance, any) {
	t.Helper()
	vmi := base.DeepCopy()
	switch {
	case c.set != nil:
		c.set(vmi)
	case c.value != nil:
		l.Set(&vmi.Spec, value(l, c.value))
	default:
		vals := l.Values()
		require.NotEmpty(t, vals, "the walk cannot set a %s: give the case a value", l.Type)
		l.Set(&vmi.Spec, vals[0])
	}
	got, was := l.Get(&vmi.Spec), l.Get(&base.Spec)
	require.True(t, got.IsValid(), "the case does not set %s", l.Path)
	require.False(t, was.IsValid() && reflect.DeepEqual(got.Interface(), was.Interface()), "the case leaves %s as the base VMI has it", l.Path)
	return vmi, reflect.Indirect(got).Interface()
}

// checkActs sets the leaf on the base VMI for backend ("": the launcher
// picks) and checks that it is admitted and acts, or (on QEMU) is refused
// naming it.
func checkActs(t *testing.T, l fields.Leaf, c fieldCase, b vmispec.Backend) {
	r := newRenderer(t)
	secrets(r)
	base := baseVMI(t)
	if c.prepare != nil {
		c.prepare(base)
	}
	if b == vmispec.BackendQEMU {
		qemuVMI(base)
	}
	vmi, val := mutate(t, l, c, base)
	where := "on the backend the launcher picks"
	if b != "" {
		where = "on " + string(b)
	}
	r0, errs, err := r.render(base)
	require.Empty(t, errs, "the base VMI for %s %s is refused", l.Path, where)
	require.NoError(t, err, "rendering the base VMI for %s %s", l.Path, where)
	again, _, err := r.render(base)
	require.NoError(t, err)
	require.Empty(t, r0.diff(again), "rendering the base VMI for %s %s twice gives two results: the comparison would mean nothing", l.Path, where)
	r1, errs, err := r.render(vmi)
	if len(errs) > 0 {
		if b == vmispec.BackendQEMU && namedIn(errs, "spec."+l.Path) {
			t.Logf("spec.%s: %v is refused on QEMU, naming it: %v", l.Path, val, errs.ToAggregate())
			return
		}
		t.Errorf("spec.%s: %v, listed as implemented (%s), is refused %s: %v", l.Path, val, fields.Implemented[l.Path], where, errs.ToAggregate())
		return
	}
	if err != nil {
		t.Errorf("spec.%s: %v is admitted %s, but the renderers fail: %v", l.Path, val, where, err)
		return
	}
	if r1.Backend != r0.Backend {
		// The field routes the VMI to another backend: compare with the
		// base VMI on that one, what the field does there is its effect.
		on := base.DeepCopy()
		on.Annotations[vmispec.BackendAnnotation] = string(r1.Backend)
		r0, errs, err = r.render(on)
		require.Empty(t, errs, "the base VMI for %s on %s is refused", l.Path, r1.Backend)
		require.NoError(t, err, "rendering the base VMI for %s on %s", l.Path, r1.Backend)
	}
	d := r0.diff(r1)
	if gap, ok := c.notHonoured[r1.Backend]; ok {
		if len(d) > 0 {
			t.Errorf("spec.%s: %v now changes %s on %s: it is honoured there, remove the notHonoured entry", l.Path, val, strings.Join(d, ", "), r1.Backend)
			return
		}
		t.Logf("KNOWN GAP spec.%s: %v is admitted on %s and changes nothing: %s", l.Path, val, r1.Backend, gap)
		return
	}
	if len(d) > 0 {
		t.Logf("spec.%s: %v %s (%s) changes %s", l.Path, val, where, r1.Backend, strings.Join(d, ", "))
		return
	}
	if why, ok := c.same[r1.Backend]; ok {
		t.Logf("spec.%s: %v changes nothing on %s: %s", l.Path, val, r1.Backend, why)
		return
	}
	t.Errorf("spec.%s: %v is admitted %s (%s), but changes nothing kubevmm renders from the VMI "+
		"(the webhook's patch, the launcher pod, our VMM's configuration or the QEMU command line, the cloud-init disk): "+
		"listed as implemented (%s), it is not honoured there: honour it, or refuse it by name in virt-api", l.Path, val, where, r1.Backend, fields.Implemented[l.Path])
}

// namedIn reports whether an error is about path or a field enclosing it.
func namedIn(errs field.ErrorList, path string) bool {
	for _, e := range errs {
		if path == e.Field || strings.HasPrefix(path, e.Field+".") || strings.HasPrefix(path, e.Field+"[") {
			return true
		}
	}
	return false
}

// checkElsewhere checks a leaf no rendering shows: its test exists, it is
// admitted, and on QEMU admitted too or, if it acts on our VMM only,
// refused naming it.
func checkElsewhere(t *testing.T, l fields.Leaf, c fieldCase, e elsewhere) {
	testExists(t, e.test, "spec."+l.Path)
	for _, b := range []vmispec.Backend{"", vmispec.BackendQEMU} {
		base := baseVMI(t)
		if c.prepare != nil {
			c.prepare(base)
		}
		if b == vmispec.BackendQEMU {
			qemuVMI(base)
		}
		require.Empty(t, validate(base), "the base VMI for %s on %q is refused", l.Path, b)
		vmi, val := mutate(t, l, c, base)
		errs := validate(vmi)
		switch {
		case b == vmispec.BackendQEMU && e.ourVMMOnly:
			if !namedIn(errs, "spec."+l.Path) {
				t.Errorf("spec.%s: %v acts on our VMM only (%s), but is not refused by name on QEMU: %v", l.Path, val, e.why, errs.ToAggregate())
			}
		case len(errs) > 0:
			t.Errorf("spec.%s: %v, listed as implemented (%s), is refused on %q: %v", l.Path, val, fields.Implemented[l.Path], b, errs.ToAggregate())
		default:
			t.Logf("spec.%s: %v is admitted on %q; %s: %s", l.Path, val, b, e.why, e.test)
		}
	}
}

func validate(vmi *v1.VirtualMachineInstance) field.ErrorList {
	return virtapi.ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, field.NewPath("metadata"), vmi.Annotations)
}

// testFuncs are the test functions of each folder's Go test files, read
// once.
var testFuncs = map[string]map[string]bool{}

// testExists checks that test ("folder.TestName", the folder relative to
// the module's root) is a test function there.
func testExists(t *testing.T, test, what string) {
	t.Helper()
	dir, name, ok := strings.Cut(test, ".")
	if !ok {
		t.Errorf("%s: %q is not folder.TestName", what, test)
		return
	}
	funcs, ok := testFuncs[dir]
	if !ok {
		funcs = map[string]bool{}
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*_test.go"))
		require.NoError(t, err)
		fset := token.NewFileSet()
		for _, f := range files {
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			for _, d := range file.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
					funcs[fd.Name.Name] = true
				}
			}
		}
		testFuncs[dir] = funcs
	}
	if !funcs[name] {
		t.Errorf("%s is said to be checked by %s, but %s has no test function %s", what, test, dir, name)
	}
}

// TestVMAndMigrationFieldsChecked: each implemented leaf of the VM's and
// the migration's spec names a test that exists (virtapi's walk checks
// that they are admitted).
func TestVMAndMigrationFieldsChecked(t *testing.T) {
	for _, list := range []struct {
		kind   string
		typ    reflect.Type
		claims map[string]fields.Claim
	}{
		{"VirtualMachine", reflect.TypeOf(v1.VirtualMachineSpec{}), fields.VMImplemented},
		{"VirtualMachineInstanceMigration", reflect.TypeOf(v1.VirtualMachineInstanceMigrationSpec{}), fields.MigrationImplemented},
	} {
		known := map[string]bool{}
		for _, l := range fields.Leaves(list.typ, "template") {
			known[l.Path] = true
		}
		for p, c := range list.claims {
			if !known[p] {
				t.Errorf("%s: %s is listed, but is no leaf of the spec", list.kind, p)
			}
			testExists(t, c.Test, list.kind+" spec."+p)
		}
	}
}
