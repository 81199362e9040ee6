package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
)

// attachmentPodsOf lists the VMI's attachment pods not being deleted, by
// the claims they mount.
func attachmentPodsOf(t *testing.T, vmi *v1.VirtualMachineInstance) map[string]*corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(vmi.Namespace),
		client.MatchingLabels{v1.AppLabel: controller.HotplugLabelValue, controller.HotplugVMILabel: vmi.Name}))
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		var claims []string
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, v.PersistentVolumeClaim.ClaimName)
			}
		}
		slices.Sort(claims)
		out[fmt.Sprint(claims)] = p
	}
	return out
}

// hotplug changes the VMI's spec as virt-api's addvolume/removevolume do.
func hotplug(t *testing.T, ns, name string, mutate func(*v1.VirtualMachineInstanceSpec) error) {
	t.Helper()
	waitFor(t, "changing the VMI's volumes", func() (bool, string) {
		cur := &v1.VirtualMachineInstance{}
		if err := get(t, ns, name, cur); err != nil {
			return false, err.Error()
		}
		orig := cur.DeepCopy()
		require.NoError(t, mutate(&cur.Spec))
		if err := k8s.Patch(context.Background(), cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func addClaim(name string) func(*v1.VirtualMachineInstanceSpec) error {
	return func(s *v1.VirtualMachineInstanceSpec) error {
		return s.AddHotplugVolume(&v1.AddVolumeOptions{
			Name:         name,
			Disk:         &v1.Disk{DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "scsi"}}},
			VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name, Hotpluggable: true}},
		})
	}
}

func volumeStatus(vmi *v1.VirtualMachineInstance) map[string]v1.VolumeStatus {
	out := map[string]v1.VolumeStatus{}
	for _, s := range vmi.Status.VolumeStatus {
		out[s.Name] = s
	}
	return out
}

// A running VMI's hot-plugged claims get one attachment pod on its node,
// owned by the launcher pod; the volumes go Pending -> AttachedToNode
// when it runs; a changed set gets a new pod and the old one goes once
// the new one runs; with no hot-plugged volume left, no pod and no
// volumeStatus.
func TestHotplugAttachmentPods(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	for _, name := range []string{"data", "more"} {
		require.NoError(t, k8s.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}))
	}
	require.NoError(t, k8s.Create(ctx, newVMI(ns, "hp")))
	vmi := waitVMI(t, ns, "hp", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	launcher := waitOnePod(t, vmi)
	bindPod(t, launcher, "node01")
	vmi = waitVMI(t, ns, "hp", "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })
	setPodStatus(t, launcher, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	setVMIPhase(t, vmi, v1.Running)

	hotplug(t, ns, "hp", addClaim("data"))
	hotplug(t, ns, "hp", addClaim("absent"))
	var first *corev1.Pod
	waitFor(t, "an attachment pod for data", func() (bool, string) {
		first = attachmentPodsOf(t, vmi)["[data]"]
		return first != nil, fmt.Sprint(slices.Collect(maps.Keys(attachmentPodsOf(t, vmi))))
	})
	require.NotNil(t, metav1.GetControllerOf(first))
	assert.Equal(t, launcher.UID, metav1.GetControllerOf(first).UID, "owned by the launcher pod")
	assert.Equal(t, []string{"node01"}, first.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values)
	assert.Equal(t, []string{"wait"}, first.Spec.Containers[0].Args)
	vmi = waitVMI(t, ns, "hp", "data Pending on its pod", func(n *v1.VirtualMachineInstance) bool {
		s := volumeStatus(n)["data"]
		return s.Phase == v1.VolumePending && s.HotplugVolume != nil && s.HotplugVolume.AttachPodName == first.Name
	})
	absent := volumeStatus(vmi)["absent"]
	assert.Equal(t, v1.VolumePending, absent.Phase)
	assert.Contains(t, absent.Message, "does not exist")
	assert.Nil(t, absent.HotplugVolume)

	setPodStatus(t, first, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	waitVMI(t, ns, "hp", "data AttachedToNode", func(n *v1.VirtualMachineInstance) bool {
		return volumeStatus(n)["data"].Phase == v1.HotplugVolumeAttachedToNode
	})

	// A second volume: a new pod with both, the first kept until it runs.
	hotplug(t, ns, "hp", addClaim("more"))
	var second *corev1.Pod
	waitFor(t, "an attachment pod for data and more", func() (bool, string) {
		second = attachmentPodsOf(t, vmi)["[data more]"]
		return second != nil, fmt.Sprint(slices.Collect(maps.Keys(attachmentPodsOf(t, vmi))))
	})
	assert.NotNil(t, attachmentPodsOf(t, vmi)["[data]"], "the old pod stays until the new one runs")
	setPodStatus(t, second, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	waitFor(t, "the old attachment pod to go", func() (bool, string) {
		pods := attachmentPodsOf(t, vmi)
		return len(pods) == 1 && pods["[data more]"] != nil, fmt.Sprint(slices.Collect(maps.Keys(pods)))
	})
	waitVMI(t, ns, "hp", "both AttachedToNode on the new pod", func(n *v1.VirtualMachineInstance) bool {
		st := volumeStatus(n)
		return st["data"].Phase == v1.HotplugVolumeAttachedToNode && st["more"].Phase == v1.HotplugVolumeAttachedToNode &&
			st["data"].HotplugVolume.AttachPodUID == second.UID
	})

	for _, name := range []string{"data", "more", "absent"} {
		hotplug(t, ns, "hp", func(s *v1.VirtualMachineInstanceSpec) error { return s.RemoveHotplugVolume(name) })
	}
	waitFor(t, "no attachment pod", func() (bool, string) {
		pods := attachmentPodsOf(t, vmi)
		return len(pods) == 0, fmt.Sprint(slices.Collect(maps.Keys(pods)))
	})
	waitVMI(t, ns, "hp", "no volumeStatus", func(n *v1.VirtualMachineInstance) bool { return len(n.Status.VolumeStatus) == 0 })
}
