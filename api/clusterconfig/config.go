// Package clusterconfig is the part of KubeVirt's cluster configuration
// (the KubeVirt CR's spec.configuration) that kubevmm implements, as
// virt-operator renders it into the ConfigMap kubevmm-config and
// virt-controller and virt-api read it (--config).
package clusterconfig

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// ClusterConfig is the part of KubeVirt's cluster configuration (the
// KubeVirt CR's spec.configuration) that kubevmm implements.
// virt-controller and virt-api read it from a YAML or JSON file (--config),
// the ConfigMap kubevmm-config mounted into their pods, and read it again
// whenever the file changes.
//
//	migrations:
//	  parallelMigrationsPerCluster: 5
//	  parallelOutboundMigrationsPerNode: 2
//	  bandwidthPerMigration: 0          # bytes/s, a quantity; 0: no cap
//	  completionTimeoutPerGiB: 150      # s per GiB of guest memory
//	  progressTimeout: 150              # s without progress
//	  allowAutoConverge: false
//	  unschedulablePendingTimeoutSeconds: 300
//	  catchAllPendingTimeoutSeconds: 900
//	developerConfiguration:
//	  featureGates: [SameNodeLiveMigration]
type ClusterConfig struct {
	Migrations             v1.MigrationConfiguration `json:"migrations,omitempty"`
	DeveloperConfiguration DeveloperConfiguration    `json:"developerConfiguration,omitempty"`
}

// DeveloperConfiguration holds the feature gates, as in KubeVirt.
type DeveloperConfiguration struct {
	FeatureGates []string `json:"featureGates,omitempty"`
}

// FeatureGateSameNodeLiveMigration (kubevmm's own gate) lets a migration's
// target pod run on the node of its source. KubeVirt, and kubevmm without
// the gate, keep the target off the source's node (a required node
// anti-affinity), so a single-node cluster cannot migrate: the migration
// fails once its target pod has been unschedulable for
// unschedulablePendingTimeoutSeconds. The dev cluster (one node) enables
// it to exercise the whole handoff; it moves nothing off the node, so it
// is no use for draining one.
const FeatureGateSameNodeLiveMigration = "SameNodeLiveMigration"

// FeatureGateHotplugVolumes (KubeVirt's) lets addvolume/removevolume and
// hotpluggable volumes in VMI and VM specs through virt-api; without it
// they are refused, as KubeVirt refuses them.
const FeatureGateHotplugVolumes = "HotplugVolumes"

// FeatureGateVMMSeccompOptOut (kubevmm's own gate) lets a VM ask, by its
// kubevmm.io/seccomp annotation, for its VMM's seccomp filter to log
// ("log") or not to be installed ("off"). Without it virt-api refuses
// both: the filter confines a VMM the guest may have subverted, and
// whether it is there is the cluster admin's choice, not the VM owner's.
const FeatureGateVMMSeccompOptOut = "VMMSeccompOptOut"

// KubeVirt's defaults (the product's limits, architecture.md).
const (
	defaultParallelMigrationsPerCluster      = 5
	defaultParallelOutboundMigrationsPerNode = 2
	defaultCompletionTimeoutPerGiB           = 150
	defaultProgressTimeout                   = 150
	defaultUnschedulablePendingTimeout       = 300
	defaultCatchAllPendingTimeout            = 900
)

// HasFeatureGate reports whether the gate is enabled.
func (c ClusterConfig) HasFeatureGate(g string) bool {
	return slices.Contains(c.DeveloperConfiguration.FeatureGates, g)
}

// MigrationLimits is the migration configuration with every default
// applied.
type MigrationLimits struct {
	PerCluster, PerNode     int
	BandwidthBytesPerSecond int64 // 0: no cap
	CompletionTimeoutPerGiB int64
	ProgressTimeout         int64
	AllowAutoConverge       bool
	AllowPostCopy           bool
	UnschedulableTimeout    time.Duration
	CatchAllTimeout         time.Duration
}

