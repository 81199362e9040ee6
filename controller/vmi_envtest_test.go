package controller_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
)

func newVMI(ns, name string) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				CPU:       &v1.CPU{Cores: 2},
				Memory:    &v1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))},
				Resources: v1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
				Devices:   v1.Devices{Disks: []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{}}}}},
			},
			NodeSelector:                  map[string]string{"kubernetes.io/arch": "amd64"},
			TerminationGracePeriodSeconds: ptr.To(int64(20)),
			Volumes:                       []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:latest"}}}},
		},
	}
}

func TestVMIGetsOneLauncherPod(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	vmi := newVMI(ns, "one")
	require.NoError(t, k8s.Create(context.Background(), vmi))

	// Scheduling means the controller has seen its pod; every pass after
	// that one, including the ones racing the pod into the cache, must
	// not create another.
	vmi = waitVMI(t, ns, "one", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	pod := pods[0]

	assert.True(t, strings.HasPrefix(pod.Name, "virt-launcher-one-"), pod.Name)
	assert.Len(t, pod.Name, len("virt-launcher-one-")+5, "random 5-character suffix")
	assert.Equal(t, "virt-launcher", pod.Labels["kubevirt.io"])
	assert.Equal(t, string(vmi.UID), pod.Labels[v1.CreatedByLabel])
	assert.Equal(t, "one", pod.Labels["app"], "VMI labels reach the pod (Services)")
	assert.True(t, metav1.IsControlledBy(&pod, vmi))
	assert.Equal(t, map[string]string{"kubernetes.io/arch": "amd64", controller.NodeSchedulableLabel: "true"}, pod.Spec.NodeSelector)
	assert.Equal(t, ptr.To(int64(20+controller.LauncherGraceMargin)), pod.Spec.TerminationGracePeriodSeconds)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)

	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	assert.Equal(t, "compute", c.Name)
	assert.Equal(t, launcherImage, c.Image)
	one := resource.MustParse("1")
	for _, r := range []corev1.ResourceName{v1.KVMResource, v1.TunResource, v1.UserfaultfdResource} {
		assert.Equal(t, one.Value(), ptr.To(c.Resources.Limits[r]).Value(), "limit %s", r)
		assert.Equal(t, one.Value(), ptr.To(c.Resources.Requests[r]).Value(), "request %s", r)
	}
	mem := c.Resources.Requests[corev1.ResourceMemory]
	guest := resource.MustParse("1Gi")
	assert.Greater(t, mem.Value(), guest.Value(), "guest memory plus overhead")
	assert.Equal(t, "250m", ptr.To(c.Resources.Requests[corev1.ResourceCPU]).String())

	for _, v := range pod.Spec.Volumes {
		assert.Nil(t, v.HostPath, "no host path: %s", v.Name)
	}

	// The launcher's copy of the VMI.
	var got v1.VirtualMachineInstance
	require.NoError(t, json.Unmarshal([]byte(pod.Annotations[controller.VMIAnnotation]), &got))
	assert.Equal(t, vmi.UID, got.UID)
	assert.Equal(t, vmi.Spec, got.Spec)

	// More passes still leave one pod. Each pod status change below is
	// mirrored onto the VMI, so each wait proves a full pass that saw the pod.
	for _, msg := range []string{"0/1 nodes are available: first", "0/1 nodes are available: second"} {
		setPodStatus(t, &pod, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
		})
		waitVMI(t, ns, "one", "to mirror "+msg, func(n *v1.VirtualMachineInstance) bool {
			c := n.GetCondition(v1.VirtualMachineInstancePodScheduled)
			return c != nil && c.Message == msg
		})
		assert.Len(t, launcherPods(t, vmi), 1)
	}
}

func TestVMIScheduledWhenPodBound(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	require.NoError(t, k8s.Create(context.Background(), newVMI(ns, "sched")))
	vmi := waitVMI(t, ns, "sched", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pod := waitOnePod(t, vmi)

	// The scheduler cannot place it yet: the VMI says why.
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient devices.kubevirt.io/kvm."}}
	})
	waitVMI(t, ns, "sched", "to show PodScheduled=False", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstancePodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "Insufficient devices.kubevirt.io/kvm")
	})

	bindPod(t, pod, "node01")
	vmi = waitVMI(t, ns, "sched", "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })
	assert.Equal(t, "node01", vmi.Status.NodeName)
	assert.Equal(t, "node01", vmi.Labels[v1.NodeNameLabel])
	assert.Equal(t, "node01", vmi.Status.ActivePods[pod.UID])
	var phases []v1.VirtualMachineInstancePhase
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, p.Phase)
	}
	assert.Equal(t, []v1.VirtualMachineInstancePhase{v1.Pending, v1.Scheduling, v1.Scheduled}, phases)
}

func TestVMIFailsWhenPodFailsBeforeHandler(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	require.NoError(t, k8s.Create(context.Background(), newVMI(ns, "podfail")))
	vmi := waitVMI(t, ns, "podfail", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pod := waitOnePod(t, vmi)
	bindPod(t, pod, "node01")
	waitVMI(t, ns, "podfail", "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })

	setPodStatus(t, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed })
	waitVMI(t, ns, "podfail", "to be Failed", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Failed })
	// The ended pod is kept (its logs say why), not replaced.
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	assert.Nil(t, pods[0].DeletionTimestamp)
}

