package templatevalidator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// fedoraVM is a VM as the common Fedora template makes it: 2Gi of guest
// memory, a virtio root disk and a cloud-init disk.
func fedoraVM(change ...func(*v1.VirtualMachine)) *v1.VirtualMachine {
	guest := resource.MustParse("2Gi")
	vm := &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "fedora", Namespace: "ns"},
		Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: &guest},
				Devices: v1.Devices{Disks: []v1.Disk{
					{Name: "rootdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
					{Name: "cloudinitdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
				}},
			},
			Volumes: []v1.Volume{
				{Name: "rootdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "fedora"}}},
				{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config"}}},
			},
		}}},
	}
	for _, c := range change {
		c(vm)
	}
	return vm
}

func memory(q string) func(*v1.VirtualMachine) {
	return func(vm *v1.VirtualMachine) {
		g := resource.MustParse(q)
		vm.Spec.Template.Spec.Domain.Memory.Guest = &g
	}
}

func requestsOnly(q string) func(*v1.VirtualMachine) {
	return func(vm *v1.VirtualMachine) {
		vm.Spec.Template.Spec.Domain.Memory = nil
		vm.Spec.Template.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	}
}

func sataData(vm *v1.VirtualMachine) {
	s := &vm.Spec.Template.Spec
	s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "data-1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}})
	s.Volumes = append(s.Volumes, v1.Volume{Name: "data-1", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "data"}}})
}

func noDisks(vm *v1.VirtualMachine) {
	vm.Spec.Template.Spec.Domain.Devices.Disks = nil
	vm.Spec.Template.Spec.Volumes = nil
}

