package handler

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/launcher/spec"
	"github.com/kubevmm/kubevmm/net/dhcp"
)

// Bridge binding on the pod network (KubeVirt's): the guest takes the
// pod's place on the pod network. The pod's eth0 and the guest's tap are
// the ports of the in-pod bridge k6t-eth0, as for a multus network
// (bridge.go), and the pod's IPv4 address and routes move off eth0 to the
// guest, which gets them from a DHCP server for it alone:
//
//	guest eth0 (pod IP, by DHCP) ── tap0 ── k6t-eth0 (169.254.75.10/32) ── eth0 (no IPv4) ══ node
//
// What eth0 had is recorded in the bridge's alias (podNet, JSON) before
// it is removed: the record lives and dies with the pod's network
// namespace, so a second pass, or a restarted virt-handler, reads the
// same lease from it, though eth0 has no address any more. The bridge
// has the link-local spec.PodBridgeFakeIP, the DHCP server's address,
// and a route to the pod IP: the pod reaches its guest there
// (port-forward), and the lease's classless routes tell the guest that
// 169.254.75.10 is on its link, so it answers there and not through the
// pod network's gateway.
//
// The DHCP server is a goroutine of virt-handler with a UDP socket made
// inside the pod's network namespace, bound to k6t-eth0
// (SO_BINDTODEVICE), port 67. It runs in virt-handler because the
// launcher has no capabilities and must not have: binding port 67 and
// broadcasting on the bridge would need them, and the pod's addresses are
// virt-handler's to move anyway. A socket holds its namespace, so the
// server is stopped when the VMI's pod or guest goes, and started again
// for running VMIs by a restarted handler (dhcpServers).
//
// The guest's MAC is the one the launcher gives the NIC (spec.MACFor),
// as on the other bindings: KubeVirt gives the guest the pod interface's
// original MAC instead, which the launcher cannot know. A VMI with such a
// NIC does not migrate (spec.ReasonInterfaceNotLiveMigratable): the guest
// has its pod's IP. Ports are masquerade's: here every port is the guest's.

// podNet is what the pod interface had before its addresses moved to the
// guest: the lease.
type podNet struct {
	Addr   string     `json:"addr"` // CIDR
	Routes []podRoute `json:"routes,omitempty"`
	MTU    int        `json:"mtu"`
}

type podRoute struct {
	Dst string `json:"dst"`          // CIDR
	Gw  string `json:"gw,omitempty"` // empty: on link
}

// aliasMax is the kernel's limit on an interface alias (IFALIASZ - 1).
const aliasMax = 255

// readPodNet reads eth0's first IPv4 address and its IPv4 routes that go
// through a gateway or are not the address's own prefix route.
func readPodNet(pod netlink.Link) (podNet, error) {
	addrs, err := netlink.AddrList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("addresses of %s: %w", spec.PodInterface, err)
	}
	if len(addrs) == 0 {
		return podNet{}, fmt.Errorf("pod interface %s has no IPv4 address for the guest", spec.PodInterface)
	}
	pn := podNet{Addr: addrs[0].IPNet.String(), MTU: pod.Attrs().MTU}
	routes, err := netlink.RouteList(pod, netlink.FAMILY_V4)
	if err != nil {
		return podNet{}, fmt.Errorf("routes of %s: %w", spec.PodInterface, err)
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

// lease is the DHCP lease of pn: the address, the default route's gateway
// as router, every route (and an on-link route to the bridge's address)
// as classless routes, the MTU, the pod's DNS settings, and hostname.
func (pn podNet) lease(resolv []byte, hostname string) (*dhcp.Lease, error) {
	ip, ipnet, err := net.ParseCIDR(pn.Addr)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("recorded pod address %q: not an IPv4 CIDR", pn.Addr)
	}
	fake := net.ParseIP(spec.PodBridgeFakeIP).To4()
	l := &dhcp.Lease{IP: ip.To4(), Mask: ipnet.Mask, ServerID: fake, Hostname: hostname,
		MTU: uint16(min(max(pn.MTU, 0), 65535)), Time: 24 * time.Hour}
	for _, r := range pn.Routes {
		_, dst, err := net.ParseCIDR(r.Dst)
		if err != nil || dst.IP.To4() == nil {
			return nil, fmt.Errorf("recorded pod route %q: not an IPv4 CIDR", r.Dst)
		}
		route := dhcp.Route{Dst: *dst}
		if r.Gw != "" {
			if route.Gateway = net.ParseIP(r.Gw).To4(); route.Gateway == nil {
				return nil, fmt.Errorf("recorded pod route %s: gateway %q is not an IPv4 address", r.Dst, r.Gw)
			}
		}
		if ones, _ := dst.Mask.Size(); ones == 0 {
			l.Router = route.Gateway
		}
		l.Routes = append(l.Routes, route)
	}
	l.Routes = append(l.Routes, dhcp.Route{Dst: net.IPNet{IP: fake, Mask: net.CIDRMask(32, 32)}})
	l.DNS, l.Search = parseResolvConf(resolv)
	return l, nil
}

// parseResolvConf reads the IPv4 nameservers and the search domains of a
// resolv.conf (the pod's, as the kubelet wrote it); what it does not
// understand it skips.
func parseResolvConf(b []byte) (dns []net.IP, search []string) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if ip := net.ParseIP(f[1]).To4(); ip != nil {
				dns = append(dns, ip)
			}
		case "search", "domain":
			search = f[1:]
		}
	}
	return dns, search
}

