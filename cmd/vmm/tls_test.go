package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/migration/tlstest"
)

// lineLog collects a process's stderr lines as they come.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

// waitFor waits until n lines contain substr and returns the last of them.
func (l *lineLog) waitFor(t *testing.T, substr string, n int) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		l.mu.Lock()
		var found []string
		for _, s := range l.lines {
			if strings.Contains(s, substr) {
				found = append(found, s)
			}
		}
		l.mu.Unlock()
		if len(found) >= n {
			return found[n-1]
		}
		select {
		case <-l.more:
		case <-deadline:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("not %d lines with %q on stderr: %q", n, substr, l.lines)
		}
	}
}

// TestMigrateOverMutualTLS migrates a VM between two vmm processes over
// loopback TCP with mutual TLS, after a source with a certificate from
// another CA and a plaintext source were refused by the same target.
func TestMigrateOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "loop.elf")
	require.NoError(t, os.WriteFile(kernel, boottest.TinyELF([]byte{0xeb, 0xfe}, 0x100000), 0o644)) // jmp $
	ca, rogueCA := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "rogue")
	target, source, rogue := ca.Issue(t, "target.example"), ca.Issue(t, "source.example"), rogueCA.Issue(t, "source.example")

	aAPI, bAPI := filepath.Join(dir, "a.api"), filepath.Join(dir, "b.api")
	a := startVMM(t, "run", "--kernel", kernel, "--memory", "64M", "--console", "none", "--api", aAPI)
	waitForFile(t, aAPI, a)

	b := vmmCommand("run", "--incoming", "tcp:127.0.0.1:0", "--tls-cert", target.Cert, "--tls-key", target.Key,
		"--tls-ca", ca.File, "--tls-peer-name", "source.example", "--console", "none", "--api", bAPI, "-v")
	stderr, err := b.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Process.Kill(); b.Wait() })
	log := &lineLog{more: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.mu.Lock()
			log.lines = append(log.lines, sc.Text())
			log.mu.Unlock()
			select {
			case log.more <- struct{}{}:
			default:
			}
		}
	}()
	// `-v` logs it as a structured text record: ... address=HOST:PORT
	_, addr, _ := strings.Cut(log.waitFor(t, `msg="waiting for a migration"`, 1), " address=")
	addr, _, _ = strings.Cut(addr, " ")
	to := "tcp:" + addr

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"certificate from another CA", []string{"--tls-cert", rogue.Cert, "--tls-key", rogue.Key, "--tls-ca", ca.File}},
		{"plaintext", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"migrate", "--api", aAPI, "--to", to, "--tls-server-name", "target.example"}, tc.args...)
			if tc.args == nil {
				args = []string{"migrate", "--api", aAPI, "--to", to}
			}
			r := vmm(t, args...)
			assert.Equal(t, exitGuest, r.code, "%s%s", r.stdout, r.stderr)
			assert.Contains(t, r.stdout+r.stderr, "the VM keeps running here")
			assert.Contains(t, vmm(t, "status", "--api", aAPI).stdout, `"state": "Running"`)
		})
	}
	log.waitFor(t, "incoming migration: refused", 2) // both, and the target waits on

	r := vmm(t, "migrate", "--api", aAPI, "--to", to, "--tls-cert", source.Cert, "--tls-key", source.Key,
		"--tls-ca", ca.File, "--tls-server-name", "target.example")
	require.Equal(t, exitOK, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "migrate: completed")
	assert.NotContains(t, r.stdout, "\r", "progress on a pipe comes as whole lines")
	waitForFile(t, bAPI, &vmmProc{t: t, exited: make(chan error)})
	assert.Contains(t, vmm(t, "status", "--api", bAPI).stdout, `"state": "Running"`)
	require.Equal(t, exitOK, vmm(t, "stop", "--api", bAPI).code)
	require.NoError(t, b.Wait())
	assert.Equal(t, 0, a.wait(time.Minute), "the source ends once migrated")
}

func TestTLSFlagErrors(t *testing.T) {
	cert := writeFile(t, "c.pem", []byte("not a certificate"))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"TLS on a unix socket", []string{"run", "--incoming", "unix:/tmp/x.mig", "--tls-cert", cert, "--tls-key", cert, "--tls-ca", cert}, "for tcp: addresses"},
		{"half the TLS flags", []string{"run", "--incoming", "tcp:127.0.0.1:0", "--tls-cert", cert}, "needs all of"},
		{"peer name without TLS", []string{"run", "--incoming", "tcp:127.0.0.1:0", "--tls-peer-name", "x"}, "needs --tls-cert"},
		{"TLS without --incoming", []string{"run", "--kernel", cert, "--tls-cert", cert, "--tls-key", cert, "--tls-ca", cert}, "are for --incoming"},
		{"unreadable certificate", []string{"run", "--incoming", "tcp:127.0.0.1:0", "--tls-cert", cert, "--tls-key", cert, "--tls-ca", cert}, "TLS certificate"},
		{"migrate TLS on a unix socket", []string{"migrate", "--api", "/nonexistent.api", "--to", "unix:/tmp/x.mig", "--tls-cert", cert, "--tls-key", cert, "--tls-ca", cert}, "for tcp: addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertOneLineError(t, vmm(t, tc.args...), tc.want)
		})
	}
}
