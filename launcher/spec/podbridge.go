package spec

import (
	"encoding/json"
	"fmt"
	"net"
)

// TakesPodMAC says whether the guest's NIC takes the pod interface's
// original MAC, as KubeVirt's bridge binding on the pod network does for
// an interface without macAddress: the guest keeps the identity the pod
// network's CNI gave the pod (and the pod's network-status reports), and
// the pod interface moves to another MAC. virt-handler records the
// original in PodBridgeRecord before it changes it. A record without it
// was written by a virt-handler from before it was recorded, which gave
// the guest MACFor's MAC: so does every part then, across an upgrade.
func (n PodNIC) TakesPodMAC() bool { return n.PodBridge() && n.MAC == "" }

// PodBridgeRecord is what the pod interface had before virt-handler gave
// it to the guest of a NIC bridge-bound on the pod network: its IPv4
// network (the guest's DHCP lease) and its MAC. virt-handler keeps it as
// JSON in the alias of the in-pod bridge, BridgeName(PodInterface), so it
// lives and dies with the pod's network namespace; the launcher reads the
// MAC from there (/sys/class/net/<bridge>/ifalias) once its tap exists.
type PodBridgeRecord struct {
	Addr   string           `json:"addr"` // CIDR
	Routes []PodBridgeRoute `json:"routes,omitempty"`
	MTU    int              `json:"mtu"`
	// MAC is the pod interface's original MAC: the guest's where
	// TakesPodMAC. Empty in a record of an older virt-handler.
	MAC string `json:"mac,omitempty"`
}

// PodBridgeRoute is a route of the pod interface, for the guest.
type PodBridgeRoute struct {
	Dst string `json:"dst"`          // CIDR
	Gw  string `json:"gw,omitempty"` // empty: on link
}

// ParsePodBridgeRecord parses the record in the in-pod bridge's alias.
func ParsePodBridgeRecord(alias string) (PodBridgeRecord, error) {
	var r PodBridgeRecord
	if err := json.Unmarshal([]byte(alias), &r); err != nil {
		return r, fmt.Errorf("the pod network recorded on %s: %w", BridgeName(PodInterface), err)
	}
	return r, nil
}

// GuestMAC is the guest's MAC where TakesPodMAC: the recorded one, else
// (a record of an older virt-handler) fallback, MACFor's.
func (r PodBridgeRecord) GuestMAC(fallback net.HardwareAddr) (net.HardwareAddr, error) {
	if r.MAC == "" {
		return fallback, nil
	}
	m, err := net.ParseMAC(r.MAC)
	if err != nil || len(m) != 6 || m[0]&1 != 0 {
		return nil, fmt.Errorf("the pod interface's MAC recorded on %s, %q: not a unicast MAC address", BridgeName(PodInterface), r.MAC)
	}
	return m, nil
}