const (
	minMemory   = `{"name": "minimal-required-memory", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "This VM requires more memory.", "min": 2147483648}`
	virtioBus   = `{"name": "virtio-bus", "path": "jsonpath::.spec.domain.devices.disks[*].disk.bus", "rule": "enum", "message": "Use virtio disks.", "values": ["virtio"]}`
	virtioWarn  = `{"name": "virtio-bus", "path": "jsonpath::.spec.domain.devices.disks[*].disk.bus", "valid": "jsonpath::.spec.domain.devices.disks[*].disk.bus", "rule": "enum", "message": "virtio disks are faster.", "values": ["virtio"], "justWarning": true}`
	diskNames   = `{"name": "disk-names", "path": "jsonpath::.spec.domain.devices.disks[*].name", "rule": "regex", "message": "Disk names are lowercase letters.", "regex": "^[a-z]+$"}`
	memMsg      = "This VM requires more memory."
	memoryGuest = ".spec.domain.memory.guest"
)

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rule       string
		vm         *v1.VirtualMachine
		violations []string // "path: message: detail"
		warnings   []string
	}{
		{name: "integer: enough memory", rule: minMemory, vm: fedoraVM()},
		{name: "integer: too little memory", rule: minMemory, vm: fedoraVM(memory("1Gi")),
			violations: []string{memoryGuest + ": " + memMsg + ": value 1073741824 is lower than minimum [2147483648]"}},
		{name: "integer: memory given as the request is the guest's", rule: minMemory, vm: fedoraVM(requestsOnly("1Gi")),
			violations: []string{memoryGuest + ": " + memMsg + ": value 1073741824 is lower than minimum [2147483648]"}},
		{name: "integer: the request defaults from the guest memory",
			rule: `{"name": "r", "path": "jsonpath::.spec.domain.resources.requests.memory", "rule": "integer", "message": "m", "min": 2147483648}`,
			vm:   fedoraVM(memory("1536Mi")), violations: []string{".spec.domain.resources.requests.memory: m: value 1610612736 is lower than minimum [2147483648]"}},
		{name: "integer: max", rule: `{"name": "r", "path": "jsonpath::.spec.domain.cpu.cores", "rule": "integer", "message": "Too many cores.", "max": 2}`,
			vm:         fedoraVM(func(vm *v1.VirtualMachine) { vm.Spec.Template.Spec.Domain.CPU = &v1.CPU{Cores: 4} }),
			violations: []string{".spec.domain.cpu.cores: Too many cores.: value 4 is higher than maximum [2]"}},
		{name: "integer: an unset CPU has one core, as the VMI", rule: `{"name": "r", "path": "jsonpath::.spec.domain.cpu.cores", "rule": "integer", "message": "m", "min": 1, "max": 1}`,
			vm: fedoraVM()},
		{name: "integer: a bound from a path",
			rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "Over the limit.", "max": "jsonpath::.spec.domain.resources.limits.memory"}`,
			vm: fedoraVM(func(vm *v1.VirtualMachine) {
				vm.Spec.Template.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
			}),
			violations: []string{memoryGuest + ": Over the limit.: value 2147483648 is higher than maximum [1073741824]"}},
		{name: "string: minLength", rule: `{"name": "r", "path": "jsonpath::.spec.hostname", "rule": "string", "message": "Hostname too short.", "minLength": 3, "maxLength": 8}`,
			vm:         fedoraVM(func(vm *v1.VirtualMachine) { vm.Spec.Template.Spec.Hostname = "ab" }),
			violations: []string{`.spec.hostname: Hostname too short.: length 2 of "ab" is lower than minimum [3]`}},
		{name: "string: maxLength", rule: `{"name": "r", "path": "jsonpath::.spec.hostname", "rule": "string", "message": "Hostname too long.", "minLength": 3, "maxLength": 8}`,
			vm:         fedoraVM(func(vm *v1.VirtualMachine) { vm.Spec.Template.Spec.Hostname = "fedora-server" }),
			violations: []string{`.spec.hostname: Hostname too long.: length 13 of "fedora-server" is higher than maximum [8]`}},
		{name: "string: lengths within", rule: `{"name": "r", "path": "jsonpath::.spec.hostname", "rule": "string", "message": "m", "minLength": 3, "maxLength": 8}`,
			vm: fedoraVM(func(vm *v1.VirtualMachine) { vm.Spec.Template.Spec.Hostname = "fedora" })},
		{name: "enum: every value of an array path", rule: virtioBus, vm: fedoraVM()},
		{name: "enum: one value of an array path is not allowed", rule: virtioBus, vm: fedoraVM(sataData),
			violations: []string{`.spec.domain.devices.disks[*].disk.bus: Use virtio disks.: value "sata" is not one of [virtio]`}},
		{name: "enum: a value from a path", rule: `{"name": "r", "path": "jsonpath::.spec.domain.machine.type", "rule": "enum", "message": "m", "values": ["jsonpath::.metadata.labels.machine"]}`,
			vm:         fedoraVM(func(vm *v1.VirtualMachine) { vm.Spec.Template.ObjectMeta.Labels = map[string]string{"machine": "pc"} }),
			violations: []string{`.spec.domain.machine.type: m: value "q35" is not one of [pc]`}},
		{name: "enum: the machine type defaults as the VMI's", rule: `{"name": "r", "path": "jsonpath::.spec.domain.machine.type", "rule": "enum", "message": "m", "values": ["q35"]}`,
			vm: fedoraVM()},
		{name: "regex", rule: diskNames, vm: fedoraVM(sataData),
			violations: []string{`.spec.domain.devices.disks[*].name: Disk names are lowercase letters.: value "data-1" does not match ^[a-z]+$`}},
		{name: "regex: a disk the VMI gets for a volume counts", rule: diskNames,
			vm: fedoraVM(func(vm *v1.VirtualMachine) {
				vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, v1.Volume{Name: "scratch2", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "x"}}})
			}),
			violations: []string{`.spec.domain.devices.disks[*].name: Disk names are lowercase letters.: value "scratch2" does not match ^[a-z]+$`}},
		{name: "justWarning: a violation warns", rule: virtioWarn, vm: fedoraVM(sataData),
			warnings: []string{`.spec.domain.devices.disks[*].disk.bus: virtio disks are faster.: value "sata" is not one of [virtio]`}},
		{name: "valid: the rule is skipped when its valid path finds nothing", rule: virtioWarn, vm: fedoraVM(noDisks)},
		{name: "valid: an unset field is not valid",
			rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.hugepages.pageSize", "valid": "jsonpath::.spec.domain.memory.hugepages", "rule": "enum", "message": "Use 1Gi pages.", "values": ["1Gi"]}`,
			vm:   fedoraVM()},
		{name: "valid: a set field is",
			rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.hugepages.pageSize", "valid": "jsonpath::.spec.domain.memory.hugepages", "rule": "enum", "message": "Use 1Gi pages.", "values": ["1Gi"]}`,
			vm: fedoraVM(func(vm *v1.VirtualMachine) {
				vm.Spec.Template.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			}),
			violations: []string{`.spec.domain.memory.hugepages.pageSize: Use 1Gi pages.: value "2Mi" is not one of [1Gi]`}},
		{name: "integer: a quantity in a string field", rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.hugepages.pageSize", "rule": "integer", "message": "m", "min": 1073741824}`,
			vm: fedoraVM(func(vm *v1.VirtualMachine) {
				vm.Spec.Template.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			}),
			violations: []string{`.spec.domain.memory.hugepages.pageSize: m: value 2097152 is lower than minimum [1073741824]`}},
		{name: "missing path: an unset field is its zero value", rule: `{"name": "r", "path": "jsonpath::.spec.domain.cpu.model", "rule": "string", "message": "Name a CPU model.", "minLength": 1}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.cpu.model: Name a CPU model.: length 0 of "" is lower than minimum [1]`}},
		{name: "missing path: an unset map entry is its zero value", rule: `{"name": "r", "path": "jsonpath::.metadata.labels.tier", "rule": "enum", "message": "Say the tier.", "values": ["gold"]}`,
			vm: fedoraVM(), violations: []string{`.metadata.labels.tier: Say the tier.: value "" is not one of [gold]`}},
		{name: "missing path: an unset quantity is 0", rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.maxGuest", "rule": "integer", "message": "m", "min": 1}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.memory.maxGuest: m: value 0 is lower than minimum [1]`}},
		{name: "a path naming no field fails the rule", rule: `{"name": "r", "path": "jsonpath::.spec.domain.nosuch", "rule": "integer", "message": "m", "min": 1}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.nosuch: m: .spec.domain.nosuch names no field of a VirtualMachine's spec.template`}},
		{name: "a broken justWarning rule refuses too", rule: `{"name": "r", "path": "jsonpath::.spec.domain.nosuch", "rule": "integer", "message": "m", "min": 1, "justWarning": true}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.nosuch: m: .spec.domain.nosuch names no field of a VirtualMachine's spec.template`}},
		{name: "an empty list finds no values", rule: diskNames, vm: fedoraVM(noDisks),
			violations: []string{`.spec.domain.devices.disks[*].name: Disk names are lowercase letters.: no values were found`}},
		{name: "a string is no integer", rule: `{"name": "r", "path": "jsonpath::.spec.domain.devices.disks[*].name", "rule": "integer", "message": "m", "min": 1}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.devices.disks[*].name: m: value "rootdisk" is not an integer or a quantity`}},
		{name: "an object is no string", rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory", "rule": "string", "message": "m", "minLength": 1}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.memory: m: a JSON object is not a string`}},
		{name: "a bound path must find one value", rule: `{"name": "r", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "m", "min": "jsonpath::.spec.domain.devices.disks[*].name"}`,
			vm: fedoraVM(), violations: []string{`.spec.domain.memory.guest: m: min: .spec.domain.devices.disks[*].name finds 2 values, not one`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules("[" + tc.rule + "]")
			require.NoError(t, err)
			before := tc.vm.DeepCopy()
			res, err := Evaluate(rules, tc.vm)
			require.NoError(t, err)
			assert.Equal(t, tc.violations, pathed(res.Violations), "violations")
			assert.Equal(t, tc.warnings, pathed(res.Warnings), "warnings")
			assert.Equal(t, before, tc.vm, "the VM is not changed")
		})
	}
}

