package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/runner"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

// The runner is driven the way the `vmm` CLI and virt-launcher drive it:
// through the control API's client on a real unix socket, in front of a
// real KVM machine (runnertest).

const memBytes = runnertest.MemoryBytes

type vm struct {
	r      *runner.Runner
	c      *api.Client
	exited <-chan machine.Exit
	log    *runnertest.Log
}

func spinningVM(t *testing.T) *vm {
	v := runnertest.Spinning(t)
	return &vm{r: v.Runner, c: v.Client, exited: v.Exited, log: v.Log}
}

// states are the VM states the runner logged, in order.
func (v *vm) states(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(v.log.String()), "\n") {
		var rec struct{ Msg, State string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "a JSON log line: %q", line)
		if rec.Msg == "VM state" {
			out = append(out, rec.State)
		}
	}
	return out
}

func (v *vm) state(t *testing.T) api.State {
	t.Helper()
	i, err := v.c.Info(context.Background())
	require.NoError(t, err)
	return i.State
}

// vcpuRuns waits for the vCPU to leave its pause: a resumed vCPU thread
// wakes on its own time (the deadline only turns a hang into a failure).
func (v *vm) vcpuRuns(t *testing.T) {
	t.Helper()
	assert.Eventually(t, func() bool { return !v.r.Machine().Paused() }, time.Minute, time.Millisecond, "the vCPU runs")
}

// apiError asserts err is an API error reply with the status and a
// message naming why.
func apiError(t *testing.T, err error, status int, msg string) {
	t.Helper()
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, status, e.Status)
	assert.Contains(t, e.Msg, msg)
}

func TestPauseResumeStop(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	v.vcpuRuns(t) // Run has begun (and said so) before the first pause

	i, err := v.c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.StateRunning, i.State)
	assert.Equal(t, 1, i.CPUs)
	assert.Equal(t, uint64(memBytes>>20), i.MemoryMiB)
	assert.Equal(t, "kubevmm", i.Backend)

	require.NoError(t, v.c.Pause(ctx))
	assert.Equal(t, api.StatePaused, v.state(t))
	assert.True(t, v.r.Machine().Paused(), "the vCPU is parked")
	// Pausing a paused VM is a no-op, not an error: a caller that retries
	// after losing the reply must not be told it failed.
	require.NoError(t, v.c.Pause(ctx))
	assert.Equal(t, api.StatePaused, v.state(t))

	require.NoError(t, v.c.Resume(ctx))
	assert.Equal(t, api.StateRunning, v.state(t))
	// The vCPU thread wakes on its own time; the wait only bounds a hang.
	v.vcpuRuns(t)

	require.NoError(t, v.c.Stop(ctx))
	e := <-v.exited
	assert.Equal(t, machine.ExitStopped, e.Reason)
	require.NoError(t, e.Err)
	i, err = v.c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.StateStopped, i.State)
	assert.Equal(t, string(machine.ExitStopped), i.Exit)

	// An ended VM refuses what needs a running one, with a conflict.
	apiError(t, v.c.Pause(ctx), http.StatusConflict, "the VM has ended (stopped)")
	apiError(t, v.c.Resume(ctx), http.StatusConflict, "the VM has ended")
	_, err = v.c.Snapshot(ctx, api.SnapshotRequest{Dir: t.TempDir()})
	apiError(t, err, http.StatusConflict, "the VM has ended")
	apiError(t, v.c.Migrate(ctx, api.MigrateRequest{To: "unix:/nonexistent"}), http.StatusConflict, "the VM has ended")

	// Every state change is logged once: the second pause changed nothing.
	assert.Equal(t, []string{"Running", "Paused", "Running", "Stopped"}, v.states(t))
}

func TestStopWhilePausedEndsTheVM(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	require.NoError(t, v.c.Pause(ctx))
	require.NoError(t, v.c.Stop(ctx))
	assert.Equal(t, machine.ExitStopped, (<-v.exited).Reason)
	assert.Equal(t, api.StateStopped, v.state(t))
}

func TestSnapshot(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name   string
		pause  bool // before the snapshot
		resume *bool
		want   api.State
	}{
		{"running VM resumes", false, nil, api.StateRunning},
		{"running VM told not to resume stays paused", false, &no, api.StatePaused},
		{"paused VM stays paused", true, nil, api.StatePaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := spinningVM(t)
			ctx := context.Background()
			if tc.pause {
				require.NoError(t, v.c.Pause(ctx))
			}
			dir := filepath.Join(t.TempDir(), "snap")
			res, err := v.c.Snapshot(ctx, api.SnapshotRequest{Dir: dir, Resume: tc.resume})
			require.NoError(t, err)
			assert.Equal(t, dir, res.Dir)
			assert.Positive(t, res.MemoryBytes, "the guest's code page is stored")
			assert.Equal(t, tc.want, v.state(t))
			if tc.want == api.StatePaused {
				assert.True(t, v.r.Machine().Paused())
			} else {
				v.vcpuRuns(t)
			}

			man, mem, err := snapshot.Read(dir)
			require.NoError(t, err)
			defer mem.Close()
			assert.Equal(t, snapshot.Format, man.Format)
			assert.Equal(t, uint64(memBytes), mem.Size())
			code, err := mem.Slice(runnertest.CodeAddr, 2)
			require.NoError(t, err)
			assert.Equal(t, []byte{0xeb, 0xfe}, code, "the guest's RAM is in the snapshot")
		})
	}
}

