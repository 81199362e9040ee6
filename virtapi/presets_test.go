package virtapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func preset(name string, match map[string]string, d v1.DomainSpec) v1.VirtualMachineInstancePreset {
	return v1.VirtualMachineInstancePreset{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.VirtualMachineInstancePresetSpec{Selector: metav1.LabelSelector{MatchLabels: match}, Domain: &d}}
}

// presetVMI is a VMI as a user writes it: no clock, no resources key.
const presetVMI = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"v","labels":{"flavor":"small"}},
"spec":{"domain":{"cpu":{"cores":1},"devices":{}}}}`

// applied is presetVMI after the presets' patch, and the warnings.
func applied(t *testing.T, raw string, presets ...v1.VirtualMachineInstancePreset) (*v1.VirtualMachineInstance, []string) {
	t.Helper()
	vmi := &v1.VirtualMachineInstance{}
	require.NoError(t, json.Unmarshal([]byte(raw), vmi))
	ops, warnings, err := applyPresets(vmi, presets)
	require.NoError(t, err)
	out := []byte(raw)
	if len(ops) > 0 {
		b, err := json.Marshal(ops)
		require.NoError(t, err)
		p, err := jsonpatch.DecodePatch(b)
		require.NoError(t, err)
		out, err = p.Apply(out)
		require.NoError(t, err, "the patch applies to the object as written: %s", b)
	}
	got := &v1.VirtualMachineInstance{}
	require.NoError(t, json.Unmarshal(out, got))
	return got, warnings
}

// A preset whose selector matches fills what the VMI leaves out, keeps
// what it sets (warning of it) and is recorded on the VMI; one that does
// not match, or a VMI that excludes itself, changes nothing.
func TestApplyPresets(t *testing.T) {
	mem := resource.MustParse("64Mi")
	small := preset("small", map[string]string{"flavor": "small"}, v1.DomainSpec{
		Resources: v1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: mem}},
		CPU:       &v1.CPU{Cores: 2},
		Clock:     &v1.Clock{Timer: &v1.Timer{RTC: &v1.RTCTimer{TickPolicy: "delay"}}},
		Features:  &v1.Features{ACPI: &v1.FeatureState{Enabled: ptr.To(true)}},
	})
	got, warnings := applied(t, presetVMI, small, preset("large", map[string]string{"flavor": "large"}, v1.DomainSpec{CPU: &v1.CPU{Cores: 8}}))
	assert.True(t, got.Spec.Domain.Resources.Requests.Memory().Equal(mem), "requests filled")
	assert.Equal(t, uint32(1), got.Spec.Domain.CPU.Cores, "the VMI's own cpu kept")
	require.NotNil(t, got.Spec.Domain.Clock)
	assert.Equal(t, small.Spec.Domain.Clock.Timer, got.Spec.Domain.Clock.Timer, "a clock made for the timer")
	assert.Equal(t, small.Spec.Domain.Features, got.Spec.Domain.Features)
	assert.Equal(t, map[string]string{PresetAnnotationPrefix + "small": "kubevirt.io/v1"}, got.Annotations)
	assert.Equal(t, []string{"VirtualMachineInstancePreset small: spec.domain.cpu is the VMI's own, not the preset's"}, warnings)

	// A VMI with a clock of its own and no timer gets the timer only.
	withClock := `{"metadata":{"name":"v","labels":{"flavor":"small"},"annotations":{"a":"b"}},"spec":{"domain":{"clock":{"utc":{"offsetSeconds":60}},"devices":{}}}}`
	got, _ = applied(t, withClock, small)
	assert.Equal(t, ptr.To(60), got.Spec.Domain.Clock.UTC.OffsetSeconds)
	assert.Equal(t, small.Spec.Domain.Clock.Timer, got.Spec.Domain.Clock.Timer)
	assert.Equal(t, "b", got.Annotations["a"], "other annotations kept")
	assert.Equal(t, "kubevirt.io/v1", got.Annotations[PresetAnnotationPrefix+"small"])

	excluded := `{"metadata":{"name":"v","labels":{"flavor":"small"},"annotations":{"` + PresetExcludeAnnotation + `":"true"}},"spec":{"domain":{"devices":{}}}}`
	got, _ = applied(t, excluded, small)
	assert.Nil(t, got.Spec.Domain.CPU)
	assert.Len(t, got.Annotations, 1)

	// A preset that agrees with what the VMI has counts as applied.
	same := preset("same", map[string]string{"flavor": "small"}, v1.DomainSpec{CPU: &v1.CPU{Cores: 1}})
	got, warnings = applied(t, presetVMI, same)
	assert.Equal(t, "kubevirt.io/v1", got.Annotations[PresetAnnotationPrefix+"same"])
	assert.Empty(t, warnings)
}

// Two matching presets that set one thing differently refuse the VMI,
// naming both; a preset whose selector does not parse refuses it too.
func TestApplyPresetsRefuses(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	require.NoError(t, json.Unmarshal([]byte(presetVMI), vmi))
	a := preset("a", map[string]string{"flavor": "small"}, v1.DomainSpec{Firmware: &v1.Firmware{Serial: "1"}})
	b := preset("b", nil, v1.DomainSpec{Firmware: &v1.Firmware{Serial: "2"}})
	_, _, err := applyPresets(vmi, []v1.VirtualMachineInstancePreset{b, a})
	require.Error(t, err)
	assert.Equal(t, `VirtualMachineInstancePresets cannot be applied due to conflicts: presets "a" and "b" set spec.domain.firmware differently`, err.Error())

	bad := preset("bad", nil, v1.DomainSpec{})
	bad.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "flavor", Operator: "Sometimes"}}
	_, _, err = applyPresets(vmi, []v1.VirtualMachineInstancePreset{bad})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "VirtualMachineInstancePreset bad: spec.selector")
}
