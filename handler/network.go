package handler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Masquerade networking, KubeVirt's default binding: the guest is
// vmispec.GuestIP (10.0.2.2) on a tap in the launcher pod's network
// namespace whose address, vmispec.GatewayIP, is the guest's gateway; the pod
// routes between the tap and its own interface, and nftables NATs:
//
//	table ip kubevmm
//	  prerouting:  iifname eth0 ip daddr <pod IP> tcp dport 49152 accept
//	               iifname eth0 ip daddr <pod IP> dnat to 10.0.2.2
//	  postrouting: ip saddr 10.0.2.0/24 oifname eth0 masquerade
//
// so every port of the pod IP but one reaches the guest, and the guest
// reaches the cluster as the pod. An interface with ports gets one DNAT
// rule per port instead (iifname eth0 ip daddr <pod IP> tcp dport 80
// dnat to 10.0.2.2): only those reach the guest, the others stay the
// pod's, where nothing listens. The exception is vmispec.MigrationPort,
// where a migration target's launcher receives its guest (KubeVirt
// reserves its migration ports the same way). The tap's MAC is always
// vmispec.GatewayMAC, so that a guest migrated into another pod finds its
// gateway at the address it has cached. This needs CAP_NET_ADMIN in the pod's namespace and
// a writable net.ipv4.ip_forward, which the launcher (not root, no
// capabilities) does not have: virt-handler, privileged, does it from
// outside, as KubeVirt's handler does. The tap is made persistent and owned
// by the launcher's user, so the launcher can attach to it without
// privileges; the launcher waits for the tap to appear, and the tap is
// created last, so its existence means the network is ready.

const nftTable = "kubevmm"

// SetupPodNetwork prepares the network of the VMI's NICs (vmispec.PodNICs)
// in the launcher pod's network namespace ns (launcherProcess.netns): the masquerade NAT or the
// in-pod bridge (bridge.go) of each, then its tap. guestMACs are the
// NICs' MACs (vmispec.PodNIC.MACFor), in the same order. It is idempotent.
func SetupPodNetwork(ns netns.NsHandle, nics []vmispec.PodNIC, guestMACs []net.HardwareAddr, owner int) error {
	for i, nic := range nics {
		if err := setupNIC(ns, nic, guestMACs[i], owner); err != nil {
			return fmt.Errorf("interface %s: %w", nic.Name, err)
		}
	}
	return nil
}

// setupNIC wires one NIC in ns. Its tap is created last: if it exists,
// everything before it was done by an earlier pass (the launcher may
// still be loading the kernel, so it still says Starting).
func setupNIC(ns netns.NsHandle, nic vmispec.PodNIC, guestMAC net.HardwareAddr, owner int) error {
	done := false
	if err := inNetns(ns, func() error {
		_, err := netlink.LinkByName(nic.Tap)
		done = err == nil
		return nil
	}); err != nil {
		return err
	}
	if done {
		return nil
	}
	if nic.Binding == vmispec.BindingBridge {
		return setupBridge(ns, nic, guestMAC, owner)
	}
	return setupMasquerade(ns, nic, owner)
}

// setupMasquerade: the NAT rules, forwarding, and the tap as the guest's
// gateway.
func setupMasquerade(ns netns.NsHandle, nic vmispec.PodNIC, owner int) error {
	if err := setupNAT(ns, nic.Ports); err != nil {
		return err
	}
	return inNetns(ns, func() error {
		// /proc/sys/net is the namespace of the thread that opens it.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
			return fmt.Errorf("enabling ip_forward in the pod: %w", err)
		}
		if _, err := netlink.LinkByName(nic.Tap); err != nil {
			if err := createTap(nic.Tap, owner, nic.Queues); err != nil {
				return err
			}
		}
		l, err := netlink.LinkByName(nic.Tap)
		if err != nil {
			return fmt.Errorf("tap %s: %w", nic.Tap, err)
		}
		mac, _ := net.ParseMAC(vmispec.GatewayMAC)
		if err := netlink.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("MAC address of %s: %w", nic.Tap, err)
		}
		addr, _ := netlink.ParseAddr(vmispec.GatewayIP + "/24")
		if err := netlink.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("address of %s: %w", nic.Tap, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", nic.Tap, err)
		}
		return nil
	})
}

