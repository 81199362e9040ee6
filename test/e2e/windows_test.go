package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
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
// swapped for the dev cluster's); README "KubeVirt manifests" lists the
// others and the field each is refused for.
func TestKubeVirtExamplesAdmitted(t *testing.T) {
	freshNamespace(t)
	for _, f := range []string{"kubevirt-vm-cirros.yaml", "kubevirt-vm-cirros-sata.yaml", "kubevirt-vm-priorityclass.yaml", "kubevirt-vmi-fedora.yaml"} {
		out := kubectl(t, "-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(repo, "test/e2e/testdata", f))
		t.Logf("%s: %s", f, strings.TrimSpace(out))
	}
}
