package handler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
)

// TestMetricsCollector scrapes the metrics of a running VMI whose
// launcher is a real VMM (with two virtio disks) serving its control API
// in the pod's socket directory, as virt-handler finds it, then again
// while it migrates.
func TestMetricsCollector(t *testing.T) {
	k8s := apiServer(t)
	ctx := context.Background()
	// Short: the socket's path must fit a sockaddr_un.
	pods, err := os.MkdirTemp("", "pods")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(pods) })

	g := resource.MustParse("64Mi")
	vmi := vmiWithPodNIC()
	vmi.ObjectMeta = metav1.ObjectMeta{Name: "vm1", Namespace: "default"}
	vmi.Spec.Domain.Memory = &v1.Memory{Guest: &g}
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "rootdisk"}, {Name: "cloudinit"}}
	require.NoError(t, k8s.Create(ctx, vmi))
	vmi.Status = v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01"}
	require.NoError(t, k8s.Status().Update(ctx, vmi))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm1", Namespace: "default",
			Labels:          map[string]string{v1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, v1.VirtualMachineInstanceGroupVersionKind)}},
		Spec: corev1.PodSpec{NodeName: "node01", Containers: []corev1.Container{{Name: "compute", Image: "launcher"}}},
	}
	require.NoError(t, k8s.Create(ctx, pod))
	// virt-controller records its launcher pods by UID: the handler acts
	// for no other.
	vmi.Status.ActivePods = map[types.UID]string{pod.UID: "node01"}
	require.NoError(t, k8s.Status().Update(ctx, vmi))

	// A VMI on another node and one not running yet are not this
	// handler's to report.
	for name, st := range map[string]v1.VirtualMachineInstanceStatus{
		"elsewhere": {Phase: v1.Running, NodeName: "node02"},
		"scheduled": {Phase: v1.Scheduled, NodeName: "node01"},
	} {
		o := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}}}
		require.NoError(t, k8s.Create(ctx, o))
		o.Status = st
		require.NoError(t, k8s.Status().Update(ctx, o))
	}

	dir := socketDir{podsDir: pods, podUID: pod.UID}
	require.NoError(t, os.MkdirAll(dir.String(), 0o777))
	var disks []machine.DiskConfig
	for _, name := range []string{"root.img", "ci.img"} {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o600))
		disks = append(disks, machine.DiskConfig{Path: p})
	}
	vmm := runnertest.SpinningWith(t, filepath.Join(dir.String(), vmispec.ControlSocket), disks)

	col := &MetricsCollector{Client: k8s, NodeName: "node01", PodsDir: pods}
	const want = `
# HELP kubevirt_vmi_memory_domain_bytes The amount of memory allocated to the domain.
# TYPE kubevirt_vmi_memory_domain_bytes gauge
kubevirt_vmi_memory_domain_bytes{name="vm1",namespace="default",node="node01"} 6.7108864e+07
# HELP kubevirt_vmi_storage_flush_requests_total Total storage flush requests.
# TYPE kubevirt_vmi_storage_flush_requests_total counter
kubevirt_vmi_storage_flush_requests_total{drive="cloudinit",name="vm1",namespace="default",node="node01"} 0
kubevirt_vmi_storage_flush_requests_total{drive="rootdisk",name="vm1",namespace="default",node="node01"} 0
# HELP kubevirt_vmi_storage_iops_read_total Total number of I/O read operations.
# TYPE kubevirt_vmi_storage_iops_read_total counter
kubevirt_vmi_storage_iops_read_total{drive="cloudinit",name="vm1",namespace="default",node="node01"} 0
kubevirt_vmi_storage_iops_read_total{drive="rootdisk",name="vm1",namespace="default",node="node01"} 0
# HELP kubevirt_vmi_storage_iops_write_total Total number of I/O write operations.
# TYPE kubevirt_vmi_storage_iops_write_total counter
kubevirt_vmi_storage_iops_write_total{drive="cloudinit",name="vm1",namespace="default",node="node01"} 0
kubevirt_vmi_storage_iops_write_total{drive="rootdisk",name="vm1",namespace="default",node="node01"} 0
# HELP kubevirt_vmi_storage_read_traffic_bytes_total Total number of bytes read from storage.
# TYPE kubevirt_vmi_storage_read_traffic_bytes_total counter
kubevirt_vmi_storage_read_traffic_bytes_total{drive="cloudinit",name="vm1",namespace="default",node="node01"} 0
kubevirt_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="vm1",namespace="default",node="node01"} 0
# HELP kubevirt_vmi_storage_write_traffic_bytes_total Total number of written bytes.
# TYPE kubevirt_vmi_storage_write_traffic_bytes_total counter
kubevirt_vmi_storage_write_traffic_bytes_total{drive="cloudinit",name="vm1",namespace="default",node="node01"} 0
kubevirt_vmi_storage_write_traffic_bytes_total{drive="rootdisk",name="vm1",namespace="default",node="node01"} 0
`
	require.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(want), "kubevirt_vmi_memory_domain_bytes",
		"kubevirt_vmi_storage_flush_requests_total", "kubevirt_vmi_storage_iops_read_total", "kubevirt_vmi_storage_iops_write_total",
		"kubevirt_vmi_storage_read_traffic_bytes_total", "kubevirt_vmi_storage_write_traffic_bytes_total"))

	// The one vCPU has spun in its thread: its CPU time, KubeVirt's way.
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	fams, err := reg.Gather()
	require.NoError(t, err)
	var vcpu []*dto.Metric
	for _, f := range fams {
		if f.GetName() == "kubevirt_vmi_vcpu_seconds_total" {
			vcpu = f.GetMetric()
		}
	}
	require.Len(t, vcpu, 1)
	labels := map[string]string{}
	for _, l := range vcpu[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	assert.Equal(t, map[string]string{"node": "node01", "namespace": "default", "name": "vm1", "id": "0", "state": "running"}, labels)
	assert.Greater(t, vcpu[0].GetCounter().GetValue(), 0.0)

	// While the VM migrates (to a target that never reads, so it stays
	// in its first round) the migration's progress is reported too.
	require.NoError(t, vmm.Client.Migrate(ctx, api.MigrateRequest{To: runnertest.DeafTarget(t)}))
	t.Cleanup(func() { _ = vmm.Client.CancelMigration(context.Background()) })
	for _, name := range []string{"kubevirt_vmi_migration_data_processed_bytes", "kubevirt_vmi_migration_data_remaining_bytes",
		"kubevirt_vmi_migration_dirty_memory_rate_bytes", "kubevirt_vmi_migration_memory_transfer_rate_bytes"} {
		assert.Equal(t, 1, testutil.CollectAndCount(col, name), name)
	}
}
