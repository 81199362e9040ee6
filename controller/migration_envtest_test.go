package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/controller"
)

// The migration controller's part of a live migration, with the test
// playing the scheduler, the kubelet and virt-handler (as elsewhere in
// these tests): the target pod it creates, the handoff once that pod runs,
// and the two ways a migration ends early (its target pod fails, the user
// deletes it), after which the source must be exactly as before.

// runningVMI creates a live-migratable VMI (its containerDisk is read-only,
// so both ends can have the image) and brings it to Running on node01 with
// its launcher pod running: what virt-handler reports for a booted guest.
func runningVMI(t *testing.T, ns, name string, mutate ...func(*v1.VirtualMachineInstance)) (*v1.VirtualMachineInstance, *corev1.Pod) {
	t.Helper()
	vmi := newVMI(ns, name)
	vmi.Spec.Domain.Devices.Disks[0].Disk.ReadOnly = true
	// Kernel boot: our VMM's (firmware boot is QEMU's, which does not
	// migrate).
	vmi.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
		Image: "kernels:1", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initrd"}}}
	for _, m := range mutate {
		m(vmi)
	}
	require.NoError(t, k8s.Create(context.Background(), vmi))
	vmi = waitVMI(t, ns, name, "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pod := waitOnePod(t, vmi)
	bindPod(t, pod, "node01")
	setPodStatus(t, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning; s.PodIP = "10.200.0.10" })
	waitVMI(t, ns, name, "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })
	setVMIPhase(t, vmi, v1.Running)
	vmi = waitVMI(t, ns, name, "to be Running and migratable", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstanceIsMigratable)
		return n.Status.Phase == v1.Running && c != nil && c.Status == corev1.ConditionTrue
	})
	require.NoError(t, get(t, ns, pod.Name, pod))
	return vmi, pod
}

func newMigration(ns, name, vmi string) *v1.VirtualMachineInstanceMigration {
	return &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: vmi},
	}
}

// createMigration creates m, and deletes it after the test: a migration
// left in flight would count against the next test's limits (envtest has
// no namespace controller to remove it with its namespace). A migration
// handed to the handlers only ends by the source handler's verdict, so
// the clean-up plays that handler: it answers the abort request.
func createMigration(t *testing.T, m *v1.VirtualMachineInstanceMigration) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), m))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k8s.Delete(ctx, m)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(m), &v1.VirtualMachineInstanceMigration{}); apierrors.IsNotFound(err) {
				return
			}
			vmi := &v1.VirtualMachineInstance{}
			if err := get(t, m.Namespace, m.Spec.VMIName, vmi); err != nil {
				continue
			}
			ms := vmi.Status.MigrationState
			if ms == nil || ms.MigrationUID != m.UID || !ms.AbortRequested || ms.Failed || ms.Completed {
				continue
			}
			orig := vmi.DeepCopy()
			now := metav1.Now()
			ms.Failed, ms.FailureReason, ms.EndTimestamp, ms.AbortStatus = true, "aborted at the end of the test", &now, v1.MigrationAbortSucceeded
			_ = k8s.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		}
	})
}

func waitMigration(t *testing.T, ns, name, what string, cond func(*v1.VirtualMachineInstanceMigration) bool) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	m := &v1.VirtualMachineInstanceMigration{}
	waitFor(t, "migration "+name+" "+what, func() (bool, string) {
		m = &v1.VirtualMachineInstanceMigration{}
		if err := get(t, ns, name, m); err != nil {
			return false, err.Error()
		}
		return cond(m), fmt.Sprintf("phase=%q state=%+v", m.Status.Phase, m.Status.MigrationState)
	})
	return m
}

// waitTargetPod waits for the migration's one target pod.
func waitTargetPod(t *testing.T, m *v1.VirtualMachineInstanceMigration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "the target pod of migration "+m.Name, func() (bool, string) {
		list := &corev1.PodList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(m.Namespace), client.MatchingLabels{v1.MigrationJobLabel: string(m.UID)}); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d target pods", len(list.Items))
		}
		pod = &list.Items[0]
		return true, ""
	})
	return pod
}

// podGoneOrGoing: deleted, or being deleted (with no kubelet, a bound pod
// keeps its deletionTimestamp).
func podGoneOrGoing(t *testing.T, pod *corev1.Pod) (bool, string) {
	cur := &corev1.Pod{}
	err := get(t, pod.Namespace, pod.Name, cur)
	if apierrors.IsNotFound(err) {
		return true, ""
	}
	if err != nil {
		return false, err.Error()
	}
	return cur.DeletionTimestamp != nil, "pod " + pod.Name + " not being deleted"
}

