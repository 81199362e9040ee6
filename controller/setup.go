// Package controller is virt-controller: the cluster-wide reconcilers of
// the kubevirt.io API. The VM reconciler turns VirtualMachines into
// VirtualMachineInstances per run strategy; the VMI reconciler gives each
// VMI one virt-launcher pod and tracks it until virt-handler takes over;
// the migration reconciler carries out live migrations (target pod,
// handoff to the handlers, limits).
//
// All of them are level-triggered: each pass reads the object and what it
// owns, acts, and writes status derived only from what it observed. Writes
// to kubevirt.io objects are merge patches with optimistic locking, never
// full updates: fields our Go types do not know (see api/core/v1
// Unmodeled) must survive, and virt-handler/virt-api write the same
// statuses.
//
// Logging is controller-runtime's logr, from the reconcile's context (it
// names the object): one Info line per state change of an object (a VM's
// printable status, a VMI's phase, a migration's phase) and per retried
// failure; V(1) for detail a healthy cluster repeats.
package controller

//go:generate go tool controller-gen rbac:roleName=kubevirt-controller paths=. output:rbac:artifacts:config=rbac

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure virt-controller.
type Options struct {
	Launcher LauncherConfig
	// Config is the cluster configuration (migration limits, feature
	// gates); nil means KubeVirt's defaults.
	Config func() (ClusterConfig, error)
}

// Setup registers every virt-controller reconciler with the manager. The
// manager's scheme must include client-go's types and api/core/v1.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Launcher.Image == "" {
		return fmt.Errorf("controller setup: the virt-launcher image is required")
	}
	vmi := &VMIReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("virtualmachineinstance-controller"),
		Launcher:  opts.Launcher,
		Config:    opts.Config,
	}
	if err := vmi.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the VMI controller: %w", err)
	}
	vm := &VMReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("virtualmachine-controller"),
	}
	if err := vm.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the VM controller: %w", err)
	}
	mig := &MigrationReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("migration-controller"),
		Launcher:  opts.Launcher,
		Config:    opts.Config,
	}
	if err := mig.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the migration controller: %w", err)
	}
	return nil
}
