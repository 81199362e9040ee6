package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// consoleSession is a `virtctl console` kept attached: what it prints is
// collected, lines are typed into it as the test goes.
type consoleSession struct {
	t     *testing.T
	stdin io.WriteCloser
	mu    sync.Mutex
	out   bytes.Buffer
	ended chan struct{}
}

func (s *consoleSession) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(b)
}

func openConsole(t *testing.T, vmi string) *consoleSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "virtctl.sh"), "-n", ns, "console", vmi)
	s := &consoleSession{t: t, ended: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s, s
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(s.ended) }()
	t.Cleanup(func() { cancel(); <-s.ended })
	return s
}

// until waits for want in what the console printed after offset from;
// the session ending first fails the test.
func (s *consoleSession) until(want string, from int, bound time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		s.mu.Lock()
		seen := s.out.String()
		s.mu.Unlock()
		if strings.Contains(seen[min(from, len(seen)):], want) {
			return
		}
		select {
		case <-s.ended:
			s.t.Fatalf("the console session ended before %q appeared:\n%s", want, seen)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%q never appeared on the console:\n%s", want, seen)
		}
	}
}

// run types line and waits for want after it.
func (s *consoleSession) run(line, want string, bound time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	from := s.out.Len()
	s.mu.Unlock()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		s.t.Fatalf("typing on the console: %v", err)
	}
	s.until(want, from, bound)
}

// secretSerial is the serial number of the certificate (tls.crt) in
// Secret namespace/name.
func secretSerial(t *testing.T, namespace, name string) string {
	t.Helper()
	b64 := kubectl(t, "-n", namespace, "get", "secret", name, "-o", "jsonpath={.data.tls\\.crt}")
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("%s/%s tls.crt: %v", namespace, name, err)
	}
	blk, _ := pem.Decode(der)
	if blk == nil {
		t.Fatalf("%s/%s tls.crt is not PEM", namespace, name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s/%s tls.crt: %v", namespace, name, err)
	}
	return c.SerialNumber.String()
}

// servingCerts are the serving certificates each operator makes and
// rotates by the HyperConverged CR's certConfig: virt-handler's
// (virt-operator: migrations, virt-api's calls), kubemacpool's (the
// network operator), virt-template-validator's (the SSP operator) and the
// hco-webhook's (the HCO).
var servingCerts = [][2]string{
	{"kubevirt", "virt-handler-certs"},
	{"cluster-network-addons", "kubemacpool-service"},
	{"kubevirt", "virt-template-validator-certs"},
	{"kubevirt", "hyperconverged-cluster-webhook-service-cert"},
}

func serials(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, s := range servingCerts {
		out = append(out, secretSerial(t, s[0], s[1]))
	}
	return out
}

// rotateServing sets the serving certificates' lifetime in the
// HyperConverged CR's certConfig (renewed 2 minutes before they expire)
// to one shorter than what they have left, so every operator remakes its
// own at once, and waits until all have. during, if not nil, is called
// when virt-handler's has changed, before the others are waited for.
func rotateServing(t *testing.T, duration string, during func()) {
	t.Helper()
	before := serials(t)
	hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"security":{"certConfig":{"server":{"duration":"`+duration+`","renewBefore":"2m"}}}}}`)
	// Bounded only to turn a hang into a failure (the HCO looks at its
	// webhook's every 30 s; an operator whose CA is younger than its
	// secret propagation, 2 minutes, waits for it).
	deadline := time.Now().Add(6 * time.Minute)
	for i := range servingCerts {
		for secretSerial(t, servingCerts[i][0], servingCerts[i][1]) == before[i] {
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s was not renewed for certConfig.server.duration %s", servingCerts[i][0], servingCerts[i][1], duration)
			}
			time.Sleep(time.Second)
		}
		if i == 0 && during != nil {
			during()
		}
	}
	t.Logf("certConfig.server.duration %s: every serving certificate renewed: %v", duration, serials(t))
}

// admitted: after a rotation, a VM is admitted through every webhook a
// VM create passes (virt-api's, kubemacpool's, which gives its NIC a MAC,
// and virt-template-validator's, which checks the VM's
// vm.kubevirt.io/validations: one that breaks them is refused), so their
// new certificates verify (or, until the kubelet updated the pods'
// Secrets, the previous ones still do).
func admitted(t *testing.T, name string) {
	t.Helper()
	vm := func(minMemory string) string {
		return fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: %s
  annotations:
    vm.kubevirt.io/validations: '[{"name": "minimal-required-memory", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "too little memory", "min": %s}]'
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices:
          interfaces: [{name: default, masquerade: {}}]
      networks: [{name: default, pod: {}}]
`, name, minMemory)
	}
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(vm("1073741824")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "kubectl.sh", "-n", ns, "create", "-f", f); err == nil || !strings.Contains(out, "too little memory") {
		t.Fatalf("a VM breaking its validations was not refused by virt-template-validator: %v\n%s", err, out)
	}
	if err := os.WriteFile(f, []byte(vm("67108864")), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", ns, "create", "-f", f)
	if mac := jsonpath(t, "vm/"+name, "{.spec.template.spec.domain.devices.interfaces[0].macAddress}"); mac == "" {
		t.Fatalf("VM %s has no MAC from kubemacpool", name)
	}
	kubectl(t, "-n", ns, "delete", "vm", name, "--wait=true")
}

