// Package datasource is CDI's DataSource controller: it says whether the
// PVC a DataSource names can be cloned (its Ready condition, with
// upstream's reasons) and copies the source into status.source.
//
// States (the Ready condition):
//
//	False NoSource    spec.source names no PVC
//	False NotFound    neither the PVC nor a DataVolume of its name exists
//	False <phase>     the PVC's DataVolume has not Succeeded; the reason is
//	                  its phase (ImportInProgress, CloneInProgress, ...)
//	True  Ready       the DataVolume Succeeded, or the PVC exists without
//	                  a DataVolume (filled by whoever made it)
//
// The controller is level-triggered: a DataSource is computed again when
// it changes and when a PVC or DataVolume of the name it points at does.
package datasource

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
)

// The Ready condition's reasons (upstream's).
const (
	ReasonReady    = "Ready"
	ReasonNoSource = "NoSource"
	ReasonNotFound = "NotFound"
)

// sourceIndex indexes DataSources by the "namespace/name" of their PVC.
const sourceIndex = "spec.source.pvc"

// SourcePVC is the namespace and name of the PVC ds names (its namespace
// defaulting to the DataSource's); ok is false when it names none.
func SourcePVC(ds *cdiv1.DataSource) (key client.ObjectKey, ok bool) {
	p := ds.Spec.Source.PVC
	if p == nil || p.Name == "" {
		return client.ObjectKey{}, false
	}
	ns := p.Namespace
	if ns == "" {
		ns = ds.Namespace
	}
	return client.ObjectKey{Namespace: ns, Name: p.Name}, true
}

// Seen is what a pass read about the source PVC: its DataVolume (nil if
// none) and whether the PVC exists.
type Seen struct {
	DataVolume *cdiv1.DataVolume
	Claim      bool
}

// Status is the DataSource's status given what was seen.
func Status(ds *cdiv1.DataSource, s Seen, now metav1.Time) cdiv1.DataSourceStatus {
	st := *ds.Status.DeepCopy()
	st.Source = *ds.Spec.Source.DeepCopy()
	c := cdiv1.DataSourceCondition{Type: cdiv1.DataSourceReady}
	key, named := SourcePVC(ds)
	switch {
	case !named:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonNoSource, "No source PVC set"
	case s.DataVolume != nil && s.DataVolume.Status.Phase == cdiv1.Succeeded, s.DataVolume == nil && s.Claim:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ReasonReady, "DataSource is ready to be consumed"
	case s.DataVolume != nil:
		phase := s.DataVolume.Status.Phase
		if phase == cdiv1.PhaseUnset {
			phase = cdiv1.Pending
		}
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, string(phase), fmt.Sprintf("DataVolume %s is %s", key, phase)
	default:
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonNotFound, fmt.Sprintf("PVC %s not found", key)
	}
	st.Conditions = cdiv1.SetDataSourceCondition(st.Conditions, c, now)
	return st
}

// Reconciler reconciles DataSources.
type Reconciler struct {
	Client client.Client
}

// Reconcile is one pass: read the source's DataVolume and PVC, decide
// (Status), write the status if it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ds := &cdiv1.DataSource{}
	if err := r.Client.Get(ctx, req.NamespacedName, ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var s Seen
	if key, ok := SourcePVC(ds); ok {
		dv := &cdiv1.DataVolume{}
		switch err := r.Client.Get(ctx, key, dv); {
		case err == nil:
			s.DataVolume = dv
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("reading DataVolume %s: %w", key, err)
		}
		pvc := &corev1.PersistentVolumeClaim{}
		switch err := r.Client.Get(ctx, key, pvc); {
		case err == nil:
			s.Claim = true
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("reading PVC %s: %w", key, err)
		}
	}
	st := Status(ds, s, metav1.Now())
	if old, c := cdiv1.FindDataSourceCondition(ds.Status.Conditions, cdiv1.DataSourceReady), cdiv1.FindDataSourceCondition(st.Conditions, cdiv1.DataSourceReady); old == nil || old.Reason != c.Reason {
		logf.FromContext(ctx).Info("state", "ready", c.Status, "reason", c.Reason)
	}
	return reconcile.Result{}, patch.Status(ctx, r.Client, ds, &ds.Status, st)
}

// SetupWithManager registers the reconciler: DataSources, and the PVCs
// and DataVolumes they name (found through an index of the DataSources
// by their PVC).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &cdiv1.DataSource{}, sourceIndex, func(o client.Object) []string {
		if key, ok := SourcePVC(o.(*cdiv1.DataSource)); ok {
			return []string{key.String()}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("indexing DataSources by PVC: %w", err)
	}
	toSources := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &cdiv1.DataSourceList{}
		if err := r.Client.List(ctx, list, client.MatchingFields{sourceIndex: client.ObjectKeyFromObject(o).String()}); err != nil {
			logf.FromContext(ctx).Error(err, "listing the DataSources of", "object", client.ObjectKeyFromObject(o))
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).Named("datasource").For(&cdiv1.DataSource{}).
		Watches(&corev1.PersistentVolumeClaim{}, toSources).
		Watches(&cdiv1.DataVolume{}, toSources).Complete(r)
}