// sourceUntouched: the VMI still runs on node01 from its one launcher pod,
// which nobody deleted.
func sourceUntouched(t *testing.T, vmi *v1.VirtualMachineInstance, source *corev1.Pod) {
	t.Helper()
	cur := &v1.VirtualMachineInstance{}
	require.NoError(t, get(t, vmi.Namespace, vmi.Name, cur))
	assert.Equal(t, v1.Running, cur.Status.Phase)
	assert.Equal(t, "node01", cur.Status.NodeName)
	assert.Equal(t, "node01", cur.Labels[v1.NodeNameLabel])
	assert.Empty(t, cur.Labels[v1.MigrationTargetNodeNameLabel], "no migration target node left on the VMI")
	sp := &corev1.Pod{}
	require.NoError(t, get(t, source.Namespace, source.Name, sp))
	assert.Nil(t, sp.DeletionTimestamp, "the source pod was deleted")
	assert.Equal(t, corev1.PodRunning, sp.Status.Phase)
	assert.Equal(t, source.UID, sp.UID)
}

func TestMigrationTargetPod(t *testing.T) {
	needEnv(t)
	for _, tc := range []struct {
		name     string
		gates    []string
		sameNode bool
	}{
		{name: "other-node", sameNode: false},
		{name: "same-node", gates: []string{controller.FeatureGateSameNodeLiveMigration}, sameNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: tc.gates}})
			ns := namespace(t)
			vmi, source := runningVMI(t, ns, "mig")
			m := newMigration(ns, "mig-job", "mig")
			m.Spec.AddedNodeSelector = map[string]string{"example.com/zone": "b"}
			createMigration(t, m)
			m = waitMigration(t, ns, "mig-job", "to be Scheduling", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduling })
			assert.Contains(t, m.Finalizers, v1.VirtualMachineInstanceMigrationFinalizer)
			target := waitTargetPod(t, m)

			// The VMI's launcher pod, marked as this migration's target.
			assert.NotEqual(t, source.Name, target.Name)
			assert.Equal(t, "virt-launcher", target.Labels[v1.AppLabel])
			assert.Equal(t, string(vmi.UID), target.Labels[v1.CreatedByLabel])
			assert.Equal(t, string(m.UID), target.Labels[v1.MigrationJobLabel])
			assert.Equal(t, "mig-job", target.Annotations[v1.MigrationJobNameAnnotation])
			assert.True(t, metav1.IsControlledBy(target, vmi), "owned by the VMI, like its source")
			assert.Equal(t, map[string]string{"kubernetes.io/arch": "amd64", controller.NodeSchedulableLabel: "true", "example.com/zone": "b"}, target.Spec.NodeSelector)
			// Its own sockets (an emptyDir of its own), its launcher the
			// source's user.
			for _, v := range target.Spec.Volumes {
				assert.Nil(t, v.HostPath, v.Name)
			}
			assert.Equal(t, source.Spec.SecurityContext.RunAsUser, target.Spec.SecurityContext.RunAsUser)
			c := target.Spec.Containers[0]
			var incoming string
			for _, e := range c.Env {
				if e.Name == vmispec.IncomingEnv {
					incoming = e.Value
				}
			}
			assert.Equal(t, "unix:"+controller.SocketRootDir+"/"+vmispec.MigrationInSocket, incoming,
				"the launcher receives instead of booting, on a socket only its handler reaches")
			if tc.sameNode {
				assert.Nil(t, target.Spec.Affinity, "with %s the target may share the source's node", controller.FeatureGateSameNodeLiveMigration)
			} else {
				require.NotNil(t, target.Spec.Affinity)
				require.NotNil(t, target.Spec.Affinity.NodeAffinity)
				req := target.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
				require.NotNil(t, req)
				require.Len(t, req.NodeSelectorTerms, 1)
				assert.Equal(t, []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node01"}}},
					req.NodeSelectorTerms[0].MatchFields, "kept off the source's node")
			}
			// Not handed to the handlers while the pod does not run.
			cur := &v1.VirtualMachineInstance{}
			require.NoError(t, get(t, ns, "mig", cur))
			assert.Nil(t, cur.Status.MigrationState)

			node := "node02"
			if tc.sameNode {
				node = "node01"
			}
			bindPod(t, target, node)
			waitMigration(t, ns, "mig-job", "to be Scheduled", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduled })
			setPodStatus(t, target, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning; s.PodIP = "10.200.0.11" })
			m = waitMigration(t, ns, "mig-job", "to be PreparingTarget", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationPreparingTarget })

			// The handoff: the VMI's migrationState names both ends.
			// (Status first, then the label: two writes.)
			cur = waitVMI(t, ns, "mig", "to carry the migration's state and target node", func(n *v1.VirtualMachineInstance) bool {
				return n.Status.MigrationState != nil && n.Labels[v1.MigrationTargetNodeNameLabel] != ""
			})
			ms := cur.Status.MigrationState
			assert.Equal(t, m.UID, ms.MigrationUID)
			assert.Equal(t, "node01", ms.SourceNode)
			assert.Equal(t, source.Name, ms.SourcePod)
			assert.Equal(t, node, ms.TargetNode)
			assert.Equal(t, target.Name, ms.TargetPod)
			require.NotNil(t, ms.MigrationConfiguration)
			assert.Equal(t, node, cur.Labels[v1.MigrationTargetNodeNameLabel])
			assert.Equal(t, v1.Running, cur.Status.Phase)
		})
	}
}

