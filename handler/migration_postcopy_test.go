package handler

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// scriptedVMM is a launcher whose migration reports what the test sets:
// the outcomes of a post-copy migration a real VMM reaches only with a
// guest dirtying memory faster than the link (cmd/vmm's post-copy test
// has that guest).
type scriptedVMM struct {
	mu      sync.Mutex
	st      api.MigrationStatus
	stopped bool
}

func (s *scriptedVMM) Info() api.Info { return api.Info{State: api.StateRunning} }
func (s *scriptedVMM) Pause() error   { return nil }
func (s *scriptedVMM) Resume() error  { return nil }
func (s *scriptedVMM) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	return nil
}
func (s *scriptedVMM) PowerButton() error { return nil }
func (s *scriptedVMM) Reset() error       { return nil }
func (s *scriptedVMM) SoftReboot() error  { return nil }
func (s *scriptedVMM) Snapshot(api.SnapshotRequest) (api.SnapshotResult, error) {
	return api.SnapshotResult{}, nil
}
func (s *scriptedVMM) Migrate(api.MigrateRequest) error { return nil }
func (s *scriptedVMM) Migration() api.MigrationStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}
func (s *scriptedVMM) CancelMigration() error  { return nil }
func (s *scriptedVMM) Metrics() map[string]any { return nil }

func (s *scriptedVMM) set(st api.MigrationStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = st
}

// TestMigrationSourcePostCopy: a migration that switched to post-copy is
// reported in mode PostCopy and cannot be aborted any more; if it then
// fails, the guest is lost: the source VMM is stopped (it must never run
// half a guest) and the migration fails saying so.
func TestMigrationSourcePostCopy(t *testing.T) {
	k8s := apiServer(t)
	ctx := context.Background()
	sd, dir := testSocketDir(t)
	vmm := &scriptedVMM{}
	srv, err := api.Listen(filepath.Join(dir, vmispec.ControlSocket), vmm)
	require.NoError(t, err)
	defer srv.Close()
	rec := events.NewFakeRecorder(100)
	r := &VMIReconciler{Client: k8s, NodeName: "node01", PodsDir: sd.podsDir, Recorder: rec, LauncherSocketDir: dir}
	l := launcherConn{dir: sd}

	vmi := vmiWithPodNIC()
	vmi.ObjectMeta = metav1.ObjectMeta{Name: "postcopy", Namespace: "default"}
	require.NoError(t, k8s.Create(ctx, vmi))
	started := metav1.Now()
	vmi.Status = v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01", MigrationState: &v1.VirtualMachineInstanceMigrationState{
		MigrationUID: types.UID("m-postcopy"), SourceNode: "node01", TargetNode: "node02", TargetPod: "target",
		TargetNodeAddress: "10.0.0.2", StartTimestamp: &started, Mode: v1.MigrationPreCopy,
	}}
	require.NoError(t, k8s.Status().Update(ctx, vmi))
	pass := func() *v1.VirtualMachineInstanceMigrationState {
		t.Helper()
		cur := &v1.VirtualMachineInstance{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
		_, _, err := r.syncMigrationSource(ctx, cur, l, api.Info{State: api.StateRunning}, true)
		require.NoError(t, err)
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
		return cur.Status.MigrationState
	}

	vmm.set(api.MigrationStatus{Active: true, Stats: migration.Stats{Phase: "postcopy", PostCopy: true}})
	ms := pass()
	assert.Equal(t, v1.MigrationPostCopy, ms.Mode)
	// An abort asked now is too late: the handler does not try it.
	cur := &v1.VirtualMachineInstance{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
	orig := cur.DeepCopy()
	cur.Status.MigrationState.AbortRequested = true
	require.NoError(t, k8s.Status().Patch(ctx, cur, client.MergeFrom(orig)))
	ms = pass()
	assert.Empty(t, ms.AbortStatus, "no abort is attempted in post-copy")
	assert.False(t, ms.Failed)

	vmm.set(api.MigrationStatus{Stats: migration.Stats{Phase: "failed", PostCopy: true, Error: "lost the migration target"}})
	ms = pass()
	assert.True(t, ms.Failed)
	assert.Equal(t, "lost the migration target", ms.FailureReason)
	assert.Equal(t, v1.MigrationAbortFailed, ms.AbortStatus, "the abort did not save the guest")
	vmm.mu.Lock()
	assert.True(t, vmm.stopped, "the source VMM is stopped: it holds only part of the guest")
	vmm.mu.Unlock()
	assert.True(t, strings.Contains(drain(rec), "failed in post-copy; the guest is lost"))
}

// TestMigrationSourcePostCopyCompletedBetweenPolls: a post-copy phase
// that began and ended between two polls is still recorded as PostCopy.
func TestMigrationSourcePostCopyCompletedBetweenPolls(t *testing.T) {
	k8s := apiServer(t)
	ctx := context.Background()
	sd, dir := testSocketDir(t)
	vmm := &scriptedVMM{}
	srv, err := api.Listen(filepath.Join(dir, vmispec.ControlSocket), vmm)
	require.NoError(t, err)
	defer srv.Close()
	r := &VMIReconciler{Client: k8s, NodeName: "node01", PodsDir: sd.podsDir, Recorder: events.NewFakeRecorder(100), LauncherSocketDir: dir}

	vmi := vmiWithPodNIC()
	vmi.ObjectMeta = metav1.ObjectMeta{Name: "quick-postcopy", Namespace: "default"}
	require.NoError(t, k8s.Create(ctx, vmi))
	started := metav1.Now()
	vmi.Status = v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01", MigrationState: &v1.VirtualMachineInstanceMigrationState{
		MigrationUID: types.UID("m-quick"), SourceNode: "node01", TargetNode: "node02", TargetPod: "target",
		TargetNodeAddress: "10.0.0.2", StartTimestamp: &started, Mode: v1.MigrationPreCopy,
	}}
	require.NoError(t, k8s.Status().Update(ctx, vmi))

	vmm.set(api.MigrationStatus{Stats: migration.Stats{Phase: "completed", PostCopy: true}})
	cur := &v1.VirtualMachineInstance{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
	_, _, err = r.syncMigrationSource(ctx, cur, launcherConn{dir: sd}, api.Info{State: api.StateRunning}, true)
	require.NoError(t, err)
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
	assert.True(t, cur.Status.MigrationState.Completed)
	assert.Equal(t, v1.MigrationPostCopy, cur.Status.MigrationState.Mode)
}
