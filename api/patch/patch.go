// Package patch holds the writes every controller and operator makes the
// same way: an object's status, written when it differs from the one
// read, and its finalizers. Each is a merge patch (not an update), which
// never writes back fields this module's types do not know.
//
// Finalizers, and a VMI's status, are patched under the optimistic lock
// (resourceVersion): virt-controller and virt-handler write the same
// objects, so a write decided on a stale copy must fail with a conflict
// and be decided again, never silently drop the other's change.
//
// It sits under api/ rather than in any component: it is the lowest
// package they all import, and depends only on the API types and the
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

// Status writes want as obj's status, if it differs (equality.Semantic)
// from *status, the status field of obj; afterwards obj holds want (and
// the server's new resourceVersion). opts are the merge patch's (the
// optimistic lock: client.MergeFromWithOptimisticLock{}).
func Status[S any](ctx context.Context, c client.Client, obj client.Object, status *S, want S, opts ...client.MergeFromOption) error {
	if equality.Semantic.DeepEqual(*status, want) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	*status = want
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, opts...)); err != nil {
		return fmt.Errorf("writing the status of %s %s: %w", kind(obj), ref(obj), err)
	}
	return nil
}

// VMIStatus writes st as the VMI's status, if it differs from the one vmi
// holds, under the optimistic lock; afterwards vmi holds st (and the
// server's new resourceVersion).
func VMIStatus(ctx context.Context, c client.Client, vmi *v1.VirtualMachineInstance, st *v1.VirtualMachineInstanceStatus) error {
	return Status(ctx, c, vmi, &vmi.Status, *st, client.MergeFromWithOptimisticLock{})
}

// AddFinalizer adds the finalizer f to obj unless it has it. The patch
// carries obj's resourceVersion: an object changed meanwhile (deleted,
// say) fails it and the next pass decides again.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) error {
	if controllerutil.ContainsFinalizer(obj, f) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, f)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s to %s %s: %w", f, kind(obj), ref(obj), err)
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
		return client.IgnoreNotFound(fmt.Errorf("removing finalizer %s from %s %s: %w", f, kind(obj), ref(obj), err))
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

// ref is obj's namespace/name, or its name if it is cluster-scoped.
func ref(obj client.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}
