package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// KubeVirt's per-VMI metrics that virt-handler serves, with KubeVirt's
// names and labels.
var (
	vmiLabels       = []string{"node", "namespace", "name"}
	vcpuSeconds     = desc("kubevirt_vmi_vcpu_seconds_total", "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time).", []string{"id", "state"})
	memoryDomain    = desc("kubevirt_vmi_memory_domain_bytes", "The amount of memory allocated to the domain.", nil)
	netRxBytes      = desc("kubevirt_vmi_network_receive_bytes_total", "Total network traffic received in bytes.", []string{"interface"})
	netTxBytes      = desc("kubevirt_vmi_network_transmit_bytes_total", "Total network traffic transmitted in bytes.", []string{"interface"})
	netRxPackets    = desc("kubevirt_vmi_network_receive_packets_total", "Total network traffic received packets.", []string{"interface"})
	netTxPackets    = desc("kubevirt_vmi_network_transmit_packets_total", "Total network traffic transmitted packets.", []string{"interface"})
	netRxDropped    = desc("kubevirt_vmi_network_receive_packets_dropped_total", "The total number of rx packets dropped on vNIC interfaces.", []string{"interface"})
	netTxDropped    = desc("kubevirt_vmi_network_transmit_packets_dropped_total", "The total number of tx packets dropped on vNIC interfaces.", []string{"interface"})
	diskReadBytes   = desc("kubevirt_vmi_storage_read_traffic_bytes_total", "Total number of bytes read from storage.", []string{"drive"})
	diskWriteBytes  = desc("kubevirt_vmi_storage_write_traffic_bytes_total", "Total number of written bytes.", []string{"drive"})
	diskReadOps     = desc("kubevirt_vmi_storage_iops_read_total", "Total number of I/O read operations.", []string{"drive"})
	diskWriteOps    = desc("kubevirt_vmi_storage_iops_write_total", "Total number of I/O write operations.", []string{"drive"})
	diskFlushes     = desc("kubevirt_vmi_storage_flush_requests_total", "Total storage flush requests.", []string{"drive"})
	migProcessed    = desc("kubevirt_vmi_migration_data_processed_bytes", "The total Guest OS data processed and migrated to the new VM.", nil)
	migRemaining    = desc("kubevirt_vmi_migration_data_remaining_bytes", "The remaining guest OS data to be migrated to the new VM.", nil)
	migDirtyRate    = desc("kubevirt_vmi_migration_dirty_memory_rate_bytes", "The rate of memory being dirty in the Guest OS.", nil)
	migTransferRate = desc("kubevirt_vmi_migration_memory_transfer_rate_bytes", "The rate at which the memory is being transferred.", nil)
)

func desc(name, help string, extra []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, vmiLabels...), extra...), nil)
}

// MetricsCollector serves the metrics of the VMIs running on this node,
// asking each launcher's control API at scrape time (nothing is kept
// between scrapes, so a value is always the VMM's own).
type MetricsCollector struct {
	Client   client.Reader
	NodeName string
	PodsDir  string
}

// Describe implements prometheus.Collector.
func (c *MetricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vcpuSeconds, memoryDomain, netRxBytes, netTxBytes, netRxPackets, netTxPackets, netRxDropped, netTxDropped,
		diskReadBytes, diskWriteBytes, diskReadOps, diskWriteOps, diskFlushes, migProcessed, migRemaining, migDirtyRate, migTransferRate} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A VMI whose launcher does not
// answer is left out of this scrape (it may be starting or ending); a
// list that fails makes the scrape fail, naming why.
func (c *MetricsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx := context.Background()
	var vmis v1.VirtualMachineInstanceList
	if err := c.Client.List(ctx, &vmis); err != nil {
		ch <- prometheus.NewInvalidMetric(memoryDomain, fmt.Errorf("listing the VMIs of node %s: %w", c.NodeName, err))
		return
	}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if vmi.Status.NodeName != c.NodeName || vmi.Status.Phase != v1.Running {
			continue
		}
		pod, err := activeLauncherPod(ctx, c.Client, c.NodeName, vmi)
		if err != nil || pod == nil {
			continue
		}
		c.collectVMI(ctx, ch, vmi, podLauncher(c.PodsDir, pod))
	}
}

// vmmCounters is the part of the VMM's metrics (GET /v1/vm/metrics) read
// here: per virtio device, its counters, and each vCPU thread's CPU time.
type vmmCounters struct {
	Virtio      map[string]map[string]uint64 `json:"virtio"`
	VCPUSeconds map[string]float64           `json:"vcpu_seconds"`
}

func (c *MetricsCollector) collectVMI(ctx context.Context, ch chan<- prometheus.Metric, vmi *v1.VirtualMachineInstance, l launcherConn) {
	ctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	defer cancel()
	vm := l.client()
	info, err := vm.Info(ctx)
	if err != nil || info.State == api.StateStopped || info.State == api.StateMigrated {
		return
	}
	base := []string{c.NodeName, vmi.Namespace, vmi.Name}
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(append([]string{}, base...), extra...)...)
	}
	counter := func(d *prometheus.Desc, v uint64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append(append([]string{}, base...), extra...)...)
	}
	gauge(memoryDomain, float64(info.MemoryMiB<<20))

	if raw, err := vm.Metrics(ctx); err == nil {
		var m vmmCounters
		// The map came from JSON; back through JSON it takes the typed shape.
		if b, err := json.Marshal(raw); err == nil && json.Unmarshal(b, &m) == nil {
			c.devices(vmi, m, counter)
			for id, sec := range m.VCPUSeconds {
				ch <- prometheus.MustNewConstMetric(vcpuSeconds, prometheus.CounterValue, sec, append(append([]string{}, base...), id, "running")...)
			}
		}
	}

	if st, err := vm.Migration(ctx); err == nil && st.Active {
		s := st.Stats
		gauge(migProcessed, float64(s.BytesSent))
		gauge(migRemaining, float64(s.Remaining))
		gauge(migDirtyRate, s.DirtyRate)
		gauge(migTransferRate, s.Bandwidth)
	}
}

// devices maps the VMM's device names to the VMI's: the launcher attaches
// blkN for the N-th disk of the spec and netN for the N-th pod NIC.
func (c *MetricsCollector) devices(vmi *v1.VirtualMachineInstance, m vmmCounters, counter func(*prometheus.Desc, uint64, ...string)) {
	disks := vmi.Spec.Domain.Devices.Disks
	nics := vmispec.PodNICs(&vmi.Spec)
	for dev, n := range m.Virtio {
		if i, ok := deviceIndex(dev, "blk"); ok && i < len(disks) {
			d := disks[i].Name
			counter(diskReadBytes, n["read_bytes"], d)
			counter(diskWriteBytes, n["write_bytes"], d)
			counter(diskReadOps, n["reads"], d)
			counter(diskWriteOps, n["writes"], d)
			counter(diskFlushes, n["flushes"], d)
			continue
		}
		if i, ok := deviceIndex(dev, "net"); ok && i < len(nics) {
			nic := nics[i].Name
			counter(netRxBytes, n["rx_bytes"], nic)
			counter(netTxBytes, n["tx_bytes"], nic)
			counter(netRxPackets, n["rx_frames"], nic)
			counter(netTxPackets, n["tx_frames"], nic)
			counter(netRxDropped, n["rx_dropped"], nic)
			counter(netTxDropped, n["tx_dropped"]+n["tx_malformed"], nic)
		}
	}
}

func deviceIndex(dev, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(dev, prefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}