func TestSnapshotFailureKeepsTheVMRunning(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	_, err := v.c.Snapshot(ctx, api.SnapshotRequest{Dir: filepath.Join(file, "snap")})
	apiError(t, err, http.StatusInternalServerError, "snapshot to "+filepath.Join(file, "snap"))
	assert.Equal(t, api.StateRunning, v.state(t))
	v.vcpuRuns(t)

	_, err = v.c.Snapshot(ctx, api.SnapshotRequest{})
	apiError(t, err, http.StatusBadRequest, `snapshot needs "dir"`)
}

func TestMigrateErrors(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		to     string
		status int
		msg    string
	}{
		{"no scheme", "127.0.0.1:1", http.StatusBadRequest, "want tcp:HOST:PORT or unix:PATH"},
		{"tcp without a port", "tcp:localhost", http.StatusBadRequest, "missing port"},
		{"nothing listens", "unix:" + filepath.Join(t.TempDir(), "none.sock"), http.StatusInternalServerError, "connect to migration target unix:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apiError(t, v.c.Migrate(ctx, api.MigrateRequest{To: tc.to}), tc.status, tc.msg)
			assert.Equal(t, api.StateRunning, v.state(t), "the VM keeps running here")
			s, err := v.c.Migration(ctx)
			require.NoError(t, err)
			assert.False(t, s.Active)
		})
	}

	apiError(t, v.c.CancelMigration(ctx), http.StatusConflict, "no migration in progress")

	require.NoError(t, v.c.Pause(ctx))
	apiError(t, v.c.Migrate(ctx, api.MigrateRequest{To: "unix:/x"}), http.StatusConflict, "resume the VM before migrating it")
}

func TestCancelMigration(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	require.NoError(t, v.c.Migrate(ctx, api.MigrateRequest{To: runnertest.DeafTarget(t)}))

	assert.Equal(t, api.StateMigrating, v.state(t))
	s, err := v.c.Migration(ctx)
	require.NoError(t, err)
	assert.True(t, s.Active)
	apiError(t, v.c.Pause(ctx), http.StatusConflict, "during a live migration")
	apiError(t, v.c.Migrate(ctx, api.MigrateRequest{To: runnertest.DeafTarget(t)}), http.StatusConflict, "during a live migration")
	_, err = v.c.Snapshot(ctx, api.SnapshotRequest{Dir: t.TempDir()})
	apiError(t, err, http.StatusConflict, "during a live migration")

	require.NoError(t, v.c.CancelMigration(ctx))
	s, err = v.c.WaitMigration(ctx, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.False(t, s.Active)
	assert.Equal(t, "failed", s.Stats.Phase)
	assert.NotEmpty(t, s.Stats.Error)
	assert.Equal(t, api.StateRunning, v.state(t), "the VM keeps running here")
	v.vcpuRuns(t)

	require.NoError(t, v.c.Stop(ctx))
	assert.Equal(t, machine.ExitStopped, (<-v.exited).Reason)
}

// Stopping the VM cancels its migration, and Run returns only once the
// sender is done with the machine: the launcher and the `vmm` CLI close
// the machine (unmapping guest RAM) right after.
func TestStopDuringMigration(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	require.NoError(t, v.c.Migrate(ctx, api.MigrateRequest{To: runnertest.DeafTarget(t)}))
	require.NoError(t, v.c.Stop(ctx))
	assert.Equal(t, machine.ExitStopped, (<-v.exited).Reason)
	s := v.r.Migration()
	assert.False(t, s.Active, "Run returned while the migration still ran")
	assert.Equal(t, "failed", s.Stats.Phase)
	assert.Equal(t, api.StateStopped, v.r.Info().State)
}

func TestMigrationToARealTarget(t *testing.T) {
	v := spinningVM(t)
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "in.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	in := machine.NewIncoming(machine.Config{Console: io.Discard})
	received := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- err
			return
		}
		defer c.Close()
		_, err = migration.Receive(ctx, c, in)
		received <- err
	}()

	require.NoError(t, v.c.Migrate(ctx, api.MigrateRequest{To: "unix:" + sock}))
	s, err := v.c.WaitMigration(ctx, 10*time.Millisecond, nil)
	require.NoError(t, err)
	require.NoError(t, <-received)
	require.NotNil(t, in.Machine)
	defer in.Machine.Close()
	assert.False(t, s.Active)
	assert.Equal(t, "completed", s.Stats.Phase)
	assert.Equal(t, int64(memBytes), s.Stats.RAMBytes)

	// The guest now runs on the target: here the VM stays paused for good.
	assert.Equal(t, api.StateMigrated, v.state(t))
	assert.True(t, v.r.Machine().Paused())
	apiError(t, v.c.Resume(ctx), http.StatusConflict, "the guest now runs on the migration target")
	apiError(t, v.c.CancelMigration(ctx), http.StatusConflict, "no migration in progress")

	code, err := in.Machine.Memory().Slice(runnertest.CodeAddr, 2)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xeb, 0xfe}, code, "the target has the guest's RAM")

	require.NoError(t, v.c.Stop(ctx))
	assert.Equal(t, machine.ExitMigrated, (<-v.exited).Reason)
	i, err := v.c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.StateMigrated, i.State)
	assert.Equal(t, string(machine.ExitMigrated), i.Exit)
}

func TestMetrics(t *testing.T) {
	v := spinningVM(t)
	m, err := v.c.Metrics(context.Background())
	require.NoError(t, err)
	assert.Contains(t, m, "exits_io")
	assert.Contains(t, m, "assists")
}