// TestMigrationFailsWhenTargetPodFails: the target pod ends before the
// guest moved. The migration fails, says why, its pod goes, and the source
// is untouched.
func TestMigrationFailsWhenTargetPodFails(t *testing.T) {
	needEnv(t)
	withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: []string{controller.FeatureGateSameNodeLiveMigration}}})
	ns := namespace(t)
	vmi, source := runningVMI(t, ns, "tf")
	createMigration(t, newMigration(ns, "tf-job", "tf"))
	m := waitMigration(t, ns, "tf-job", "to be Scheduling", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduling })
	target := waitTargetPod(t, m)
	bindPod(t, target, "node01")
	setPodStatus(t, target, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning; s.PodIP = "10.200.0.11" })
	waitMigration(t, ns, "tf-job", "to be PreparingTarget", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationPreparingTarget })

	setPodStatus(t, target, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
	})
	m = waitMigration(t, ns, "tf-job", "to be Failed", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationFailed })
	require.NotNil(t, m.Status.MigrationState)
	assert.True(t, m.Status.MigrationState.Failed)
	assert.Contains(t, m.Status.MigrationState.FailureReason, "the target pod "+target.Name+" ended before the migration started")
	assert.Contains(t, m.Status.MigrationState.FailureReason, "exit code 1")
	waitEvent(t, ns, "VirtualMachineInstanceMigration", "tf-job", controller.ReasonMigrationFailed,
		"Migration of VMI tf failed: "+m.Status.MigrationState.FailureReason)
	waitFor(t, "the failed target pod to go", func() (bool, string) { return podGoneOrGoing(t, target) })

	// The VMI records the failed attempt; its guest stays where it was.
	cur := waitVMI(t, ns, "tf", "to record the failed migration", func(n *v1.VirtualMachineInstance) bool {
		ms := n.Status.MigrationState
		return ms != nil && ms.MigrationUID == m.UID && ms.Failed && !ms.Completed && n.Labels[v1.MigrationTargetNodeNameLabel] == ""
	})
	assert.Equal(t, m.Status.MigrationState.FailureReason, cur.Status.MigrationState.FailureReason)
	sourceUntouched(t, vmi, source)
}

