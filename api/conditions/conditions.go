// Package conditions holds the conditions every operator's CR reports
// (KubeVirt, SSP, NetworkAddonsConfig, CDI, HyperConverged,
// HostPathProvisioner), as openshift/custom-resource-status conditions/v1
// names them: the types' names, which users and HCO read by these exact
// strings, and, for the CRs that share upstream's layout, the condition
// itself and how it is set. Each API package declares its typed
// constants from here, and no copy can drift.
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

// Set sets or replaces the condition of c's type: its
// LastTransitionTime is when its Status last changed, and its
// LastHeartbeatTime when its reason, message or status last changed (an
// unchanged condition makes no write).
func Set(conds []Condition, c Condition, now metav1.Time) []Condition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime, c.LastHeartbeatTime = conds[i].LastTransitionTime, conds[i].LastHeartbeatTime
		if conds[i].Status != c.Status {
			c.LastTransitionTime = now
		}
		if conds[i].Status != c.Status || conds[i].Reason != c.Reason || conds[i].Message != c.Message {
			c.LastHeartbeatTime = now
		}
		conds[i] = c
		return conds
	}
	c.LastTransitionTime, c.LastHeartbeatTime = now, now
	return append(conds, c)
}

// Find is the condition of type t, nil if none.
func Find(conds []Condition, t Type) *Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
