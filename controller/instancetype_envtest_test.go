package controller_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// restartVMI ends the VM's running VMI as a guest poweroff would, and
// returns its replacement (run strategy Always).
func restartVMI(t *testing.T, ns, name string) *v1.VirtualMachineInstance {
	t.Helper()
	vmi := waitVMI(t, ns, name, "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	setVMIPhase(t, vmi, v1.Running)
	setVMIPhase(t, vmi, v1.Succeeded)
	return waitVMI(t, ns, name, "to be replaced", func(n *v1.VirtualMachineInstance) bool { return n.UID != vmi.UID })
}

func TestVMInstancetypeRevisions(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()

	// Namespaced kinds, so that parallel tests don't share them.
	it := &v1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: ns},
		Spec: v1beta1.VirtualMachineInstancetypeSpec{
			CPU:    v1beta1.CPUInstancetype{Guest: 2},
			Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("512Mi")},
		},
	}
	require.NoError(t, k8s.Create(ctx, it))
	pref := &v1beta1.VirtualMachinePreference{
		ObjectMeta: metav1.ObjectMeta{Name: "linux", Namespace: ns},
		Spec: v1beta1.VirtualMachinePreferenceSpec{
			Devices:                                &v1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusSATA, PreferredRng: &v1.Rng{}},
			PreferredTerminationGracePeriodSeconds: ptr.To[int64](180),
		},
	}
	require.NoError(t, k8s.Create(ctx, pref))

	vm := newVM(ns, "sized", v1.RunStrategyAlways)
	vm.Spec.Template.Spec.Domain.Resources = v1.ResourceRequirements{}
	vm.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus = ""
	vm.Spec.Instancetype = &v1.InstancetypeMatcher{Kind: "VirtualMachineInstancetype", Name: "small"}
	vm.Spec.Preference = &v1.PreferenceMatcher{Kind: "virtualmachinepreference", Name: "linux"}
	require.NoError(t, k8s.Create(ctx, vm))

	vmi := waitVMI(t, ns, "sized", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	assert.Equal(t, &v1.CPU{Sockets: 1, Cores: 2, Threads: 1}, vmi.Spec.Domain.CPU)
	assert.Equal(t, "512Mi", vmi.Spec.Domain.Memory.Guest.String())
	assert.Equal(t, v1.DiskBusSATA, vmi.Spec.Domain.Devices.Disks[0].Disk.Bus, "the preferred bus where the VM names none")
	assert.NotNil(t, vmi.Spec.Domain.Devices.Rng)
	assert.Equal(t, ptr.To[int64](180), vmi.Spec.TerminationGracePeriodSeconds)
	assert.Equal(t, "small", vmi.Annotations["kubevirt.io/instancetype-name"])
	assert.Equal(t, "linux", vmi.Annotations["kubevirt.io/preference-name"])

	// The type and preference were captured, owned by the VM.
	require.NoError(t, get(t, ns, "sized", vm))
	require.NotEmpty(t, vm.Spec.Instancetype.RevisionName)
	require.NotEmpty(t, vm.Spec.Preference.RevisionName)
	require.NoError(t, get(t, ns, "small", it))
	assert.Equal(t, "sized-small-v1beta1-"+string(it.UID)+"-1", vm.Spec.Instancetype.RevisionName)
	rev := &appsv1.ControllerRevision{}
	require.NoError(t, get(t, ns, vm.Spec.Instancetype.RevisionName, rev))
	assert.True(t, metav1.IsControlledBy(rev, vm))
	assert.Equal(t, map[string]string{
		"instancetype.kubevirt.io/object-generation": "1", "instancetype.kubevirt.io/object-kind": "VirtualMachineInstancetype",
		"instancetype.kubevirt.io/object-name": "small", "instancetype.kubevirt.io/object-uid": string(it.UID),
		"instancetype.kubevirt.io/object-version": "v1beta1",
	}, rev.Labels)
	firstRev := vm.Spec.Instancetype.RevisionName

	// Editing the type changes neither the VM's revision nor its next VMI.
	orig := it.DeepCopy()
	it.Spec.CPU.Guest = 4
	require.NoError(t, k8s.Patch(ctx, it, client.MergeFrom(orig)))
	vmi = restartVMI(t, ns, "sized")
	assert.Equal(t, uint32(2), vmi.Spec.Domain.CPU.Cores, "the captured revision, not the edited type")

	// Clearing revisionName captures the type as it is now.
	require.NoError(t, get(t, ns, "sized", vm))
	orig2 := vm.DeepCopy()
	vm.Spec.Instancetype.RevisionName = ""
	require.NoError(t, k8s.Patch(ctx, vm, client.MergeFrom(orig2)))
	vmi = restartVMI(t, ns, "sized")
	assert.Equal(t, uint32(4), vmi.Spec.Domain.CPU.Cores)
	require.NoError(t, get(t, ns, "sized", vm))
	assert.NotEqual(t, firstRev, vm.Spec.Instancetype.RevisionName)
	assert.Contains(t, vm.Spec.Instancetype.RevisionName, "-2", "generation 2 of the type")
}

func TestVMMissingInstancetype(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	vm := newVM(ns, "unsized", v1.RunStrategyAlways)
	vm.Spec.Template.Spec.Domain.Resources = v1.ResourceRequirements{}
	vm.Spec.Instancetype = &v1.InstancetypeMatcher{Name: "no-such-type"}
	require.NoError(t, k8s.Create(context.Background(), vm))
	vm = waitVM(t, ns, "unsized", "to report the missing type", func(vm *v1.VirtualMachine) bool {
		c := vm.GetCondition(v1.VirtualMachineFailure)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	assert.Contains(t, vm.GetCondition(v1.VirtualMachineFailure).Message, `VirtualMachineClusterInstancetype "no-such-type"`)
	assert.False(t, vm.Status.Created, "no VMI without its instance type")
}
