package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Deadlines for steps that should succeed. They only matter when something
// is broken; a loaded 2-core CI machine running TCG is slow, so they are
// generous.
const (
	generous = 2 * time.Minute
	bootTime = 10 * time.Minute
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed: run hack/deps.sh qemu")
	}
}

// The guest's kernel command line: "quiet" keeps kernel messages from
// interleaving with what the test guest prints; reboot=k makes its final
// `reboot -f` a reset, which -no-reboot turns into QEMU exiting.
const guestCmdline = "console=ttyS0 reboot=k panic=-1 quiet"

// counterScript prints a count every second of guest time, forever.
const counterScript = `#!/bin/sh
i=0; while true; do i=$((i+1)); echo "count $i"; sleep 1; done
`

// guestConfig is a small TCG VM booting the test guest, paused at start so
// the console can be attached before the guest prints anything.
func guestConfig(t *testing.T, name, kernel, initrd string) Config {
	dir := t.TempDir()
	return Config{
		Name:         name,
		CPUs:         1,
		MemoryMiB:    128,
		Kernel:       kernel,
		Initrd:       initrd,
		Cmdline:      guestCmdline,
		Accel:        AccelTCG,
		NoReboot:     true,
		StartPaused:  true,
		SerialSocket: filepath.Join(dir, "serial.sock"),
		RunDir:       filepath.Join(dir, "run"),
	}
}

// stopProcess stops a child process with SIGSTOP and returns once all its
// threads have stopped (waitid reports the group stop; WNOWAIT leaves the
// state for anyone else waiting): a real hung QEMU, with no race against a
// command sent right after.
func stopProcess(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, unix.Kill(pid, unix.SIGSTOP))
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			require.NoError(t, err, "waiting for pid %d to stop", pid)
			return
		}
	}
}

func writeSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startVM starts cfg and makes sure the process is gone after the test.
func startVM(t *testing.T, ctx context.Context, cfg Config) *VM {
	t.Helper()
	vm, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := vm.Kill(testCtx(t, generous)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return vm
}
