package v1_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

var (
	t0  = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1  = metav1.NewTime(t0.Add(time.Minute))
	now = metav1.NewTime(t0.Add(time.Hour))
)

func TestSetVMICondition(t *testing.T) {
	ready := func(s corev1.ConditionStatus, reason string, probe, trans metav1.Time) v1.VirtualMachineInstanceCondition {
		return v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady, Status: s, Reason: reason, LastProbeTime: probe, LastTransitionTime: trans}
	}
	paused := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue, LastTransitionTime: t0}
	for _, tc := range []struct {
		name string
		have []v1.VirtualMachineInstanceCondition
		set  v1.VirtualMachineInstanceCondition
		want []v1.VirtualMachineInstanceCondition
	}{
		{"new condition: transition now", []v1.VirtualMachineInstanceCondition{paused},
			ready(corev1.ConditionTrue, "", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{paused, ready(corev1.ConditionTrue, "", metav1.Time{}, now)}},
		{"same status, new reason: transition time kept", []v1.VirtualMachineInstanceCondition{ready(corev1.ConditionFalse, "A", metav1.Time{}, t0)},
			ready(corev1.ConditionFalse, "B", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{ready(corev1.ConditionFalse, "B", metav1.Time{}, t0)}},
		{"status changes: transition now", []v1.VirtualMachineInstanceCondition{ready(corev1.ConditionFalse, "A", metav1.Time{}, t0)},
			ready(corev1.ConditionTrue, "", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", metav1.Time{}, now)}},
		{"no probe time given: the old one stays", []v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", t1, t0)},
			ready(corev1.ConditionTrue, "", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", t1, t0)}},
		{"probe time given: it replaces the old one", []v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", t0, t0)},
			ready(corev1.ConditionTrue, "", t1, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", t1, t0)}},
		{"a given transition time is ignored: only a status change moves it", []v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", metav1.Time{}, t0)},
			ready(corev1.ConditionTrue, "", metav1.Time{}, t1),
			[]v1.VirtualMachineInstanceCondition{ready(corev1.ConditionTrue, "", metav1.Time{}, t0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, v1.SetVMICondition(tc.have, tc.set, now))
		})
	}
}

func TestSetVMCondition(t *testing.T) {
	c := func(s corev1.ConditionStatus, probe, trans metav1.Time) v1.VirtualMachineCondition {
		return v1.VirtualMachineCondition{Type: v1.VirtualMachineReady, Status: s, LastProbeTime: probe, LastTransitionTime: trans}
	}
	for _, tc := range []struct {
		name string
		have []v1.VirtualMachineCondition
		set  v1.VirtualMachineCondition
		want []v1.VirtualMachineCondition
	}{
		{"new: transition now", nil, c(corev1.ConditionTrue, metav1.Time{}, metav1.Time{}), []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, now)}},
		{"new with a transition time (mirrored from the VMI): kept", nil, c(corev1.ConditionTrue, metav1.Time{}, t1), []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, t1)}},
		{"same status: transition time kept", []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, t0)}, c(corev1.ConditionTrue, metav1.Time{}, metav1.Time{}), []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, t0)}},
		{"status changes: transition now", []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, t0)}, c(corev1.ConditionFalse, metav1.Time{}, metav1.Time{}), []v1.VirtualMachineCondition{c(corev1.ConditionFalse, metav1.Time{}, now)}},
		{"given transition time wins", []v1.VirtualMachineCondition{c(corev1.ConditionTrue, metav1.Time{}, t0)}, c(corev1.ConditionFalse, metav1.Time{}, t1), []v1.VirtualMachineCondition{c(corev1.ConditionFalse, metav1.Time{}, t1)}},
		{"probe time kept unless given", []v1.VirtualMachineCondition{c(corev1.ConditionTrue, t1, t0)}, c(corev1.ConditionTrue, metav1.Time{}, metav1.Time{}), []v1.VirtualMachineCondition{c(corev1.ConditionTrue, t1, t0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, v1.SetVMCondition(tc.have, tc.set, now))
		})
	}
}

func TestRemoveCondition(t *testing.T) {
	ready := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady}
	paused := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused}
	for _, tc := range []struct {
		name string
		have []v1.VirtualMachineInstanceCondition
		want []v1.VirtualMachineInstanceCondition
	}{
		{"present", []v1.VirtualMachineInstanceCondition{ready, paused}, []v1.VirtualMachineInstanceCondition{ready}},
		{"absent", []v1.VirtualMachineInstanceCondition{ready}, []v1.VirtualMachineInstanceCondition{ready}},
		{"the last one: nil, so that the field is omitted", []v1.VirtualMachineInstanceCondition{paused}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := append([]v1.VirtualMachineInstanceCondition(nil), tc.have...)
			assert.Equal(t, tc.want, v1.RemoveVMICondition(have, v1.VirtualMachineInstancePaused))
			assert.Equal(t, tc.have, have, "the input is not modified")
		})
	}
	vmPaused := v1.VirtualMachineCondition{Type: v1.VirtualMachinePaused}
	assert.Nil(t, v1.RemoveVMCondition([]v1.VirtualMachineCondition{vmPaused}, v1.VirtualMachinePaused))
}

func TestSetPhase(t *testing.T) {
	st := &v1.VirtualMachineInstanceStatus{}
	st.SetPhase(v1.Pending, t0)
	st.SetPhase(v1.Pending, t1)
	st.SetPhase(v1.Running, now)
	assert.Equal(t, v1.Running, st.Phase)
	assert.Equal(t, []v1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: v1.Pending, PhaseTransitionTimestamp: t0},
		{Phase: v1.Running, PhaseTransitionTimestamp: now},
	}, st.PhaseTransitionTimestamps, "one timestamp per change, none for a phase set again")
}
