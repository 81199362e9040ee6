// Package find fetches what a VM's spec.instancetype and spec.preference
// name: the copy captured in the ControllerRevision their revisionName
// names, else the object as it is now. virt-controller expands VMIs with
// it, virt-api the expand-spec subresource.
package find

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// Found is an instance type's or a preference's spec, with the kind and
// name it came from.
type Found[S any] struct {
	Kind string `json:"kind"`
	Name string `json:"-"`
	Spec S      `json:"spec"`
}

// Instancetype finds the instance type m names for a VM in namespace ns.
func Instancetype(ctx context.Context, c client.Reader, ns string, m *v1.InstancetypeMatcher) (*Found[v1beta1.VirtualMachineInstancetypeSpec], error) {
	kind, ok := v1beta1.InstancetypeKind(m.Kind)
	if !ok {
		return nil, fmt.Errorf("spec.instancetype.kind %q is not an instance type kind", m.Kind)
	}
	if m.RevisionName != "" {
		return fromRevision[v1beta1.VirtualMachineInstancetypeSpec](ctx, c, ns, m.RevisionName, m.Name, v1beta1.KindInstancetype, v1beta1.KindClusterInstancetype)
	}
	f := &Found[v1beta1.VirtualMachineInstancetypeSpec]{Kind: kind, Name: m.Name}
	obj, err := Object(ctx, c, ns, kind, m.Name)
	if err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case *v1beta1.VirtualMachineInstancetype:
		f.Spec = o.Spec
	case *v1beta1.VirtualMachineClusterInstancetype:
		f.Spec = o.Spec
	}
	return f, nil
}

// Preference finds the preference m names for a VM in namespace ns.
func Preference(ctx context.Context, c client.Reader, ns string, m *v1.PreferenceMatcher) (*Found[v1beta1.VirtualMachinePreferenceSpec], error) {
	kind, ok := v1beta1.PreferenceKind(m.Kind)
	if !ok {
		return nil, fmt.Errorf("spec.preference.kind %q is not a preference kind", m.Kind)
	}
	if m.RevisionName != "" {
		return fromRevision[v1beta1.VirtualMachinePreferenceSpec](ctx, c, ns, m.RevisionName, m.Name, v1beta1.KindPreference, v1beta1.KindClusterPreference)
	}
	f := &Found[v1beta1.VirtualMachinePreferenceSpec]{Kind: kind, Name: m.Name}
	obj, err := Object(ctx, c, ns, kind, m.Name)
	if err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case *v1beta1.VirtualMachinePreference:
		f.Spec = o.Spec
	case *v1beta1.VirtualMachineClusterPreference:
		f.Spec = o.Spec
	}
	return f, nil
}

// Object gets the instance type or preference of that kind (one of the
// v1beta1 Kind constants) and name; the namespaced kinds in namespace ns.
// Its kind is set, so that it serialises whole (a revision's content).
func Object(ctx context.Context, c client.Reader, ns, kind, name string) (client.Object, error) {
	var obj client.Object
	key := types.NamespacedName{Name: name}
	switch kind {
	case v1beta1.KindInstancetype:
		obj, key.Namespace = &v1beta1.VirtualMachineInstancetype{}, ns
	case v1beta1.KindClusterInstancetype:
		obj = &v1beta1.VirtualMachineClusterInstancetype{}
	case v1beta1.KindPreference:
		obj, key.Namespace = &v1beta1.VirtualMachinePreference{}, ns
	case v1beta1.KindClusterPreference:
		obj = &v1beta1.VirtualMachineClusterPreference{}
	default:
		return nil, fmt.Errorf("%q is not an instancetype.kubevirt.io kind", kind)
	}
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, fmt.Errorf("failure to find %s %q: %w", kind, name, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(v1beta1.GroupVersion.WithKind(kind))
	return obj, nil
}

// fromRevision decodes the object a ControllerRevision captured; its kind
// must be one of kinds (a revisionName set by hand may name any
// ControllerRevision).
func fromRevision[S any](ctx context.Context, c client.Reader, ns, rev, name string, kinds ...string) (*Found[S], error) {
	cr := &appsv1.ControllerRevision{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: rev}, cr); err != nil {
		return nil, fmt.Errorf("getting ControllerRevision %s: %w", rev, err)
	}
	f := &Found[S]{Name: name}
	if err := json.Unmarshal(cr.Data.Raw, f); err != nil {
		return nil, fmt.Errorf("decoding ControllerRevision %s: %w", rev, err)
	}
	if !slices.Contains(kinds, f.Kind) {
		return nil, fmt.Errorf("ControllerRevision %s holds a %q, not a %s", rev, f.Kind, strings.Join(kinds, " or "))
	}
	return f, nil
}
