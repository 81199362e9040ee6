// Package multus is kubevmm's Multus-compatible CNI meta-plugin: the
// cluster's CNI entry on every node. On ADD it attaches the pod network
// (the node's existing CNI configuration, "clusterNetwork") and then each
// secondary network the pod's k8s.v1.cni.cncf.io/networks annotation asks
// for, by running the real plugins that network's
// NetworkAttachmentDefinition names (libcni), and records what it attached
// in the pod's k8s.v1.cni.cncf.io/network-status annotation. The result
// the runtime gets is the pod network's. DEL undoes it from libcni's cache
// of what ADD ran, so neither a deleted pod nor a deleted
// NetworkAttachmentDefinition can wedge a sandbox's teardown.
package multus

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
)

// PluginType is the meta-plugin's binary name in the CNI bin directory.
const PluginType = "kubevmm-multus"

// NetworkName is the network name of the meta-plugin's conflist (Multus's).
const NetworkName = "multus-cni-network"

// Defaults where the configuration leaves a directory out.
const (
	DefaultConfDir = "/etc/cni/net.d"
	DefaultBinDir  = "/opt/cni/bin"
	// DefaultCNIDir is the meta-plugin's own libcni cache: apart from the
	// runtime's, which holds the runtime's cache of the meta-plugin itself.
	DefaultCNIDir = "/var/lib/cni/kubevmm-multus"
)

// NetConf is the meta-plugin's entry in its conflist (Multus's fields).
type NetConf struct {
	types.PluginConf
	// Kubeconfig is the file the plugin reads pods and
	// NetworkAttachmentDefinitions with.
	Kubeconfig string `json:"kubeconfig"`
	// ClusterNetwork is the pod network: a conf or conflist file (an
	// absolute path), else a network name in ConfDir.
	ClusterNetwork string `json:"clusterNetwork"`
	// ConfDir is where a NetworkAttachmentDefinition with an empty config
	// finds its network (by its name).
	ConfDir string `json:"confDir,omitempty"`
	// CNIDir is the cache of what the delegates were given and returned.
	CNIDir string `json:"cniDir,omitempty"`
	// BinDir is where the delegated plugins are.
	BinDir string `json:"binDir,omitempty"`
}

// ParseConf reads the meta-plugin's configuration (CNI stdin).
func ParseConf(b []byte) (*NetConf, error) {
	c := &NetConf{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s configuration: %w", PluginType, err)
	}
	if c.ClusterNetwork == "" {
		return nil, errors.New(PluginType + " configuration: clusterNetwork is required (the pod network's conf file or network name)")
	}
	if c.ConfDir == "" {
		c.ConfDir = DefaultConfDir
	}
	if c.CNIDir == "" {
		c.CNIDir = DefaultCNIDir
	}
	if c.BinDir == "" {
		c.BinDir = DefaultBinDir
	}
	for name, d := range map[string]string{"confDir": c.ConfDir, "cniDir": c.CNIDir, "binDir": c.BinDir} {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("%s configuration: %s %q is not an absolute path", PluginType, name, d)
		}
	}
	return c, nil
}
