package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// MigrationReconciler is the placeholder of the migration controller: it
// acknowledges a new VirtualMachineInstanceMigration by moving it to
// Pending. Phase 2 adds the real work: the target launcher pod, the
// handoff between the source and target handlers, and the limits (2
// outbound migrations per node, 5 per cluster).
type MigrationReconciler struct {
	Client client.Client
	// Now is the clock; tests leave it nil.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations/status,verbs=get;update;patch

// SetupWithManager registers the reconciler.
func (r *MigrationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachineinstancemigration").
		For(&v1.VirtualMachineInstanceMigration{}).
		Complete(r)
}

// Reconcile sets an unset phase to Pending and leaves everything else alone.
func (r *MigrationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(ctx)(r.reconcile(ctx, req))
}

func (r *MigrationReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &v1.VirtualMachineInstanceMigration{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.Status.Phase != v1.MigrationPhaseUnset || m.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	now := metav1.Now()
	if r.Now != nil {
		now = metav1.NewTime(r.Now())
	}
	orig := m.DeepCopy()
	m.Status.Phase = v1.MigrationPending
	m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: v1.MigrationPending, PhaseTransitionTimestamp: now})
	if err := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("setting migration %s to Pending: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