// TestCertRotation: the serving certificates of every component (set
// short on the HyperConverged CR's certConfig, which the HCO passes to
// the KubeVirt CR, the NetworkAddonsConfig and, through the KubeVirt CR,
// the SSP operator) are rotated twice while a console session stays open
// and typing on it still works, and VMs are admitted after each rotation
// through the webhooks whose certificates changed. The second rotation
// happens while a migration is Running: the guest holds tens of MiB of
// data and the migration's bandwidth is 1 MiB/s, the migration is seen
// Running before the rotation is asked for, virt-handler's certificate
// (both ends of the migration stream) is seen renewed while the
// migration is still Running, and it then succeeds; a new console session
// (new handshakes, rotated leaves on both ends) works after it.
func TestCertRotation(t *testing.T) {
	freshNamespace(t)
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	// A slow migration, and time to finish it (while the guest boots).
	liveMigrationConfig(t, map[string]any{"bandwidthPerMigration": "1Mi", "completionTimeoutPerGiB": 600}, func(m v1.MigrationConfiguration) bool {
		return m.BandwidthPerMigration != nil && m.BandwidthPerMigration.Cmp(resource.MustParse("1Mi")) == 0 &&
			m.CompletionTimeoutPerGiB != nil && *m.CompletionTimeoutPerGiB == 600
	})
	t.Cleanup(func() {
		hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"security":{"certConfig":{"server":null}}}}`)
	})
	// The VM's controller makes the VMI a moment after the apply.
	wait(t, "vmi/"+vmName, "create", 2*time.Minute)
	wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", 5*time.Minute)
	s := openConsole(t, vmName)
	s.until("kubevmm-guest: shell on the console", 0, 15*time.Minute)
	// About 35 MiB of the guest's memory that is not zero (zero pages
	// cost nothing to migrate), held by a process that stays.
	s.run(`awk 'BEGIN { for (i = 0; i < 200000; i++) a[i] = sprintf("%0120d", i); printf "FILLED-%d\n", 6*7; fflush(); system("sleep 100000") }' &`,
		"FILLED-42", 5*time.Minute)

	rotateServing(t, "10m", nil)
	s.run("echo ROT-$((40+1))", "ROT-41", 2*time.Minute)
	admitted(t, "rot-1")

	mig := filepath.Join(t.TempDir(), "vmim.yaml")
	if err := os.WriteFile(mig, []byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\n"+
		"metadata:\n  name: rotation-migration\nspec:\n  vmiName: "+vmName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", ns, "apply", "-f", mig)
	phase := func() string { return jsonpath(t, "vmim/rotation-migration", "{.status.phase}") }
	for deadline := time.Now().Add(5 * time.Minute); phase() != string(v1.MigrationRunning); time.Sleep(time.Second) {
		if p := phase(); p == string(v1.MigrationSucceeded) || p == string(v1.MigrationFailed) || time.Now().After(deadline) {
			t.Fatalf("the migration is %q, never seen Running", p)
		}
	}
	atRunning := secretSerial(t, "kubevirt", "virt-handler-certs")
	rotateServing(t, "5m", func() {
		if p := phase(); p != string(v1.MigrationRunning) {
			t.Fatalf("virt-handler's certificate was renewed with the migration %q: want it Running across the rotation", p)
		}
		t.Logf("virt-handler's certificate renewed while the migration runs")
		// The session on the source, still open, still types.
		s.run("echo ROT-$((40+2))", "ROT-42", time.Minute)
	})
	admitted(t, "rot-2")

	wait(t, "vmim/rotation-migration", "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	if atRunning == secretSerial(t, "kubevirt", "virt-handler-certs") {
		t.Fatalf("virt-handler's certificate is the same at the migration's end as when it was Running")
	}
	consoleRun(t, "echo AFTER-$((6*7))", "AFTER-42", 2*time.Minute)
	kubectl(t, "-n", ns, "delete", "vm", vmName, "--wait=true", "--timeout=180s")
}
