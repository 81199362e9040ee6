package controller_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/launcher/spec"
)

// The migration controller's part of a live migration, with the test
// playing the scheduler, the kubelet and virt-handler (as elsewhere in
// these tests): the target pod it creates, the handoff once that pod runs,
// and the two ways a migration ends early (its target pod fails, the user
// deletes it), after which the source must be exactly as before.

// runningVMI creates a live-migratable VMI (its containerDisk is read-only,
// so both ends can have the image) and brings it to Running on node01 with
// its launcher pod running: what virt-handler reports for a booted guest.
func runningVMI(t *testing.T, ns, name string) (*v1.VirtualMachineInstance, *corev1.Pod) {
	t.Helper()
	vmi := newVMI(ns, name)
	vmi.Spec.Domain.Devices.Disks[0].Disk.ReadOnly = true
	// Kernel boot: our VMM's (firmware boot is QEMU's, which does not
	// migrate).
	vmi.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
		Image: "kernels:1", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initrd"}}}
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
// no namespace controller to remove it with its namespace).
func createMigration(t *testing.T, m *v1.VirtualMachineInstanceMigration) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), m))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), m) })
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
			// Its own sockets, inside the VMI's directory.
			assert.Equal(t, controller.SocketRootDir+"/"+string(vmi.UID)+"/"+spec.MigrationSocketSubdir(string(m.UID)), spec.PodSocketDir(target))
			c := target.Spec.Containers[0]
			var incoming string
			for _, e := range c.Env {
				if e.Name == spec.IncomingEnv {
					incoming = e.Value
				}
			}
			assert.Equal(t, fmt.Sprintf("tcp:0.0.0.0:%d", spec.MigrationPort), incoming, "the launcher receives instead of booting")
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
			m = waitMigration(t, ns, "mig-job", "to be Scheduled", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduled })
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

// TestMigrationCancelledByDeletion: deleting a migration in flight cancels
// it: its target pod goes, then the migration itself (its finalizer held
// it for that clean-up); the source is untouched.
func TestMigrationCancelledByDeletion(t *testing.T) {
	needEnv(t)
	withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: []string{controller.FeatureGateSameNodeLiveMigration}}})
	ns := namespace(t)
	vmi, source := runningVMI(t, ns, "cx")
	createMigration(t, newMigration(ns, "cx-job", "cx"))
	m := waitMigration(t, ns, "cx-job", "to be Scheduling", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationScheduling })
	target := waitTargetPod(t, m)
	bindPod(t, target, "node01")
	setPodStatus(t, target, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning; s.PodIP = "10.200.0.11" })
	waitMigration(t, ns, "cx-job", "to be PreparingTarget", func(m *v1.VirtualMachineInstanceMigration) bool { return m.Status.Phase == v1.MigrationPreparingTarget })

	require.NoError(t, k8s.Delete(context.Background(), m))
	waitFor(t, "the target pod to go", func() (bool, string) { return podGoneOrGoing(t, target) })
	waitFor(t, "the migration to be gone", func() (bool, string) {
		cur := &v1.VirtualMachineInstanceMigration{}
		err := get(t, ns, "cx-job", cur)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("err=%v finalizers=%v phase=%s", err, cur.Finalizers, cur.Status.Phase)
	})
	cur := waitVMI(t, ns, "cx", "to record the cancelled migration", func(n *v1.VirtualMachineInstance) bool {
		ms := n.Status.MigrationState
		return ms != nil && ms.MigrationUID == m.UID && ms.Failed && n.Labels[v1.MigrationTargetNodeNameLabel] == ""
	})
	assert.Contains(t, cur.Status.MigrationState.FailureReason, "deleted before it ended")
	sourceUntouched(t, vmi, source)
}
