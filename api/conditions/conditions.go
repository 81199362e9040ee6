// Package conditions holds the condition types every operator's CR
// reports (KubeVirt, SSP, NetworkAddonsConfig, CDI, HyperConverged), as
// openshift/custom-resource-status conditions/v1 names them. Users and
// HCO read them by these exact strings, so each API package declares its
// typed constants from here, and no copy can drift.
package conditions

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