func pathed(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path+": "+f.String())
	}
	return out
}

func TestEvaluateAllRules(t *testing.T) {
	rules, err := ParseRules("[" + minMemory + "," + virtioWarn + "," + diskNames + "]")
	require.NoError(t, err)
	res, err := Evaluate(rules, fedoraVM(memory("1Gi"), sataData))
	require.NoError(t, err)
	require.Len(t, res.Violations, 2, "every rule is applied")
	assert.Equal(t, Finding{Rule: "minimal-required-memory", Path: memoryGuest, Message: memMsg, Detail: "value 1073741824 is lower than minimum [2147483648]"}, res.Violations[0])
	assert.Equal(t, "disk-names", res.Violations[1].Rule)
	require.Len(t, res.Warnings, 1)
	assert.Equal(t, "virtio-bus", res.Warnings[0].Rule)

	res, err = Evaluate(nil, fedoraVM())
	require.NoError(t, err)
	assert.Equal(t, Result{}, res, "no rules, nothing to say")
}

func TestTemplateRules(t *testing.T) {
	vmObj := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "${NAME}", "annotations": map[string]any{AnnotationValidations: "[vm]"}}}
	for _, tc := range []struct {
		name string
		tmpl map[string]any
		want string
	}{
		{"the VirtualMachine's annotation", map[string]any{"objects": []any{map[string]any{"kind": "Service"}, vmObj},
			"metadata": map[string]any{"annotations": map[string]any{TemplateAnnotationValidations: "[old]"}}}, "[vm]"},
		{"else the template's own", map[string]any{"objects": []any{map[string]any{"kind": "VirtualMachine", "apiVersion": "kubevirt.io/v1"}},
			"metadata": map[string]any{"annotations": map[string]any{TemplateAnnotationValidations: "[old]"}}}, "[old]"},
		{"none", map[string]any{"objects": []any{"not an object", map[string]any{"kind": "VirtualMachine", "apiVersion": "example.com/v1",
			"metadata": map[string]any{"annotations": map[string]any{AnnotationValidations: "[other]"}}}}}, ""},
		{"malformed objects", map[string]any{"objects": "nope"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, TemplateRules(&unstructured.Unstructured{Object: tc.tmpl}))
		})
	}

	ref, ok := TemplateRef(map[string]string{LabelTemplate: "fedora-server-small", LabelTemplateNamespace: "openshift"})
	assert.True(t, ok)
	assert.Equal(t, types.NamespacedName{Namespace: "openshift", Name: "fedora-server-small"}, ref)
	_, ok = TemplateRef(map[string]string{LabelTemplate: "fedora-server-small"})
	assert.False(t, ok, "a template without its namespace names none (as upstream)")
}
