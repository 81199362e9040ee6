package expand_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/expand"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

var tmpl = field.NewPath("spec", "template", "spec")

func small() *v1beta1.VirtualMachineInstancetypeSpec {
	return &v1beta1.VirtualMachineInstancetypeSpec{
		CPU:    v1beta1.CPUInstancetype{Guest: 2},
		Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("2Gi")},
	}
}

func withDisk() v1.VirtualMachineInstanceSpec {
	return v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Devices: v1.Devices{
		Disks:      []v1.Disk{{Name: "root"}, {Name: "cd", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{}}}, {Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}}},
		Interfaces: []v1.Interface{{Name: "default"}},
	}}, Networks: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}}
}

func TestApplyInstancetype(t *testing.T) {
	s := withDisk()
	meta := metav1.ObjectMeta{Annotations: map[string]string{"mine": "x"}}
	it := small()
	it.NodeSelector = map[string]string{"disk": "ssd"}
	it.Annotations = map[string]string{"mine": "x", "from-type": "y"}
	require.Empty(t, expand.Apply(tmpl, &s, &meta, it, nil))
	assert.Equal(t, &v1.CPU{Sockets: 1, Cores: 2, Threads: 1}, s.Domain.CPU, "two vCPUs as cores: the guest sees one socket")
	assert.Equal(t, "2Gi", s.Domain.Memory.Guest.String())
	assert.Equal(t, map[string]string{"disk": "ssd"}, s.NodeSelector)
	assert.Equal(t, map[string]string{"mine": "x", "from-type": "y"}, meta.Annotations)
	assert.Empty(t, s.Domain.Devices.Disks[0].Disk, "no preference: disks untouched but for their device")
}

func TestTopology(t *testing.T) {
	tests := []struct {
		topology v1beta1.PreferredCPUTopology
		ratio    uint32
		across   v1beta1.SpreadAcross
		n        uint32
		want     [3]uint32 // sockets, cores, threads
	}{
		{"", 0, "", 4, [3]uint32{1, 4, 1}},
		{v1beta1.Any, 0, "", 4, [3]uint32{1, 4, 1}},
		{v1beta1.Cores, 0, "", 4, [3]uint32{1, 4, 1}},
		{v1beta1.DeprecatedPreferCores, 0, "", 4, [3]uint32{1, 4, 1}},
		{v1beta1.Sockets, 0, "", 4, [3]uint32{4, 1, 1}},
		{v1beta1.DeprecatedPreferSockets, 0, "", 1, [3]uint32{1, 1, 1}},
		{v1beta1.Threads, 0, "", 2, [3]uint32{1, 1, 2}},
		{v1beta1.Spread, 0, "", 8, [3]uint32{4, 2, 1}},
		{v1beta1.Spread, 4, "", 8, [3]uint32{2, 4, 1}},
		{v1beta1.Spread, 0, v1beta1.SpreadAcrossCoresThreads, 8, [3]uint32{1, 4, 2}},
		{v1beta1.Spread, 2, v1beta1.SpreadAcrossSocketsCoresThreads, 8, [3]uint32{2, 2, 2}},
	}
	for _, tc := range tests {
		t.Run(string(tc.topology)+"/"+string(tc.across), func(t *testing.T) {
			pref := &v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{}}
			if tc.topology != "" {
				pref.CPU.PreferredCPUTopology = ptr.To(tc.topology)
			}
			if tc.ratio != 0 || tc.across != "" {
				pref.CPU.SpreadOptions = &v1beta1.SpreadOptions{}
				if tc.ratio != 0 {
					pref.CPU.SpreadOptions.Ratio = ptr.To(tc.ratio)
				}
				if tc.across != "" {
					pref.CPU.SpreadOptions.Across = ptr.To(tc.across)
				}
			}
			s, c, th := expand.Topology(tc.n, pref)
			assert.Equal(t, tc.want, [3]uint32{s, c, th})
		})
	}
}

func TestConflicts(t *testing.T) {
	q := resource.MustParse("1Gi")
	tests := []struct {
		name  string
		edit  func(*v1.VirtualMachineInstanceSpec, *metav1.ObjectMeta)
		field string
	}{
		{"sockets", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) { s.Domain.CPU = &v1.CPU{Sockets: 1} }, "spec.template.spec.domain.cpu.sockets"},
		{"cores", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) { s.Domain.CPU = &v1.CPU{Cores: 2} }, "spec.template.spec.domain.cpu.cores"},
		{"threads", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) { s.Domain.CPU = &v1.CPU{Threads: 1} }, "spec.template.spec.domain.cpu.threads"},
		{"memory", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) { s.Domain.Memory = &v1.Memory{Guest: &q} }, "spec.template.spec.domain.memory.guest"},
		{"requests", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: q}
		}, "spec.template.spec.domain.resources.requests.memory"},
		{"limits", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, "spec.template.spec.domain.resources.limits.cpu"},
		{"nodeSelector", func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.NodeSelector = map[string]string{"a": "b"}
		}, "spec.template.spec.nodeSelector"},
		{"annotation", func(_ *v1.VirtualMachineInstanceSpec, m *metav1.ObjectMeta) {
			m.Annotations = map[string]string{"k": "other"}
		}, "annotations[k]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, meta := withDisk(), metav1.ObjectMeta{}
			tc.edit(&s, &meta)
			it := small()
			it.NodeSelector = map[string]string{"x": "y"}
			it.Annotations = map[string]string{"k": "v"}
			errs := expand.Apply(tmpl, &s, &meta, it, nil)
			require.Len(t, errs, 1)
			assert.Equal(t, tc.field, errs[0].Field)
			assert.Contains(t, errs[0].Error(), "conflicts with selected instance type")
		})
	}
}