// writeMigrationState plays virt-handler: it changes the VMI's status
// (its migrationState) with the optimistic lock, as the handler does.
func writeMigrationState(t *testing.T, ns, name string, mutate func(*v1.VirtualMachineInstanceStatus)) {
	t.Helper()
	waitFor(t, "writing the migration state of VMI "+name, func() (bool, string) {
		cur := &v1.VirtualMachineInstance{}
		if err := get(t, ns, name, cur); err != nil {
			return false, err.Error()
		}
		if cur.Status.MigrationState == nil {
			return false, "no migrationState"
		}
		orig := cur.DeepCopy()
		mutate(&cur.Status)
		if err := k8s.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// handedOffMigration brings a migration of a running VMI (same node) to
// the handoff; with started, the test then plays both handlers up to the
// running migration (target address, start recorded).
func handedOffMigration(t *testing.T, ns, vmiName, name string, started bool) (*v1.VirtualMachineInstance, *corev1.Pod, *v1.VirtualMachineInstanceMigration, *corev1.Pod) {
	t.Helper()
	vmi, source := runningVMI(t, ns, vmiName)
	createMigration(t, newMigration(ns, name, vmiName))
	m := waitMigration(t, ns, name, "to be Scheduling", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduling })
	target := waitTargetPod(t, m)
	bindPod(t, target, "node01")
	setPodStatus(t, target, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning; s.PodIP = "10.200.0.11" })
	waitMigration(t, ns, name, "to be PreparingTarget", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationPreparingTarget })
	if started {
		writeMigrationState(t, ns, vmiName, func(st *v1.VirtualMachineInstanceStatus) {
			st.MigrationState.TargetNodeAddress = "10.200.0.11"
			now := metav1.Now()
			st.MigrationState.StartTimestamp, st.MigrationState.Mode = &now, v1.MigrationPreCopy
		})
		waitMigration(t, ns, name, "to be Running", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationRunning })
	}
	return vmi, source, m, target
}

// waitAbortRequested: deleting the migration asked the source's handler
// for an abort, and nothing else happened: the target pod (which may hold
// the guest by now) and the migration (its finalizer) stay.
func waitAbortRequested(t *testing.T, ns, vmiName, name string, target *corev1.Pod) {
	t.Helper()
	waitVMI(t, ns, vmiName, "to carry the abort request", func(n *v1.VirtualMachineInstance) bool {
		ms := n.Status.MigrationState
		return ms != nil && ms.AbortRequested && !ms.Failed && !ms.Completed
	})
	waitMigration(t, ns, name, "to say an abort was requested", func(m *v1.VirtualMachineInstanceMigration) bool {
		for _, c := range m.Status.Conditions {
			if c.Type == v1.VirtualMachineInstanceMigrationAbortRequested && c.Status == corev1.ConditionTrue {
				return c.Message == "the migration was deleted before it ended"
			}
		}
		return false
	})
	waitEvent(t, ns, "VirtualMachineInstanceMigration", name, controller.ReasonAbortRequested,
		"Migration is ready to be canceled by virt-handler: the migration was deleted before it ended")
	// Only the handler's verdict moves things on; give a wrong decision
	// time to show.
	time.Sleep(2 * time.Second)
	cur := &corev1.Pod{}
	require.NoError(t, get(t, ns, target.Name, cur))
	assert.Nil(t, cur.DeletionTimestamp, "the target pod was deleted before the source's handler said the abort worked")
	m := &v1.VirtualMachineInstanceMigration{}
	require.NoError(t, get(t, ns, name, m))
	assert.Contains(t, m.Finalizers, v1.VirtualMachineInstanceMigrationFinalizer)
	assert.NotEqual(t, v1.MigrationFailed, m.Status.Phase)
	assert.NotEqual(t, v1.MigrationSucceeded, m.Status.Phase)
	vmi := &v1.VirtualMachineInstance{}
	require.NoError(t, get(t, ns, vmiName, vmi))
	assert.False(t, vmi.Status.MigrationState.Failed, "virt-controller wrote the verdict")
}

// TestMigrationCancelledByDeletion: deleting a migration the handlers have
// been handed (before and after the source started it) only asks the
// source's handler to abort. Once it says the abort worked (failed,
// abortStatus Succeeded), the target pod goes, then the migration itself
// (its finalizer held it for that); the source is untouched.
func TestMigrationCancelledByDeletion(t *testing.T) {
	needEnv(t)
	withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: []string{controller.FeatureGateSameNodeLiveMigration}}})
	for _, tc := range []struct {
		name    string
		started bool
	}{{"handed-off", false}, {"running", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			vmi, source, m, target := handedOffMigration(t, ns, "cx", "cx-job", tc.started)

			require.NoError(t, k8s.Delete(context.Background(), m))
			waitAbortRequested(t, ns, "cx", "cx-job", target)

			// The source's handler: the VMM resumed the guest here.
			writeMigrationState(t, ns, "cx", func(st *v1.VirtualMachineInstanceStatus) {
				now := metav1.Now()
				ms := st.MigrationState
				ms.Failed, ms.FailureReason, ms.EndTimestamp = true, "the migration was aborted at virt-controller's request", &now
				ms.AbortStatus = v1.MigrationAbortSucceeded
			})
			waitFor(t, "the target pod to go", func() (bool, string) { return podGoneOrGoing(t, target) })
			waitFor(t, "the migration to be gone", func() (bool, string) {
				cur := &v1.VirtualMachineInstanceMigration{}
				err := get(t, ns, "cx-job", cur)
				if apierrors.IsNotFound(err) {
					return true, ""
				}
				return false, fmt.Sprintf("err=%v finalizers=%v phase=%s", err, cur.Finalizers, cur.Status.Phase)
			})
			waitEvent(t, ns, "VirtualMachineInstanceMigration", "cx-job", controller.ReasonMigrationFailed,
				"Migration of VMI cx failed: the migration was aborted at virt-controller's request")
			cur := waitVMI(t, ns, "cx", "to be rid of the migration's target node", func(n *v1.VirtualMachineInstance) bool {
				return n.Labels[v1.MigrationTargetNodeNameLabel] == ""
			})
			ms := cur.Status.MigrationState
			assert.Equal(t, m.UID, ms.MigrationUID)
			assert.True(t, ms.Failed)
			assert.Equal(t, v1.MigrationAbortSucceeded, ms.AbortStatus)
			sourceUntouched(t, vmi, source)
		})
	}
}

