package handler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SchedulableLabel marks nodes that can run VMs; launcher pods select it.
const SchedulableLabel = "kubevirt.io/schedulable"

// NodeReconciler keeps this node labelled schedulable while virt-handler
// (and so its device plugins) runs on it.
type NodeReconciler struct {
	Client   client.Client
	NodeName string
}

// SetupWithManager watches this node (the cache holds only it).
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("virt-handler-node").For(&corev1.Node{}).Complete(r)
}

// Reconcile sets the label if it is missing.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != r.NodeName {
		return ctrl.Result{}, nil
	}
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, n); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if n.Labels[SchedulableLabel] == "true" {
		return ctrl.Result{}, nil
	}
	orig := n.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[SchedulableLabel] = "true"
	if err := r.Client.Patch(ctx, n, client.MergeFrom(orig)); err != nil {
		return ctrl.Result{}, fmt.Errorf("labelling node %s schedulable: %w", r.NodeName, err)
	}
	return ctrl.Result{}, nil
}
