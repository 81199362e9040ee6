package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
)

// setComputeImage plays an update: the pod's launcher is of another
// image than virt-controller's (a pod's container image is mutable).
func setComputeImage(t *testing.T, pod *corev1.Pod, image string) {
	t.Helper()
	cur := &corev1.Pod{}
	require.NoError(t, get(t, pod.Namespace, pod.Name, cur))
	orig := cur.DeepCopy()
	for i := range cur.Spec.Containers {
		if cur.Spec.Containers[i].Name == controller.ComputeContainerName {
			cur.Spec.Containers[i].Image = image
		}
	}
	require.NoError(t, k8s.Patch(context.Background(), cur, client.MergeFrom(orig)))
}

// TestWorkloadUpdater: with an installation deployed at its target
// version and LiveMigrate in batches of one, two running VMIs whose
// launcher pods run an old image are labelled outdated and counted in the
// KubeVirt CR's status; one migration (annotated as the workload
// updater's) is created, for the first by name, the other waits for the
// next batch; a VMI whose launcher is current again loses the label.
func TestWorkloadUpdater(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubevirt"}, Spec: v1.KubeVirtSpec{
		WorkloadUpdateStrategy: v1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []v1.WorkloadUpdateMethod{v1.WorkloadUpdateMethodLiveMigrate},
			BatchEvictionSize: ptr.To(1), BatchEvictionInterval: &metav1.Duration{Duration: time.Hour}}}}
	require.NoError(t, k8s.Create(ctx, kv))
	t.Cleanup(func() {
		// The CR first: the updater stops acting for it. Migrations are
		// not removed with the namespace here (no namespace controller):
		// none may count against later tests.
		_ = k8s.Delete(ctx, kv)
		_ = k8s.DeleteAllOf(ctx, &v1.VirtualMachineInstanceMigration{}, client.InNamespace(ns))
		migrationsGone(t, ns)
	})
	// A merge patch, not an update: the updater may already have written
	// its count into the CR's status since the create, and an update
	// would then conflict with it.
	orig := kv.DeepCopy()
	kv.Status = v1.KubeVirtStatus{Phase: v1.KubeVirtPhaseDeployed, ObservedKubeVirtVersion: "envtest", TargetKubeVirtVersion: "envtest",
		ObservedKubeVirtRegistry: "localhost/kubevmm", TargetKubeVirtRegistry: "localhost/kubevmm"}
	require.NoError(t, k8s.Status().Patch(ctx, kv, client.MergeFrom(orig)))

	a, podA := runningVMI(t, ns, "a")
	b, podB := runningVMI(t, ns, "b")
	assert.NotContains(t, a.Labels, v1.OutdatedLauncherImageLabel, "a current launcher is not outdated")
	const old = "localhost/kubevmm/virt-launcher:old"
	setComputeImage(t, podA, old)
	setComputeImage(t, podB, old)
	t.Cleanup(func() {
		// The VMIs stay (no namespace controller): a later KubeVirt CR's
		// updater must not count them outdated.
		setComputeImage(t, podA, launcherImage)
		setComputeImage(t, podB, launcherImage)
	})

	for _, vmi := range []*v1.VirtualMachineInstance{a, b} {
		waitVMI(t, ns, vmi.Name, "labelled outdated", func(n *v1.VirtualMachineInstance) bool {
			_, ok := n.Labels[v1.OutdatedLauncherImageLabel]
			return ok
		})
	}
	outdated := func(want int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d outdated in the KubeVirt CR", want), func() (bool, string) {
			cur := &v1.KubeVirt{}
			require.NoError(t, get(t, ns, kv.Name, cur))
			n := cur.Status.OutdatedVirtualMachineInstanceWorkloads
			if n == nil {
				return false, "none"
			}
			return *n == want, fmt.Sprint(*n)
		})
	}
	outdated(2)
	var migs v1.VirtualMachineInstanceMigrationList
	waitFor(t, "a workload update migration", func() (bool, string) {
		require.NoError(t, k8s.List(ctx, &migs, client.InNamespace(ns)))
		return len(migs.Items) > 0, ""
	})
	require.Len(t, migs.Items, 1, "a batch of one")
	m := migs.Items[0]
	assert.Equal(t, "a", m.Spec.VMIName, "the first by name")
	assert.Contains(t, m.Annotations, v1.WorkloadUpdateMigrationAnnotation)
	assert.Regexp(t, "^kubevirt-workload-update-", m.Name)

	// a's launcher is current again (as after its migration): unlabelled,
	// uncounted.
	setComputeImage(t, podA, launcherImage)
	waitVMI(t, ns, "a", "unlabelled", func(n *v1.VirtualMachineInstance) bool {
		_, ok := n.Labels[v1.OutdatedLauncherImageLabel]
		return !ok
	})
	outdated(1)
	require.NoError(t, k8s.List(ctx, &migs, client.InNamespace(ns)))
	assert.Len(t, migs.Items, 1, "b waits for the next batch")

	// A cancelled workload-update migration still counts against its
	// interval: deleting it starts no other, for a outdated again nor for
	// b. The pass that counts a outdated (2) could create one; the pass
	// that counts 1 again runs after it ends, so the list then holds what
	// that pass did.
	require.NoError(t, k8s.Delete(ctx, &m))
	migrationsGone(t, ns)
	setComputeImage(t, podA, old)
	outdated(2)
	setComputeImage(t, podA, launcherImage)
	outdated(1)
	require.NoError(t, k8s.List(ctx, &migs, client.InNamespace(ns)))
	assert.Empty(t, migs.Items, "a cancelled migration used the batch: none until the next interval")
}

// migrationsGone waits until ns holds no migration.
func migrationsGone(t *testing.T, ns string) {
	t.Helper()
	waitFor(t, "the migrations gone", func() (bool, string) {
		l := &v1.VirtualMachineInstanceMigrationList{}
		require.NoError(t, k8s.List(context.Background(), l, client.InNamespace(ns)))
		return len(l.Items) == 0, fmt.Sprint(len(l.Items))
	})
}