// TestMigrationAbortTooLate: the migration is deleted while it runs, and
// the source's handler answers that the target had confirmed the guest
// already (completed, abortStatus Failed). The migration then Succeeded,
// and the target pod, unmarked, is the VMI's launcher pod: deleting it
// would destroy the only copy of the guest.
func TestMigrationAbortTooLate(t *testing.T) {
	needEnv(t)
	withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: []string{controller.FeatureGateSameNodeLiveMigration}}})
	ns := namespace(t)
	_, _, m, target := handedOffMigration(t, ns, "late", "late-job", true)
	// The test's own finalizer keeps the deleted migration readable after
	// virt-controller lets go of it.
	const hold = "test.kubevmm.io/hold"
	orig := m.DeepCopy()
	m.Finalizers = append(m.Finalizers, hold)
	require.NoError(t, k8s.Patch(context.Background(), m, client.MergeFrom(orig)))
	t.Cleanup(func() {
		cur := &v1.VirtualMachineInstanceMigration{}
		if get(t, ns, "late-job", cur) == nil {
			o := cur.DeepCopy()
			controllerutil.RemoveFinalizer(cur, hold)
			_ = k8s.Patch(context.Background(), cur, client.MergeFrom(o))
		}
	})

	require.NoError(t, k8s.Delete(context.Background(), m))
	waitAbortRequested(t, ns, "late", "late-job", target)

	// The source's handler: the VMM had committed; the guest runs on the
	// target.
	writeMigrationState(t, ns, "late", func(st *v1.VirtualMachineInstanceStatus) {
		now := metav1.Now()
		st.MigrationState.Completed, st.MigrationState.EndTimestamp = true, &now
		st.MigrationState.AbortStatus = v1.MigrationAbortFailed
		st.NodeName = st.MigrationState.TargetNode
	})
	waitMigration(t, ns, "late-job", "to be Succeeded and let go", func(m *v1.VirtualMachineInstanceMigration) bool {
		return m.Status.Phase == v1.MigrationSucceeded && !controllerutil.ContainsFinalizer(m, v1.VirtualMachineInstanceMigrationFinalizer)
	})
	waitEvent(t, ns, "VirtualMachineInstanceMigration", "late-job", controller.ReasonMigrationSucceeded,
		"VMI late migrated from node node01 to pod "+target.Name+" on node node01")
	cur := &corev1.Pod{}
	require.NoError(t, get(t, ns, target.Name, cur))
	assert.Nil(t, cur.DeletionTimestamp, "the pod with the guest was deleted")
	assert.Empty(t, cur.Labels[v1.MigrationJobLabel], "still marked as a migration target")
	vmi := waitVMI(t, ns, "late", "to be rid of the migration's target node", func(n *v1.VirtualMachineInstance) bool {
		return n.Labels[v1.MigrationTargetNodeNameLabel] == ""
	})
	pods := launcherPods(t, vmi)
	ptrs := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		ptrs = append(ptrs, &pods[i])
	}
	active := vmispec.ActiveLauncherPod(vmi, ptrs)
	require.NotNil(t, active, "the VMI has no launcher pod")
	assert.Equal(t, target.Name, active.Name, "the VMI's launcher pod")
	assert.Equal(t, v1.Running, vmi.Status.Phase)
}
