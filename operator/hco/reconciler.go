// Package hco is the HyperConverged operator: it reconciles the one
// HyperConverged CR (hco.kubevirt.io/v1, named kubevirt-hyperconverged, in
// the operator's namespace) into the operand CRs (Operands: KubeVirt,
// CDI, NetworkAddonsConfig, SSP), each made once its CRD exists, and
// reports their state in the CR's status. The hco-webhook (webhook.go)
// validates the CR and converts it between v1 and v1beta1.
//
// One level-triggered reconciler: read (the CR as typed and as stored,
// the operands' CRDs, the operands), decide (Decide, a pure function),
// write (server-side apply under field manager hco-operator with forced
// ownership; then the status). An operand edited by someone else is put
// back: a field the HCO sets at once by the apply, a field someone added
// by an update of the whole spec first (an apply cannot drop a field
// another manager set to the same value); each such revert counts in
// kubevirt_hco_out_of_band_modifications_total. The operands' changes
// reach the reconciler through watches started once their CRDs exist.
//
// States of the CR (condition Available, with ReconcileComplete):
//
//	new         -> Progressing  finalizer added, operands applied
//	Progressing -> Available    every operand reports Available, none Degraded
//	any         -> Degraded     an operand is Degraded, or the spec is
//	                            refused (UnsupportedFields,
//	                            InvalidAnnotation): nothing is applied
//	any         -> Deleting     deletionTimestamp set: the operands are
//	                            deleted and waited for (their operators
//	                            uninstall what they made)
//	Deleting    -> gone         no operand is left: finalizer removed
//
// A CR with another name or in another namespace gets InvalidRequest and
// nothing else.
package hco

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// FieldManager is the HCO's server-side apply field manager.
const FieldManager = "hco-operator"

// OutOfBandModifications counts the operand edits the HCO reverted, by
// component_name ("kind/name", lower case), as upstream.
var OutOfBandModifications = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubevirt_hco_out_of_band_modifications_total",
	Help: "Count of out-of-band modifications overwritten by HCO",
}, []string{"component_name"})

func init() {
	ctrlmetrics.Registry.MustRegister(OutOfBandModifications)
}

