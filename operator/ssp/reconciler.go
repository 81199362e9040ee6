// Package ssp is the SSP operator: it reconciles the SSP CR
// (ssp.kubevirt.io/v1beta3) into the Template CRD
// (template.openshift.io/v1), the common cluster instance types and
// preferences (operator/ssp/instancetypes), the common templates
// (operator/ssp/templates) in spec.commonTemplates.namespace,
// virt-template-validator (its RBAC, Deployment, Service and webhooks) in
// the SSP's namespace, and the golden images: one CDI DataImportCron per
// spec.commonTemplates.dataImportCronTemplates entry (in
// kubevirt-os-images, which it creates, unless the entry names another
// namespace), deleted when dropped from the list. It also answers TektonTasks CRs (the deprecated
// tekton-tasks-operator's) as a documented no-op (TektonTasksReconciler).
//
// One level-triggered reconciler: read (the SSP, the others, the stored
// spec, the templates' namespace, the validator's CA and certificate
// Secrets, the KubeVirt CR's certificateRotateStrategy, the validator's
// Deployment),
// decide (Decide, a pure function), write (server-side apply under field
// manager ssp-operator with forced ownership, so an edit of a deployed
// field is reverted; then the status). Everything deployed carries the
// label app.kubernetes.io/managed-by=ssp-operator and the
// operator-sdk/primary-resource annotations naming the SSP; what is in the
// SSP's namespace is also owned by it (the garbage collector removes it
// with the SSP). Watches on the label bring every change back here.
//
// States of the SSP (status.phase):
//
//	""        -> Deploying   finalizer added, objects applied
//	Deploying -> Deployed    the validator's replicas are available
//	Deployed  -> Deploying   a replica is no longer available, or the spec changed
//	any       -> Deleting    deletionTimestamp set: the webhooks, the
//	                         validator's cluster RBAC, the common templates,
//	                         instance types, preferences and DataImportCrons
//	                         are deleted, kind by kind (the Template CRD stays: users' templates
//	                         live in it)
//	Deleting  -> Deleted     nothing deployed is left: finalizer removed
//
// The validator's serving certificate and its CA are the operator's
// (certificates.go: made, rotated and published as the webhooks'
// caBundle by certs.MakePlan, with the KubeVirt CR's lifetimes); the
// operator requeues itself for the next one due and logs each renewal.
//
// A spec that sets a field kubevmm does not implement, a missing
// templates namespace or a KubeVirt
// certificateRotateStrategy that cannot be used leave the phase and make
// the SSP Degraded, naming the cause; nothing is applied until it is fixed. An SSP outside the
// operator's namespace (Options.Namespace), and a second SSP in it (not
// the oldest), is Degraded and ignored. The annotation kubevirt.io/operator.paused
// ("true") stops reconciling (status.paused) until removed.
package ssp

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubevmm/kubevmm/api/certs"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// FieldManager is the SSP operator's server-side apply field manager.
const FieldManager = "ssp-operator"

// cleanupOrder lists the kinds deployed outside the SSP's namespace in
// the order a deletion removes them: the webhooks first (the template
// webhook would refuse deleting templates VMs use), the Template CRD never.
var cleanupOrder = []schema.GroupVersionKind{
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	roleBindingGVK,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	templatev1.GroupVersion.WithKind(templatev1.Kind),
	v1beta1.GroupVersion.WithKind(v1beta1.KindClusterInstancetype),
	v1beta1.GroupVersion.WithKind(v1beta1.KindClusterPreference),
	dataImportCronGVK,
}

// watched are the built-in kinds the operator deploys: a change of one of
// them (by its label) reconciles the SSPs.
var watched = []schema.GroupVersionKind{
	{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"},
	cleanupOrder[0], cleanupOrder[2], cleanupOrder[3],
}

// roleBindingGVK: the validator's RoleBinding in kube-system (its
// front-proxy settings' reader), the one namespaced object outside the
// SSP's namespace. The operator may read and write RoleBindings there
// only, so they are listed there and not watched: every deploy applies
// it again.
var roleBindingGVK = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}

// watchedLater are the kinds of CRDs: the operator installs the Template
// CRD itself and virt-operator the instance types', so they are watched
// once a deploy found them served (a watch of a kind not served would
// stop the operator from starting).
var watchedLater = cleanupOrder[4:7]

var managed = client.MatchingLabels{ManagedByLabel: ManagedBy}

