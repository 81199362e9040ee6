// Package metrics is virt-controller's Prometheus collector: KubeVirt's
// cluster-wide VMI and migration metrics, with KubeVirt's names and labels,
// computed from the objects at scrape time (nothing is counted on the side,
// so a value never drifts from the API).
package metrics

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// The annotations and labels KubeVirt reads for kubevirt_vmi_phase_count's
// os, workload, flavor, instance_type and preference labels.
const (
	annOS              = "vm.kubevirt.io/os"
	annWorkload        = "vm.kubevirt.io/workload"
	annFlavor          = "vm.kubevirt.io/flavor"
	annInstancetype    = "kubevirt.io/instancetype-name"
	annClusterInstance = "kubevirt.io/cluster-instancetype-name"
	annPreference      = "kubevirt.io/preference-name"
	annClusterPref     = "kubevirt.io/cluster-preference-name"
)

var (
	phaseCount = prometheus.NewDesc("kubevirt_vmi_phase_count",
		"Sum of VMIs per phase and node.",
		[]string{"node", "phase", "os", "workload", "flavor", "instance_type", "preference",
			"guest_os_kernel_release", "guest_os_machine", "guest_os_name", "guest_os_version_id"}, nil)
	leading = prometheus.NewDesc("kubevirt_virt_controller_leading_status",
		"Indication for an operating virt-controller.", nil, nil)
	ready = prometheus.NewDesc("kubevirt_virt_controller_ready_status",
		"Indication for a virt-controller that is ready to take the lead.", nil, nil)
	migPending = prometheus.NewDesc("kubevirt_vmi_migrations_in_pending_phase",
		"Number of current pending migrations.", nil, nil)
	migScheduling = prometheus.NewDesc("kubevirt_vmi_migrations_in_scheduling_phase",
		"Number of current scheduling migrations.", nil, nil)
	migUnset = prometheus.NewDesc("kubevirt_vmi_migrations_in_unset_phase",
		"Number of current unset migrations. These are pending items the virt-controller hasn't processed yet from the queue.", nil, nil)
	migRunning = prometheus.NewDesc("kubevirt_vmi_migrations_in_running_phase",
		"Number of current running migrations.", nil, nil)
	migSucceeded = prometheus.NewDesc("kubevirt_vmi_migration_succeeded",
		"Indicates if the VMI migration succeeded.", []string{"vmi", "vmim", "namespace"}, nil)
	migFailed = prometheus.NewDesc("kubevirt_vmi_migration_failed",
		"Indicates if the VMI migration failed.", []string{"vmi", "vmim", "namespace"}, nil)
)

// Collector reads VMIs and migrations through Reader (the manager's cache)
// on every scrape. Ready and Leading report the process's own state.
type Collector struct {
	Reader  client.Reader
	Ready   func() bool
	Leading func() bool
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseCount, leading, ready, migPending, migScheduling, migUnset, migRunning, migSucceeded, migFailed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A list that fails makes its
// metrics invalid, so the scrape reports the error instead of a zero.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(ready, prometheus.GaugeValue, boolValue(c.Ready))
	ch <- prometheus.MustNewConstMetric(leading, prometheus.GaugeValue, boolValue(c.Leading))
	ctx := context.Background()

	var vmis v1.VirtualMachineInstanceList
	if err := c.Reader.List(ctx, &vmis); err != nil {
		ch <- prometheus.NewInvalidMetric(phaseCount, fmt.Errorf("listing VMIs: %w", err))
	} else {
		counts := map[[11]string]float64{}
		for i := range vmis.Items {
			counts[phaseLabels(&vmis.Items[i])]++
		}
		for l, n := range counts {
			ch <- prometheus.MustNewConstMetric(phaseCount, prometheus.GaugeValue, n, l[:]...)
		}
	}

	var migs v1.VirtualMachineInstanceMigrationList
	if err := c.Reader.List(ctx, &migs); err != nil {
		err = fmt.Errorf("listing migrations: %w", err)
		for _, d := range []*prometheus.Desc{migPending, migScheduling, migUnset, migRunning, migSucceeded, migFailed} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	var pending, scheduling, unset, running float64
	for i := range migs.Items {
		m := &migs.Items[i]
		switch m.Status.Phase {
		case v1.MigrationPhaseUnset:
			unset++
		case v1.MigrationPending:
			pending++
		case v1.MigrationScheduling:
			scheduling++
		// From the target pod's scheduling on, KubeVirt counts a migration
		// as running.
		case v1.MigrationScheduled, v1.MigrationPreparingTarget, v1.MigrationTargetReady, v1.MigrationRunning:
			running++
		case v1.MigrationSucceeded:
			ch <- prometheus.MustNewConstMetric(migSucceeded, prometheus.GaugeValue, 1, m.Spec.VMIName, m.Name, m.Namespace)
		case v1.MigrationFailed:
			ch <- prometheus.MustNewConstMetric(migFailed, prometheus.GaugeValue, 1, m.Spec.VMIName, m.Name, m.Namespace)
		}
	}
	ch <- prometheus.MustNewConstMetric(migPending, prometheus.GaugeValue, pending)
	ch <- prometheus.MustNewConstMetric(migScheduling, prometheus.GaugeValue, scheduling)
	ch <- prometheus.MustNewConstMetric(migUnset, prometheus.GaugeValue, unset)
	ch <- prometheus.MustNewConstMetric(migRunning, prometheus.GaugeValue, running)
}

// phaseLabels are a VMI's kubevirt_vmi_phase_count labels: the phase in
// lower case as KubeVirt writes it, what the VMI's annotations say, and
// empty guest OS fields (kubevmm has no guest agent to report them).
func phaseLabels(vmi *v1.VirtualMachineInstance) [11]string {
	a := vmi.Annotations
	return [11]string{
		vmi.Status.NodeName,
		strings.ToLower(string(vmi.Status.Phase)),
		a[annOS], a[annWorkload], a[annFlavor],
		first(a[annInstancetype], a[annClusterInstance]),
		first(a[annPreference], a[annClusterPref]),
		// what the guest agent reported (virt-handler writes it)
		vmi.Status.GuestOSInfo.KernelRelease, vmi.Status.GuestOSInfo.Machine,
		vmi.Status.GuestOSInfo.Name, vmi.Status.GuestOSInfo.VersionID,
	}
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func boolValue(f func() bool) float64 {
	if f != nil && f() {
		return 1
	}
	return 0
}
