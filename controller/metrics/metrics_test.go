package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller/metrics"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestCollector writes VMIs and migrations to a real API server and
// compares the scrape with the exposition text KubeVirt's users query.
func TestCollector(t *testing.T) {
	_, c := apiserver.Start(t)
	ctx := context.Background()
	g := resource.MustParse("64Mi")
	vmi := func(name, node string, phase v1.VirtualMachineInstancePhase, ann map[string]string) {
		t.Helper()
		o := &v1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: ann},
			Spec:       v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}},
		}
		require.NoError(t, c.Create(ctx, o))
		o.Status.Phase, o.Status.NodeName = phase, node
		require.NoError(t, c.Status().Update(ctx, o))
	}
	mig := func(name, vmi string, phase v1.VirtualMachineInstanceMigrationPhase) {
		t.Helper()
		o := &v1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: vmi},
		}
		require.NoError(t, c.Create(ctx, o))
		if phase != v1.MigrationPhaseUnset {
			o.Status.Phase = phase
			require.NoError(t, c.Status().Update(ctx, o))
		}
	}
	vmi("a", "node1", v1.Running, nil)
	vmi("b", "node1", v1.Running, nil)
	vmi("c", "node2", v1.Running, map[string]string{"vm.kubevirt.io/os": "fedora", "vm.kubevirt.io/workload": "server", "vm.kubevirt.io/flavor": "small", "kubevirt.io/instancetype-name": "u1.small", "kubevirt.io/cluster-preference-name": "fedora"})
	vmi("d", "", v1.Pending, nil)
	// c's guest agent reported its OS
	withOS := &v1.VirtualMachineInstance{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "c"}, withOS))
	withOS.Status.GuestOSInfo = v1.VirtualMachineInstanceGuestOSInfo{Name: "Fedora Linux", VersionID: "39", KernelRelease: "6.5.6-300.fc39.x86_64", Machine: "x86_64"}
	require.NoError(t, c.Status().Update(ctx, withOS))
	mig("m-unset", "a", v1.MigrationPhaseUnset)
	mig("m-pending", "a", v1.MigrationPending)
	mig("m-scheduling", "a", v1.MigrationScheduling)
	mig("m-target", "b", v1.MigrationTargetReady)
	mig("m-running", "b", v1.MigrationRunning)
	mig("m-ok", "c", v1.MigrationSucceeded)
	mig("m-failed", "c", v1.MigrationFailed)

	col := &metrics.Collector{Reader: c, Ready: func() bool { return true }, Leading: func() bool { return false }}
	const want = `
# HELP kubevirt_vmi_phase_count Sum of VMIs per phase and node.
# TYPE kubevirt_vmi_phase_count gauge
kubevirt_vmi_phase_count{flavor="",guest_os_kernel_release="",guest_os_machine="",guest_os_name="",guest_os_version_id="",instance_type="",node="",os="",phase="pending",preference="",workload=""} 1
kubevirt_vmi_phase_count{flavor="",guest_os_kernel_release="",guest_os_machine="",guest_os_name="",guest_os_version_id="",instance_type="",node="node1",os="",phase="running",preference="",workload=""} 2
kubevirt_vmi_phase_count{flavor="small",guest_os_kernel_release="6.5.6-300.fc39.x86_64",guest_os_machine="x86_64",guest_os_name="Fedora Linux",guest_os_version_id="39",instance_type="u1.small",node="node2",os="fedora",phase="running",preference="fedora",workload="server"} 1
# HELP kubevirt_virt_controller_leading_status Indication for an operating virt-controller.
# TYPE kubevirt_virt_controller_leading_status gauge
kubevirt_virt_controller_leading_status 0
# HELP kubevirt_virt_controller_ready_status Indication for a virt-controller that is ready to take the lead.
# TYPE kubevirt_virt_controller_ready_status gauge
kubevirt_virt_controller_ready_status 1
# HELP kubevirt_vmi_migrations_in_pending_phase Number of current pending migrations.
# TYPE kubevirt_vmi_migrations_in_pending_phase gauge
kubevirt_vmi_migrations_in_pending_phase 1
# HELP kubevirt_vmi_migrations_in_scheduling_phase Number of current scheduling migrations.
# TYPE kubevirt_vmi_migrations_in_scheduling_phase gauge
kubevirt_vmi_migrations_in_scheduling_phase 1
# HELP kubevirt_vmi_migrations_in_unset_phase Number of current unset migrations. These are pending items the virt-controller hasn't processed yet from the queue.
# TYPE kubevirt_vmi_migrations_in_unset_phase gauge
kubevirt_vmi_migrations_in_unset_phase 1
# HELP kubevirt_vmi_migrations_in_running_phase Number of current running migrations.
# TYPE kubevirt_vmi_migrations_in_running_phase gauge
kubevirt_vmi_migrations_in_running_phase 2
# HELP kubevirt_vmi_migration_succeeded Indicates if the VMI migration succeeded.
# TYPE kubevirt_vmi_migration_succeeded gauge
kubevirt_vmi_migration_succeeded{namespace="default",vmi="c",vmim="m-ok"} 1
# HELP kubevirt_vmi_migration_failed Indicates if the VMI migration failed.
# TYPE kubevirt_vmi_migration_failed gauge
kubevirt_vmi_migration_failed{namespace="default",vmi="c",vmim="m-failed"} 1
`
	require.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(want)))

	// A VMI that changes phase moves between series at the next scrape.
	d := &v1.VirtualMachineInstance{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "d"}, d))
	d.Status.Phase, d.Status.NodeName = v1.Running, "node1"
	require.NoError(t, c.Status().Update(ctx, d))
	require.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(`
# HELP kubevirt_vmi_phase_count Sum of VMIs per phase and node.
# TYPE kubevirt_vmi_phase_count gauge
kubevirt_vmi_phase_count{flavor="",guest_os_kernel_release="",guest_os_machine="",guest_os_name="",guest_os_version_id="",instance_type="",node="node1",os="",phase="running",preference="",workload=""} 3
kubevirt_vmi_phase_count{flavor="small",guest_os_kernel_release="6.5.6-300.fc39.x86_64",guest_os_machine="x86_64",guest_os_name="Fedora Linux",guest_os_version_id="39",instance_type="u1.small",node="node2",os="fedora",phase="running",preference="fedora",workload="server"} 1
`), "kubevirt_vmi_phase_count"))
}

// failingReader stands in for an API that cannot be read: the one error
// path a real server does not produce on demand.
type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache not synced")
}

// TestCollectorListError: a scrape during which the objects cannot be read
// fails, naming why, instead of reporting zero VMIs.
func TestCollectorListError(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(&metrics.Collector{Reader: failingReader{}}))
	_, err := reg.Gather()
	require.ErrorContains(t, err, "listing VMIs: cache not synced")
	require.ErrorContains(t, err, "listing migrations: cache not synced")
}
