package v1_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// decodeStrict decodes a manifest into out, failing on any field the Go
// types do not have: a KubeVirt manifest must be fully representable.
func decodeStrict(t *testing.T, path string, out any) []byte {
	t.Helper()
	y, err := os.ReadFile(path)
	require.NoError(t, err)
	j, err := yaml.YAMLToJSON(y)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(out), "decoding %s strictly", path)
	return j
}

// normalize drops what encoding adds on its own (null timestamps, empty
// status) so that a round trip can be compared with the manifest.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if e == nil {
				continue
			}
			n := normalize(e)
			if m, ok := n.(map[string]any); ok && len(m) == 0 && k == "status" {
				continue
			}
			out[k] = n
		}
		return out
	case []any:
		for i := range t {
			t[i] = normalize(t[i])
		}
	}
	return v
}

func TestKubeVirtManifestRoundTrip(t *testing.T) {
	vm := &v1.VirtualMachine{}
	in := decodeStrict(t, "testdata/vm-fedora.yaml", vm)

	// Values land in the right fields.
	assert.Equal(t, ptr.To(v1.RunStrategyRerunOnFailure), vm.Spec.RunStrategy)
	spec := vm.Spec.Template.Spec
	assert.Equal(t, "kept", vm.Spec.Template.ObjectMeta.Annotations["example.com/note"])
	assert.Equal(t, uint32(2), spec.Domain.CPU.Cores)
	assert.Equal(t, resource.MustParse("2Gi"), *spec.Domain.Memory.Guest)
	assert.Equal(t, resource.MustParse("500m"), spec.Domain.Resources.Requests[corev1.ResourceCPU])
	assert.Equal(t, "q35", spec.Domain.Machine.Type)
	assert.Equal(t, ptr.To(uint32(8191)), spec.Domain.Features.Hyperv.Spinlocks.Retries)
	assert.Equal(t, "/boot/vmlinuz", spec.Domain.Firmware.KernelBoot.Container.KernelPath)
	assert.Equal(t, "console=ttyS0", spec.Domain.Firmware.KernelBoot.KernelArgs)
	disks := spec.Domain.Devices.Disks
	require.Len(t, disks, 6)
	assert.Equal(t, ptr.To(uint(1)), disks[0].BootOrder)
	assert.Equal(t, v1.DiskBusVirtio, disks[0].Disk.Bus)
	assert.Equal(t, v1.DiskBusSATA, disks[1].Disk.Bus)
	assert.Equal(t, "DATA01", disks[1].Serial)
	assert.Equal(t, v1.DiskBusSATA, disks[2].CDRom.Bus)
	assert.Equal(t, v1.DiskBusSCSI, disks[5].LUN.Bus)
	ifs := spec.Domain.Devices.Interfaces
	require.Len(t, ifs, 2)
	assert.NotNil(t, ifs[0].Masquerade)
	assert.Equal(t, int32(22), ifs[0].Ports[0].Port)
	assert.NotNil(t, ifs[1].Bridge)
	assert.Equal(t, "02:00:00:00:00:01", ifs[1].MacAddress)
	assert.NotNil(t, spec.Networks[0].Pod)
	assert.Equal(t, "default/br1", spec.Networks[1].Multus.NetworkName)
	vols := spec.Volumes
	assert.Equal(t, "/disk/fedora.qcow2", vols[0].ContainerDisk.Path)
	assert.Equal(t, "fedora-data", vols[1].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, "fedora-iso", vols[2].DataVolume.Name)
	assert.Contains(t, vols[3].CloudInitNoCloud.UserData, "#cloud-config")
	assert.Equal(t, resource.MustParse("2Gi"), vols[4].EmptyDisk.Capacity)
	assert.True(t, vols[5].PersistentVolumeClaim.ReadOnly)
	assert.Equal(t, ptr.To(int64(60)), spec.TerminationGracePeriodSeconds)
	assert.Equal(t, ptr.To(v1.EvictionStrategyLiveMigrate), spec.EvictionStrategy)
	assert.Empty(t, v1.UnmodeledFields(&spec), "the manifest uses only modelled fields")

	// And encode back to the same JSON: the tags are KubeVirt's.
	out, err := json.Marshal(vm)
	require.NoError(t, err)
	var want, got any
	require.NoError(t, json.Unmarshal(in, &want))
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, normalize(want), normalize(got))
}

