package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWindowsClassVMI applies the domain of KubeVirt's vmi-windows.yaml
// (clock and timers, Hyper-V, TPM, EFI secure boot with SMM; see
// testdata/vmi-windows-kubevirt.yaml for the one change, its disk) and
// waits for it to run on the launcher's QEMU, with swtpm beside it.
func TestWindowsClassVMI(t *testing.T) {
	freshNamespace(t)

	const name = "vmi-windows"
	t0 := time.Now()
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-windows-kubevirt.yaml"))
	wait(t, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)
	t.Logf("MEASURED kubectl apply -> vmi-windows Running on QEMU: %v", time.Since(t0).Round(time.Millisecond))
	if got := jsonpath(t, "vmi/"+name, "{.metadata.annotations.kubevmm\\.io/active-backend}"); got != "qemu" {
		t.Fatalf("active backend %q, want qemu", got)
	}
	t.Logf("backend reason: %s", jsonpath(t, "vmi/"+name, "{.metadata.annotations.kubevmm\\.io/active-backend-reason}"))

	uid := jsonpath(t, "vmi/"+name, "{.metadata.uid}")
	podUID := strings.TrimSpace(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.uid}"))
	if podUID == "" || strings.Contains(podUID, " ") {
		t.Fatalf("want one launcher pod of VMI %s, got UIDs %q", name, podUID)
	}
	if pids := podProcesses(podUID, "swtpm"); len(pids) != 1 {
		t.Errorf("want one swtpm process (the TPM) in pod %s, got %v", podUID, pids)
	}
	kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=true", "--timeout=120s")
}

// TestKubeVirtExamplesAdmitted: the webhooks admit KubeVirt's
// cloudInitNoCloud examples that kubevmm runs, as they are (their images
// swapped for the dev cluster's), and its registry-DataVolume example;
// README "KubeVirt manifests" lists the others and the field each is
// refused for. Bad input is refused through the API server naming the
// field: a quantity that is none (the CRD's schema: the mutating webhooks
// let an object they cannot decode through to it) and two disks of one
// name (virt-api).
func TestKubeVirtExamplesAdmitted(t *testing.T) {
	freshNamespace(t)
	for _, f := range []string{"kubevirt-vm-cirros.yaml", "kubevirt-vm-cirros-sata.yaml", "kubevirt-vm-priorityclass.yaml", "kubevirt-vmi-fedora.yaml", "kubevirt-vm-alpine-datavolume.yaml"} {
		out := kubectl(t, "-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(repo, "test/e2e/testdata", f))
		t.Logf("%s: %s", f, strings.TrimSpace(out))
	}
	for _, tc := range []struct{ kind, spec, want string }{
		{"VirtualMachine", `{"runStrategy":"Halted","template":{"spec":{"domain":{"devices":{},"resources":{"requests":{"memory":"lots"}}}}}}`,
			`spec.template.spec.domain.resources.requests.memory: Invalid value: "lots"`},
		{"VirtualMachineInstance", `{"domain":{"memory":{"guest":"lots"},"devices":{}}}`,
			`spec.domain.memory.guest: Invalid value: "lots"`},
		{"VirtualMachineInstance", `{"domain":{"memory":{"guest":"64Mi"},"devices":{"disks":[{"name":"d"},{"name":"d"}]}},"volumes":[{"name":"d","emptyDisk":{"capacity":"1Mi"}}]}`,
			`spec.domain.devices.disks[1].name: Duplicate value: "d"`},
	} {
		f := filepath.Join(t.TempDir(), "bad.json")
		require.NoError(t, os.WriteFile(f, []byte(`{"apiVersion":"kubevirt.io/v1","kind":"`+tc.kind+`","metadata":{"name":"bad"},"spec":`+tc.spec+`}`), 0o600))
		out, err := run(t, "kubectl.sh", "-n", ns, "apply", "--dry-run=server", "-f", f)
		require.Error(t, err, "%s admitted: %s", tc.spec, out)
		assert.Contains(t, out, tc.want, "the refusal names the field")
	}
}
