// Package runnertest serves a real running VM on the control API for
// tests that drive it: a KVM machine whose one-instruction guest (`jmp $`)
// spins forever, so no Linux boot is needed.
package runnertest

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/runner"
)

// MemoryBytes is the spinning VM's RAM.
const MemoryBytes = 64 << 20

// CodeAddr is where the guest's code (0xeb 0xfe) sits in its RAM.
const CodeAddr = 0x100000

// VM is a running VM served on a unix socket.
type VM struct {
	Runner *runner.Runner
	Client *api.Client
	Socket string
	Exited <-chan machine.Exit // what Run returned, once it has
	Log    *Log                // the machine's log, as JSON lines
}

// Log collects log lines safely across goroutines.
type Log struct {
	mu sync.Mutex
	b  []byte
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// String is everything logged so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// Spinning starts the VM, or skips without /dev/kvm. Cleanup stops it.
func Spinning(t *testing.T) *VM {
	t.Helper()
	return SpinningAt(t, filepath.Join(t.TempDir(), "vmm.sock"))
}

// SpinningAt is Spinning serving the control API on the unix socket sock
// (where a launcher would).
func SpinningAt(t *testing.T, sock string) *VM {
	t.Helper()
	return SpinningWith(t, sock, nil)
}

// SpinningWith is SpinningAt with the machine's devices: disks are the
// virtio disks the VM gets (the guest never touches them).
func SpinningWith(t *testing.T, sock string, disks []machine.DiskConfig) *VM {
	t.Helper()
	return spinning(t, sock, machine.Config{Disks: disks})
}

// SpinningSCSI is Spinning with a SCSI controller for hot-plugged volumes.
func SpinningSCSI(t *testing.T) *VM {
	t.Helper()
	return spinning(t, filepath.Join(t.TempDir(), "vmm.sock"), machine.Config{SCSI: true})
}

// spinning runs the spinning guest on a machine with cfg's devices.
func spinning(t *testing.T, sock string, cfg machine.Config) *VM {
	t.Helper()
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	log := &Log{}
	cfg.CPUs, cfg.MemoryBytes, cfg.Kernel = 1, MemoryBytes, boottest.TinyELF([]byte{0xeb, 0xfe}, CodeAddr)
	cfg.Console, cfg.Logger = io.Discard, slog.New(slog.NewJSONHandler(log, nil))
	m, err := machine.New(cfg)
	require.NoError(t, err)
	r := runner.New(m, 1, MemoryBytes)
	exited := make(chan machine.Exit, 1)
	go func() { exited <- r.Run() }()
	srv, err := api.Listen(sock, r)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = r.Stop()
		<-r.Done()
		// A client request still open only delays shutdown: not this test's concern.
		_ = srv.Close()
		assert.NoError(t, m.Close())
	})
	return &VM{Runner: r, Client: api.NewClient(sock), Socket: sock, Exited: exited, Log: log}
}

// DeafTarget accepts migration connections and never reads them, so a
// migration to it runs until it is cancelled. It returns its address.
func DeafTarget(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "deaf.sock")
	Deaf(t, sock)
	return "unix:" + sock
}

// Deaf listens on the unix socket sock, accepts every connection and
// never reads from it, until the test ends.
func Deaf(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
}