func TestUnmodeledFieldsNamed(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	decodeStrict(t, "testdata/vmi-unmodeled.yaml", vmi)
	assert.ElementsMatch(t, []string{
		"livenessProbe",
		"domain.chassis",
		"domain.devices.watchdog",
		"domain.devices.gpus[0]",
	}, v1.UnmodeledFields(&vmi.Spec))

	// The raw JSON is kept, so admission can quote it back.
	assert.JSONEq(t, `{"name":"gpu1","deviceName":"nvidia.com/TU104GL_Tesla_T4"}`, string(vmi.Spec.Domain.Devices.GPUs[0].Raw))
}

func TestRunStrategy(t *testing.T) {
	always, halted := v1.RunStrategyAlways, v1.RunStrategyManual
	tests := []struct {
		name    string
		spec    v1.VirtualMachineSpec
		want    v1.VirtualMachineRunStrategy
		wantErr bool
	}{
		{name: "neither set means halted", want: v1.RunStrategyHalted},
		{name: "running true", spec: v1.VirtualMachineSpec{Running: ptr.To(true)}, want: v1.RunStrategyAlways},
		{name: "running false", spec: v1.VirtualMachineSpec{Running: ptr.To(false)}, want: v1.RunStrategyHalted},
		{name: "runStrategy", spec: v1.VirtualMachineSpec{RunStrategy: &halted}, want: v1.RunStrategyManual},
		{name: "both is an error", spec: v1.VirtualMachineSpec{Running: ptr.To(true), RunStrategy: &always}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &v1.VirtualMachine{Spec: tc.spec}
			got, err := vm.RunStrategy()
			if tc.wantErr {
				assert.ErrorIs(t, err, v1.ErrRunningAndRunStrategy)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDeepCopyIndependent(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	decodeStrict(t, "testdata/vmi-unmodeled.yaml", vmi)
	cp := vmi.DeepCopy()
	cp.Spec.Domain.Devices.GPUs[0].Raw[2] = 'X'
	cp.Spec.Volumes[0].ContainerDisk.Image = "changed"
	assert.Equal(t, "quay.io/containerdisks/cirros:latest", vmi.Spec.Volumes[0].ContainerDisk.Image)
	assert.JSONEq(t, `{"name":"gpu1","deviceName":"nvidia.com/TU104GL_Tesla_T4"}`, string(vmi.Spec.Domain.Devices.GPUs[0].Raw))
}

// A KubeVirt CR as users write it: what the Go type declares decodes, the
// rest is named (nested, in lists, scalars too); zero values are not.
func TestUnknownFields(t *testing.T) {
	raw := []byte(`{
	  "imageTag": "",
	  "configuration": {
	    "evictionStrategy": "LiveMigrate",
	    "developerConfiguration": {"featureGates": ["Snapshot"], "useEmulation": true, "logVerbosity": {}},
	    "migrations": {"bandwidthPerMigration": "64Mi", "unsafeMigrationOverride": false}
	  },
	  "customizeComponents": {"patches": [{"resourceName": "virt-api", "resourceType": "Deployment", "patch": "{}", "type": "merge", "extra": 1}]}
	}`)
	var spec v1.KubeVirtSpec
	require.NoError(t, json.Unmarshal(raw, &spec))
	got, err := v1.UnknownFields(raw, spec)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"configuration.developerConfiguration.useEmulation",
		"configuration.evictionStrategy",
		"customizeComponents.patches[0].extra",
	}, got)

	_, err = v1.UnknownFields([]byte(`{`), spec)
	assert.Error(t, err)
}