// Reconciler reconciles SSP CRs.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: what the operator deploys is watched by
	// its metadata only.
	APIReader client.Reader
	Options   Options

	// Set by SetupWithManager: what watches watchedLater.
	ctrl        controller.Controller
	cache       cache.Cache
	enqueue     handler.EventHandler
	pred        predicate.Predicate
	watchingAll bool
	// watchingCrons: DataImportCrons are watched, from the first applied
	// (their CRD is CDI's, and may never be served).
	watchingCrons bool
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	s := &sspv1beta3.SSP{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	o, err := r.observe(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(o, r.Options, metav1.Now())
	if d.Status.Phase != s.Status.Phase || d.Status.Paused != s.Status.Paused {
		log.Info("state", "from", s.Status.Phase, "to", d.Status.Phase, "paused", d.Status.Paused)
	}
	var requeue time.Duration
	switch d.Action {
	case Deploy:
		for _, why := range d.Renewed {
			log.Info("certificate renewed", "secret", why)
		}
		if err := patch.AddFinalizer(ctx, r.Client, s, sspv1beta3.Finalizer); err != nil {
			return reconcile.Result{}, err
		}
		switch err := kit.Apply(ctx, r.Client, FieldManager, d.Objects); {
		case apimeta.IsNoMatchError(err):
			// The Template CRD applied just before is not served yet,
			// or virt-operator has not installed the instance types'.
			log.Info("waiting for the API to be served", "error", err.Error())
			requeue = 2 * time.Second
		case err != nil:
			return reconcile.Result{}, err
		}
		if requeue == 0 && !r.watchingAll {
			for _, gvk := range watchedLater {
				if err := r.ctrl.Watch(source.Kind[client.Object](r.cache, metadataOf(gvk), r.enqueue, r.pred)); err != nil {
					return reconcile.Result{}, fmt.Errorf("watching %s: %w", gvk.Kind, err)
				}
			}
			r.watchingAll = true
		}
		if requeue == 0 && !r.watchingCrons && len(s.Spec.CommonTemplates.DataImportCronTemplates) > 0 {
			if err := r.ctrl.Watch(source.Kind[client.Object](r.cache, metadataOf(dataImportCronGVK), r.enqueue, r.pred)); err != nil {
				return reconcile.Result{}, fmt.Errorf("watching DataImportCrons: %w", err)
			}
			r.watchingCrons = true
		}
		for _, k := range d.Prune {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(dataImportCronGVK)
			u.SetNamespace(k.Namespace)
			u.SetName(k.Name)
			if err := r.Client.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("deleting DataImportCron %s: %w", k, err)
			}
			log.Info("golden image's DataImportCron removed", "dataImportCron", k)
		}
	case Cleanup:
		if err := r.cleanup(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
		requeue = time.Second
	}
	if err := patch.Status(ctx, r.Client, s, &s.Status, d.Status); err != nil {
		return reconcile.Result{}, err
	}
	if d.Action == Finalize && controllerutil.ContainsFinalizer(s, sspv1beta3.Finalizer) {
		if err := patch.RemoveFinalizer(ctx, r.Client, s, sspv1beta3.Finalizer); err != nil {
			return reconcile.Result{}, err
		}
		log.Info("removed")
	}
	if d.Action == Deploy && !d.CertsDue.IsZero() && requeue == 0 {
		// Nothing else wakes the operator when a certificate comes due.
		requeue = max(time.Until(d.CertsDue), time.Second)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, s *sspv1beta3.SSP) (Observed, error) {
	o := Observed{SSP: s}
	if s.DeletionTimestamp != nil {
		n, err := r.remaining(ctx, s)
		o.Remaining = n
		return o, err
	}
	// Only an SSP in the operator's namespace counts (Decide ignores the
	// others).
	all := &sspv1beta3.SSPList{}
	if err := r.APIReader.List(ctx, all, client.InNamespace(r.Options.Namespace)); err != nil {
		return o, fmt.Errorf("listing SSPs: %w", err)
	}
	// The oldest is the cluster's (the name breaks a tie): one created
	// second finds the first deployed.
	sort.Slice(all.Items, func(i, j int) bool {
		a, b := all.Items[i], all.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	o.Active = len(all.Items) > 0 && all.Items[0].UID == s.UID
	if !o.Active {
		if len(all.Items) > 0 {
			o.Other = all.Items[0].Namespace + "/" + all.Items[0].Name
		}
		return o, nil
	}
	var err error
	if _, o.UnknownFields, err = kit.StoredSpec(ctx, r.APIReader, s, sspv1beta3.GroupVersion.WithKind("SSP"), s.Spec); err != nil {
		return o, err
	}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: s.Spec.CommonTemplates.Namespace}, &corev1.Namespace{}); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("reading namespace %s: %w", s.Spec.CommonTemplates.Namespace, err)
	default:
		o.NamespaceExists = true
	}
	var data [2]map[string][]byte
	for i, name := range []string{ValidatorCASecret, ValidatorSecret} {
		sec := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, sec); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return o, fmt.Errorf("reading Secret %s: %w", name, err)
		default:
			data[i] = sec.Data
		}
	}
	o.Certs = storedCerts(data[0], data[1])
	if o.CertStrategy, o.CertStrategyErr, err = r.certStrategy(ctx); err != nil {
		return o, err
	}
	crons, err := r.owned(ctx, s, dataImportCronGVK)
	if err != nil {
		return o, err
	}
	for i := range crons {
		o.DataImportCrons = append(o.DataImportCrons, client.ObjectKeyFromObject(&crons[i]))
	}
	d := &appsv1.Deployment{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: ValidatorName}, d); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("reading the validator's Deployment: %w", err)
	default:
		o.ValidatorReady = kit.DeploymentReady(d)
	}
	return o, nil
}

