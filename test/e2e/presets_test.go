package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// presetVMIJSON is a VMI labelled flavor=small with no cpu of its own:
// the test guest's kernel boot, a dry run only.
const presetVMIJSON = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance",
"metadata":{"name":"preset-vmi","labels":{"flavor":"small"}%s},
"spec":{"domain":{"memory":{"guest":"128Mi"},"devices":{},
"firmware":{"kernelBoot":{"kernelArgs":"console=ttyS0","container":{"image":"localhost/kubevmm/test-guest:devel","kernelPath":"/boot/vmlinux","initrdPath":"/boot/initramfs.cpio"}}}}}}`

// TestVMIPresets: KubeVirt's deprecated VirtualMachineInstancePresets are
// served. Creating one warns of the deprecation; a VMI its selector
// matches gets its settings where it has none, and the preset's
// annotation (virt-api's mutating webhook reads the presets of the VMI's
// namespace, with its own RBAC); a VMI that excludes itself does not; two
// matching presets that disagree refuse the VMI, naming both. Dry runs of
// the VMIs: no guest boots.
func TestVMIPresets(t *testing.T) {
	requireE2E(t)
	t.Parallel()
	pns := ownNamespace(t, "e2e-presets")
	dir := t.TempDir()
	write := func(name, body string) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		return f
	}
	presetYAML := func(name string, cores int) string {
		return write(name+".yaml", `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstancePreset
metadata:
  name: `+name+`
spec:
  selector:
    matchLabels:
      flavor: small
  domain:
    cpu:
      cores: `+strconv.Itoa(cores)+`
    devices: {}
`)
	}
	out, err := run(t, "kubectl.sh", "-n", pns, "create", "-f", presetYAML("small", 2))
	require.NoError(t, err, out)
	assert.Contains(t, out, "VirtualMachineInstancePresets is now deprecated", "the deprecation is said")
	assert.Contains(t, kubectl(t, "-n", pns, "get", "vmipresets"), "small", "the short name lists it")

	dryRun := func(annotations string) (*v1.VirtualMachineInstance, string, error) {
		f := write("vmi.json", fmt.Sprintf(presetVMIJSON, annotations))
		out, err := run(t, "kubectl.sh", "-n", pns, "create", "--dry-run=server", "-o", "json", "-f", f)
		if err != nil {
			return nil, out, err
		}
		vmi := &v1.VirtualMachineInstance{}
		require.NoError(t, json.Unmarshal([]byte(out), vmi), out)
		return vmi, out, nil
	}
	vmi, out, err := dryRun("")
	require.NoError(t, err, out)
	require.NotNil(t, vmi.Spec.Domain.CPU, "the preset's cpu")
	assert.Equal(t, uint32(2), vmi.Spec.Domain.CPU.Cores)
	assert.Equal(t, "kubevirt.io/v1", vmi.Annotations["virtualmachinepreset.kubevirt.io/small"])

	vmi, out, err = dryRun(`,"annotations":{"virtualmachineinstancepresets.admission.kubevirt.io/exclude":"true"}`)
	require.NoError(t, err, out)
	assert.Nil(t, vmi.Spec.Domain.CPU, "an excluded VMI gets no preset")

	out, err = run(t, "kubectl.sh", "-n", pns, "create", "-f", presetYAML("big", 4))
	require.NoError(t, err, out)
	_, out, err = dryRun("")
	require.Error(t, err, "two presets disagree on the cpu: %s", out)
	assert.Contains(t, out, `presets "big" and "small" set spec.domain.cpu differently`)
}
