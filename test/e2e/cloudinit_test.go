package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCloudInit boots the test guest with a cloud-init disk of each kind,
// both at once (each boot costs minutes here): NoCloud with inline user
// data and spec.hostname, ConfigDrive with user data from a Secret and an
// SSH key Secret. The guest's /init applies the user data (a file written,
// then printed by runcmd) and the metadata's hostname, and says so on its
// console, which is read through virtctl as a user would.
func TestCloudInit(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	const cins = "kubevmm-e2e-cloudinit"
	kc := func(args ...string) string { return kubectl(t, append([]string{"-n", cins}, args...)...) }
	kubectl(t, "delete", "namespace", cins, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", cins)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", cins, "get", "vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", cins, "logs", "-l", "kubevirt.io=virt-launcher", "--tail=30", "--prefix")
			t.Logf("launchers:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", cins, "--wait=true", "--timeout=180s")
	})

	kc("create", "secret", "generic", "ci-userdata", "--from-literal=userdata=#cloud-config\n"+
		"write_files:\n  - path: /etc/kubevmm/greeting\n    content: hello from a Secret on a ConfigDrive\n"+
		"runcmd:\n  - cat /etc/kubevmm/greeting; echo\n")
	kc("create", "secret", "generic", "ci-ssh-keys", "--from-literal=key1=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2e e2e@kubevmm")
	t0 := time.Now()
	for _, f := range []string{"vmi-cloudinit-nocloud.yaml", "vmi-cloudinit-configdrive.yaml"} {
		kc("apply", "-f", filepath.Join(repo, "test/e2e/testdata", f))
	}
	for _, tc := range []struct{ vmi, hostname, content string }{
		{"ci-nocloud", "ci-nocloud-guest", "hello from cloudInitNoCloud"},
		{"ci-configdrive", "ci-configdrive", "hello from a Secret on a ConfigDrive"},
	} {
		t.Run(tc.vmi, func(t *testing.T) {
			kubectl(t, "-n", cins, "wait", "vmi/"+tc.vmi, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
			// The shell prompt line comes after every cloud-init step.
			out := consoleUntil(t, cins, tc.vmi, "kubevmm-guest: shell on the console", 10*time.Minute)
			t.Logf("%s: guest console after %v:\n%s", tc.vmi, time.Since(t0).Round(time.Second), out)
			for _, want := range []string{
				"kubevmm-guest: hostname=" + tc.hostname + "\r\n",
				"kubevmm-guest: write_files /etc/kubevmm/greeting\r\n",
				"kubevmm-guest: runcmd cat /etc/kubevmm/greeting",
				tc.content + "\r\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("the console lacks %q", want)
				}
			}
		})
	}
}
