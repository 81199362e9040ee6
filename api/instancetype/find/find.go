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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/expand"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// Found is an instance type's or a preference's spec, with the kind and
// name it came from.
type Found[S any] struct {
	Kind string `json:"kind"`
	Name string `json:"-"`
	Spec S      `json:"spec"`
}

// lookup reads the revision rev when there is one (its kind one of
// kinds), else the object of that kind.
func lookup[S any](ctx context.Context, c client.Reader, ns, kind, name, rev string, kinds ...string) (*Found[S], error) {
	if rev != "" {
		return fromRevision[S](ctx, c, ns, rev, name, kinds...)
	}
	obj, err := Object(ctx, c, ns, kind, name)
	if err != nil {
		return nil, err
	}
	// Both kinds of a pair share their spec type: read it through JSON.
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q: %w", kind, name, err)
	}
	f := &Found[S]{Name: name}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("decoding %s %q: %w", kind, name, err)
	}
	return f, nil
}

// Expansion is what a VM is expanded with; either may be nil.
type Expansion struct {
	Instancetype *Found[v1beta1.VirtualMachineInstancetypeSpec]
	Preference   *Found[v1beta1.VirtualMachinePreferenceSpec]
}

// ForVM finds the VM's instance type and preference.
func ForVM(ctx context.Context, c client.Reader, vm *v1.VirtualMachine) (*Expansion, error) {
	e := &Expansion{}
	var err error
	if m := vm.Spec.Instancetype; m != nil {
		kind, ok := v1beta1.InstancetypeKind(m.Kind)
		if !ok {
			return nil, fmt.Errorf("spec.instancetype.kind %q is not an instance type kind", m.Kind)
		}
		e.Instancetype, err = lookup[v1beta1.VirtualMachineInstancetypeSpec](ctx, c, vm.Namespace, kind, m.Name, m.RevisionName,
			v1beta1.KindInstancetype, v1beta1.KindClusterInstancetype)
		if err != nil {
			return nil, err
		}
	}
	if m := vm.Spec.Preference; m != nil {
		kind, ok := v1beta1.PreferenceKind(m.Kind)
		if !ok {
			return nil, fmt.Errorf("spec.preference.kind %q is not a preference kind", m.Kind)
		}
		e.Preference, err = lookup[v1beta1.VirtualMachinePreferenceSpec](ctx, c, vm.Namespace, kind, m.Name, m.RevisionName,
			v1beta1.KindPreference, v1beta1.KindClusterPreference)
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Apply refuses the settings kubevmm does not honour (named by kind and
// name), else applies both to s and meta, a copy of the VM's template
// (expand.Apply).
func (e *Expansion) Apply(s *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) field.ErrorList {
	var errs field.ErrorList
	var it *v1beta1.VirtualMachineInstancetypeSpec
	var pref *v1beta1.VirtualMachinePreferenceSpec
	if f := e.Instancetype; f != nil {
		it = &f.Spec
		errs = append(errs, expand.UnsupportedInstancetype(field.NewPath(f.Kind, f.Name, "spec"), it)...)
	}
	if f := e.Preference; f != nil {
		pref = &f.Spec
		errs = append(errs, expand.UnsupportedPreference(field.NewPath(f.Kind, f.Name, "spec"), pref)...)
	}
	if len(errs) > 0 {
		return errs
	}
	return expand.Apply(field.NewPath("spec", "template", "spec"), s, meta, it, pref)
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
