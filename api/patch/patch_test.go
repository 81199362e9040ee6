package patch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// Against a real API server: what matters is what it stores and when it
// refuses a stale write.
func TestPatch(t *testing.T) {
	_, c := apiserver.Start(t)
	ctx := context.Background()
	g := resource.MustParse("64Mi")
	newVMI := func(name string) *v1.VirtualMachineInstance {
		vmi := &v1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}},
		}
		require.NoError(t, c.Create(ctx, vmi))
		return vmi
	}
	get := func(vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstance {
		got := &v1.VirtualMachineInstance{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(vmi), got))
		return got
	}

	t.Run("status", func(t *testing.T) {
		vmi := newVMI("status")
		stale := vmi.DeepCopy()

		st := vmi.Status.DeepCopy()
		st.SetPhase(v1.Pending, metav1.Now())
		require.NoError(t, patch.VMIStatus(ctx, c, vmi, st))
		assert.Equal(t, v1.Pending, get(vmi).Status.Phase)

		rv := vmi.ResourceVersion
		require.NoError(t, patch.VMIStatus(ctx, c, vmi, vmi.Status.DeepCopy()), "an unchanged status")
		assert.Equal(t, rv, get(vmi).ResourceVersion, "an unchanged status is not written")

		// A writer that decided on the copy from before the first write.
		st = stale.Status.DeepCopy()
		st.SetPhase(v1.Failed, metav1.Now())
		err := patch.VMIStatus(ctx, c, stale, st)
		assert.True(t, apierrors.IsConflict(err), "a stale write is refused: %v", err)
		assert.Equal(t, v1.Pending, get(vmi).Status.Phase, "and the other's status stays")
	})

	t.Run("finalizers", func(t *testing.T) {
		vmi := newVMI("finalizers")
		stale := vmi.DeepCopy()
		require.NoError(t, patch.AddFinalizer(ctx, c, vmi, v1.VirtualMachineInstanceFinalizer))
		require.NoError(t, patch.AddFinalizer(ctx, c, vmi, v1.VirtualMachineInstanceFinalizer), "added twice")
		assert.Equal(t, []string{v1.VirtualMachineInstanceFinalizer}, get(vmi).Finalizers)

		err := patch.AddFinalizer(ctx, c, stale, v1.VirtualMachineControllerFinalizer)
		assert.True(t, apierrors.IsConflict(err), "a stale write is refused: %v", err)

		require.NoError(t, c.Delete(ctx, vmi))
		assert.NotNil(t, get(vmi).DeletionTimestamp, "held by its finalizer")
		vmi = get(vmi)
		gone := vmi.DeepCopy()
		require.NoError(t, patch.RemoveFinalizer(ctx, c, vmi, v1.VirtualMachineInstanceFinalizer))
		err = c.Get(ctx, client.ObjectKeyFromObject(vmi), &v1.VirtualMachineInstance{})
		assert.True(t, apierrors.IsNotFound(err), "without its finalizer the deleted VMI goes: %v", err)

		assert.NoError(t, patch.RemoveFinalizer(ctx, c, gone, v1.VirtualMachineInstanceFinalizer), "an object already gone is no error")
	})
}
