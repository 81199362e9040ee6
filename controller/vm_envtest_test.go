package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func newVM(ns, name string, strategy v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	return &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: v1.VirtualMachineInstanceSpec{
					Domain: v1.DomainSpec{
						Resources: v1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
						Devices:   v1.Devices{Disks: []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
					},
					Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:latest"}}}},
				},
			},
		},
	}
}

func TestVMAlwaysCreatesVMIAndLauncherPod(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()

	start := time.Now()
	vm := newVM(ns, "always", v1.RunStrategyAlways)
	require.NoError(t, k8s.Create(ctx, vm))

	vmi := waitVMI(t, ns, "always", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	vmiLatency := time.Since(start)
	pod := waitOnePod(t, vmi)
	// Measured, not asserted: observed by 20 ms polling, so +-20 ms.
	t.Logf("latency: VM create -> VMI observed %v, -> launcher pod observed %v", vmiLatency, time.Since(start))

	// Events as KubeVirt's, visible to `kubectl describe` (core/v1 Events).
	waitEvent(t, ns, "VirtualMachine", "always", "SuccessfulCreate", "Started the virtual machine by creating the new virtual machine instance always")
	waitEvent(t, ns, "VirtualMachineInstance", "always", "SuccessfulCreate", "Created virtual machine pod "+pod.Name)

	assert.True(t, metav1.IsControlledBy(vmi, vm), "the VM controls its VMI")
	assert.Contains(t, vmi.Finalizers, v1.VirtualMachineControllerFinalizer)
	assert.Equal(t, "always", vmi.Labels["app"], "template labels are copied")
	assert.Equal(t, vm.Spec.Template.Spec.Volumes, vmi.Spec.Volumes)

	vm = waitVM(t, ns, "always", "to report Starting", func(vm *v1.VirtualMachine) bool {
		return vm.Status.Created && vm.Status.PrintableStatus == v1.VirtualMachineStatusStarting
	})
	assert.Contains(t, vm.Finalizers, v1.VirtualMachineControllerFinalizer)
	ready := vm.GetCondition(v1.VirtualMachineReady)
	require.NotNil(t, ready)
	assert.Equal(t, corev1.ConditionFalse, ready.Status)
	assert.Equal(t, v1.RunStrategyAlways, vm.Status.RunStrategy)

	// Playing virt-handler, which takes over once the VMI is scheduled:
	// the guest runs and the launcher is ready.
	waitVMI(t, ns, "always", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	setVMIPhase(t, vmi, v1.Running)
	bindPod(t, pod, "node01")
	setPodStatus(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
	waitVM(t, ns, "always", "to report Running and ready", func(vm *v1.VirtualMachine) bool {
		c := vm.GetCondition(v1.VirtualMachineReady)
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusRunning && vm.Status.Ready && c != nil && c.Status == corev1.ConditionTrue
	})

	// A VMI that fails under Always is replaced (its bound pod's graceful
	// deletion needs the kubelet's confirmation).
	setVMIPhase(t, vmi, v1.Failed)
	finishPodDeletion(t, pod)
	waitVMI(t, ns, "always", "to be replaced", func(n *v1.VirtualMachineInstance) bool { return n.UID != vmi.UID })
}

func TestVMHaltedRemovesVMI(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	vm := newVM(ns, "halt", v1.RunStrategyAlways)
	require.NoError(t, k8s.Create(ctx, vm))
	vmi := waitVMI(t, ns, "halt", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	waitOnePod(t, vmi)

	require.NoError(t, get(t, ns, "halt", vm))
	orig := vm.DeepCopy()
	vm.Spec.RunStrategy = ptr.To(v1.RunStrategyHalted)
	require.NoError(t, k8s.Patch(ctx, vm, client.MergeFrom(orig)))

	waitVMIGone(t, ns, "halt")
	waitFor(t, "launcher pod to be gone", func() (bool, string) { return len(launcherPods(t, vmi)) == 0, "pod still there" })
	vm = waitVM(t, ns, "halt", "to report Stopped", func(vm *v1.VirtualMachine) bool {
		return !vm.Status.Created && vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped
	})
	assert.Equal(t, v1.RunStrategyHalted, vm.Status.RunStrategy)

	// And running: true brings it back (the older on/off switch).
	require.NoError(t, get(t, ns, "halt", vm))
	orig = vm.DeepCopy()
	vm.Spec.RunStrategy = nil
	vm.Spec.Running = ptr.To(true)
	require.NoError(t, k8s.Patch(ctx, vm, client.MergeFrom(orig)))
	waitVMI(t, ns, "halt", "to exist again", func(n *v1.VirtualMachineInstance) bool { return n.UID != vmi.UID })
}

// TestRunStrategiesOnVMIEnd: what each run strategy does when the VMI's
// guest ends (virt-handler writes Succeeded or Failed).
func TestRunStrategiesOnVMIEnd(t *testing.T) {
	needEnv(t)
	tests := []struct {
		name      string
		strategy  v1.VirtualMachineRunStrategy
		end       v1.VirtualMachineInstancePhase
		restarted bool
		// gone: the ended VMI is deleted (and not replaced).
		gone bool
	}{
		{name: "RerunOnFailure restarts a failed VMI", strategy: v1.RunStrategyRerunOnFailure, end: v1.Failed, restarted: true},
		{name: "RerunOnFailure does not restart a succeeded VMI", strategy: v1.RunStrategyRerunOnFailure, end: v1.Succeeded, gone: true},
		{name: "Once does not restart a failed VMI", strategy: v1.RunStrategyOnce, end: v1.Failed},
		{name: "Always restarts a succeeded VMI", strategy: v1.RunStrategyAlways, end: v1.Succeeded, restarted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			require.NoError(t, k8s.Create(context.Background(), newVM(ns, "vm", tc.strategy)))
			// virt-handler's part starts once the launcher pod exists.
			vmi := waitVMI(t, ns, "vm", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
			// The guest ran, then ended: not a crash loop, no backoff.
			setVMIPhase(t, vmi, v1.Running)
			setVMIPhase(t, vmi, tc.end)

			switch {
			case tc.restarted:
				n := waitVMI(t, ns, "vm", "to be replaced", func(n *v1.VirtualMachineInstance) bool { return n.UID != vmi.UID })
				assert.NotEqual(t, tc.end, n.Status.Phase)
				vm := waitVM(t, ns, "vm", "to have no pending requests", func(vm *v1.VirtualMachine) bool {
					return vm.Status.Created && len(vm.Status.StateChangeRequests) == 0
				})
				assert.Nil(t, vm.Status.StartFailure)
			case tc.gone:
				waitVMIGone(t, ns, "vm")
				waitVM(t, ns, "vm", "to report Stopped", func(vm *v1.VirtualMachine) bool {
					return !vm.Status.Created && vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped
				})
				err := get(t, ns, "vm", &v1.VirtualMachineInstance{})
				assert.True(t, apierrors.IsNotFound(err), "no new VMI: %v", err)
			default:
				// The VM controller records the end and then releases its
				// finalizer on the VMI; that pass also decided not to restart.
				waitVMI(t, ns, "vm", "to be released by the VM controller", func(n *v1.VirtualMachineInstance) bool {
					for _, f := range n.Finalizers {
						if f == v1.VirtualMachineControllerFinalizer {
							return false
						}
					}
					return true
				})
				vm := waitVM(t, ns, "vm", "to report Stopped", func(vm *v1.VirtualMachine) bool {
					return vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped
				})
				assert.True(t, vm.Status.Created, "the ended VMI stays")
				cur := &v1.VirtualMachineInstance{}
				require.NoError(t, get(t, ns, "vm", cur))
				assert.Equal(t, vmi.UID, cur.UID, "not restarted")
				assert.Equal(t, tc.end, cur.Status.Phase)
			}
		})
	}
}

func TestVMStateChangeRequests(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, newVM(ns, "manual", v1.RunStrategyManual)))
	vm := waitVM(t, ns, "manual", "to report Stopped", func(vm *v1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped
	})
	assert.False(t, vm.Status.Created, "Manual starts nothing on its own")

	// What virt-api's start subresource will do: queue a Start request.
	addRequest := func(r ...v1.VirtualMachineStateChangeRequest) {
		patchVMStatus(t, ns, "manual", "queueing a state change request", func(s *v1.VirtualMachineStatus) {
			s.StateChangeRequests = append(s.StateChangeRequests, r...)
		})
	}
	addRequest(v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	first := waitVMI(t, ns, "manual", "to be started", func(*v1.VirtualMachineInstance) bool { return true })
	waitVM(t, ns, "manual", "to consume the start request", func(vm *v1.VirtualMachine) bool {
		return vm.Status.Created && len(vm.Status.StateChangeRequests) == 0
	})

	// Restart = Stop(this VMI) + Start.
	uid := first.UID
	addRequest(v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}, v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	waitVMI(t, ns, "manual", "to be restarted", func(n *v1.VirtualMachineInstance) bool { return n.UID != uid })
	waitVM(t, ns, "manual", "to consume both requests", func(vm *v1.VirtualMachine) bool {
		return vm.Status.Created && len(vm.Status.StateChangeRequests) == 0
	})

	// Stop of the current VMI.
	cur := &v1.VirtualMachineInstance{}
	require.NoError(t, get(t, ns, "manual", cur))
	uid = cur.UID
	addRequest(v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid})
	waitVMIGone(t, ns, "manual")
	waitVM(t, ns, "manual", "to report Stopped", func(vm *v1.VirtualMachine) bool {
		return !vm.Status.Created && vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped && len(vm.Status.StateChangeRequests) == 0
	})
}

func TestVMDeletionStopsVMI(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	vm := newVM(ns, "del", v1.RunStrategyAlways)
	require.NoError(t, k8s.Create(ctx, vm))
	vmi := waitVMI(t, ns, "del", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	pod := waitOnePod(t, vmi)
	// A scheduled pod: its deletion is graceful, so the kubelet (us) must
	// confirm it.
	bindPod(t, pod, "node01")
	waitVMI(t, ns, "del", "to be Scheduled", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduled })

	require.NoError(t, get(t, ns, "del", vm))
	require.NoError(t, k8s.Delete(ctx, vm))
	finishPodDeletion(t, pod)
	waitVMIGone(t, ns, "del")
	waitFor(t, "VM to be gone", func() (bool, string) {
		err := get(t, ns, "del", &v1.VirtualMachine{})
		return apierrors.IsNotFound(err), "VM still there"
	})
}

func TestVMNotOwningVMI(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	// A VMI of the same name that the VM does not own must be left alone.
	standalone := newVM(ns, "x", v1.RunStrategyAlways).Spec.Template
	require.NoError(t, k8s.Create(ctx, &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "clash", Namespace: ns}, Spec: standalone.Spec,
	}))
	require.NoError(t, k8s.Create(ctx, newVM(ns, "clash", v1.RunStrategyHalted)))
	vm := waitVM(t, ns, "clash", "to report the clash", func(vm *v1.VirtualMachine) bool {
		c := vm.GetCondition(v1.VirtualMachineFailure)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	assert.Contains(t, vm.GetCondition(v1.VirtualMachineFailure).Message, "not controlled by this VirtualMachine")
	vmi := &v1.VirtualMachineInstance{}
	require.NoError(t, get(t, ns, "clash", vmi))
	assert.Nil(t, vmi.DeletionTimestamp, "Halted did not delete a VMI it does not own")
	assert.Empty(t, vmi.OwnerReferences)
}
