// Package kit holds the steps every operator under operator/ takes the
// same way, so that each rule has one home: reading a CR's spec as
// stored to refuse what kubevmm does not declare, turning objects into
// apply configurations and server-side applying what Decide wants,
// deciding when a Deployment or DaemonSet has rolled out, mapping a
// watched change to every CR of a kind (each operator's CR is a singleton
// by convention, and the next one takes over when the first goes), the
// objects that run an operator itself (install.go), and the
// NetworkPolicies that close a component's namespace and open what each
// component needs (netpol.go). A CR's finalizer and status are written as
// every controller writes them (api/patch). Where operators really differ
// (what they observe, what they decide, what they log) they keep their
// own code.
package kit

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// StoredSpec reads obj (of kind gvk) as the API server stores it and
// returns its spec as stored, and the spec's fields that typed (obj's
// typed spec) does not declare, sorted (see v1.UnknownFields). The CRDs
// keep fields kubevmm does not declare and the typed read drops them:
// they are refused by name, never silently ignored.
func StoredSpec(ctx context.Context, r client.Reader, obj client.Object, gvk schema.GroupVersionKind, typed any) (map[string]any, []string, error) {
	raw := &unstructured.Unstructured{}
	raw.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, client.ObjectKeyFromObject(obj), raw); err != nil {
		return nil, nil, fmt.Errorf("reading %s %s as stored: %w", gvk.Kind, obj.GetName(), err)
	}
	spec, err := json.Marshal(raw.Object["spec"])
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	unknown, err := v1.UnknownFields(spec, typed)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	m, _ := raw.Object["spec"].(map[string]any)
	return m, unknown, nil
}

// ApplyConfiguration is obj as the operator applies it: its JSON less
// metadata.creationTimestamp and status, which an apply must not claim
// (the fields it sets become the operator's).
func ApplyConfiguration(obj client.Object) (*unstructured.Unstructured, error) {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", kind, obj.GetName(), err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", kind, obj.GetName(), err)
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// Apply server-side applies objs in order under fieldManager with forced
// ownership: an edit of a field the operator deploys is reverted.
func Apply(ctx context.Context, c client.Client, fieldManager string, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// TypeMeta is the apiVersion and kind an object is built with (the
// install packages' objects are applied as unstructured, which needs
// both).
func TypeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// DeploymentReady says whether dep's current spec has rolled out: the
// controller saw its generation, and all its replicas run that spec and
// are available.
func DeploymentReady(dep *appsv1.Deployment) bool {
	want, st := ptr.Deref(dep.Spec.Replicas, 1), dep.Status
	return st.ObservedGeneration >= dep.Generation && st.UpdatedReplicas >= want && st.AvailableReplicas >= want
}

// DaemonSetReady says whether ds's current spec has rolled out: the
// controller saw its generation, and it runs that spec, available, on
// every node it should.
func DaemonSetReady(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled &&
		st.NumberAvailable >= st.DesiredNumberScheduled
}

// EnqueueAll maps any change to a request for every object of list's
// kind that c lists (list is copied for each change). What an operator
// deploys is shared by all its CRs, so every one hears of it.
func EnqueueAll(c client.Client, list client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l); err != nil {
			logf.FromContext(ctx).Error(err, "listing the CRs to reconcile")
			return nil
		}
		var out []reconcile.Request
		if err := apimeta.EachListItem(l, func(o runtime.Object) error {
			if m, ok := o.(client.Object); ok {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
			}
			return nil
		}); err != nil {
			logf.FromContext(ctx).Error(err, "listing the CRs to reconcile")
		}
		return out
	})
}