// certStrategy is the lifetimes the validator's certificates get: the
// cluster's KubeVirt CR's certificateRotateStrategy (the oldest CR's, as
// virt-operator deploys only that one), KubeVirt's defaults without one.
// bad is a strategy that cannot be used, naming the CR and field.
func (r *Reconciler) certStrategy(ctx context.Context) (st certs.Strategy, bad, err error) {
	l := &v1.KubeVirtList{}
	if err := r.APIReader.List(ctx, l); err != nil && !apimeta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return st, nil, fmt.Errorf("listing KubeVirts: %w", err)
	}
	var strat v1.KubeVirtCertificateRotateStrategy
	name := ""
	if len(l.Items) > 0 {
		sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
		strat, name = l.Items[0].Spec.CertificateRotateStrategy, l.Items[0].Namespace+"/"+l.Items[0].Name
	}
	st, bad = certs.FromKubeVirt(strat)
	if bad != nil {
		bad = fmt.Errorf("the validator's certificate lifetimes come from KubeVirt %s: %w", name, bad)
	}
	return st, bad, nil
}

// owned lists the objects of kind gvk deployed for s (by the label, then
// the primary-resource annotation); none when the kind is not served.
func (r *Reconciler) owned(ctx context.Context, s *sspv1beta3.SSP, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := append(kit.InOwnNamespace(gvk, r.Options.Namespace), managed)
	if gvk == roleBindingGVK {
		opts = append(opts, client.InNamespace("kube-system"))
	}
	if err := r.APIReader.List(ctx, l, opts...); err != nil {
		if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	var out []unstructured.Unstructured
	for _, u := range l.Items {
		if u.GetAnnotations()[AnnotationPrimaryResource] == s.Namespace+"/"+s.Name {
			out = append(out, u)
		}
	}
	return out, nil
}

// remaining counts what was deployed for s outside its namespace.
func (r *Reconciler) remaining(ctx context.Context, s *sspv1beta3.SSP) (int, error) {
	n := 0
	for _, gvk := range cleanupOrder {
		l, err := r.owned(ctx, s, gvk)
		if err != nil {
			return 0, err
		}
		n += len(l)
	}
	return n, nil
}

// cleanup deletes the first kind in cleanupOrder that has objects left;
// the next pass goes on once they are gone.
func (r *Reconciler) cleanup(ctx context.Context, s *sspv1beta3.SSP) error {
	for _, gvk := range cleanupOrder {
		l, err := r.owned(ctx, s, gvk)
		if err != nil {
			return err
		}
		if len(l) == 0 {
			continue
		}
		for i := range l {
			if err := r.Client.Delete(ctx, &l[i]); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s %s: %w", gvk.Kind, l[i].GetName(), err)
			}
		}
		return nil
	}
	return nil
}

// SetupWithManager registers the reconciler: SSPs, and the deployed
// objects' metadata by label, each change mapped to every SSP.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	sel, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{MatchLabels: managed})
	if err != nil {
		return err
	}
	all := kit.EnqueueAll(mgr.GetClient(), &sspv1beta3.SSPList{})
	// Every SSP on any SSP's change: when the cluster's is deleted, the
	// next one takes over. The validator's Secrets are not watched: the
	// operator makes them itself.
	b := ctrl.NewControllerManagedBy(mgr).Named("ssp").Watches(&sspv1beta3.SSP{}, all)
	// The templates' namespace: an SSP made with it (one manifest) or
	// before it waits Degraded until the namespace's event brings it back.
	c := mgr.GetClient()
	b = b.WatchesMetadata(metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace")), handler.EnqueueRequestsFromMapFunc(
		func(ctx context.Context, ns client.Object) []reconcile.Request {
			l := &sspv1beta3.SSPList{}
			if err := c.List(ctx, l); err != nil {
				logf.FromContext(ctx).Error(err, "listing the SSPs of a namespace", "namespace", ns.GetName())
				return nil
			}
			var out []reconcile.Request
			for i := range l.Items {
				if l.Items[i].Spec.CommonTemplates.Namespace == ns.GetName() {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l.Items[i])})
				}
			}
			return out
		}))
	for _, gvk := range watched {
		b = b.WatchesMetadata(metadataOf(gvk), all, builder.WithPredicates(sel))
	}
	// The KubeVirt CR's certificateRotateStrategy sets the validator's
	// certificates' lifetimes (its CRD is installed with virt-operator's).
	b = b.WatchesMetadata(metadataOf(v1.GroupVersion.WithKind("KubeVirt")), all, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	r.cache, r.enqueue, r.pred = mgr.GetCache(), all, sel
	r.ctrl, err = b.Build(r)
	return err
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}
