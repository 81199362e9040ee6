package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

const agentNS = "kubevmm-e2e-agent"

// TestGuestAgent: the test guest's agent (over vsock) is seen by the
// cluster as KubeVirt users see qemu-ga: `kubectl get vmi -o yaml` shows
// status.guestOSInfo, the AgentConnected condition and the guest's
// interface merged with the domain's (infoSource "domain, guest-agent");
// `virtctl guestosinfo`, `userlist` and `fslist` answer; and `virtctl
// stop` shuts the guest down through the agent, which the guest logs on
// its console before it powers off within its grace period.
func TestGuestAgent(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	k := func(args ...string) string {
		t.Helper()
		return kubectl(t, append([]string{"-n", agentNS}, args...)...)
	}
	vc := func(args ...string) string {
		t.Helper()
		out, err := run(t, "virtctl.sh", append([]string{"-n", agentNS}, args...)...)
		if err != nil {
			t.Fatalf("virtctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	kubectl(t, "delete", "namespace", agentNS, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", agentNS)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", agentNS, "get", "vm,vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", agentNS, "logs", "-l", "kubevirt.io=virt-launcher", "--tail=40", "--prefix")
			t.Logf("launchers:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", agentNS, "--wait=true", "--timeout=180s")
	})

	t0 := time.Now()
	k("apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	k("wait", "vmi/"+vmName, "--for=create", "--timeout=120s")
	k("wait", "vmi/"+vmName, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	// The guest boots (minutes here), /init starts the agent, the
	// launcher's poller finds it, virt-handler writes the status.
	k("wait", "vmi/"+vmName, "--for=condition=AgentConnected", "--timeout=900s")
	t.Logf("MEASURED apply -> AgentConnected: %v", time.Since(t0).Round(time.Second))

	var vmi v1.VirtualMachineInstance
	out := k("get", "vmi", vmName, "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &vmi); err != nil {
		t.Fatalf("kubectl get vmi -o yaml: %v\n%s", err, out)
	}
	t.Logf("status.guestOSInfo: %+v", vmi.Status.GuestOSInfo)
	if got := vmi.Status.GuestOSInfo.PrettyName; got != "kubevmm test guest (busybox)" {
		t.Errorf("guestOSInfo.prettyName %q, want the test guest's os-release", got)
	}
	if vmi.Status.GuestOSInfo.KernelRelease == "" || vmi.Status.GuestOSInfo.Machine != "x86_64" {
		t.Errorf("guestOSInfo lacks uname's fields: %+v", vmi.Status.GuestOSInfo)
	}
	if c := vmi.GetCondition(v1.VirtualMachineInstanceAgentConnected); c == nil || c.Status != "True" {
		t.Errorf("AgentConnected: %+v", c)
	}
	found := false
	for _, i := range vmi.Status.Interfaces {
		t.Logf("interface %+v", i)
		if strings.Contains(i.InfoSource, "guest-agent") {
			found = true
			if i.Name != "default" || i.InterfaceName != "eth0" || i.InfoSource != "domain, guest-agent" {
				t.Errorf("the guest's NIC is not merged with the domain's: %+v", i)
			}
		}
	}
	if !found {
		t.Errorf("no interface with infoSource guest-agent in:\n%s", out)
	}

	var info v1.VirtualMachineInstanceGuestAgentInfo
	out = vc("guestosinfo", vmName)
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("virtctl guestosinfo: %v\n%s", err, out)
	}
	if info.OS.PrettyName != "kubevmm test guest (busybox)" || info.GAVersion == "" || len(info.SupportedCommands) == 0 {
		t.Errorf("virtctl guestosinfo:\n%s", out)
	}
	var users v1.VirtualMachineInstanceGuestOSUserList
	if out = vc("userlist", vmName); json.Unmarshal([]byte(out), &users) != nil {
		t.Errorf("virtctl userlist:\n%s", out)
	}
	var fss v1.VirtualMachineInstanceFileSystemList
	if out = vc("fslist", vmName); json.Unmarshal([]byte(out), &fss) != nil {
		t.Errorf("virtctl fslist:\n%s", out)
	}

	// Stop: the agent's guest-shutdown (not the power button) ends the
	// guest; attached to the console, its lines are seen.
	var tStop time.Time
	con := consoleRunThenIn(t, agentNS, vmName, "echo AGENT-$((6*7))", "AGENT-42", func() {
		tStop = time.Now()
		vc("stop", vmName)
	}, "kubevmm-guest: shutdown requested", 3*time.Minute)
	if !strings.Contains(con, "kubevmm-agent: guest-shutdown mode=powerdown") {
		t.Errorf("the console lacks the agent's shutdown line:\n%s", con)
	}
	k("wait", "vmi/"+vmName, "--for=delete", "--timeout=180s")
	t.Logf("MEASURED virtctl stop -> VMI gone: %v", time.Since(tStop).Round(time.Millisecond))
	ev := k("get", "events", "--field-selector", "involvedObject.kind=VirtualMachineInstance,involvedObject.name="+vmName,
		"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
	t.Logf("events:\n%s", ev)
	if !strings.Contains(ev, "Asked the guest agent to shut the guest down") || !strings.Contains(ev, "The guest ended: shutdown") {
		t.Errorf("the guest did not shut down through its agent within its grace period:\n%s", ev)
	}
}
