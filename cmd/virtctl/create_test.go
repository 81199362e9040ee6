package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

func TestCreateVM(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-n", "ns1", "create", "vm", "--name", "web", "--instancetype", "u1.small", "--preference", "virtualmachinepreference/linux",
		"--volume-containerdisk", "src:localhost:5000/img:v1,bootorder:1", "--cloud-init-user-data", "I2Nsb3VkLWNvbmZpZwo="}, nil, &out)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	vm := &v1.VirtualMachine{}
	require.NoError(t, yaml.UnmarshalStrict(out.Bytes(), vm))
	assert.Equal(t, "ns1", vm.Namespace)
	assert.Equal(t, &v1.InstancetypeMatcher{Name: "u1.small"}, vm.Spec.Instancetype)
	assert.Equal(t, &v1.PreferenceMatcher{Name: "linux", Kind: "virtualmachinepreference"}, vm.Spec.Preference)
	s := vm.Spec.Template.Spec
	assert.Nil(t, s.Domain.Memory, "the instance type sets the memory")
	require.Len(t, s.Volumes, 2)
	assert.Equal(t, "web-containerdisk-0", s.Volumes[0].Name)
	assert.Equal(t, "localhost:5000/img:v1", s.Volumes[0].ContainerDisk.Image)
	assert.Equal(t, "I2Nsb3VkLWNvbmZpZwo=", s.Volumes[1].CloudInitNoCloud.UserDataBase64)
	require.Len(t, s.Domain.Devices.Disks, 2)
	assert.Equal(t, uint(1), *s.Domain.Devices.Disks[0].BootOrder)
	assert.Equal(t, int64(180), *s.TerminationGracePeriodSeconds)
	assert.Equal(t, v1.RunStrategyAlways, *vm.Spec.RunStrategy)
}

func TestCreateTypes(t *testing.T) {
	var out bytes.Buffer
	_, err := run([]string{"create", "instancetype", "--cpu", "2", "--memory", "1Gi", "--name", "big"}, nil, &out)
	require.NoError(t, err)
	it := &v1beta1.VirtualMachineClusterInstancetype{}
	require.NoError(t, yaml.UnmarshalStrict(out.Bytes(), it))
	assert.Equal(t, v1beta1.KindClusterInstancetype, it.Kind)
	assert.Equal(t, "big", it.Name)
	assert.Equal(t, uint32(2), it.Spec.CPU.Guest)
	assert.Equal(t, "1Gi", it.Spec.Memory.Guest.String())

	out.Reset()
	_, err = run([]string{"-n", "ns1", "create", "preference", "--namespaced", "--cpu-topology", "cores"}, nil, &out)
	require.NoError(t, err)
	p := &v1beta1.VirtualMachinePreference{}
	require.NoError(t, yaml.UnmarshalStrict(out.Bytes(), p))
	assert.Equal(t, v1beta1.KindPreference, p.Kind)
	assert.Equal(t, "ns1", p.Namespace)
	assert.Regexp(t, "^preference-", p.Name)
	assert.Equal(t, v1beta1.Cores, *p.Spec.CPU.PreferredCPUTopology)

	out.Reset()
	_, err = run([]string{"create", "preference", "--machine-type", "q35", "--volume-storage-class", "local"}, nil, &out)
	require.NoError(t, err)
	cp := &v1beta1.VirtualMachineClusterPreference{}
	require.NoError(t, yaml.UnmarshalStrict(out.Bytes(), cp))
	assert.Equal(t, "q35", cp.Spec.Machine.PreferredMachineType)
	assert.Equal(t, "local", cp.Spec.Volumes.PreferredStorageClassName)
	assert.Empty(t, cp.Namespace, "cluster-scoped")
}

// Upstream's flags that ask for what create vm does anyway are taken.
func TestCreateVMUpstreamDefaults(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"create", "vm", "--name", "a", "--cloud-init", "nocloud", "--infer-instancetype=false", "--infer-preference",
		"--memory", "1Gi", "--cloud-init-user-data", "I2Nsb3VkLWNvbmZpZwo="}, nil, &out)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	vm := &v1.VirtualMachine{}
	require.NoError(t, yaml.UnmarshalStrict(out.Bytes(), vm))
	assert.Equal(t, "1Gi", vm.Spec.Template.Spec.Domain.Memory.Guest.String())
	assert.Empty(t, vm.Namespace, "no -n: no namespace")
}

func TestCreateRefuses(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"create", "vm", "--instancetype", "flavor/x"}, `invalid kind "flavor"`},
		{[]string{"create", "vm", "--instancetype", "u1.small", "--memory", "1Gi"}, "mutually exclusive"},
		{[]string{"create", "vm", "--volume-containerdisk", "name:x"}, "src must be specified"},
		{[]string{"create", "vm", "--volume-containerdisk", "src:img,size:1Gi"}, `"size:1Gi" is not one of src, name, bootorder`},
		{[]string{"create", "vm", "--volume-containerdisk", "src:img,bootorder:0"}, "greater than 0"},
		{[]string{"create", "vm", "--volume-containerdisk", "src:img,name:Bad_Name"}, `invalid name "Bad_Name"`},
		{[]string{"create", "vm", "--memory", "lots"}, "--memory"},
		{[]string{"create", "instancetype", "--cpu", "2"}, "--cpu and --memory are required"},
		{[]string{"create", "preference", "--cpu-topology", "diagonal"}, `"diagonal" is not one of`},
		{[]string{"create", "flavor"}, `unknown command "flavor" for "virtctl create"`},
		{[]string{"create", "vm", "--volume-pvc", "src:disk"}, "create vm: --volume-pvc is not supported by kubevmm's virtctl"},
		{[]string{"create", "vm", "--cloud-init", "configdrive"}, "create vm: --cloud-init is not supported by kubevmm's virtctl"},
		{[]string{"create", "instancetype", "--cpu", "2", "--memory", "1Gi", "--gpu", "name:g,devicename:d"}, "create instancetype: --gpu is not supported"},
		{[]string{"create", "vm", "extra"}, "create vm: want no argument, flags only"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			var out bytes.Buffer
			code, err := run(tc.args, nil, &out)
			require.Error(t, err)
			assert.Equal(t, 2, code)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out.String(), "nothing printed")
		})
	}
}
