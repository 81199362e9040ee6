package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Conditions and phases are written by virt-controller and virt-handler
// alike; these setters are the one rule both follow, so that neither
// rewrites a timestamp the other set and an unchanged status makes no
// write (reconciles must be idempotent).
//
// As in KubeVirt, a condition's LastTransitionTime is when its Status last
// changed: a new reason or message keeps it. LastProbeTime is kept unless
// the new condition sets one.

// SetVMICondition sets or replaces the condition of c's type.
func SetVMICondition(conds []VirtualMachineInstanceCondition, c VirtualMachineInstanceCondition, now metav1.Time) []VirtualMachineInstanceCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime = conds[i].LastTransitionTime
		if conds[i].Status != c.Status {
			c.LastTransitionTime = now
		}
		if c.LastProbeTime.IsZero() {
			c.LastProbeTime = conds[i].LastProbeTime
		}
		conds[i] = c
		return conds
	}
	c.LastTransitionTime = now
	return append(conds, c)
}

// RemoveVMICondition drops the condition of type t; none left is nil.
func RemoveVMICondition(conds []VirtualMachineInstanceCondition, t VirtualMachineInstanceConditionType) []VirtualMachineInstanceCondition {
	var out []VirtualMachineInstanceCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// SetVMCondition sets or replaces the condition of c's type. A
// LastTransitionTime given in c is kept (the VM controller copies
// conditions from the VMI with theirs).
func SetVMCondition(conds []VirtualMachineCondition, c VirtualMachineCondition, now metav1.Time) []VirtualMachineCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = conds[i].LastTransitionTime
			if conds[i].Status != c.Status {
				c.LastTransitionTime = now
			}
		}
		if c.LastProbeTime.IsZero() {
			c.LastProbeTime = conds[i].LastProbeTime
		}
		conds[i] = c
		return conds
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = now
	}
	return append(conds, c)
}

// RemoveVMCondition drops the condition of type t; none left is nil.
func RemoveVMCondition(conds []VirtualMachineCondition, t VirtualMachineConditionType) []VirtualMachineCondition {
	var out []VirtualMachineCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
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
