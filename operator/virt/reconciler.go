// Package virt is virt-operator: it reconciles the KubeVirt CR
// (kubevirt.io/v1) into everything that runs kubevmm (the CRDs, RBAC,
// virt-api, virt-controller, virt-handler, webhooks, APIService, the
// cluster configuration: operator/virt/install).
//
// One level-triggered reconciler: read (the CR, the others, the
// components' readiness, the workloads, virt-api's CA), decide (Decide, a
// pure function), write (server-side apply under field manager
// virt-operator with forced ownership, so an edit of a deployed field is
// reverted; then the status). Deployed objects carry the label
// app.kubernetes.io/managed-by=virt-operator and the
// kubevirt.io/install-strategy-{version,registry} annotations instead of
// owner references (cluster-scoped objects cannot be owned by a
// namespaced CR); watches on that label bring every change back here.
//
// States of the CR (status.phase):
//
//	""        -> Deploying   finalizer added, objects applied
//	Deploying -> Deployed    virt-api, virt-controller, virt-handler available
//	Deployed  -> Deploying   a component is no longer available, or the spec changed
//	Deployed  -> Deploying   an update (imageTag or imageRegistry changed, the
//	                         default's included): Available stays True,
//	                         Progressing=True reason UpdateInProgress;
//	                         virt-controller and virt-handler roll first,
//	                         virt-api (kept on its version meanwhile) once
//	                         both run the new one (holdVirtAPI)
//	Deploying -> Deployed    all three run the target version: observed
//	                         version = target version
//	any       -> Deleting    deletionTimestamp set: VMs and VMIs deleted
//	                         (RemoveWorkloads) or waited for
//	                         (BlockUninstallIfWorkloadsExist, condition
//	                         Degraded/WorkloadsExist), then every deployed
//	                         object, webhooks first, CRDs last
//	Deleting  -> Deleted     nothing deployed is left: finalizer removed
//
// A second KubeVirt CR (not the oldest) gets Synchronized=False, reason
// ExistingDeployment, and nothing else.
package virt

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubevmm/kubevmm/api/certs"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

// Options are virt-operator's defaults for what the CR leaves out, and
// where the components go.
type Options struct {
	// Namespace of the components (virt-operator's own).
	Namespace     string
	ImageRegistry string
	ImageTag      string
	PullPolicy    corev1.PullPolicy
	PluginDir     string
	KubeletRoot   string
	// SecretPropagation is how long the kubelet may take to update a
	// mounted Secret: a new CA signs leaves only once it has been
	// published that long.
	SecretPropagation time.Duration
}

// FieldManager is virt-operator's server-side apply field manager.
const FieldManager = "virt-operator"

// deletionOrder lists the kinds virt-operator deploys in the order an
// uninstall deletes them: webhooks and the APIService first (nothing may
// call a virt-api that is going away), CRDs last.
var deletionOrder = []schema.GroupVersionKind{
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	// After the workloads: no pod runs without its policy.
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
}

var managed = client.MatchingLabels{install.ManagedByLabel: ManagedBy}

