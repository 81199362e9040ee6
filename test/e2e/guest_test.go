package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPortForwardAndReset runs one guest (each boot costs minutes) with a
// TCP echo server that cloud-init starts at every boot, and drives it
// with virtctl as a user would: `virtctl port-forward` to the echo port
// carries bytes both ways; `virtctl soft-reboot` (through the guest agent:
// the guest reboots and boots again) shows a whole second boot on the
// console while the VMI stays Running, after which port forwarding works
// again; `virtctl reset` shows the kernel starting once more, still
// Running. `virtctl version` reports a semver server version.
func TestPortForwardAndReset(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	const gns, vmi = "kubevmm-e2e-guest", "echo"
	kc := func(args ...string) string { return kubectl(t, append([]string{"-n", gns}, args...)...) }
	vc := func(args ...string) string {
		t.Helper()
		out, err := run(t, "virtctl.sh", append([]string{"-n", gns}, args...)...)
		if err != nil {
			t.Fatalf("virtctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	kubectl(t, "delete", "namespace", gns, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", gns)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", gns, "get", "vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", gns, "logs", "-l", "kubevirt.io=virt-launcher", "--tail=40", "--prefix")
			t.Logf("launcher:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", gns, "--wait=true", "--timeout=180s")
	})

	ver := vc("version")
	if !regexp.MustCompile(`(?m)^Server Version: version\.Info\{GitVersion:"v\d+\.\d+\.\d+`).MatchString(ver) {
		t.Errorf("virtctl version: no semver server version:\n%s", ver)
	}

	kc("apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-echo.yaml"))
	kc("wait", "vmi/"+vmi, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	t0 := time.Now()
	boot := consoleUntil(t, gns, vmi, "kubevmm-guest: shell on the console", 15*time.Minute)
	t.Logf("MEASURED first boot to the shell: %v", time.Since(t0).Round(time.Second))
	if i := strings.Index(boot, "kubevmm-guest: runcmd"); i >= 0 {
		t.Logf("guest console from its runcmd on:\n%s", boot[i:])
	}
	portForwardEcho(t, gns, vmi)

	running := func(after string) {
		t.Helper()
		if p := kc("get", "vmi/"+vmi, "-o", "jsonpath={.status.phase}"); p != "Running" {
			t.Fatalf("VMI phase %q after %s, want Running", p, after)
		}
	}
	// soft-reboot: with the guest agent connected, KubeVirt's way is the
	// agent's guest-shutdown mode=reboot; the guest reboots and boots
	// again to its shell, where cloud-init starts the echo server anew.
	kc("wait", "vmi/"+vmi, "--for=condition=AgentConnected", "--timeout=300s")
	t0 = time.Now()
	out := consoleRunThenIn(t, gns, vmi, "echo SOFT-$((40+2))", "SOFT-42", func() { vc("soft-reboot", vmi) },
		"kubevmm-guest: shell on the console", 15*time.Minute)
	after := out[strings.LastIndex(out, "SOFT-42"):]
	for _, want := range []string{"kubevmm-agent: guest-shutdown mode=reboot", "kubevmm-guest: reboot requested", "Linux version", "kubevmm-guest: runcmd nc -ll -p 1234 -e cat"} {
		if !strings.Contains(after, want) {
			t.Errorf("after soft-reboot the console lacks %q:\n%s", want, after)
		}
	}
	t.Logf("MEASURED soft-reboot to the shell of the second boot: %v", time.Since(t0).Round(time.Second))
	running("soft-reboot")
	portForwardEcho(t, gns, vmi)

	// reset: the kernel starts again at once.
	consoleRunThenIn(t, gns, vmi, "echo HARD-$((40+3))", "HARD-43", func() { vc("reset", vmi) }, "Linux version", 5*time.Minute)
	running("reset")
	if ev := kc("get", "events", "--field-selector", "involvedObject.name="+vmi+",reason=Stopped", "-o", "name"); strings.TrimSpace(ev) != "" {
		t.Errorf("the VMI was reported stopped: %s", ev)
	}
}

// portForwardEcho checks the guest's echo server from the node through
// the pod IP (the masquerade DNAT: the server is up), then through
// `virtctl port-forward vmi/NAME LOCAL:1234`: a line and 256 KiB of random
// bytes come back unchanged both ways.
func portForwardEcho(t *testing.T, namespace, vmi string) {
	t.Helper()
	podIP := strings.TrimSpace(kubectl(t, "-n", namespace, "get", "vmi/"+vmi, "-o", "jsonpath={.status.interfaces[0].ipAddress}"))
	if err := echo(net.JoinHostPort(podIP, "1234")); err != nil {
		t.Fatalf("the guest's echo server, through the pod IP %s: %v", podIP, err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := l.Addr().(*net.TCPAddr).Port
	l.Close() // virtctl listens on it next
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "virtctl.sh"), "-n", namespace, "port-forward",
		"vmi/"+vmi, strconv.Itoa(local)+":1234")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	defer func() { cancel(); <-exited }()
	r := bufio.NewReader(pr)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "Forwarding from 127.0.0.1:"+strconv.Itoa(local)+" -> 1234") {
		t.Fatalf("virtctl port-forward: %q, %v", line, err)
	}
	var rest bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&rest, r); close(copied) }()
	if err := echo("127.0.0.1:" + strconv.Itoa(local)); err != nil {
		cancel()
		<-copied
		t.Fatalf("through virtctl port-forward: %v; virtctl said:\n%s", err, rest.String())
	}
	t.Logf("virtctl port-forward: %d bytes there and back, unchanged", echoBytes)
}

// echoBytes is what echo sends: a line and 256 KiB of random bytes.
const echoBytes = len("hello through port-forward\n") + 256<<10

// echo sends a line and 256 KiB of random bytes to an echo server at addr
// and checks that they come back unchanged.
func echo(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Minute)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A bound for a hung connection, not a speed limit.
	if err := conn.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		return err
	}
	payload := make([]byte, 256<<10)
	if _, err := rand.Read(payload); err != nil {
		return err
	}
	msg := append([]byte("hello through port-forward\n"), payload...)
	go func() { _, _ = conn.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("the echo differs from what was sent (first line %q)", got[:bytes.IndexByte(got, '\n')+1])
	}
	return nil
}
