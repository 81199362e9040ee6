package handler

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/crds"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
)

// The source end of a migration that virt-controller asks to abort, with
// the real pieces: a kube-apiserver (envtest) holding the VMI, and a real
// VMM (a one-instruction guest, `jmp $`) behind the control socket the
// handler talks to, migrating to a target that accepts the stream and
// never reads it, so the migration runs until someone cancels it.

// apiServer starts etcd + kube-apiserver with the CRDs, or skips.
func apiServer(t *testing.T) client.Client {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "kubevmm", "k8s", "bin")
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Skipf("no kube-apiserver in %s (KUBEBUILDER_ASSETS): run `make envtest-assets`", dir)
	}
	all, err := crds.All()
	require.NoError(t, err)
	env := &envtest.Environment{BinaryAssetsDirectory: dir, CRDs: all, ControlPlaneStartTimeout: 3 * time.Minute}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// spinningVMM runs a real VM whose guest spins, serving the control API
// in dir as a launcher does.
func spinningVMM(t *testing.T, dir string) *api.Client {
	t.Helper()
	return runnertest.SpinningAt(t, filepath.Join(dir, vmispec.ControlSocket)).Client
}

// deafTarget is a target handler whose launcher accepts the migration
// and never reads it. It returns the handler's migration port.
func deafTarget(t *testing.T, cfg *MigrationTLS, uids ...string) int {
	t.Helper()
	in, dir := testSocketDir(t)
	runnertest.Deaf(t, filepath.Join(dir, vmispec.MigrationInSocket))
	srv, addr := migrationServer(t, cfg)
	for _, uid := range uids {
		srv.Expect(uid, "default/target-"+uid, in)
	}
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

func TestMigrationSourceAbort(t *testing.T) {
	k8s := apiServer(t)
	ctx := context.Background()
	tlsCfg, _ := handlerTLS(t)

	for _, tc := range []struct {
		name    string
		started bool
	}{{"before the start", false}, {"while it runs", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sd, dir := testSocketDir(t)
			vmm := spinningVMM(t, dir)
			rec := events.NewFakeRecorder(100)
			port := deafTarget(t, tlsCfg, "m-"+strings.ReplaceAll(tc.name, " ", "-"))
			// The VMM runs in this process: it sees its socket directory
			// where the handler does.
			r := &VMIReconciler{Client: k8s, NodeName: "node01", PodsDir: sd.podsDir, Recorder: rec, MigrationTLS: tlsCfg, LauncherSocketDir: dir}
			l := launcherConn{dir: sd}

			// A running VMI handed over for a migration whose target listens.
			name := strings.ReplaceAll(tc.name, " ", "-")
			vmi := vmiWithPodNIC()
			vmi.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: "default"}
			require.NoError(t, k8s.Create(ctx, vmi))
			vmi.Status = v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01", MigrationState: &v1.VirtualMachineInstanceMigrationState{
				MigrationUID: types.UID("m-" + name), SourceNode: "node01", TargetNode: "node01", TargetPod: "target",
				TargetNodeAddress: "127.0.0.1", TargetDirectMigrationNodePorts: map[string]int{strconv.Itoa(port): 0},
			}}
			require.NoError(t, k8s.Status().Update(ctx, vmi))
			pass := func() {
				t.Helper()
				cur := &v1.VirtualMachineInstance{}
				require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
				info, err := vmm.Info(ctx)
				require.NoError(t, err)
				_, _, err = r.syncMigrationSource(ctx, cur, l, info, true)
				require.NoError(t, err)
			}
			if tc.started {
				pass() // records the start and has the VMM migrate
				st, err := vmm.Migration(ctx)
				require.NoError(t, err)
				require.True(t, st.Active, "the VMM migrates: %+v", st)
			}

			// virt-controller asks for the abort.
			cur := &v1.VirtualMachineInstance{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
			orig := cur.DeepCopy()
			cur.Status.MigrationState.AbortRequested = true
			require.NoError(t, k8s.Status().Patch(ctx, cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))

			deadline := time.Now().Add(time.Minute)
			for {
				pass()
				require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(vmi), cur))
				if ms := cur.Status.MigrationState; ms.Failed || ms.Completed || time.Now().After(deadline) {
					break
				}
				if tc.started {
					assert.Equal(t, v1.MigrationAbortInProgress, cur.Status.MigrationState.AbortStatus)
				}
				time.Sleep(migrationPoll)
			}
			ms := cur.Status.MigrationState
			assert.True(t, ms.Failed, "the abort worked: %+v", ms)
			assert.False(t, ms.Completed)
			assert.Equal(t, v1.MigrationAbortSucceeded, ms.AbortStatus)
			assert.Contains(t, ms.FailureReason, "aborted at virt-controller's request")
			assert.Equal(t, "node01", cur.Status.NodeName)
			assert.Equal(t, tc.started, ms.StartTimestamp != nil, "started only if it was before the request")

			// The guest stayed here and runs.
			info, err := vmm.Info(ctx)
			require.NoError(t, err)
			assert.Equal(t, api.StateRunning, info.State)
			st, err := vmm.Migration(ctx)
			require.NoError(t, err)
			assert.False(t, st.Active)
			if tc.started {
				assert.Equal(t, "failed", st.Stats.Phase)
				assert.Contains(t, st.Stats.Error, "cancelled")
				assert.Contains(t, ms.FailureReason, "cancelled")
				assert.Contains(t, drain(rec), "Normal Migrating VirtualMachineInstance is aborting migration.")
			} else {
				assert.Empty(t, st.Stats.Phase, "the VMM was never asked to migrate")
			}
		})
	}
}

func drain(rec *events.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}
