package vmispec

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/net/dhcp"
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
// lives and dies with the pod's network namespace; the launcher reads it
// there (/sys/class/net/<bridge>/ifalias) once its tap exists, for the
// MAC and the lease it serves.
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

// UnprivilegedPortSysctl is the sysctl of a launcher pod whose launcher
// serves DHCP (ServesDHCP): the ports from its value up are unprivileged
// in the pod's own network namespace, so that the launcher, without any
// capability, binds the DHCP server's port. One of the kubelet's safe
// sysctls, which the restricted Pod Security Standard allows.
const UnprivilegedPortSysctl = "net.ipv4.ip_unprivileged_port_start"

// LauncherSysctls are the sysctls of the launcher pod of a VMI: with a
// NIC whose guest the launcher serves DHCP, UnprivilegedPortSysctl down
// to DHCP's server port; none otherwise.
func LauncherSysctls(s *v1.VirtualMachineInstanceSpec) []corev1.Sysctl {
	for _, n := range PodNICs(s) {
		if n.ServesDHCP() {
			return []corev1.Sysctl{{Name: UnprivilegedPortSysctl, Value: strconv.Itoa(dhcp.ServerPort)}}
		}
	}
	return nil
}

// LauncherServesDHCP says whether the launcher of pod serves its guest's
// DHCP: a launcher pod of an earlier version, made without
// UnprivilegedPortSysctl, has a launcher that serves none (virt-handler
// did).
func LauncherServesDHCP(pod *corev1.Pod) bool {
	sc := pod.Spec.SecurityContext
	return sc != nil && slices.ContainsFunc(sc.Sysctls, func(s corev1.Sysctl) bool { return s.Name == UnprivilegedPortSysctl })
}

// ServesDHCP says whether the launcher serves the NIC's guest a DHCP
// lease: the masquerade binding (spec.MasqueradeLease) and bridge on the
// pod network (PodBridgeRecord.Lease), whose guest's address is the
// pod's to give.
func (n PodNIC) ServesDHCP() bool { return n.Binding == BindingMasquerade || n.PodBridge() }

// LeaseTime is how long a lease the launcher serves lasts: the guest
// renews it from the same launcher halfway through.
const LeaseTime = 24 * time.Hour

// Lease is the DHCP lease of the guest of a NIC bridge-bound on the pod
// network, from the record: the pod's address, its default route's
// gateway as router, every route (and an on-link route to the bridge's
// address, the server's) as classless routes, the MTU, the DNS settings
// of resolv (the pod's resolv.conf) and hostname.
func (r PodBridgeRecord) Lease(resolv []byte, hostname string) (*dhcp.Lease, error) {
	ip, ipnet, err := net.ParseCIDR(r.Addr)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("recorded pod address %q: not an IPv4 CIDR", r.Addr)
	}
	fake := net.ParseIP(PodBridgeFakeIP).To4()
	l := &dhcp.Lease{IP: ip.To4(), Mask: ipnet.Mask, ServerID: fake, Hostname: hostname,
		MTU: uint16(min(max(r.MTU, 0), 65535)), Time: LeaseTime}
	for _, rt := range r.Routes {
		_, dst, err := net.ParseCIDR(rt.Dst)
		if err != nil || dst.IP.To4() == nil {
			return nil, fmt.Errorf("recorded pod route %q: not an IPv4 CIDR", rt.Dst)
		}
		route := dhcp.Route{Dst: *dst}
		if rt.Gw != "" {
			if route.Gateway = net.ParseIP(rt.Gw).To4(); route.Gateway == nil {
				return nil, fmt.Errorf("recorded pod route %s: gateway %q is not an IPv4 address", rt.Dst, rt.Gw)
			}
		}
		if ones, _ := dst.Mask.Size(); ones == 0 {
			l.Router = route.Gateway
		}
		l.Routes = append(l.Routes, route)
	}
	l.Routes = append(l.Routes, dhcp.Route{Dst: net.IPNet{IP: fake, Mask: net.CIDRMask(32, 32)}})
	l.DNS, l.Search = dhcp.ParseResolvConf(resolv)
	return l, nil
}

// MasqueradeLease is the DHCP lease of the guest of a masquerade NIC:
// GuestIP on DefaultVMNetworkCIDR behind GatewayIP (the tap, also the
// server), the pod interface's MTU, the DNS settings of resolv (the pod's
// resolv.conf) and hostname, as KubeVirt's masquerade DHCP gives.
func MasqueradeLease(resolv []byte, hostname string, mtu int) *dhcp.Lease {
	gw := net.ParseIP(GatewayIP).To4()
	_, cidr, _ := net.ParseCIDR(DefaultVMNetworkCIDR) // a constant
	l := &dhcp.Lease{IP: net.ParseIP(GuestIP).To4(), Mask: cidr.Mask, Router: gw, ServerID: gw,
		Hostname: hostname, MTU: uint16(min(max(mtu, 0), 65535)), Time: LeaseTime}
	l.DNS, l.Search = dhcp.ParseResolvConf(resolv)
	return l
}