func TestApplyPreference(t *testing.T) {
	pref := &v1beta1.VirtualMachinePreferenceSpec{
		Devices: &v1beta1.DevicePreferences{
			PreferredDiskBus: v1.DiskBusSATA, PreferredCdromBus: v1.DiskBusSATA, PreferredInterfaceModel: "e1000",
			PreferredRng: &v1.Rng{}, PreferredAutoattachSerialConsole: ptr.To(false),
		},
		Features:                               &v1beta1.FeaturePreferences{PreferredSmm: &v1.FeatureState{}},
		Firmware:                               &v1beta1.FirmwarePreferences{PreferredUseEfi: ptr.To(true), PreferredUseSecureBoot: ptr.To(false)},
		Clock:                                  &v1beta1.ClockPreferences{PreferredClockOffset: &v1beta1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}},
		PreferredTerminationGracePeriodSeconds: ptr.To[int64](180),
		Annotations:                            map[string]string{"p": "1"},
	}
	s, meta := withDisk(), metav1.ObjectMeta{}
	s.Domain.Devices.AutoattachSerialConsole = ptr.To(true)
	require.Empty(t, expand.Apply(tmpl, &s, &meta, small(), pref))
	d := s.Domain.Devices
	assert.Equal(t, v1.DiskBusSATA, d.Disks[0].Disk.Bus, "a disk naming no device becomes a disk on the preferred bus")
	assert.Equal(t, v1.DiskBusSATA, d.Disks[1].CDRom.Bus)
	assert.Equal(t, v1.DiskBusSATA, d.Disks[2].Disk.Bus, "the VM's own bus kept")
	assert.Equal(t, "e1000", d.Interfaces[0].Model)
	assert.NotNil(t, d.Rng)
	assert.Equal(t, ptr.To(true), d.AutoattachSerialConsole, "the VM's own value kept")
	assert.NotNil(t, s.Domain.Features.SMM)
	assert.Equal(t, &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(false)}}, s.Domain.Firmware.Bootloader)
	assert.NotNil(t, s.Domain.Clock.UTC)
	assert.Equal(t, ptr.To[int64](180), s.TerminationGracePeriodSeconds)
	assert.Equal(t, map[string]string{"p": "1"}, meta.Annotations)
}

func TestRequirements(t *testing.T) {
	pref := &v1beta1.VirtualMachinePreferenceSpec{Requirements: &v1beta1.PreferenceRequirements{
		CPU:    &v1beta1.CPUPreferenceRequirement{Guest: 4},
		Memory: &v1beta1.MemoryPreferenceRequirement{Guest: resource.MustParse("4Gi")},
	}}
	s, meta := withDisk(), metav1.ObjectMeta{}
	errs := expand.Apply(tmpl, &s, &meta, small(), pref)
	require.Len(t, errs, 2)
	assert.Equal(t, "spec.instancetype", errs[0].Field)
	assert.Contains(t, errs[0].Detail, "preference requires 4 vCPU")
	assert.Contains(t, errs[1].Detail, "preference requires 4Gi")

	// Without an instance type the template itself must meet them.
	q := resource.MustParse("8Gi")
	s.Domain.CPU = &v1.CPU{Cores: 4}
	s.Domain.Memory = &v1.Memory{Guest: &q}
	assert.Empty(t, expand.Apply(tmpl, &s, &meta, nil, pref))
}

func TestUnsupported(t *testing.T) {
	it := small()
	it.CPU.Model = ptr.To("host-passthrough")
	it.Memory.Hugepages = &v1.Unmodeled{Raw: []byte(`{"pageSize":"2Mi"}`)}
	errs := expand.UnsupportedInstancetype(field.NewPath("spec"), it)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	assert.ElementsMatch(t, []string{"spec.cpu.model", "spec.memory.hugepages"}, fields)
	assert.Empty(t, expand.UnsupportedInstancetype(field.NewPath("spec"), small()))

	pref := &v1beta1.VirtualMachinePreferenceSpec{Machine: &v1beta1.MachinePreferences{PreferredMachineType: "pc-i440fx"}}
	errs = expand.UnsupportedPreference(field.NewPath("spec"), pref)
	require.Len(t, errs, 1)
	assert.Equal(t, "spec.machine.preferredMachineType", errs[0].Field)
	pref.Machine.PreferredMachineType = "q35"
	assert.Empty(t, expand.UnsupportedPreference(field.NewPath("spec"), pref))
}
