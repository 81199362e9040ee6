package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// TestSSH boots one test guest with an SSH key Secret in its
// accessCredentials (NoCloud) and drives it as a user would: `virtctl ssh
// -i KEY root@vmi/NAME -c ...` runs a command (the native client, through
// the portforward subresource), `virtctl scp` copies a file in and back
// out unchanged, and --local-ssh runs OpenSSH's ssh with virtctl
// port-forward --stdio as its ProxyCommand.
func TestSSH(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	const sns, vmi = "kubevmm-e2e-ssh", "ssh"
	kc := func(args ...string) string { return kubectl(t, append([]string{"-n", sns}, args...)...) }
	kubectl(t, "delete", "namespace", sns, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", sns)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", sns, "get", "vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", sns, "logs", "-l", "kubevirt.io=virt-launcher", "--tail=30", "--prefix")
			t.Logf("launcher:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", sns, "--wait=true", "--timeout=180s")
	})

	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	kc("create", "secret", "generic", "ssh-keys", "--from-literal=key1="+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))+" e2e@kubevmm")
	kc("apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-ssh.yaml"))
	kc("wait", "vmi/"+vmi, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	t0 := time.Now()
	boot := consoleUntil(t, sns, vmi, "kubevmm-guest: shell on the console", 15*time.Minute)
	t.Logf("MEASURED boot to the shell: %v", time.Since(t0).Round(time.Second))
	if !strings.Contains(boot, "kubevmm-guest: ssh server") {
		t.Fatalf("the guest did not start its SSH server:\n%s", boot)
	}

	known := filepath.Join(dir, "known_hosts")
	virtctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(repo, "hack", "virtctl.sh"), append([]string{"-n", sns}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("virtctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	out := virtctl("ssh", "-i", key, "--known-hosts", known, "root@vmi/"+vmi, "-c", "echo hi; hostname")
	if out != "hi\n"+vmi+"\n" {
		t.Errorf("virtctl ssh -c 'echo hi; hostname': %q, want %q", out, "hi\n"+vmi+"\n")
	}
	if b, err := os.ReadFile(known); err != nil || !strings.HasPrefix(string(b), "vmi/"+vmi+"."+sns+" ssh-ed25519 ") {
		t.Errorf("known hosts after the first ssh: %q, %v", b, err)
	}

	data := make([]byte, 256<<10)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	in, back := filepath.Join(dir, "blob"), filepath.Join(dir, "back")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	virtctl("scp", "-i", key, "--known-hosts", known, in, "root@vmi/"+vmi+":/tmp/blob")
	virtctl("scp", "-i", key, "--known-hosts", known, "root@vmi/"+vmi+":/tmp/blob", back)
	t.Logf("MEASURED virtctl scp of %d KiB in and out: %v", len(data)>>10, time.Since(t0).Round(time.Millisecond))
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the file back from the guest differs (%d bytes, %v), want the %d sent", len(got), err, len(data))
	}
	if out := virtctl("ssh", "-i", key, "--known-hosts", known, "root@vmi/"+vmi+"."+sns, "-c", "wc -c < /tmp/blob"); strings.TrimSpace(out) != "262144" {
		t.Errorf("the guest's copy: wc -c says %q", out)
	}

	hosttools.Require(t, "ssh")
	out = virtctl("ssh", "--local-ssh", "-i", key, "--known-hosts", known, "-t", "-oStrictHostKeyChecking=accept-new", "-t", "-oBatchMode=yes",
		"root@vmi/"+vmi, "-c", "echo through OpenSSH")
	if out != "through OpenSSH\n" {
		t.Errorf("virtctl ssh --local-ssh: %q", out)
	}
}
