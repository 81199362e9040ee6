package ssp

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubevmm/kubevmm/api/conditions"
	"github.com/kubevmm/kubevmm/api/patch"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
)

// DeprecatedMessage is the Deprecated condition's message on every
// TektonTasks CR.
const DeprecatedMessage = "tekton-tasks-operator is deprecated upstream in favour of SSP; kubevmm deploys nothing for a TektonTasks CR"

// TektonTasksReconciler answers TektonTasks CRs, a documented no-op: each
// gets the condition Deprecated=True (reason Deprecated) and its
// observedGeneration, and nothing is deployed.
type TektonTasksReconciler struct {
	Client client.Client
}

// DecideTektonTasks is the status a TektonTasks CR gets.
func DecideTektonTasks(tt *tektonv1alpha1.TektonTasks, now metav1.Time) tektonv1alpha1.TektonTasksStatus {
	st := *tt.Status.DeepCopy()
	st.ObservedGeneration = tt.Generation
	st.Conditions = conditions.Set(st.Conditions, sspv1beta3.Condition{Type: tektonv1alpha1.ConditionDeprecated,
		Status: corev1.ConditionTrue, Reason: "Deprecated", Message: DeprecatedMessage}, now)
	return st
}

// Reconcile writes the status DecideTektonTasks returns.
func (r *TektonTasksReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tt := &tektonv1alpha1.TektonTasks{}
	if err := r.Client.Get(ctx, req.NamespacedName, tt); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	st := DecideTektonTasks(tt, metav1.Now())
	if equality.Semantic.DeepEqual(tt.Status, st) {
		return reconcile.Result{}, nil
	}
	if err := patch.Status(ctx, r.Client, tt, &tt.Status, st); err != nil {
		return reconcile.Result{}, err
	}
	logf.FromContext(ctx).Info("deprecated: nothing deployed")
	return reconcile.Result{}, nil
}

// SetupWithManager registers the reconciler for TektonTasks CRs.
func (r *TektonTasksReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("tektontasks").For(&tektonv1alpha1.TektonTasks{}).Complete(r)
}
