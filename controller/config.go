package controller

import "github.com/kubevmm/kubevmm/api/clusterconfig"

// The cluster configuration lives in api/clusterconfig, where virt-api
// reads it too; these names keep virt-controller's code and its callers
// as they were.
type (
	ClusterConfig          = clusterconfig.ClusterConfig
	DeveloperConfiguration = clusterconfig.DeveloperConfiguration
	MigrationLimits        = clusterconfig.MigrationLimits
	ConfigFile             = clusterconfig.ConfigFile
)

// FeatureGateSameNodeLiveMigration: see clusterconfig.
const FeatureGateSameNodeLiveMigration = clusterconfig.FeatureGateSameNodeLiveMigration

// ParseClusterConfig decodes YAML or JSON and validates it.
func ParseClusterConfig(b []byte) (ClusterConfig, error) { return clusterconfig.ParseClusterConfig(b) }
