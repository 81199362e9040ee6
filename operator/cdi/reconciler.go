// Package cdi is the CDI operator: it reconciles the cluster's CDI CR
// (cdi.kubevirt.io/v1beta1; HCO makes cdi-kubevirt-hyperconverged) into
// CDI's deployment (operator/cdi/install): the CDIConfig, StorageProfile
// and DataVolume CRDs, cdi-controller (cdi-deployment) in namespace cdi,
// the CDIConfig `config` (its spec the CDI's spec.config, its status the
// configuration in effect) and a StorageProfile per StorageClass (its
// status the access and volume modes DataVolumes' `storage` gets).
//
// One level-triggered reconciler: read (the CDI, its spec as stored, the
// components' Deployments, StorageClasses and StorageProfiles, how many
// DataVolumes exist), decide (Decide, a pure function), write (server-side
// apply under field manager cdi-operator with forced ownership, so an edit
// of a deployed field is reverted; then the statuses). Everything applied
// is owned by the CDI, except the CRDs: users' DataVolumes live in them.
//
// States (the conditions Available/Progressing/Degraded, phase):
//
//	-> Progressing/Deploying  a component's Deployment is not ready
//	-> Available/Deployed     every component is ready
//	-> Degraded/Error         the spec sets a field kubevmm does not
//	                          implement (named), or the CDI is not the
//	                          oldest: nothing is applied until fixed
//	-> Deleting               the CDI is deleted: its finalizer is held
//	                          while DataVolumes exist under
//	                          BlockUninstallIfWorkloadsExist (Degraded,
//	                          saying so), then the garbage collector
//	                          removes what it owns
package cdi

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// FieldManager is the operator's server-side apply field manager.
const FieldManager = "cdi-operator"

// Reconciler reconciles CDI CRs.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: the CDI as stored, with the fields its
	// type does not declare.
	APIReader client.Reader
	Options   Options
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	c := &cdiv1.CDI{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, c); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	o, err := r.observe(ctx, c)
	if err != nil {
		return reconcile.Result{}, err
	}
	opts := r.Options
	var certsDue time.Time
	if c.DeletionTimestamp == nil {
		if opts.UploadCA, certsDue, err = r.ensureUploadSecrets(ctx, c, time.Now()); err != nil {
			return reconcile.Result{}, err
		}
	}
	d := Decide(o, opts, metav1.Now())
	if was, is := state(c.Status), state(d.Status); was != is {
		log.Info("state", "from", was, "to", is)
	}
	if d.AddFinalizer {
		if err := patch.AddFinalizer(ctx, r.Client, c, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := kit.Apply(ctx, r.Client, FieldManager, d.Apply); err != nil {
		return reconcile.Result{}, err
	}
	if d.ConfigStatus != nil {
		cc := &cdiv1.CDIConfig{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cc); err != nil {
			return reconcile.Result{}, fmt.Errorf("reading CDIConfig %s: %w", cdiv1.CDIConfigName, err)
		}
		if err := patch.Status(ctx, r.Client, cc, &cc.Status, *d.ConfigStatus); err != nil {
			return reconcile.Result{}, err
		}
	}
	for name, want := range d.ProfileStatus {
		sp := &cdiv1.StorageProfile{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, sp); err != nil {
			return reconcile.Result{}, fmt.Errorf("reading StorageProfile %s: %w", name, err)
		}
		if err := patch.Status(ctx, r.Client, sp, &sp.Status, want); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := patch.Status(ctx, r.Client, c, &c.Status, d.Status); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	if d.RemoveFinalizer {
		if err := patch.RemoveFinalizer(ctx, r.Client, c, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	if c.DeletionTimestamp != nil && !d.RemoveFinalizer {
		// DataVolumes are not watched (their CRD comes after the
		// operator starts): count them again.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if !certsDue.IsZero() {
		// The upload certificates are looked at again when one is due.
		return reconcile.Result{RequeueAfter: max(time.Until(certsDue), time.Second)}, nil
	}
	return reconcile.Result{}, nil
}

// state names the phase and the condition that holds, for the log.
func state(s cdiv1.CDIStatus) string {
	for _, t := range []cdiv1.ConditionType{cdiv1.ConditionDegraded, cdiv1.ConditionAvailable, cdiv1.ConditionProgressing} {
		if c := cdiv1.FindCondition(s.Conditions, t); c != nil && c.Status == corev1.ConditionTrue {
			return string(s.Phase) + "/" + string(t)
		}
	}
	return string(s.Phase)
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, c *cdiv1.CDI) (Observed, error) {
	o := Observed{CDI: c, Ready: map[string]bool{}, Profiles: map[string]*cdiv1.StorageProfile{}}
	var err error
	if _, o.UnknownFields, err = kit.StoredSpec(ctx, r.APIReader, c, cdiv1.GroupVersion.WithKind("CDI"), c.Spec); err != nil {
		return o, err
	}
	cdis := &cdiv1.CDIList{}
	if err := r.Client.List(ctx, cdis); err != nil {
		return o, fmt.Errorf("listing CDIs: %w", err)
	}
	o.First = First(cdis.Items)
	dvs := &metav1.PartialObjectMetadataList{}
	dvs.SetGroupVersionKind(cdiv1.GroupVersion.WithKind("DataVolumeList"))
	switch err := r.APIReader.List(ctx, dvs); {
	case apierrors.IsNotFound(err): // The CRD is not installed yet.
	case err != nil:
		return o, fmt.Errorf("listing DataVolumes: %w", err)
	default:
		o.DataVolumes = len(dvs.Items)
	}
	for _, comp := range install.Components {
		for _, obj := range comp(r.Options.Config) {
			if _, ok := obj.(*appsv1.Deployment); !ok {
				continue
			}
			dep := &appsv1.Deployment{}
			switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), dep); {
			case apierrors.IsNotFound(err):
			case err != nil:
				return o, fmt.Errorf("reading Deployment %s: %w", obj.GetName(), err)
			default:
				o.Ready[obj.GetName()] = kit.DeploymentReady(dep)
			}
		}
	}
	scs := &storagev1.StorageClassList{}
	if err := r.Client.List(ctx, scs); err != nil {
		return o, fmt.Errorf("listing StorageClasses: %w", err)
	}
	o.StorageClasses = scs.Items
	sps := &cdiv1.StorageProfileList{}
	switch err := r.Client.List(ctx, sps); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("listing StorageProfiles: %w", err)
	}
	for i := range sps.Items {
		o.Profiles[sps.Items[i].Name] = &sps.Items[i]
	}
	return o, nil
}

// SetupWithManager registers the reconciler: the CDI, what it owns, and
// StorageClasses and DataVolumes (which every CDI hears of: there is one).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named("cdi").For(&cdiv1.CDI{}).
		Owns(&appsv1.Deployment{}).
		Owns(&cdiv1.CDIConfig{}).
		Owns(&cdiv1.StorageProfile{})
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		&admissionregistrationv1.MutatingWebhookConfiguration{}, &networkingv1.NetworkPolicy{}} {
		b = b.Owns(obj, builder.OnlyMetadata)
	}
	b = b.Watches(&storagev1.StorageClass{}, kit.EnqueueAll(mgr.GetClient(), &cdiv1.CDIList{}))
	return b.Complete(r)
}