// Reconciler reconciles HyperConverged CRs.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: operands are watched by their metadata
	// only.
	APIReader client.Reader
	// Namespace is the operator's, where the one HCO CR lives.
	Namespace string
	// Version is the operator's (status.versions).
	Version string

	mu       sync.Mutex
	ctrl     controller.Controller
	mgr      ctrl.Manager
	watching map[string]bool
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	hc := &hcov1.HyperConverged{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, hc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	o, err := r.observe(ctx, hc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.watchOperands(o.CRDs); err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(o, metav1.Now())
	for _, t := range []string{hcov1.ConditionAvailable, hcov1.ConditionDegraded, hcov1.ConditionTaintedConfiguration} {
		before, after := apimeta.FindStatusCondition(hc.Status.Conditions, t), apimeta.FindStatusCondition(d.Status.Conditions, t)
		if after != nil && (before == nil || before.Status != after.Status || before.Reason != after.Reason) {
			log.Info("condition", "type", t, "status", after.Status, "reason", after.Reason, "message", after.Message)
		}
	}
	var requeue time.Duration
	switch d.Action {
	case Apply:
		if err := patch.AddFinalizer(ctx, r.Client, hc, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
		// An operand's edit is counted as soon as the write that reverts
		// it succeeds: a later write of this pass may conflict, and the
		// next pass then no longer sees the edit it already reverted.
		reverted := map[string]bool{}
		for _, c := range d.Reverted {
			reverted[c] = true
		}
		counted := func(u *unstructured.Unstructured) {
			if c := operandName(u.GetKind(), u.GetName()); reverted[c] {
				delete(reverted, c)
				OutOfBandModifications.WithLabelValues(c).Inc()
				log.Info("reverted an out-of-band modification", "component", c)
			}
		}
		replaced := map[string]string{}
		for _, u := range d.Replace {
			if err := r.Client.Update(ctx, u, client.FieldOwner(FieldManager)); err != nil {
				return requeueOnConflict(fmt.Errorf("replacing the spec of %s %s: %w", u.GetKind(), u.GetName(), err))
			}
			replaced[u.GetKind()] = u.GetResourceVersion()
			counted(u)
		}
		for _, u := range d.Objects {
			if rv, ok := replaced[u.GetKind()]; ok {
				u.SetResourceVersion(rv)
			}
			if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
				return requeueOnConflict(fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err))
			}
			counted(u)
		}
	case DeleteOperands:
		for _, u := range d.Objects {
			if u.GetDeletionTimestamp() != nil {
				continue
			}
			if err := r.Client.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("deleting %s %s: %w", u.GetKind(), u.GetName(), err)
			}
			log.Info("deleting", "kind", u.GetKind(), "name", u.GetName())
		}
		// Operands whose operator is gone keep their finalizer: poll too.
		requeue = 2 * time.Second
	}
	if err := patch.Status(ctx, r.Client, hc, &hc.Status, d.Status); err != nil {
		return reconcile.Result{}, err
	}
	if d.Action == Finalize && controllerutil.ContainsFinalizer(hc, Finalizer) {
		if err := patch.RemoveFinalizer(ctx, r.Client, hc, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
		log.Info("uninstalled")
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// requeueOnConflict: an operand changed since it was read; the next pass
// reads it again (and counts the change if it was out of band).
func requeueOnConflict(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return reconcile.Result{}, err
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, hc *hcov1.HyperConverged) (Observed, error) {
	o := Observed{HCO: hc, Namespace: r.Namespace, Version: r.Version, CRDs: map[string]bool{}, Current: map[string]*unstructured.Unstructured{}}
	var err error
	if _, o.UnknownFields, err = kit.StoredSpec(ctx, r.APIReader, hc, hcov1.GroupVersion.WithKind("HyperConverged"), hc.Spec); err != nil {
		return o, err
	}
	for _, op := range Operands {
		crd := &metav1.PartialObjectMetadata{}
		crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: op.CRD}, crd); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return o, fmt.Errorf("reading CRD %s: %w", op.CRD, err)
		}
		o.CRDs[op.CRD] = true
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(op.GVK)
		key := client.ObjectKey{Name: op.Name}
		if op.Namespaced {
			key.Namespace = hc.Namespace
		}
		switch err := r.APIReader.Get(ctx, key, u); {
		case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		case err != nil:
			return o, fmt.Errorf("reading %s %s: %w", op.GVK.Kind, op.Name, err)
		default:
			o.Current[op.GVK.Kind] = u
		}
	}
	return o, nil
}

// watchOperands starts watching (by metadata) each operand kind whose CRD
// now exists: a kind cannot be watched before its CRD is there.
func (r *Reconciler) watchOperands(crds map[string]bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctrl == nil {
		return nil // not running under a manager
	}
	for _, op := range Operands {
		if !crds[op.CRD] || r.watching[op.CRD] {
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(op.GVK)
		sel, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{MatchLabels: map[string]string{ManagedByLabel: ManagedBy}})
		if err != nil {
			return err
		}
		if err := r.ctrl.Watch(source.Kind(r.mgr.GetCache(), client.Object(m), r.all(), sel)); err != nil {
			return fmt.Errorf("watching %s: %w", op.GVK.Kind, err)
		}
		r.watching[op.CRD] = true
	}
	return nil
}

// all maps any change to every HyperConverged CR (there is one).
func (r *Reconciler) all() handler.EventHandler {
	return kit.EnqueueAll(r.mgr.GetClient(), &hcov1.HyperConvergedList{})
}

// SetupWithManager registers the reconciler: HyperConverged CRs, and the
// operands' CRDs (an operand is made once its CRD appears).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.mgr = mgr
	r.watching = map[string]bool{}
	names := map[string]bool{}
	for _, op := range Operands {
		names[op.CRD] = true
	}
	isOperandCRD := predicate.NewPredicateFuncs(func(o client.Object) bool { return names[o.GetName()] })
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	c, err := ctrl.NewControllerManagedBy(mgr).Named("hyperconverged").
		For(&hcov1.HyperConverged{}).
		WatchesMetadata(crd, r.all(), builder.WithPredicates(isOperandCRD)).
		Build(r)
	if err != nil {
		return err
	}
	r.ctrl = c
	return nil
}
