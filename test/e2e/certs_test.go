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

// leafSerial is the serial number of virt-handler's certificate, as its
// Secret holds it.
func leafSerial(t *testing.T) string {
	t.Helper()
	b64 := kubectl(t, "-n", "kubevirt", "get", "secret", "virt-handler-certs", "-o", "jsonpath={.data.tls\\.crt}")
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("virt-handler-certs tls.crt: %v", err)
	}
	blk, _ := pem.Decode(der)
	if blk == nil {
		t.Fatalf("virt-handler-certs tls.crt is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("virt-handler-certs tls.crt: %v", err)
	}
	return c.SerialNumber.String()
}

// TestCertRotation: with the shortest lifetimes the operators accept (the
// serving and client certificates live 5 minutes, renewed 2 minutes
// before they expire; set on the HyperConverged CR, which passes them to
// the KubeVirt CR), virt-operator rotates the components' certificates
// twice while a console session stays open: typing on it still works
// after both, so an established session is not cut by a rotation. A
// migration then runs between handlers holding rotated certificates and
// succeeds, and a new console session (new handshakes, rotated leaves on
// both ends) works. The HyperConverged CR's certConfig is put back.
func TestCertRotation(t *testing.T) {
	freshNamespace(t)
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	// The VM's controller makes the VMI a moment after the apply.
	wait(t, "vmi/"+vmName, "create", 2*time.Minute)
	wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", 5*time.Minute)
	s := openConsole(t, vmName)
	s.until("kubevmm-guest: shell on the console", 0, 15*time.Minute)
	s.run("echo ROT-$((40+2))", "ROT-42", 2*time.Minute)

	first := leafSerial(t)
	hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"security":{"certConfig":{"server":{"duration":"5m","renewBefore":"2m"}}}}}`)
	t.Cleanup(func() {
		hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"security":{"certConfig":{"server":null}}}}`)
	})
	// The 24-hour leaf outlives the new duration: remade at once, then
	// every 3 minutes. Bounded only to turn a hang into a failure.
	serials := []string{first}
	deadline := time.Now().Add(12 * time.Minute)
	for len(serials) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("virt-handler's certificate serials seen: %v; want two rotations", serials)
		}
		if sn := leafSerial(t); sn != serials[len(serials)-1] {
			serials = append(serials, sn)
			t.Logf("rotation %d: virt-handler's certificate serial %s", len(serials)-1, sn)
			n := len(serials)
			s.run(fmt.Sprintf("echo ROT-$((40+%d))", n), fmt.Sprintf("ROT-%d", 40+n), 2*time.Minute)
		}
		time.Sleep(5 * time.Second)
	}

	mig := filepath.Join(t.TempDir(), "vmim.yaml")
	if err := os.WriteFile(mig, []byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\n"+
		"metadata:\n  name: rotation-migration\nspec:\n  vmiName: "+vmName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", ns, "apply", "-f", mig)
	wait(t, "vmim/rotation-migration", "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	consoleRun(t, "echo AFTER-$((6*7))", "AFTER-42", 2*time.Minute)
	kubectl(t, "-n", ns, "delete", "vm", vmName, "--wait=true", "--timeout=180s")
}
