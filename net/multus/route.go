package multus

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// defaultRoute moves the pod's default route onto the secondary network
// whose selection asked for it ("default-route": its gateways), as Multus
// does: the default routes of each gateway's address family are replaced
// by one via that gateway through that interface (the first gateway of a
// family wins).
func (p *Plugin) defaultRoute(nsPath string, dels []delegate) error {
	var want []delegate
	for _, d := range dels {
		if d.sel != nil && len(d.sel.GatewayRequest) > 0 {
			want = append(want, d)
		}
	}
	if len(want) == 0 {
		return nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("default-route: opening netns %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("default-route: netlink in %s: %w", nsPath, err)
	}
	defer h.Close()
	done := map[int]bool{}
	for _, d := range want {
		link, err := h.LinkByName(d.rt.IfName)
		if err != nil {
			return fmt.Errorf("default-route of network %s: interface %s: %w", d.status, d.rt.IfName, err)
		}
		for _, gw := range parseIPs(d.sel.GatewayRequest) {
			family, dst := netlink.FAMILY_V4, &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}
			if gw.To4() == nil {
				family, dst = netlink.FAMILY_V6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			}
			if done[family] {
				continue
			}
			done[family] = true
			routes, err := h.RouteListFiltered(family, &netlink.Route{Dst: nil}, netlink.RT_FILTER_DST)
			if err != nil {
				return fmt.Errorf("default-route of network %s: listing routes: %w", d.status, err)
			}
			for _, r := range routes {
				if err := h.RouteDel(&r); err != nil {
					return fmt.Errorf("default-route of network %s: removing %s: %w", d.status, r, err)
				}
			}
			if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Gw: gw}); err != nil {
				return fmt.Errorf("default-route of network %s: via %s dev %s: %w", d.status, gw, d.rt.IfName, err)
			}
		}
	}
	return nil
}
