package virtapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func TestDefaulted(t *testing.T) {
	in := &v1.VirtualMachineInstanceSpec{
		Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "img"}}}},
	}
	before := in.DeepCopy()
	out, err := Defaulted(in)
	require.NoError(t, err)
	assert.Equal(t, before, in, "the input is not changed")
	require.NotNil(t, out.Domain.Machine)
	assert.Equal(t, DefaultMachineType, out.Domain.Machine.Type)
	require.Len(t, out.Domain.Devices.Disks, 1, "a disk for the volume")
	assert.Equal(t, "root", out.Domain.Devices.Disks[0].Name)
	assert.Equal(t, v1.DiskBusVirtio, out.Domain.Devices.Disks[0].Disk.Bus)
	require.Len(t, out.Domain.Devices.Interfaces, 1, "the pod network's NIC")
	assert.NotNil(t, out.Domain.Devices.Interfaces[0].Masquerade)
	require.Len(t, out.Networks, 1)
	assert.NotNil(t, out.Networks[0].Pod)

	// A spec that has every default keeps what it says.
	again, err := Defaulted(out)
	require.NoError(t, err)
	assert.Equal(t, out, again)
}