func TestVMIDeletionRemovesPod(t *testing.T) {
	needEnv(t)
	tests := []struct {
		name string
		// bound: the pod is on a node, so its deletion is graceful and the
		// kubelet must confirm it.
		bound bool
		// running: virt-handler reported the guest running; it gets to stop
		// it (the VMI turns Succeeded) before the pod goes.
		running bool
	}{
		{name: "unscheduled pod"},
		{name: "scheduled pod", bound: true},
		{name: "running guest", bound: true, running: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			ctx := context.Background()
			require.NoError(t, k8s.Create(ctx, newVMI(ns, "del")))
			vmi := waitVMI(t, ns, "del", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
			pod := waitOnePod(t, vmi)
			assert.Contains(t, vmi.Finalizers, v1.VirtualMachineInstanceFinalizer)
			if tc.bound {
				bindPod(t, pod, "node01")
				vmi = waitVMI(t, ns, "del", "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })
			}
			if tc.running {
				setVMIPhase(t, vmi, v1.Running)
			}

			require.NoError(t, k8s.Delete(ctx, vmi))
			if tc.running {
				// virt-handler's graceful stop ends with the VMI final.
				waitVMI(t, ns, "del", "to be marked for deletion", func(n *v1.VirtualMachineInstance) bool { return n.DeletionTimestamp != nil })
				setVMIPhase(t, vmi, v1.Succeeded)
			}
			if tc.bound {
				finishPodDeletion(t, pod)
			}
			waitFor(t, "launcher pod to be gone", func() (bool, string) {
				err := get(t, ns, pod.Name, &corev1.Pod{})
				return apierrors.IsNotFound(err), "pod still there"
			})
			waitVMIGone(t, ns, "del")
		})
	}
}

// readManifest reads a KubeVirt manifest as the API server would get it
// from `kubectl apply`: unstructured, unchanged.
func readManifest(t *testing.T, path, ns string) *unstructured.Unstructured {
	t.Helper()
	y, err := os.ReadFile(path)
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(y, &u.Object))
	u.SetNamespace(ns)
	return u
}

// TestKubeVirtManifestsAccepted: KubeVirt manifests are stored unchanged by
// the CRD schemas (strict field validation, as kubectl does by default),
// including KubeVirt fields we do not implement, which admission must see to
// refuse by name; a field KubeVirt does not have is refused by the schema.
func TestKubeVirtManifestsAccepted(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	strict := client.WithFieldValidation(k8s, metav1.FieldValidationStrict)

	for _, path := range []string{"../api/core/v1/testdata/vm-fedora.yaml", "../api/core/v1/testdata/vmi-unmodeled.yaml"} {
		t.Run(path, func(t *testing.T) {
			in := readManifest(t, path, ns)
			want, _, err := unstructured.NestedMap(in.Object, "spec")
			require.NoError(t, err)
			require.NoError(t, strict.Create(ctx, in), "a KubeVirt manifest is accepted as-is")

			out := &unstructured.Unstructured{}
			out.SetGroupVersionKind(in.GroupVersionKind())
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(in), out))
			got, _, err := unstructured.NestedMap(out.Object, "spec")
			require.NoError(t, err)
			// Compared as JSON: the typed numbers differ (float64/int64).
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			gotJSON, err := json.Marshal(got)
			require.NoError(t, err)
			assert.JSONEq(t, string(wantJSON), string(gotJSON), "nothing pruned")
		})
	}

	bad := readManifest(t, "../api/core/v1/testdata/vmi-unmodeled.yaml", ns)
	bad.SetName("typo")
	require.NoError(t, unstructured.SetNestedField(bad.Object, "x", "spec", "domain", "devicez"))
	err := strict.Create(ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "spec.domain.devicez"`)
}

// VMIs with autoattachVSOCK get cluster-unique vsock CIDs (3 and up)
// before their launcher pods exist, and the launcher's copy of the VMI
// carries it (the launcher gives the guest that CID); a VMI without gets
// none.
func TestVMIVsockCID(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	for _, name := range []string{"vsock-a", "vsock-b", "plain"} {
		vmi := newVMI(ns, name)
		if name != "plain" {
			vmi.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(true)
		}
		require.NoError(t, k8s.Create(context.Background(), vmi))
	}
	cids := map[uint32]string{}
	for _, name := range []string{"vsock-a", "vsock-b", "plain"} {
		vmi := waitVMI(t, ns, name, "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
		pods := launcherPods(t, vmi)
		require.Len(t, pods, 1)
		var got v1.VirtualMachineInstance
		require.NoError(t, json.Unmarshal([]byte(pods[0].Annotations[controller.VMIAnnotation]), &got))
		assert.Equal(t, vmi.Status.VSOCKCID, got.Status.VSOCKCID, "%s: the launcher's copy has the CID", name)
		if name == "plain" {
			assert.Nil(t, vmi.Status.VSOCKCID, "no autoattachVSOCK, no CID")
			continue
		}
		require.NotNil(t, vmi.Status.VSOCKCID, name)
		cid := *vmi.Status.VSOCKCID
		assert.GreaterOrEqual(t, cid, uint32(3), "0-2 are not guests' CIDs")
		assert.Empty(t, cids[cid], "%s has the CID of %s", name, cids[cid])
		cids[cid] = name
	}
}
