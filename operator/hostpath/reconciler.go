// Package hostpath is the hostpath provisioner's operator: it reconciles a
// cluster-scoped HostPathProvisioner (hostpathprovisioner.kubevirt.io/v1beta1)
// into the CSI driver kubevirt.io.hostpath-provisioner (storage/hostpath)
// serving the spec's storage pools (operator/hostpath/install): the
// DaemonSet, one driver per node with every pool at its path, placed by
// spec.workload; the CSIDriver object (storageCapacity: the drivers
// publish CSIStorageCapacity objects, owned by their DaemonSet); the
// service account and RBAC. All in namespace hostpath-provisioner, the
// operator's own. StorageClasses are the users' (upstream's operator makes
// none): a class names a pool with parameters.storagePool.
//
// One level-triggered reconciler: read (the HostPathProvisioner, its spec
// as stored, the other HostPathProvisioners, the DaemonSet), decide
// (Decide, a pure function), write (server-side apply under field manager
// hostpath-provisioner-operator with forced ownership, so an edit of a
// deployed field is reverted; then the status). Everything applied is
// owned by the HostPathProvisioner: deleting it removes the driver (the
// garbage collector), and with the DaemonSet its capacity objects; the
// volumes stay in the pools. Watches on the owned kinds bring every
// change back here.
//
// States (the conditions Available/Progressing/Degraded; each pool's
// status phase Ready with Available, else Pending):
//
//	-> Progressing  the DaemonSet is not ready everywhere
//	-> Available    the DaemonSet is ready on every node it should run on;
//	                observedVersion is set
//	-> Degraded     the spec sets what kubevmm does not implement (named:
//	                pathConfig, a pool's pvcTemplate, featureGates, any
//	                undeclared field), two pools share a directory, or an
//	                older HostPathProvisioner deploys the driver already;
//	                nothing is applied until it is fixed
package hostpath

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// FieldManager is the operator's server-side apply field manager.
const FieldManager = "hostpath-provisioner-operator"

// Reconciler reconciles HostPathProvisioners.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: what the operator deploys is watched by
	// its metadata only.
	APIReader client.Reader
	Options   Options
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	hpp := &hppv1.HostPathProvisioner{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, hpp); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if hpp.DeletionTimestamp != nil {
		// The garbage collector removes what it owns.
		return reconcile.Result{}, nil
	}
	o, err := r.observe(ctx, hpp)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(o, r.Options, metav1.Now())
	if was, is := kit.State(hpp.Status.Conditions), kit.State(d.Status.Conditions); was != is {
		log.Info("state", "from", was, "to", is)
	}
	if err := kit.Apply(ctx, r.Client, FieldManager, d.Apply); err != nil {
		return reconcile.Result{}, err
	}
	if err := patch.Status(ctx, r.Client, hpp, &hpp.Status, d.Status); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, hpp *hppv1.HostPathProvisioner) (Observed, error) {
	o := Observed{HPP: hpp}
	var err error
	if _, o.UnknownFields, err = kit.StoredSpec(ctx, r.APIReader, hpp, hppv1.GroupVersion.WithKind("HostPathProvisioner"), hpp.Spec); err != nil {
		return o, err
	}
	var all hppv1.HostPathProvisionerList
	if err := r.APIReader.List(ctx, &all); err != nil {
		return o, fmt.Errorf("listing HostPathProvisioners: %w", err)
	}
	for _, h := range all.Items {
		if h.UID != hpp.UID && h.DeletionTimestamp == nil && older(&h, hpp) {
			o.Other = h.Name
			break
		}
	}
	ds := &appsv1.DaemonSet{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.Name}, ds); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("reading DaemonSet %s: %w", install.Name, err)
	default:
		o.DaemonSetReady = metav1.IsControlledBy(ds, hpp) && kit.DaemonSetReady(ds)
	}
	return o, nil
}

// older: a was made before b (by name when at the same second).
func older(a, b *hppv1.HostPathProvisioner) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// SetupWithManager registers the reconciler: the HostPathProvisioners
// (one deleted may leave the driver to another: all are reconciled then)
// and the metadata of what they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := kit.EnqueueAll(mgr.GetClient(), &hppv1.HostPathProvisionerList{})
	b := ctrl.NewControllerManagedBy(mgr).Named("hostpathprovisioner").For(&hppv1.HostPathProvisioner{}).
		Watches(&hppv1.HostPathProvisioner{}, all, builder.OnlyMetadata, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }}))
	for _, obj := range []client.Object{&appsv1.DaemonSet{}, &corev1.ServiceAccount{}, &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{},
		&rbacv1.Role{}, &rbacv1.RoleBinding{}, &storagev1.CSIDriver{}, &networkingv1.NetworkPolicy{}} {
		b = b.Owns(obj, builder.OnlyMetadata)
	}
	return b.Complete(r)
}
