package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dvVM is the test guest (as vm.yaml, kernelBoot) with its one disk, vda,
// a DataVolume from the VM's dataVolumeTemplates cloning the DataSource
// golden (cdiDataSource) into a ReadWriteMany claim of
// hostpath-csi-shared, at the source's size, so that the VM is
// LiveMigratable.
const dvVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: dvvm
spec:
  runStrategy: Always
  dataVolumeTemplates:
  - metadata:
      name: dvvm-root
      labels: {kubevmm.io/e2e: datavolume}
    spec:
      sourceRef:
        kind: DataSource
        name: golden
      storage:
        storageClassName: hostpath-csi-shared
        accessModes: [ReadWriteMany]
  template:
    spec:
      terminationGracePeriodSeconds: 30
      domain:
        cpu:
          cores: 1
        memory:
          guest: 128Mi
        resources:
          requests:
            memory: 128Mi
        firmware:
          kernelBoot:
            kernelArgs: "console=ttyS0 reboot=k panic=-1 quiet kubevmm.mode=shell"
            container:
              image: localhost/kubevmm/test-guest:devel
              imagePullPolicy: IfNotPresent
              kernelPath: /boot/vmlinux
              initrdPath: /boot/initramfs.cpio
        devices:
          disks:
          - name: root
            disk: {bus: virtio}
      volumes:
      - name: root
        dataVolume: {name: dvvm-root}
