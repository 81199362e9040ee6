// Package network is the cluster network add-ons operator: it reconciles
// the cluster-scoped NetworkAddonsConfig named "cluster"
// (networkaddonsoperator.network.kubevirt.io/v1, v1alpha1 alike) into the
// components whose spec keys are present (operator/network/install):
//
//	multus      the NetworkAttachmentDefinition CRD and the kubevmm-multus
//	            DaemonSet (installs the meta-plugin on every node)
//	linuxBridge the bridge-marker DaemonSet (installs the bridge and tuning
//	            CNI plugins, publishes each node's bridges as
//	            bridge.network.kubevirt.io/<bridge> resources)
//	kubeMacPool kubemacpool (its range ConfigMap, RBAC, Deployment, Service
//	            and mutating webhook), with spec.kubeMacPool's range, else
//	            the range its ConfigMap holds, else a random
//	            02:XX:XX:00:00:00-02:XX:XX:FF:FF:FF picked once and kept
//	            in the ConfigMap; its serving certificate (Secret
//	            kubemacpool-service, the CA bundle in ca.crt) and CA
//	            (kubemacpool-ca) are the operator's, made and rotated
//	            (api/certs) by spec.selfSignConfiguration
//
// all in namespace cluster-network-addons, the operator's own (Operator).
// The bridge and tuning CNI plugins come with bridge-marker: its image
// carries them and its init container installs them on every node.
// Upstream's other keys are refused by name (Degraded).
//
// One level-triggered reconciler: read (the NetworkAddonsConfig, its spec
// as stored, the components' DaemonSets and Deployment, kubemacpool's
// range and certificates), decide (Decide, a pure function), write (server-side apply under field manager
// cluster-network-addons-operator with forced ownership, so an edit of a
// deployed field is reverted; deletes of the components whose key is
// gone; then the status). Everything applied is owned by the
// NetworkAddonsConfig (the garbage collector removes it with it), except
// the NetworkAttachmentDefinition CRD, which stays: users' definitions
// live in it. Watches on the owned kinds bring every change back here.
//
// States (the conditions Available/Progressing/Degraded):
//
//	-> Progressing  a requested component's DaemonSet or Deployment is not
//	                ready
//	-> Available    every requested component is ready (none requested:
//	                Available at once); observedVersion is set
//	-> Degraded     the spec sets a field kubevmm does not implement (named),
//	                an invalid kubeMacPool range or selfSignConfiguration;
//	                nothing is applied or deleted until it is fixed
//
// The operator requeues itself for the next certificate due and logs
// each renewal.
//
// The CRD admits no other name than "cluster".
package network

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/network/install"
)

// FieldManager is the operator's server-side apply field manager.
const FieldManager = "cluster-network-addons-operator"

// daemonSets are the components' DaemonSets, whose readiness is read.
var daemonSets = []string{install.Multus, install.BridgeMarker}

// declared are the spec's keys kubevmm implements (their JSON names).
var declared = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[networkaddonsv1.NetworkAddonsConfigSpec]()
	for i := range t.NumField() {
		out[strings.Split(t.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	return out
}()

// Reconciler reconciles the NetworkAddonsConfig.
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
	nac := &networkaddonsv1.NetworkAddonsConfig{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, nac); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if nac.DeletionTimestamp != nil {
		// The garbage collector removes what it owns.
		return reconcile.Result{}, nil
	}
	o, err := r.observe(ctx, nac)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(o, r.Options, metav1.Now())
	if was, is := kit.State(nac.Status.Conditions), kit.State(d.Status.Conditions); was != is {
		log.Info("state", "from", was, "to", is)
	}
	if err := kit.Apply(ctx, r.Client, FieldManager, d.Apply); err != nil {
		return reconcile.Result{}, err
	}
	for _, obj := range d.Delete {
		if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	if err := patch.Status(ctx, r.Client, nac, &nac.Status, d.Status); err != nil {
		return reconcile.Result{}, err
	}
	for _, why := range d.Renewed {
		log.Info("certificate renewed", "secret", why)
	}
	if !d.CertsDue.IsZero() {
		// Nothing else wakes the operator when a certificate comes due.
		return reconcile.Result{RequeueAfter: max(time.Until(d.CertsDue), time.Second)}, nil
	}
	return reconcile.Result{}, nil
}

// observe reads what Decide needs.
func (r *Reconciler) observe(ctx context.Context, nac *networkaddonsv1.NetworkAddonsConfig) (Observed, error) {
	o := Observed{Config: nac, Workloads: map[string]Workload{}}
	spec, unknown, err := kit.StoredSpec(ctx, r.APIReader, nac, networkaddonsv1.GroupVersion.WithKind("NetworkAddonsConfig"), nac.Spec)
	if err != nil {
		return o, err
	}
	o.UnknownFields = unknown
	// A key asks for its component even empty ("ovs: {}"), which
	// UnknownFields does not report: every undeclared key is refused.
	for k, val := range spec {
		if !declared[k] && val != nil && !slices.Contains(o.UnknownFields, k) {
			o.UnknownFields = append(o.UnknownFields, k)
		}
	}
	sort.Strings(o.UnknownFields)
	for _, name := range daemonSets {
		ds := &appsv1.DaemonSet{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: name}, ds); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return o, fmt.Errorf("reading DaemonSet %s: %w", name, err)
		default:
			o.Workloads[workloadKey("DaemonSet", install.Namespace, name)] = Workload{Ready: kit.DaemonSetReady(ds)}
		}
	}
	dep := &appsv1.Deployment{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.KubeMacPool}, dep); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("reading Deployment %s: %w", install.KubeMacPool, err)
	default:
		o.Workloads[workloadKey("Deployment", install.Namespace, install.KubeMacPool)] = Workload{Ready: kit.DeploymentReady(dep)}
	}
	if nac.Spec.KubeMacPool == nil {
		return o, nil
	}
	var data [2]map[string][]byte
	for i, name := range []string{KubeMacPoolCASecret, install.KubeMacPoolSecret} {
		sec := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: name}, sec); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return o, fmt.Errorf("reading Secret %s: %w", name, err)
		default:
			data[i] = sec.Data
		}
	}
	o.KubeMacPoolCerts = storedKubeMacPoolCerts(data[0], data[1])
	cm := &corev1.ConfigMap{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: kubemacpool.ConfigMap}, cm); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("reading kubemacpool's range: %w", err)
	default:
		o.KubeMacPoolRange = &[2]string{cm.Data[kubemacpool.KeyRangeStart], cm.Data[kubemacpool.KeyRangeEnd]}
	}
	if o.KubeMacPoolRange == nil {
		// Picked once: kept in the ConfigMap from then on.
		rg, err := macpool.RandomRange()
		if err != nil {
			return o, err
		}
		o.RandomRange = &[2]string{rg.Start.String(), rg.End.String()}
	}
	return o, nil
}

// SetupWithManager registers the reconciler: the NetworkAddonsConfig and
// the metadata of what it owns.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named("networkaddonsconfig").For(&networkaddonsv1.NetworkAddonsConfig{})
	for _, obj := range []client.Object{&appsv1.DaemonSet{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}, &corev1.ConfigMap{},
		&corev1.Service{}, &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&admissionregistrationv1.MutatingWebhookConfiguration{}, &networkingv1.NetworkPolicy{}} {
		b = b.Owns(obj, builder.OnlyMetadata)
	}
	return b.Complete(r)
}