// Reconciler reconciles KubeVirt CRs.
type Reconciler struct {
	Client client.Client
	// APIReader reads uncached: the objects virt-operator deploys are
	// watched by their metadata only.
	APIReader client.Reader
	Options   Options
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	kv := &v1.KubeVirt{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, kv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	o, err := r.observe(ctx, kv)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(o, r.Options, metav1.Now())
	if d.Status.Phase != kv.Status.Phase {
		log.Info("phase", "from", kv.Status.Phase, "to", d.Status.Phase)
	}
	if p := progressing(d.Status); p != progressing(kv.Status) && p != "" {
		log.Info("progressing", "message", p)
	}
	var requeue time.Duration
	switch d.Action {
	case Deploy:
		if err := patch.AddFinalizer(ctx, r.Client, kv, v1.KubeVirtFinalizer); err != nil {
			return reconcile.Result{}, err
		}
		if err := kit.Apply(ctx, r.Client, FieldManager, d.Objects); err != nil {
			return reconcile.Result{}, err
		}
		for _, why := range d.Renewed {
			log.Info("certificate renewed", "secret", why)
		}
		// Nothing else wakes the operator when a certificate comes due.
		if !d.CertsDue.IsZero() {
			requeue = max(time.Until(d.CertsDue), time.Second)
		}
	case DeleteWorkloads:
		if err := r.deleteWorkloads(ctx); err != nil {
			return reconcile.Result{}, err
		}
		requeue = 2 * time.Second
	case DeleteComponents:
		if err := r.deleteComponents(ctx); err != nil {
			return reconcile.Result{}, err
		}
		requeue = time.Second
	case Nothing:
		if kv.DeletionTimestamp != nil {
			// Waiting for workloads to go (BlockUninstallIfWorkloadsExist):
			// VMs and VMIs are not watched.
			requeue = 5 * time.Second
		}
	}
	if err := patch.Status(ctx, r.Client, kv, &kv.Status, d.Status); err != nil {
		return reconcile.Result{}, err
	}
	if d.Action == Finalize && controllerutil.ContainsFinalizer(kv, v1.KubeVirtFinalizer) {
		if err := patch.RemoveFinalizer(ctx, r.Client, kv, v1.KubeVirtFinalizer); err != nil {
			return reconcile.Result{}, err
		}
		log.Info("uninstalled")
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// progressing is the Progressing condition's message while it is True.
func progressing(st v1.KubeVirtStatus) string {
	for _, c := range st.Conditions {
		if c.Type == v1.KubeVirtConditionProgressing && c.Status == corev1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, kv *v1.KubeVirt) (Observed, error) {
	o := Observed{KubeVirt: kv}
	all := &v1.KubeVirtList{}
	if err := r.APIReader.List(ctx, all); err != nil {
		return o, fmt.Errorf("listing KubeVirt CRs: %w", err)
	}
	// The oldest is the installation (the name breaks a tie), as one
	// created second finds the first already deployed.
	sort.Slice(all.Items, func(i, j int) bool {
		a, b := all.Items[i], all.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	o.Active = len(all.Items) > 0 && all.Items[0].UID == kv.UID
	if !o.Active {
		return o, nil
	}
	var err error
	if _, o.UnknownFields, err = kit.StoredSpec(ctx, r.APIReader, kv, v1.GroupVersion.WithKind("KubeVirt"), kv.Spec); err != nil {
		return o, err
	}
	if kv.DeletionTimestamp != nil {
		n, err := r.workloads(ctx)
		if err != nil {
			return o, err
		}
		o.Workloads = n
		if n == 0 {
			o.Remaining, err = r.remaining(ctx)
		}
		return o, err
	}
	if o.Certs, err = r.readCerts(ctx); err != nil {
		return o, err
	}
	o.Components, o.Ready, err = r.components(ctx)
	return o, err
}

// readCerts reads the CA Secret, the CA bundle ConfigMap and the leaf
// Secrets; a missing one reads as empty.
func (r *Reconciler) readCerts(ctx context.Context) (CertsRead, error) {
	c := CertsRead{Leaves: map[string]certs.KeyPair{}}
	ns := r.Options.Namespace
	secret := func(name string) (certs.KeyPair, error) {
		s := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return certs.KeyPair{}, client.IgnoreNotFound(err)
		}
		return certs.KeyPair{Cert: s.Data[corev1.TLSCertKey], Key: s.Data[corev1.TLSPrivateKeyKey]}, nil
	}
	var err error
	if c.CA, err = secret(CASecret); err != nil {
		return c, fmt.Errorf("reading Secret %s: %w", CASecret, err)
	}
	for _, l := range leaves(ns) {
		if c.Leaves[l.secret], err = secret(l.secret); err != nil {
			return c, fmt.Errorf("reading Secret %s: %w", l.secret, err)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: CABundleConfigMap}, cm); client.IgnoreNotFound(err) != nil {
		return c, fmt.Errorf("reading ConfigMap %s: %w", CABundleConfigMap, err)
	}
	c.Bundle = []byte(cm.Data[CABundleKey])
	return c, nil
}

// components reads virt-api, virt-controller (Deployments) and
// virt-handler (DaemonSet): the version they were applied for and whether
// they run their current spec, available on every node they should run
// on. Ready: all three are.
func (r *Reconciler) components(ctx context.Context) (map[string]Component, bool, error) {
	ns := r.Options.Namespace
	out := map[string]Component{}
	ready := true
	for _, name := range []string{install.VirtAPIName, install.VirtControllerName} {
		d := &appsv1.Deployment{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			if apierrors.IsNotFound(err) {
				ready = false
				continue
			}
			return nil, false, fmt.Errorf("reading Deployment %s: %w", name, err)
		}
		// Rolled out here also means no pod of an older spec is left.
		c := Component{Version: d.Annotations[AnnotationVersion], Registry: d.Annotations[AnnotationRegistry],
			RolledOut: kit.DeploymentReady(d) && d.Status.Replicas == d.Status.UpdatedReplicas}
		out[name] = c
		ready = ready && c.RolledOut
	}
	ds := &appsv1.DaemonSet{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.VirtHandlerName}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return out, false, nil
		}
		return nil, false, fmt.Errorf("reading DaemonSet %s: %w", install.VirtHandlerName, err)
	}
	s := ds.Status
	c := Component{Version: ds.Annotations[AnnotationVersion], Registry: ds.Annotations[AnnotationRegistry],
		RolledOut: s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled}
	out[install.VirtHandlerName] = c
	return out, ready && c.RolledOut, nil
}

// workloads counts the cluster's VMs and VMIs; none when their CRDs are
// gone.
func (r *Reconciler) workloads(ctx context.Context) (int, error) {
	n := 0
	for _, l := range []client.ObjectList{&v1.VirtualMachineList{}, &v1.VirtualMachineInstanceList{}} {
		if err := r.APIReader.List(ctx, l); err != nil {
			if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
				continue
			}
			return 0, fmt.Errorf("listing workloads: %w", err)
		}
		n += apimeta.LenList(l)
	}
	return n, nil
}

func (r *Reconciler) deleteWorkloads(ctx context.Context) error {
	for _, l := range []client.ObjectList{&v1.VirtualMachineList{}, &v1.VirtualMachineInstanceList{}} {
		if err := r.APIReader.List(ctx, l); err != nil {
			return fmt.Errorf("listing workloads: %w", err)
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return err
		}
		for _, item := range items {
			obj, ok := item.(client.Object)
			if !ok {
				continue
			}
			if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// remaining counts what virt-operator deployed that still exists.
func (r *Reconciler) remaining(ctx context.Context) (int, error) {
	n := 0
	for _, gvk := range deletionOrder {
		l, err := r.list(ctx, gvk)
		if err != nil {
			return 0, err
		}
		n += len(l.Items)
	}
	return n, nil
}

// deleteComponents deletes the deployed objects kind by kind, in
// deletionOrder; a kind is started only when the kinds before it are
// gone, so the CRDs go last.
func (r *Reconciler) deleteComponents(ctx context.Context) error {
	for _, gvk := range deletionOrder {
		l, err := r.list(ctx, gvk)
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			continue
		}
		for i := range l.Items {
			if err := r.Client.Delete(ctx, &l.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s %s: %w", gvk.Kind, l.Items[i].GetName(), err)
			}
		}
		return nil
	}
	return nil
}

func (r *Reconciler) list(ctx context.Context, gvk schema.GroupVersionKind) (*unstructured.UnstructuredList, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := r.APIReader.List(ctx, l, append(kit.InOwnNamespace(gvk, r.Options.Namespace), managed)...); err != nil {
		if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return l, nil // the kind's API is not served (no aggregator): nothing of it deployed
		}
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	return l, nil
}

// SetupWithManager registers the reconciler: KubeVirt CRs, and the
// deployed objects' metadata by label, each change mapped to every
// KubeVirt CR.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	sel, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{MatchLabels: managed})
	if err != nil {
		return err
	}
	all := kit.EnqueueAll(mgr.GetClient(), &v1.KubeVirtList{})
	// Every CR on any CR's change: when the installation's CR is gone,
	// the next one takes over.
	b := ctrl.NewControllerManagedBy(mgr).Named("kubevirt").Watches(&v1.KubeVirt{}, all)
	for _, gvk := range deletionOrder {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		b = b.WatchesMetadata(m, all, builder.WithPredicates(sel))
	}
	return b.Complete(r)
}
