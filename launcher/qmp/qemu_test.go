package qmp

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// startQEMU runs a real QEMU with no guest, paused (-S), its monitor on a
// unix socket we listen on first and hand over as fd 3: the socket exists
// before QEMU starts, so Dial needs no polling.
func startQEMU(t *testing.T) (path string, cmd *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed: run hack/deps.sh qemu")
	}
	path = filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	require.NoError(t, err)
	ln.Close()
	defer f.Close()

	var stderr strings.Builder
	cmd = exec.Command(bin, "-machine", "q35", "-accel", "tcg", "-nodefaults", "-no-user-config",
		"-display", "none", "-S", "-m", "64",
		"-chardev", "socket,id=mon,fd=3,server=on,wait=off", "-mon", "chardev=mon,mode=control")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("qemu stderr:\n%s", stderr.String())
		}
	})
	return path, cmd
}

// stopProcess stops a child process with SIGSTOP and returns once all its
// threads have stopped (waitid reports the group stop; WNOWAIT leaves it
// for others): a real hung monitor, with no race against the next command.
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

// TestRealQEMU drives one real QEMU process through the client's features.
func TestRealQEMU(t *testing.T) {
	path, cmd := startQEMU(t)
	c, err := Dial(testCtx(t, generous), path)
	require.NoError(t, err)

	t.Run("greeting and typed replies", func(t *testing.T) {
		ctx := testCtx(t, generous)
		var v Version
		require.NoError(t, c.Execute(ctx, "query-version", nil, &v))
		assert.Equal(t, c.Greeting().Version.String(), v.String())
		assert.GreaterOrEqual(t, v.QEMU.Major, 7)

		st, err := c.QueryStatus(ctx)
		require.NoError(t, err)
		assert.Equal(t, StatusInfo{Running: false, Status: "prelaunch"}, st)
	})

	t.Run("STOP and RESUME events", func(t *testing.T) {
		ctx := testCtx(t, generous)
		sub := c.Subscribe(EventStop, EventResume)
		defer sub.Close()
		// QEMU stamps events with the host's wall clock in microseconds.
		before := time.Now().Truncate(time.Microsecond)
		require.NoError(t, c.Execute(ctx, "cont", nil, nil))
		ev, err := sub.WaitFor(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, EventResume, ev.Name)
		assert.False(t, ev.Time.Before(before), "event time %v before the command was sent (%v)", ev.Time, before)
		assert.False(t, ev.Time.After(time.Now()), "event time in the future")

		require.NoError(t, c.Execute(ctx, "stop", nil, nil))
		ev, err = sub.WaitFor(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, EventStop, ev.Name)
		st, err := c.QueryStatus(ctx)
		require.NoError(t, err)
		assert.Equal(t, "paused", st.Status)
	})

	t.Run("refused commands", func(t *testing.T) {
		for _, tc := range []struct {
			cmd   string
			args  any
			class ErrorClass
			desc  string
		}{
			{"no-such-command", nil, CommandNotFound, "no-such-command"},
			{"device_del", map[string]string{"id": "nic9"}, DeviceNotFound, "nic9"},
			{"balloon", map[string]int{"value": 1 << 20}, DeviceNotActive, "balloon"},
			{"migrate", map[string]string{"uri": "bogus:1"}, GenericError, "migration protocol"},
		} {
			t.Run(tc.cmd, func(t *testing.T) {
				err := c.Execute(testCtx(t, generous), tc.cmd, tc.args, nil)
				var qe *Error
				require.ErrorAs(t, err, &qe)
				assert.Equal(t, tc.class, qe.Class)
				assert.Equal(t, tc.cmd, qe.Command)
				assert.Contains(t, qe.Desc, tc.desc)
			})
		}
		_, err := c.QueryStatus(testCtx(t, generous))
		require.NoError(t, err, "monitor usable after refusals")
	})

	t.Run("passing a file with add-fd", func(t *testing.T) {
		ctx := testCtx(t, generous)
		f, err := os.CreateTemp(t.TempDir(), "passed")
		require.NoError(t, err)
		defer f.Close()
		var added struct {
			FdsetID int64 `json:"fdset-id"`
			FD      int   `json:"fd"`
		}
		require.NoError(t, c.ExecuteWithFile(ctx, "add-fd", map[string]any{"opaque": "passed-file"}, &added, f))
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", cmd.Process.Pid, added.FD))
		require.NoError(t, err)
		assert.Equal(t, f.Name(), link, "QEMU holds the file we passed")

		var sets []struct {
			FdsetID int64 `json:"fdset-id"`
			FDs     []struct {
				FD     int    `json:"fd"`
				Opaque string `json:"opaque"`
			} `json:"fds"`
		}
		require.NoError(t, c.Execute(ctx, "query-fdsets", nil, &sets))
		require.Len(t, sets, 1)
		assert.Equal(t, added.FdsetID, sets[0].FdsetID)
		require.Len(t, sets[0].FDs, 1)
		assert.Equal(t, added.FD, sets[0].FDs[0].FD)
		assert.Equal(t, "passed-file", sets[0].FDs[0].Opaque)

		_, err = f.WriteString("still ours")
		require.NoError(t, err, "the caller's file stays open")
		// QEMU (7.2) closes a removed descriptor only while the guest
		// runs; a paused one keeps it until the next cleanup.
		require.NoError(t, c.Execute(ctx, "cont", nil, nil))
		defer func() { require.NoError(t, c.Execute(ctx, "stop", nil, nil)) }()
		require.NoError(t, c.Execute(ctx, "remove-fd", map[string]any{"fdset-id": added.FdsetID}, nil))
		require.NoError(t, c.Execute(ctx, "query-fdsets", nil, &sets))
		assert.Empty(t, sets)
	})

	t.Run("one client at a time, then reconnect", func(t *testing.T) {
		// QEMU greets a second connection only after the first one ends.
		_, err := Dial(testCtx(t, 500*time.Millisecond), path)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "greeting")

		require.NoError(t, c.Close())
		c, err = Dial(testCtx(t, generous), path)
		require.NoError(t, err)
		st, err := c.QueryStatus(testCtx(t, generous))
		require.NoError(t, err)
		assert.Equal(t, "paused", st.Status)
	})

	t.Run("hung QEMU gives the context's error", func(t *testing.T) {
		// A stopped process is a real hung monitor: the socket accepts the
		// command, nothing answers.
		stopProcess(t, cmd.Process.Pid)
		defer cmd.Process.Signal(syscall.SIGCONT)
		_, err := c.QueryStatus(testCtx(t, 500*time.Millisecond))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), path)
	})

	t.Run("crashed QEMU fails pending commands", func(t *testing.T) {
		// Stop QEMU so the command stays unanswered, then kill it.
		stopProcess(t, cmd.Process.Pid)
		sub := c.Subscribe()
		done := make(chan error, 1)
		go func() { _, err := c.QueryStatus(testCtx(t, generous)); done <- err }()
		require.NoError(t, cmd.Process.Kill())
		err := <-done
		require.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), path)
		_, err = sub.WaitFor(testCtx(t, generous), nil)
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, c.Execute(testCtx(t, generous), "query-status", nil, nil), ErrClosed)
	})
}
