package controller

import "github.com/kubevmm/kubevmm/api/clusterconfig"

// The cluster configuration lives in api/clusterconfig, where virt-api
// reads it too; these names keep virt-controller's code and its callers
// as they were.

// ClusterConfig is clusterconfig.ClusterConfig.
type ClusterConfig = clusterconfig.ClusterConfig

// DeveloperConfiguration is clusterconfig.DeveloperConfiguration.
type DeveloperConfiguration = clusterconfig.DeveloperConfiguration

// MigrationLimits is clusterconfig.MigrationLimits.
type MigrationLimits = clusterconfig.MigrationLimits

// ConfigFile is clusterconfig.ConfigFile.
type ConfigFile = clusterconfig.ConfigFile

// FeatureGateSameNodeLiveMigration is clusterconfig's.
const FeatureGateSameNodeLiveMigration = clusterconfig.FeatureGateSameNodeLiveMigration

// ParseClusterConfig decodes YAML or JSON and validates it.
func ParseClusterConfig(b []byte) (ClusterConfig, error) { return clusterconfig.ParseClusterConfig(b) }
