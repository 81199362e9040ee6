package controller

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/find"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// The VMI annotations that name the VM's instance type and preference
// (KubeVirt's; the metrics collector reads them).
const (
	instancetypeAnnotation        = "kubevirt.io/instancetype-name"
	clusterInstancetypeAnnotation = "kubevirt.io/cluster-instancetype-name"
	preferenceAnnotation          = "kubevirt.io/preference-name"
	clusterPreferenceAnnotation   = "kubevirt.io/cluster-preference-name"
)

// +kubebuilder:rbac:groups=instancetype.kubevirt.io,resources=virtualmachineinstancetypes;virtualmachineclusterinstancetypes;virtualmachinepreferences;virtualmachineclusterpreferences,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch;create

// captureRevisions stores a copy of the VM's instance type and preference
// in ControllerRevisions owned by the VM and records their names in
// spec.instancetype.revisionName and spec.preference.revisionName, as
// KubeVirt 1.0-1.3 do: every later VMI is expanded from those copies, so
// editing the type does not change the VM until its revisionName is
// cleared (or set to another revision). It reports whether it changed
// the VM's spec.
func (a *vmAction) captureRevisions(ctx context.Context) (bool, *syncError) {
	vm := a.vm
	orig := vm.DeepCopy()
	changed := false
	if m := vm.Spec.Instancetype; m != nil && m.RevisionName == "" {
		kind, _ := v1beta1.InstancetypeKind(m.Kind)
		name, err := a.r.storeRevision(ctx, vm, kind, m.Name)
		if err != nil {
			return false, err
		}
		m.RevisionName, changed = name, true
	}
	if m := vm.Spec.Preference; m != nil && m.RevisionName == "" {
		kind, _ := v1beta1.PreferenceKind(m.Kind)
		name, err := a.r.storeRevision(ctx, vm, kind, m.Name)
		if err != nil {
			return false, err
		}
		m.RevisionName, changed = name, true
	}
	if !changed {
		return false, nil
	}
	if err := a.r.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("recording the revisions of VM %s/%s: %w", vm.Namespace, vm.Name, err), retry: true}
	}
	return true, nil
}

// storeRevision copies the object into a ControllerRevision owned by the
// VM, named and labelled as KubeVirt names them (VM, object, version,
// UID, generation), and returns its name. A revision of that name already
// there is the same object at the same generation, so it is reused.
func (r *VMReconciler) storeRevision(ctx context.Context, vm *v1.VirtualMachine, kind, name string) (string, *syncError) {
	obj, err := find.Object(ctx, r.Client, vm.Namespace, kind, name)
	if err != nil {
		// Not found: the VM waits (retried with backoff) and says why.
		return "", &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	ver := v1beta1.GroupVersion.Version
	revName := fmt.Sprintf("%s-%s-%s-%s-%d", vm.Name, obj.GetName(), ver, obj.GetUID(), obj.GetGeneration())
	// Only the object's identity and spec are kept.
	obj.SetLabels(nil)
	obj.SetAnnotations(nil)
	obj.SetFinalizers(nil)
	obj.SetOwnerReferences(nil)
	obj.SetManagedFields(nil)
	raw, jerr := json.Marshal(obj)
	if jerr != nil {
		return "", &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("encoding %s %q: %w", kind, name, jerr)}
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            revName,
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, v1.VirtualMachineGroupVersionKind)},
			Labels: map[string]string{
				v1beta1.RevisionObjectGenerationLabel: fmt.Sprint(obj.GetGeneration()),
				v1beta1.RevisionObjectKindLabel:       kind,
				v1beta1.RevisionObjectNameLabel:       obj.GetName(),
				v1beta1.RevisionObjectUIDLabel:        string(obj.GetUID()),
				v1beta1.RevisionObjectVersionLabel:    ver,
			},
		},
		Data: runtime.RawExtension{Raw: raw},
	}
	if err := r.Client.Create(ctx, rev); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("storing %s %q in ControllerRevision %s: %w", kind, name, revName, err), retry: true}
	}
	return revName, nil
}

// nameAnnotations: the VMI annotation that names an object of each kind.
var nameAnnotations = map[string]string{
	v1beta1.KindInstancetype:        instancetypeAnnotation,
	v1beta1.KindClusterInstancetype: clusterInstancetypeAnnotation,
	v1beta1.KindPreference:          preferenceAnnotation,
	v1beta1.KindClusterPreference:   clusterPreferenceAnnotation,
}

// expandVMI applies the VM's captured instance type and preference to the
// VMI rendered from its template. The template was checked against them at
// admission; a type it conflicts with, settings kubevmm does not honour
// or unmet requirements are reported on the VM, and no VMI is created.
func (a *vmAction) expandVMI(ctx context.Context, vmi *v1.VirtualMachineInstance) *syncError {
	e, err := find.ForVM(ctx, a.r.Client, a.vm)
	if err != nil {
		// Just captured, the cache may not have the revision yet: retried.
		return &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	if f := e.Instancetype; f != nil {
		vmi.Annotations[nameAnnotations[f.Kind]] = f.Name
	}
	if f := e.Preference; f != nil {
		vmi.Annotations[nameAnnotations[f.Kind]] = f.Name
	}
	errs := e.Apply(&vmi.Spec, &vmi.ObjectMeta)
	if len(errs) > 0 {
		return &syncError{reason: ReasonInvalidSpec, err: errs.ToAggregate()}
	}
	return nil
}
