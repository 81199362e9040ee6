package controller_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
)

// A VM's addvolume/removevolume requests (as virt-api records them) reach
// its template and its running VMI, and are dropped once applied; the
// hot-plug needs no restart.
func TestVMVolumeRequests(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	vm := newVM(ns, "hot", v1.RunStrategyAlways)
	require.NoError(t, k8s.Create(ctx, vm))
	vmi := waitVMI(t, ns, "hot", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	pod := waitOnePod(t, vmi)
	setVMIPhase(t, vmi, v1.Running)

	request := func(r v1.VirtualMachineVolumeRequest) {
		patchVMStatus(t, ns, "hot", "recording a volume request", func(s *v1.VirtualMachineStatus) {
			s.VolumeRequests = append(s.VolumeRequests, r)
		})
	}
	hasData := func(s *v1.VirtualMachineInstanceSpec) bool {
		return slices.ContainsFunc(s.Volumes, func(v v1.Volume) bool { return v.Name == "data" && v.IsHotplug() }) &&
			slices.ContainsFunc(s.Domain.Devices.Disks, func(d v1.Disk) bool {
				return d.Name == "data" && d.Disk != nil && d.Disk.Bus == v1.DiskBusSCSI
			})
	}

	request(v1.VirtualMachineVolumeRequest{AddVolumeOptions: &v1.AddVolumeOptions{
		Name:         "data",
		Disk:         &v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
		VolumeSource: &v1.HotplugVolumeSource{DataVolume: &v1.DataVolumeSource{Name: "data", Hotpluggable: true}},
	}})
	waitVMI(t, ns, "hot", "to hold the hot-plugged volume", func(n *v1.VirtualMachineInstance) bool { return hasData(&n.Spec) })
	vm = waitVM(t, ns, "hot", "to persist the volume and drop the request", func(vm *v1.VirtualMachine) bool {
		return hasData(&vm.Spec.Template.Spec) && len(vm.Status.VolumeRequests) == 0
	})
	assert.Nil(t, vm.GetCondition(v1.VirtualMachineRestartRequired), "a hot-plugged volume needs no restart")
	require.NoError(t, get(t, ns, "hot", vmi))
	assert.Equal(t, vm.Status.DesiredGeneration, vm.Status.ObservedGeneration)

	// The launcher pod is the one the VMI started with: no claim mounted
	// for the hot-plugged volume.
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	assert.Equal(t, pod.UID, pods[0].UID)

	request(v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: &v1.RemoveVolumeOptions{Name: "data"}})
	waitVMI(t, ns, "hot", "to lose the hot-plugged volume", func(n *v1.VirtualMachineInstance) bool { return !hasData(&n.Spec) })
	vm = waitVM(t, ns, "hot", "to drop the volume and the request", func(vm *v1.VirtualMachine) bool {
		return !hasData(&vm.Spec.Template.Spec) && len(vm.Status.VolumeRequests) == 0
	})
	assert.Nil(t, vm.GetCondition(v1.VirtualMachineRestartRequired))
}

// A VM whose template kept hotpluggable volumes (addvolume --persist)
// starts without waiting for them, and its VMI gets a launcher pod
// without them: their claims are not mounted there, nor given to the
// launcher to boot from.
func TestLauncherPodWithoutHotplugVolumes(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	vm := newVM(ns, "persisted", v1.RunStrategyAlways)
	require.NoError(t, vm.Spec.Template.Spec.AddHotplugVolume(&v1.AddVolumeOptions{
		Name:         "data",
		Disk:         &v1.Disk{DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{}}},
		VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "absent", Hotpluggable: true}},
	}))
	require.NoError(t, vm.Spec.Template.Spec.AddHotplugVolume(&v1.AddVolumeOptions{
		Name:         "dv",
		Disk:         &v1.Disk{DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{}}},
		VolumeSource: &v1.HotplugVolumeSource{DataVolume: &v1.DataVolumeSource{Name: "absent-dv", Hotpluggable: true}},
	}))
	require.NoError(t, k8s.Create(ctx, vm))
	vmi := waitVMI(t, ns, "persisted", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	pod := waitOnePod(t, vmi) // the claim and the DataVolume do not even exist: nothing waits for them
	for _, v := range pod.Spec.Volumes {
		assert.NotEqual(t, "data", v.Name)
	}
	var boot v1.VirtualMachineInstance
	require.NoError(t, json.Unmarshal([]byte(pod.Annotations[controller.VMIAnnotation]), &boot))
	assert.Equal(t, vm.Spec.Template.Spec.WithoutHotplugVolumes().Volumes, boot.Spec.Volumes, "the launcher boots without it")
	assert.Len(t, vmi.Spec.Volumes, 3, "the VMI holds them")
}
