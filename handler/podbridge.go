package handler

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Bridge binding on the pod network (KubeVirt's): the guest takes the
// pod's place on the pod network. The pod's eth0 and the guest's tap are
// the ports of the in-pod bridge k6t-eth0, as for a multus network
// (bridge.go), and the pod's IPv4 address and routes move off eth0 to the
// guest, which gets them from a DHCP server for it alone:
//
//	guest eth0 (pod IP, by DHCP) ── tap0 ── k6t-eth0 (169.254.75.10/32) ── eth0 (no IPv4) ══ node
//
// What eth0 had, its IPv4 network and its MAC, is recorded in the
// bridge's alias (vmispec.PodBridgeRecord, JSON) before it is changed: the
// record lives and dies with the pod's network namespace, so a second
// pass, or a restarted virt-handler, reads the same network and MAC from
// it, though eth0 has neither any more. The bridge
// has the link-local vmispec.PodBridgeFakeIP, the DHCP server's address,
// and a route to the pod IP: the pod reaches its guest there
// (port-forward), and the lease's classless routes tell the guest that
// 169.254.75.10 is on its link, so it answers there and not through the
// pod network's gateway.
//
// The guest's DHCP server is its launcher's (package launcher, dhcp.go),
// which serves the lease of the record: virt-handler reads no guest's
// packets, but those of a launcher pod of an earlier version, whose
// launcher serves none (legacydhcp.go).
//
// The guest's MAC is its macAddress, else, as KubeVirt does, eth0's
// original MAC (vmispec.PodNIC.TakesPodMAC): the guest keeps the identity
// the pod network's CNI gave the pod, and eth0 gets a random one (a
// bridge forwards no frame to a MAC one of its ports has). The launcher
// reads it from the record once its tap exists. A VMI with such a NIC
// does not migrate (vmispec.ReasonInterfaceNotLiveMigratable): the guest has
// its pod's IP. Ports are masquerade's: here every port is the guest's.

// podNet is what the pod interface had before it went to the guest (the
// lease and the MAC), with the handler's methods.
type podNet vmispec.PodBridgeRecord

type podRoute = vmispec.PodBridgeRoute

// aliasMax is the kernel's limit on an interface alias (IFALIASZ - 1).
const aliasMax = 255

// readPodNet reads eth0's MAC, its first IPv4 address and its IPv4 routes
// that go through a gateway or are not the address's own prefix route.
func readPodNet(pod netlink.Link) (podNet, error) {
	addrs, err := netlink.AddrList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("addresses of %s: %w", vmispec.PodInterface, err)
	}
	if len(addrs) == 0 {
		return podNet{}, fmt.Errorf("pod interface %s has no IPv4 address for the guest", vmispec.PodInterface)
	}
	pn := podNet{Addr: addrs[0].IPNet.String(), MTU: pod.Attrs().MTU, MAC: pod.Attrs().HardwareAddr.String()}
	routes, err := netlink.RouteList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("routes of %s: %w", vmispec.PodInterface, err)
	}
	for _, r := range routes {
		if r.Gw == nil && r.Dst != nil && r.Dst.Contains(addrs[0].IP) {
			continue // the address's prefix route: the guest makes its own
		}
		pr := podRoute{Dst: "0.0.0.0/0"}
		if r.Dst != nil {
			pr.Dst = r.Dst.String()
		}
		if r.Gw != nil {
			pr.Gw = r.Gw.String()
		}
		pn.Routes = append(pn.Routes, pr)
	}
	return pn, nil
}

// setupPodBridgeAddrs runs in the pod's namespace, before eth0 joins the
// bridge br (created here if missing): it records eth0's network and MAC
// in br's alias (or reads the record of an earlier pass), moves the
// network off eth0, and gives br the fake IP and the route to the
// guest's. It returns the record.
func setupPodBridgeAddrs(pod netlink.Link, br string) (podNet, error) {
	b, err := netlink.LinkByName(br)
	if err != nil {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br, MTU: pod.Attrs().MTU}}); err != nil {
			return podNet{}, fmt.Errorf("creating bridge %s: %w", br, err)
		}
		if b, err = netlink.LinkByName(br); err != nil {
			return podNet{}, fmt.Errorf("bridge %s: %w", br, err)
		}
	}
	var pn podNet
	if a := b.Attrs().Alias; a != "" {
		rec, err := vmispec.ParsePodBridgeRecord(a)
		if err != nil {
			return podNet{}, err
		}
		pn = podNet(rec)
	} else {
		if pn, err = readPodNet(pod); err != nil {
			return podNet{}, err
		}
		rec, _ := json.Marshal(pn)
		if len(rec) > aliasMax {
			return podNet{}, fmt.Errorf("the pod network of %s (%d routes) does not fit the %d bytes it is recorded in", vmispec.PodInterface, len(pn.Routes), aliasMax)
		}
		if err := netlink.LinkSetAlias(b, string(rec)); err != nil {
			return podNet{}, fmt.Errorf("recording the pod network on %s: %w", br, err)
		}
	}
	// Now that it is recorded, eth0 gives up its IPv4 (its routes go with
	// its prefix; those that stay are deleted).
	addrs, err := netlink.AddrList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("addresses of %s: %w", vmispec.PodInterface, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(pod, &a); err != nil {
			return podNet{}, fmt.Errorf("removing %s from %s: %w", a.IPNet, vmispec.PodInterface, err)
		}
	}
	routes, err := netlink.RouteList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("routes of %s: %w", vmispec.PodInterface, err)
	}
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, os.ErrNotExist) {
			return podNet{}, fmt.Errorf("removing route %s from %s: %w", r, vmispec.PodInterface, err)
		}
	}
	fake, _ := netlink.ParseAddr(vmispec.PodBridgeFakeIP + "/32")
	if err := netlink.AddrReplace(b, fake); err != nil {
		return podNet{}, fmt.Errorf("address of %s: %w", br, err)
	}
	if err := netlink.LinkSetUp(b); err != nil {
		return podNet{}, fmt.Errorf("setting %s up: %w", br, err)
	}
	ip, _, _ := net.ParseCIDR(pn.Addr)
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: b.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Src: fake.IP}); err != nil {
		return podNet{}, fmt.Errorf("route to the guest's %s on %s: %w", ip, br, err)
	}
	return pn, nil
}

// podBridgeGuestIP is the guest's address, the pod IP recorded on the
// in-pod bridge; nil when the NIC is not wired yet.
func podBridgeGuestIP(ns netns.NsHandle) (net.IP, error) {
	pn, ok, err := recordedPodNet(ns)
	if err != nil || !ok {
		return nil, err
	}
	ip, _, err := net.ParseCIDR(pn.Addr)
	if err != nil {
		return nil, fmt.Errorf("recorded pod address %q: %w", pn.Addr, err)
	}
	return ip, nil
}

// recordedPodNet reads the record on k6t-eth0 in ns; ok is false while
// there is none (the NIC is not wired yet).
func recordedPodNet(ns netns.NsHandle) (pn podNet, ok bool, err error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return pn, false, fmt.Errorf("netlink in the pod: %w", err)
	}
	defer h.Close()
	b, err := h.LinkByName(vmispec.BridgeName(vmispec.PodInterface))
	if err != nil || b.Attrs().Alias == "" {
		return pn, false, nil
	}
	rec, err := vmispec.ParsePodBridgeRecord(b.Attrs().Alias)
	if err != nil {
		return pn, false, err
	}
	return podNet(rec), true, nil
}
