package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// TestMultiQueueVMI: a 2-vCPU VMI with networkInterfaceMultiqueue and
// blockMultiQueue runs with two queue pairs on its NIC and two request
// queues on its disk, as the guest's sysfs shows on its console; it then
// migrates (the target's tap is multi-queue too) and still answers on the
// network through the new pod.
func TestMultiQueueVMI(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-multiqueue")
	const name = "mq"
	t0 := time.Now()
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-multiqueue.yaml"))
	waitIn(t, ns, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)
	out := consoleUntil(t, ns, name, "kubevmm-guest: shell on the console", 15*time.Minute)
	t.Logf("guest console after %v:\n%s", time.Since(t0).Round(time.Second), out)
	if want := "mq-net rx-0 rx-1 tx-0 tx-1 mq-blk 0 1\r\n"; !strings.Contains(out, want) {
		t.Fatalf("the console lacks %q", want)
	}
	ping := func(what string) {
		t.Helper()
		pod := strings.TrimSpace(jsonpathIn(t, ns, "pods", "{.items[*].metadata.name}"))
		if pod == "" || strings.Contains(pod, " ") {
			t.Fatalf("%s: want one launcher pod, got %q", what, pod)
		}
		ip := jsonpathIn(t, ns, "pod/"+pod, "{.status.podIP}")
		waitIn(t, ns, "vmi/"+name, "jsonpath={.status.interfaces[0].ipAddress}="+ip, 2*time.Minute)
		b, err := exec.Command(hosttools.Require(t, "ping"), "-c", "3", "-W", "10", ip).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: ping %s (the pod's IP, DNATed to the guest): %v\n%s", what, ip, err, b)
		}
		t.Logf("%s: node -> pod IP -> guest: %s", what, pingSummary(string(b)))
	}
	ping("before the migration")

	mig := filepath.Join(t.TempDir(), "vmim.yaml")
	if err := os.WriteFile(mig, []byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\n"+
		"metadata:\n  name: mq-migration\nspec:\n  vmiName: "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", ns, "apply", "-f", mig)
	waitIn(t, ns, "vmim/mq-migration", "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	if got := jsonpathIn(t, ns, "vmi/"+name, "{.status.phase} {.status.migrationState.completed}"); got != "Running true" {
		t.Fatalf("VMI phase and migration completed: %q, want Running true", got)
	}
	src := jsonpathIn(t, ns, "vmi/"+name, "{.status.migrationState.sourcePod}")
	waitIn(t, ns, "pod/"+src, "delete", 3*time.Minute)
	ping("after the migration")
	kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=true", "--timeout=120s")
}