// Limits resolves the migration configuration.
func (c ClusterConfig) Limits() MigrationLimits {
	m := c.Migrations
	var bw int64
	if m.BandwidthPerMigration != nil {
		bw = m.BandwidthPerMigration.Value()
	}
	return MigrationLimits{
		PerCluster:              int(ptr.Deref(m.ParallelMigrationsPerCluster, defaultParallelMigrationsPerCluster)),
		PerNode:                 int(ptr.Deref(m.ParallelOutboundMigrationsPerNode, defaultParallelOutboundMigrationsPerNode)),
		BandwidthBytesPerSecond: bw,
		CompletionTimeoutPerGiB: ptr.Deref(m.CompletionTimeoutPerGiB, defaultCompletionTimeoutPerGiB),
		ProgressTimeout:         ptr.Deref(m.ProgressTimeout, defaultProgressTimeout),
		AllowAutoConverge:       ptr.Deref(m.AllowAutoConverge, false),
		AllowPostCopy:           ptr.Deref(m.AllowPostCopy, false),
		UnschedulableTimeout:    time.Duration(ptr.Deref(m.UnschedulablePendingTimeoutSeconds, defaultUnschedulablePendingTimeout)) * time.Second,
		CatchAllTimeout:         time.Duration(ptr.Deref(m.CatchAllPendingTimeoutSeconds, defaultCatchAllPendingTimeout)) * time.Second,
	}
}

// Validate refuses what kubevmm cannot do or what makes no sense.
func (c ClusterConfig) Validate() error {
	m := c.Migrations
	for name, v := range map[string]*uint32{"parallelMigrationsPerCluster": m.ParallelMigrationsPerCluster, "parallelOutboundMigrationsPerNode": m.ParallelOutboundMigrationsPerNode} {
		if v != nil && *v == 0 {
			return fmt.Errorf("migrations.%s: must be at least 1", name)
		}
	}
	if q := m.BandwidthPerMigration; q != nil && q.Sign() < 0 {
		return fmt.Errorf("migrations.bandwidthPerMigration %s: must not be negative", q.String())
	}
	for name, v := range map[string]*int64{"completionTimeoutPerGiB": m.CompletionTimeoutPerGiB, "progressTimeout": m.ProgressTimeout,
		"unschedulablePendingTimeoutSeconds": m.UnschedulablePendingTimeoutSeconds, "catchAllPendingTimeoutSeconds": m.CatchAllPendingTimeoutSeconds} {
		if v != nil && (*v <= 0 || *v > math.MaxInt32) {
			return fmt.Errorf("migrations.%s %d: must be a positive number of seconds", name, *v)
		}
	}
	return nil
}

// ParseClusterConfig decodes YAML or JSON and validates it.
func ParseClusterConfig(b []byte) (ClusterConfig, error) {
	var c ClusterConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return ClusterConfig{}, fmt.Errorf("cluster config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return ClusterConfig{}, fmt.Errorf("cluster config: %w", err)
	}
	return c, nil
}

// ConfigFile is a ClusterConfig read from a file, re-read when the file
// changes (a ConfigMap update reaches a mounted file within the kubelet's
// sync period). A file that becomes invalid keeps the last good config,
// and Get reports the error.
type ConfigFile struct {
	Path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	cfg     ClusterConfig
	loaded  bool
}

// Get returns the current configuration.
func (f *ConfigFile) Get() (ClusterConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.Path)
	if err != nil {
		return f.cfg, fmt.Errorf("cluster config %s: %w", f.Path, err)
	}
	if f.loaded && st.ModTime().Equal(f.modTime) && st.Size() == f.size {
		return f.cfg, nil
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return f.cfg, fmt.Errorf("cluster config %s: %w", f.Path, err)
	}
	c, err := ParseClusterConfig(b)
	if err != nil {
		return f.cfg, fmt.Errorf("%s: %w", f.Path, err)
	}
	f.cfg, f.modTime, f.size, f.loaded = c, st.ModTime(), st.Size(), true
	return c, nil
}
