// Package conditions holds the conditions every operator's CR reports
// (KubeVirt, SSP, NetworkAddonsConfig, CDI, HyperConverged,
// HostPathProvisioner), as openshift/custom-resource-status conditions/v1
// names them: the types' names, which users and HCO read by these exact
// strings, and, for the CRs that share upstream's layout, the condition
// itself. Each API package declares its typed constants from here, and no
// copy can drift. Set, Find and Remove are how every kind's conditions
// are set (the operators' CRs', CDI's kinds', KubeVirt's VMI and VM):
// one rule for their times.
//
// +kubebuilder:object:generate=true
package conditions

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

//go:generate go tool controller-gen object paths=.

// The condition types.
const (
	// Available: the operand works (all of its components are ready).
	Available = "Available"
	// Progressing: the operand is being deployed, updated or removed.
	Progressing = "Progressing"
	// Degraded: something is wrong that the operator cannot fix itself
	// (an unsupported spec field, a second CR, workloads blocking an
	// uninstall).
	Degraded = "Degraded"
)

// Type of a condition: Available, Progressing, Degraded, or one the
// CR's kind adds.
type Type string

// Condition is one of the operator's conditions
// (openshift/custom-resource-status conditions/v1).
type Condition struct {
	Type   Type                   `json:"type"`
	Status corev1.ConditionStatus `json:"status"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	LastHeartbeatTime metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// ConditionFields makes Condition a Kind: both its times are stamped.
func (c *Condition) ConditionFields() Fields {
	return Fields{Type: string(c.Type), Status: c.Status, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: &c.LastTransitionTime, LastHeartbeatTime: &c.LastHeartbeatTime}
}

// Fields are what Set and Find read of one condition, of any kind, and
// the times Set stamps: Set's one rule serves every condition type the
// API packages declare (this package's; CDI's, DataVolume's, DataSource's
// and DataImportCron's; KubeVirt's, the VMI's and the VM's), each with
// its own JSON, as upstream's meta.SetStatusCondition serves
// metav1.Condition. A kind without a heartbeat or a probe time leaves it
// nil.
//
// +kubebuilder:object:generate=false
type Fields struct {
	Type            string
	Status          corev1.ConditionStatus
	Reason, Message string
	// LastTransitionTime is when Status last changed: a new reason or
	// message keeps it.
	LastTransitionTime *metav1.Time
	// KeepTransition: a LastTransitionTime set in the condition given to
	// Set is kept (a VM's conditions mirror its VMI's, with their times).
	KeepTransition bool
	// LastHeartbeatTime (openshift/custom-resource-status) is when the
	// status, reason or message last changed.
	LastHeartbeatTime *metav1.Time
	// LastProbeTime (KubeVirt's VMI and VM) is kept unless the condition
	// given to Set has one.
	LastProbeTime *metav1.Time
}

// Kind is a pointer to a condition of one kind: it says its Fields.
//
// +kubebuilder:object:generate=false
type Kind[C any] interface {
	*C
	ConditionFields() Fields
}

// Set sets or replaces the condition of c's type, its times stamped (see
// Fields) with now where they move: an unchanged condition makes no
// write, so a reconcile that sets it again is idempotent.
func Set[C any, PC Kind[C]](conds []C, c C, now metav1.Time) []C {
	f := PC(&c).ConditionFields()
	if old := Find[C, PC](conds, f.Type); old != nil {
		o := PC(old).ConditionFields()
		f.stamp(&o, now)
		*old = c
		return conds
	}
	f.stamp(nil, now)
	return append(conds, c)
}

// stamp sets f's times from old, the condition f replaces (nil if none).
func (f Fields) stamp(old *Fields, now metav1.Time) {
	if !f.KeepTransition || f.LastTransitionTime.IsZero() {
		*f.LastTransitionTime = now
		if old != nil && old.Status == f.Status {
			*f.LastTransitionTime = *old.LastTransitionTime
		}
	}
	if f.LastHeartbeatTime != nil {
		*f.LastHeartbeatTime = now
		if old != nil && old.Status == f.Status && old.Reason == f.Reason && old.Message == f.Message {
			*f.LastHeartbeatTime = *old.LastHeartbeatTime
		}
	}
	if f.LastProbeTime != nil && f.LastProbeTime.IsZero() && old != nil {
		*f.LastProbeTime = *old.LastProbeTime
	}
}

// Find is the condition of type t, nil if none.
func Find[C any, PC Kind[C], T ~string](conds []C, t T) *C {
	for i := range conds {
		if PC(&conds[i]).ConditionFields().Type == string(t) {
			return &conds[i]
		}
	}
	return nil
}

// Remove is conds without the condition of type t (conds is not
// modified); none left is nil, so that the field is omitted.
func Remove[C any, PC Kind[C], T ~string](conds []C, t T) []C {
	var out []C
	for _, c := range conds {
		if PC(&c).ConditionFields().Type != string(t) {
			out = append(out, c)
		}
	}
	return out
}