`

// TestDataVolumeVM: a VM whose root disk is a dataVolumeTemplate cloned
// from a golden image (issue 11's must-show). The golden raw image (the
// test guest boots with kernelBoot and has no root filesystem image, so
// it is a raw disk with a header) is imported once into a DataVolume, a
// DataSource over its claim is Ready, and the VM's template has a
// sourceRef to it, its claim ReadWriteMany on hostpath-csi-shared. The VM
// is Provisioning while its DataVolume clones, the DataVolume is the VM's
// (controller reference, the template's label); the guest reads the
// golden header on vda, writes a marker, and after `virtctl restart` (a
// new VMI and launcher pod) reads both back. The VMI is LiveMigratable,
// `virtctl migrate` succeeds, the VMI runs in the target pod, and the
// guest there reads the marker and writes a second one, which reaches the
// claim's disk.img; deleting the VM deletes its DataVolume and claim. Two
// guest boots (the first and the restart's).
func TestDataVolumeVM(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-dv")
	const vm, dv = "dvvm", "dvvm-root"
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "vm,vmi,vmim,dv,pvc,datasources,pods", "-o", "wide")
			t.Logf("at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", ns, "get", "vm,vmi,vmim,dv,pvc", "-o", "yaml")
			t.Logf("VM, VMI, migrations, DataVolumes, claims at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "kubevirt", "logs", "deploy/virt-controller", "--tail=60")
			t.Logf("virt-controller:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cdi", "logs", "deploy/cdi-deployment", "--tail=60")
			t.Logf("cdi-controller:\n%s", out)
		}
	})
	out, err := run(t, "cluster/images.sh", "cdi-e2e-http")
	require.NoError(t, err, out)

	dir := t.TempDir()
	golden := make([]byte, 64<<20)
	copy(golden, "GOLDEN-IMG\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "golden.raw"), golden, 0o600))
	applyYAMLIn(t, ns, "images", fmt.Sprintf(cdiServer, dir))
	waitIn(t, ns, "pod/images", "condition=Ready", 3*time.Minute)
	url := "http://" + jsonpathIn(t, ns, "pod/images", "{.status.podIP}") + ":8080/golden.raw"
	applyYAMLIn(t, ns, "golden", fmt.Sprintf(cdiStorageDV, "golden", url, "128Mi"))
	waitIn(t, ns, "dv/golden", "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
	applyYAMLIn(t, ns, "datasource", cdiDataSource)
	waitIn(t, ns, "datasource/golden", "condition=Ready", 2*time.Minute)

	applyYAMLIn(t, ns, "vm", dvVM)
	// Read as a user would, until the VMI exists: the VM is Provisioning
	// while its DataVolume clones (the clone's pods take their time).
	var seen, phases []string
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		s := jsonpathIn(t, ns, "vm/"+vm, "{.status.printableStatus}")
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if out, err := run(t, "kubectl.sh", "-n", ns, "get", "dv", dv, "-o", "jsonpath={.status.phase}"); err == nil && (len(phases) == 0 || phases[len(phases)-1] != out) {
			phases = append(phases, out)
		}
		if out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", vm, "-o", "name"); err == nil && out != "" {
			break
		}
	}
	t.Logf("VM statuses seen: %q; DataVolume phases seen: %q", seen, phases)
	assert.Contains(t, seen, "Provisioning")
	assert.True(t, slices.Contains(phases, "CloneScheduled") || slices.Contains(phases, "CloneInProgress"), "the DataVolume clones")
	assert.Equal(t, "Succeeded", jsonpathIn(t, ns, "dv/"+dv, "{.status.phase}"), "the VMI comes once the DataVolume succeeded")

	t.Run("the DataVolume is the VM's", func(t *testing.T) {
		assert.Equal(t, "VirtualMachine/"+vm+"/true", jsonpathIn(t, ns, "dv/"+dv, "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}"))
		assert.Equal(t, "datavolume", jsonpathIn(t, ns, "dv/"+dv, `{.metadata.labels.kubevmm\.io/e2e}`))
		assert.Equal(t, "hostpath-csi-shared [\"ReadWriteMany\"]", jsonpathIn(t, ns, "pvc/"+dv, "{.spec.storageClassName} {.spec.accessModes}"))
	})

	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	uid := jsonpathIn(t, ns, "vmi/"+vm, "{.metadata.uid}")
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	// What the guest's shell computes cannot match its echoed command.
	out = consoleRunThenIn(t, ns, vm,
		"echo DV-$((6*7)) | dd of=/dev/vda bs=512 seek=8 conv=fsync 2>/dev/null && echo READ-$(dd if=/dev/vda bs=10 count=1 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-GOLDEN-IMG-END-5", "the guest reads the cloned image")

	virtctlIn(t, ns, "restart", vm)
	// The old VMI goes first: poll for the new one (kubectl wait fails on
	// a missing object).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", vm, "-o", "jsonpath={.metadata.uid}")
		if err == nil && out != "" && out != uid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new VMI after the restart; last seen: %s %v", out, err)
		}
		time.Sleep(2 * time.Second)
	}
	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	out = consoleRunThenIn(t, ns, vm,
		"echo READ-$(dd if=/dev/vda bs=10 count=1 2>/dev/null)-$(dd if=/dev/vda bs=1 skip=4096 count=5 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-GOLDEN-IMG-DV-42-END-5", "the disk kept the image and the guest's write across the restart")

	// virt-controller sets LiveMigratable once it has seen the claim.
	cond := `{.status.conditions[?(@.type=="LiveMigratable")].status} {.status.conditions[?(@.type=="LiveMigratable")].message}`
	for deadline := time.Now().Add(time.Minute); !strings.HasPrefix(jsonpathIn(t, ns, "vmi/"+vm, cond), "True") && time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
	}
	require.True(t, strings.HasPrefix(jsonpathIn(t, ns, "vmi/"+vm, cond), "True"), "LiveMigratable: %s", jsonpathIn(t, ns, "vmi/"+vm, cond))
	virtctlIn(t, ns, "migrate", vm)
	mig := strings.TrimSpace(jsonpathIn(t, ns, "vmim", "{.items[*].metadata.name}"))
	require.NotEmpty(t, mig)
	waitIn(t, ns, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	assert.Equal(t, "true", jsonpathIn(t, ns, "vmi/"+vm, "{.status.migrationState.completed}"))
	target := jsonpathIn(t, ns, "vmi/"+vm, "{.status.migrationState.targetPod}")
	require.NotEmpty(t, target)
	assert.NotEqual(t, jsonpathIn(t, ns, "vmi/"+vm, "{.status.migrationState.sourcePod}"), target)
	assert.Equal(t, "Running", jsonpathIn(t, ns, "pod/"+target, "{.status.phase}"), "the VMI runs in the target pod")
	assert.Equal(t, "Running", jsonpathIn(t, ns, "vmi/"+vm, "{.status.phase}"))

	out = consoleRunThenIn(t, ns, vm,
		"echo AFTER-$((6*7)) | dd of=/dev/vda bs=512 seek=16 conv=fsync 2>/dev/null && echo READ-$(dd if=/dev/vda bs=10 count=1 2>/dev/null)-$(dd if=/dev/vda bs=1 skip=4096 count=5 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-GOLDEN-IMG-DV-42-END-5", "the migrated guest reads the image and its marker")
	t.Run("the target's write is in the claim's disk.img", func(t *testing.T) {
		b, err := os.ReadFile(diskImageIn(t, ns, dv))
		require.NoError(t, err)
		require.Greater(t, len(b), 8192+9)
		assert.Equal(t, "AFTER-42\n", string(b[8192:8192+9]))
	})

	t.Run("deleting the VM deletes its DataVolume and claim", func(t *testing.T) {
		kubectl(t, "-n", ns, "delete", "vm/"+vm, "--wait=true", "--timeout=180s")
		kubectl(t, "-n", ns, "wait", "--for=delete", "dv/"+dv, "pvc/"+dv, "--timeout=180s")
		assert.Equal(t, "datavolume.cdi.kubevirt.io/golden", strings.TrimSpace(kubectl(t, "-n", ns, "get", "dv", "-o", "name")), "only the golden DataVolume is left")
	})
}
