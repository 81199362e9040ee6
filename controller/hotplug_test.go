package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func TestPlanVolumeRequests(t *testing.T) {
	add := func(name string) v1.VirtualMachineVolumeRequest {
		return v1.VirtualMachineVolumeRequest{AddVolumeOptions: &v1.AddVolumeOptions{
			Name:         name,
			Disk:         &v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
			VolumeSource: &v1.HotplugVolumeSource{DataVolume: &v1.DataVolumeSource{Name: name, Hotpluggable: true}},
		}}
	}
	remove := func(name string) v1.VirtualMachineVolumeRequest {
		return v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: &v1.RemoveVolumeOptions{Name: name}}
	}
	boot := func() *v1.VirtualMachineInstanceSpec {
		s := &v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "i"}}}}}
		s.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
		return s
	}
	with := func(names ...string) *v1.VirtualMachineInstanceSpec {
		s := boot()
		for _, n := range names {
			require.NoError(t, s.AddHotplugVolume(add(n).AddVolumeOptions))
		}
		return s
	}
	names := func(s *v1.VirtualMachineInstanceSpec) []string {
		if s == nil {
			return nil
		}
		var out []string
		for _, v := range s.Volumes {
			out = append(out, v.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		template, vmi *v1.VirtualMachineInstanceSpec
		reqs          []v1.VirtualMachineVolumeRequest
		// the volumes of the changed specs (nil: unchanged), how many refused
		wantTemplate, wantVMI []string
		refused               int
	}{
		{name: "add to a running VM", template: boot(), vmi: boot(), reqs: []v1.VirtualMachineVolumeRequest{add("a")},
			wantTemplate: []string{"root", "a"}, wantVMI: []string{"root", "a"}},
		{name: "add to a stopped VM", template: boot(), reqs: []v1.VirtualMachineVolumeRequest{add("a")},
			wantTemplate: []string{"root", "a"}},
		{name: "done in the template, not yet in the VMI", template: with("a"), vmi: boot(), reqs: []v1.VirtualMachineVolumeRequest{add("a")},
			wantVMI: []string{"root", "a"}},
		{name: "done in both", template: with("a"), vmi: with("a"), reqs: []v1.VirtualMachineVolumeRequest{add("a")}},
		{name: "add then remove", template: boot(), vmi: boot(), reqs: []v1.VirtualMachineVolumeRequest{add("a"), remove("a")}},
		{name: "remove", template: with("a", "b"), vmi: with("a", "b"), reqs: []v1.VirtualMachineVolumeRequest{remove("a")},
			wantTemplate: []string{"root", "b"}, wantVMI: []string{"root", "b"}},
		{name: "remove done", template: boot(), vmi: boot(), reqs: []v1.VirtualMachineVolumeRequest{remove("a")}},
		{name: "remove of a boot volume is refused", template: with("a"), vmi: with("a"), reqs: []v1.VirtualMachineVolumeRequest{remove("root"), remove("a")},
			wantTemplate: []string{"root"}, wantVMI: []string{"root"}, refused: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planVolumeRequests(tc.template, tc.vmi, tc.reqs)
			assert.Equal(t, tc.wantTemplate, names(p.template))
			assert.Equal(t, tc.wantVMI, names(p.vmi))
			assert.Len(t, p.refused, tc.refused)
		})
	}
}