// inNetns runs f on an OS thread inside ns.
func inNetns(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// A fresh goroutine whose thread dies with it if it cannot get
		// back to its own namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("entering the pod's network namespace: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // thread stays locked and exits
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// createTap creates a persistent tap owned by uid/gid owner, with the
// flags the VMM opens it with (no packet info, virtio-net header): a
// multi-queue tap for a NIC with several queue pairs (vmispec.NICQueues),
// whose queues the VMM (or QEMU) attaches, one per pair. The kernel
// refuses to open a tap with the other kind of flags, so this must match.
func createTap(name string, owner, queues int) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("creating tap %s: %w", name, err)
	}
	for _, op := range []struct {
		req uint
		val int
		nm  string
	}{{unix.TUNSETOWNER, owner, "owner"}, {unix.TUNSETGROUP, owner, "group"}, {unix.TUNSETPERSIST, 1, "persist"}} {
		if err := unix.IoctlSetInt(fd, op.req, op.val); err != nil {
			return fmt.Errorf("tap %s %s: %w", name, op.nm, err)
		}
	}
	return nil
}

// podIPv4 is the first IPv4 address of the pod's interface.
func podIPv4(ns netns.NsHandle) (net.IP, error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in the pod: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(vmispec.PodInterface)
	if err != nil {
		return nil, fmt.Errorf("pod interface %s: %w", vmispec.PodInterface, err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", vmispec.PodInterface, err)
	}
	for _, a := range addrs {
		if ip := a.IP.To4(); ip != nil {
			return ip, nil
		}
	}
	return nil, fmt.Errorf("pod interface %s has no IPv4 address", vmispec.PodInterface)
}

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

// natRules are the prerouting rules' matches and verdicts for the pod
// IP: the migration port accepted (it stays the launcher's), then
// every other port DNAT'ed to the guest, or with ports only those (per
// protocol, TCP when unset), as KubeVirt's masquerade does.
func natRules(podIP net.IP, ports []v1.Port) [][]expr.Any {
	toPod := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(vmispec.PodInterface)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: podIP.To4()},
	}
	port := func(proto byte, p uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, p)},
		}
	}
	dnat := []expr.Any{
		&expr.Immediate{Register: 1, Data: net.ParseIP(vmispec.GuestIP).To4()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
	rules := [][]expr.Any{concat(toPod, port(unix.IPPROTO_TCP, vmispec.MigrationPort), []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}})}
	if len(ports) == 0 {
		return append(rules, concat(toPod, dnat))
	}
	for _, p := range ports {
		proto := byte(unix.IPPROTO_TCP)
		if p.Protocol == "UDP" {
			proto = unix.IPPROTO_UDP
		}
		rules = append(rules, concat(toPod, port(proto, uint16(p.Port)), dnat))
	}
	return rules
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// setupNAT (re)writes the kubevmm nftables table in the pod: one batch
// that deletes the old table, if any, and adds the new one.
func setupNAT(ns netns.NsHandle, ports []v1.Port) error {
	podIP, err := podIPv4(ns)
	if err != nil {
		return err
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("nftables in the pod: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return fmt.Errorf("listing nftables tables in the pod: %w", err)
	}
	for _, t := range tables {
		if t.Name == nftTable {
			c.DelTable(t)
		}
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, r := range natRules(podIP, ports) {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: r})
	}
	_, vmNet, _ := net.ParseCIDR(vmispec.DefaultVMNetworkCIDR)
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: vmNet.Mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: vmNet.IP.To4()},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(vmispec.PodInterface)},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("writing the NAT rules in the pod: %w", err)
	}
	return nil
}