// setupPodBridgeAddrs runs in the pod's namespace, before eth0 joins the
// bridge br (created here if missing): it records eth0's network in br's
// alias (or reads the record of an earlier pass), moves it off eth0, and
// gives br the fake IP and the route to the guest's.
func setupPodBridgeAddrs(pod netlink.Link, br string) error {
	b, err := netlink.LinkByName(br)
	if err != nil {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br, MTU: pod.Attrs().MTU}}); err != nil {
			return fmt.Errorf("creating bridge %s: %w", br, err)
		}
		if b, err = netlink.LinkByName(br); err != nil {
			return fmt.Errorf("bridge %s: %w", br, err)
		}
	}
	var pn podNet
	if a := b.Attrs().Alias; a != "" {
		if err := json.Unmarshal([]byte(a), &pn); err != nil {
			return fmt.Errorf("the pod network recorded on %s: %w", br, err)
		}
	} else {
		if pn, err = readPodNet(pod); err != nil {
			return err
		}
		rec, _ := json.Marshal(pn)
		if len(rec) > aliasMax {
			return fmt.Errorf("the pod network of %s (%d routes) does not fit the %d bytes it is recorded in", spec.PodInterface, len(pn.Routes), aliasMax)
		}
		if err := netlink.LinkSetAlias(b, string(rec)); err != nil {
			return fmt.Errorf("recording the pod network on %s: %w", br, err)
		}
	}
	// Now that it is recorded, eth0 gives up its IPv4 (its routes go with
	// its prefix; those that stay are deleted).
	addrs, err := netlink.AddrList(pod, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", spec.PodInterface, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(pod, &a); err != nil {
			return fmt.Errorf("removing %s from %s: %w", a.IPNet, spec.PodInterface, err)
		}
	}
	routes, err := netlink.RouteList(pod, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("routes of %s: %w", spec.PodInterface, err)
	}
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing route %s from %s: %w", r, spec.PodInterface, err)
		}
	}
	fake, _ := netlink.ParseAddr(spec.PodBridgeFakeIP + "/32")
	if err := netlink.AddrReplace(b, fake); err != nil {
		return fmt.Errorf("address of %s: %w", br, err)
	}
	if err := netlink.LinkSetUp(b); err != nil {
		return fmt.Errorf("setting %s up: %w", br, err)
	}
	ip, _, _ := net.ParseCIDR(pn.Addr)
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: b.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Src: fake.IP}); err != nil {
		return fmt.Errorf("route to the guest's %s on %s: %w", ip, br, err)
	}
	return nil
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
	b, err := h.LinkByName(spec.BridgeName(spec.PodInterface))
	if err != nil || b.Attrs().Alias == "" {
		return pn, false, nil
	}
	if err := json.Unmarshal([]byte(b.Attrs().Alias), &pn); err != nil {
		return pn, false, fmt.Errorf("the pod network recorded on %s: %w", b.Attrs().Name, err)
	}
	return pn, true, nil
}

// dhcpServers are the DHCP servers of the VMIs on this node with a NIC
// bridge-bound on the pod network, one per VMI (only one NIC can be on
// the pod network), with the launcher pod it serves in.
type dhcpServers struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*podDHCP
}

type podDHCP struct {
	pod  types.UID
	conn net.PacketConn
}

// running says whether the server of VMI key serves pod.
func (d *dhcpServers) running(key types.NamespacedName, pod types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[key] != nil && d.m[key].pod == pod
}

// start starts the server of VMI key for the guest MAC mac in ns, the
// network namespace of its launcher pod, with the pod's resolv.conf,
// unless it runs already; one serving another pod of the VMI is stopped
// first. Until the NIC is wired (its record on the bridge) there is
// nothing to serve yet.
func (d *dhcpServers) start(log logr.Logger, key types.NamespacedName, pod types.UID, ns netns.NsHandle, resolv []byte, mac net.HardwareAddr, hostname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.m[key]; s != nil {
		if s.pod == pod {
			return nil
		}
		_ = s.conn.Close() // a UDP socket's close fails only when closed already
		delete(d.m, key)
	}
	pn, ok, err := recordedPodNet(ns)
	if err != nil || !ok {
		return err
	}
	l, err := pn.lease(resolv, hostname)
	if err != nil {
		return err
	}
	var conn net.PacketConn
	if err := inNetns(ns, func() error {
		conn, err = dhcp.Listen(spec.BridgeName(spec.PodInterface))
		return err
	}); err != nil {
		return err
	}
	if d.m == nil {
		d.m = map[types.NamespacedName]*podDHCP{}
	}
	d.m[key] = &podDHCP{pod: pod, conn: conn}
	log.Info("DHCP server started", "vmi", key.String(), "pod", pod, "ip", l.IP.String(), "mac", mac.String())
	go func() {
		if err := dhcp.Serve(conn, mac, l); err != nil {
			// Forgotten, so that the next pass starts it again.
			log.Error(err, "DHCP server failed", "vmi", key.String())
			d.mu.Lock()
			if s := d.m[key]; s != nil && s.conn == conn {
				delete(d.m, key)
			}
			d.mu.Unlock()
			_ = conn.Close()
		}
	}()
	return nil
}

// stop stops the server of VMI key, if any.
func (d *dhcpServers) stop(log logr.Logger, key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.m[key]; s != nil {
		_ = s.conn.Close() // Serve returns
		delete(d.m, key)
		log.Info("DHCP server stopped", "vmi", key.String(), "pod", s.pod)
	}
}
