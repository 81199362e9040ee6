// Package patch holds the writes virt-controller and virt-handler share:
// merge patches under the optimistic lock (resourceVersion). Both
// components write the same objects (a VMI's status, finalizers), so a
// write decided on a stale copy must fail with a conflict and be decided
// again, never silently drop the other's change; and a merge patch (not an
// update) never writes back fields this module's types do not know.
//
// It sits under api/ rather than in either component: it is the lowest
// package both import, and depends only on the API types and the
// controller-runtime client.
package patch

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// VMIStatus writes st as the VMI's status, if it differs from the one vmi
// holds; afterwards vmi holds st (and the server's new resourceVersion).
func VMIStatus(ctx context.Context, c client.Client, vmi *v1.VirtualMachineInstance, st *v1.VirtualMachineInstanceStatus) error {
	if equality.Semantic.DeepEqual(&vmi.Status, st) {
		return nil
	}
	orig := vmi.DeepCopy()
	vmi.Status = *st
	if err := c.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating status of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// AddFinalizer adds the finalizer f to obj unless it has it.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) error {
	if controllerutil.ContainsFinalizer(obj, f) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, f)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s to %s %s/%s: %w", f, kind(obj), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// RemoveFinalizer removes the finalizer f from obj if it has it. An object
// already gone is no error: nothing is left for the finalizer to hold.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) error {
	if !controllerutil.ContainsFinalizer(obj, f) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, f)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("removing finalizer %s from %s %s/%s: %w", f, kind(obj), obj.GetNamespace(), obj.GetName(), err))
	}
	return nil
}

// kind names the object in errors: its Go type, since typed objects read
// through a client often have an empty TypeMeta.
func kind(obj client.Object) string {
	t := reflect.TypeOf(obj)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
