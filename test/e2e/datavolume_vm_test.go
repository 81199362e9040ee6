package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dvVM is the test guest (as vm.yaml, kernelBoot) with its one disk, vda,
// a DataVolume from the VM's dataVolumeTemplates importing %q over HTTP.
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
      source:
        http:
          url: %q
      storage:
        resources:
          requests:
            storage: 128Mi
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
            kernelArgs: "console=ttyS0 reboot=k panic=-1 kubevmm.mode=shell"
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

// TestDataVolumeVM: a VM whose disk is a dataVolumeTemplate importing a
// "golden" raw image over HTTP (the test guest boots with kernelBoot and
// has no root filesystem image, so the golden image is a raw disk with a
// header). The VM is Provisioning while the DataVolume imports, the
// DataVolume is the VM's (controller reference, the template's label);
// the guest reads the imported header on vda, writes a marker, and after
// `virtctl restart` (a new VMI and launcher pod) reads both back; deleting
// the VM deletes its DataVolume and claim. Clone sources are not built
// yet, so the image is imported rather than cloned. Two guest boots.
func TestDataVolumeVM(t *testing.T) {
	freshNamespace(t)
	const vm, dv = "dvvm", "dvvm-root"
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "vm,dv,pvc", "-o", "yaml")
			t.Logf("VM, DataVolume, claim at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "kubevirt", "logs", "deploy/virt-controller", "--tail=60")
			t.Logf("virt-controller:\n%s", out)
		}
	})
	out, err := run(t, "cluster/images.sh", "cdi-e2e-http")
	require.NoError(t, err, out)

	dir := t.TempDir()
	golden := make([]byte, 64<<20)
	copy(golden, "GOLDEN-IMG\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "golden.raw"), golden, 0o600))
	applyYAML(t, "images", fmt.Sprintf(cdiServer, dir))
	wait(t, "pod/images", "condition=Ready", 3*time.Minute)
	url := "http://" + jsonpath(t, "pod/images", "{.status.podIP}") + ":8080/golden.raw"

	applyYAML(t, "vm", fmt.Sprintf(dvVM, url))
	// Read as a user would, until the VMI exists: the VM is Provisioning
	// before (the importer pod takes its time to start).
	var seen []string
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		s := jsonpath(t, "vm/"+vm, "{.status.printableStatus}")
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", vm, "-o", "name"); err == nil && out != "" {
			break
		}
	}
	t.Logf("VM statuses seen: %q", seen)
	assert.Contains(t, seen, "Provisioning")
	assert.Equal(t, "Succeeded", jsonpath(t, "dv/"+dv, "{.status.phase}"), "the VMI comes once the DataVolume succeeded")

	t.Run("the DataVolume is the VM's", func(t *testing.T) {
		assert.Equal(t, "VirtualMachine/"+vm+"/true", jsonpath(t, "dv/"+dv, "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}"))
		assert.Equal(t, "datavolume", jsonpath(t, "dv/"+dv, `{.metadata.labels.kubevmm\.io/e2e}`))
	})

	wait(t, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	uid := jsonpath(t, "vmi/"+vm, "{.metadata.uid}")
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	// What the guest's shell computes cannot match its echoed command.
	out = consoleRunThenIn(t, ns, vm,
		"echo DV-$((6*7)) | dd of=/dev/vda bs=512 seek=8 conv=fsync 2>/dev/null && echo READ-$(dd if=/dev/vda bs=10 count=1 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-GOLDEN-IMG-END-5", "the guest reads the imported image")

	virtctl(t, "restart", vm)
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
	wait(t, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	out = consoleRunThenIn(t, ns, vm,
		"echo READ-$(dd if=/dev/vda bs=10 count=1 2>/dev/null)-$(dd if=/dev/vda bs=1 skip=4096 count=5 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-GOLDEN-IMG-DV-42-END-5", "the disk kept the image and the guest's write across the restart")

	t.Run("deleting the VM deletes its DataVolume and claim", func(t *testing.T) {
		kubectl(t, "-n", ns, "delete", "vm/"+vm, "--wait=true", "--timeout=180s")
		kubectl(t, "-n", ns, "wait", "--for=delete", "dv/"+dv, "pvc/"+dv, "--timeout=180s")
		assert.Empty(t, strings.TrimSpace(kubectl(t, "-n", ns, "get", "dv", "-o", "name")))
	})
}
