package launcher

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
)

// startAgent builds the test guest's agent and runs it on the host, on a
// unix socket (the launcher reaches the real one through vsock; the
// protocol on the stream is the same), with initPID in init's place.
func startAgent(t *testing.T, initPID int) (string, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubevmm-agent")
	build := exec.Command("go", "build", "-o", bin, "../test/guestagent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(bin, "-unix", sock, "-init-pid", strconv.Itoa(initPID))
	var con bytes.Buffer
	cmd.Stdout, cmd.Stderr = &con, &con
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return sock, cmd
}

// pollUntil polls p until ok says its status is what the test waits for
// (the agent process starts asynchronously).
func pollUntil(t *testing.T, p *agentPoller, ok func(api.GuestAgent) bool) api.GuestAgent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		p.poll(context.Background(), n == 0)
		if st := p.Status(); ok(st) {
			return st
		}
		require.True(t, time.Now().Before(deadline), "the poller never got there: %+v", p.Status())
		time.Sleep(20 * time.Millisecond) // the agent is starting
	}
}

// The poller against the real agent program: it connects, reports what
// the agent says (this host's os-release and interfaces), shuts the
// "guest" down through it, and notices the agent going away.
func TestAgentPollerWithTheRealAgent(t *testing.T) {
	// a process standing in for the guest's init: guest-shutdown
	// signals it with SIGUSR2, which ends a sleep
	initProc := exec.Command("sleep", "600")
	require.NoError(t, initProc.Start())
	t.Cleanup(func() { _ = initProc.Process.Kill() })

	sock, agentProc := startAgent(t, initProc.Process.Pid)
	var logBuf bytes.Buffer
	p := newAgentPoller("", slog.New(slog.NewTextHandler(&logBuf, nil)))
	p.dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}

	st := pollUntil(t, p, func(s api.GuestAgent) bool { return s.Connected })
	assert.Equal(t, "kubevmm-test-agent 1.0", st.Version)
	osRelease, err := os.ReadFile("/etc/os-release")
	require.NoError(t, err)
	assert.NotEmpty(t, st.OS.PrettyName)
	assert.Contains(t, string(osRelease), st.OS.PrettyName, "the agent reads os-release")
	assert.Equal(t, "x86_64", st.OS.Machine)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, st.Hostname)
	assert.NotEmpty(t, st.Timezone)
	var names []string
	for _, i := range st.Interfaces {
		names = append(names, i.Name)
	}
	assert.Contains(t, names, "lo")
	assert.Equal(t, "thawed", st.FSFreezeStatus)
	assert.NotNil(t, st.Filesystems, "guest-get-fsinfo was asked on the first poll")
	assert.Contains(t, logBuf.String(), "guest agent connected")

	// the next, fast poll keeps what only slow polls ask
	p.poll(context.Background(), false)
	assert.Equal(t, st.Version, p.Status().Version)
	assert.Equal(t, st.Filesystems, p.Status().Filesystems)

	sw := &switchVM{}
	sw.setAgent(p)
	res, err := sw.Shutdown()
	require.NoError(t, err)
	assert.Equal(t, api.ShutdownViaAgent, res.Via)
	err = initProc.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "init was signalled: %v", err)
	assert.Equal(t, syscall.SIGUSR2, ee.Sys().(syscall.WaitStatus).Signal(), "powerdown is SIGUSR2, as busybox's poweroff sends")

	// The agent goes: the poller says so, and the freeze that needs it
	// is refused as a conflict.
	require.NoError(t, agentProc.Process.Kill())
	_ = agentProc.Wait()
	pollUntil(t, p, func(s api.GuestAgent) bool { return !s.Connected })
	assert.Contains(t, logBuf.String(), "guest agent disconnected")
	assert.ErrorIs(t, sw.Freeze(api.FreezeRequest{}), api.ErrConflict)
	assert.Equal(t, api.GuestAgent{}, p.Status(), "nothing stale is reported")
}

// A soft reboot goes through the agent (guest-shutdown mode=reboot, which
// the test agent passes to init as busybox's reboot does, SIGTERM) when
// one is connected and the guest's reboot boots it again; with
// rebootPolicy Terminate the guest's reboot would end the VMI, so the
// ACPI way is taken (here refused: no VM runs behind this switchVM) and
// init is not signalled: the shutdown asked next is the signal it gets.
func TestSoftRebootThroughTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rebootResets bool
		via          string
		signal       syscall.Signal
	}{
		{"rebootPolicy Reboot", true, api.ShutdownViaAgent, syscall.SIGTERM},
		{"rebootPolicy Terminate", false, api.ShutdownViaACPI, syscall.SIGUSR2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			initProc := exec.Command("sleep", "600")
			require.NoError(t, initProc.Start())
			t.Cleanup(func() { _ = initProc.Process.Kill() })

			sock, _ := startAgent(t, initProc.Process.Pid)
			p := newAgentPoller("", slog.New(slog.DiscardHandler))
			p.dial = func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}
			pollUntil(t, p, func(s api.GuestAgent) bool { return s.Connected })
			sw := &switchVM{rebootResets: tc.rebootResets}
			sw.setAgent(p)

			res, err := sw.Reboot()
			assert.Equal(t, tc.via, res.Via)
			if tc.via == api.ShutdownViaACPI {
				assert.ErrorIs(t, err, api.ErrConflict, "the ACPI way, with no VM started")
				// the agent answers requests in order: had it been
				// asked to reboot, init would have had SIGTERM first
				_, err = sw.Shutdown()
			}
			require.NoError(t, err)
			err = initProc.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "init was signalled: %v", err)
			assert.Equal(t, tc.signal, ee.Sys().(syscall.WaitStatus).Signal())
		})
	}
}
