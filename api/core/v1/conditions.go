package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// Conditions and phases are written by virt-controller and virt-handler
// alike; conditions.Set is the one rule both follow, so that neither
// rewrites a timestamp the other set and an unchanged status makes no
// write (reconciles must be idempotent).
//
// As in KubeVirt, a condition's LastTransitionTime is when its Status last
// changed: a new reason or message keeps it. LastProbeTime is kept unless
// the new condition sets one.

// ConditionFields makes VMI conditions conditions.Kinds: the probe time
// is kept unless given.
func (c *VirtualMachineInstanceCondition) ConditionFields() conditions.Fields {
	return conditions.Fields{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: &c.LastTransitionTime, LastProbeTime: &c.LastProbeTime}
}

// ConditionFields makes VM conditions conditions.Kinds: the probe time
// is kept unless given, and a LastTransitionTime given is kept (the VM
// controller copies conditions from the VMI with theirs).
func (c *VirtualMachineCondition) ConditionFields() conditions.Fields {
	return conditions.Fields{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: &c.LastTransitionTime, KeepTransition: true, LastProbeTime: &c.LastProbeTime}
}

// ConditionFields makes KubeVirt conditions conditions.Kinds: only the
// transition time is stamped (the probe time is as given).
func (c *KubeVirtCondition) ConditionFields() conditions.Fields {
	return conditions.Fields{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: &c.LastTransitionTime}
}

// SetVMICondition sets or replaces the condition of c's type.
func SetVMICondition(conds []VirtualMachineInstanceCondition, c VirtualMachineInstanceCondition, now metav1.Time) []VirtualMachineInstanceCondition {
	return conditions.Set(conds, c, now)
}

// RemoveVMICondition drops the condition of type t; none left is nil.
func RemoveVMICondition(conds []VirtualMachineInstanceCondition, t VirtualMachineInstanceConditionType) []VirtualMachineInstanceCondition {
	return conditions.Remove(conds, t)
}

// SetVMCondition sets or replaces the condition of c's type. A
// LastTransitionTime given in c is kept (the VM controller copies
// conditions from the VMI with theirs).
func SetVMCondition(conds []VirtualMachineCondition, c VirtualMachineCondition, now metav1.Time) []VirtualMachineCondition {
	return conditions.Set(conds, c, now)
}

// RemoveVMCondition drops the condition of type t; none left is nil.
func RemoveVMCondition(conds []VirtualMachineCondition, t VirtualMachineConditionType) []VirtualMachineCondition {
	return conditions.Remove(conds, t)
}

// SetKubeVirtCondition sets or replaces the condition of c's type; its
// LastTransitionTime moves only when its status changes.
func SetKubeVirtCondition(conds []KubeVirtCondition, c KubeVirtCondition, now metav1.Time) []KubeVirtCondition {
	return conditions.Set(conds, c, now)
}

// SetPhase moves the VMI to phase p and, if that is a change, records when
// in PhaseTransitionTimestamps, as KubeVirt does.
func (st *VirtualMachineInstanceStatus) SetPhase(p VirtualMachineInstancePhase, now metav1.Time) {
	if st.Phase == p {
		return
	}
	st.Phase = p
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, VirtualMachineInstancePhaseTransitionTimestamp{
		Phase: p, PhaseTransitionTimestamp: now,
	})
}
