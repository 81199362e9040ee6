package handler

import (
	"net"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/test/netnstest"
)

// Bridge binding on the pod network, in real namespaces: a pod with eth0
// (10.244.0.7/24, a default route and one more) on a veth to the node.
// The wiring moves the pod's address off eth0 and gives eth0 another MAC,
// its original being the guest's (twice: the second pass changes
// nothing), and a real DHCP client (busybox udhcpc) on the guest's side
// of the in-pod bridge, with eth0's original MAC, gets the pod's
// address, router, routes, MTU and DNS from the server virt-handler runs
// for a launcher of an earlier version (legacydhcp.go: the record's lease,
// as the launcher serves it now); another MAC gets nothing. The pod then reaches the guest at its pod IP,
// as port-forward does, and the node reaches it too.
func TestPodBridgeDHCP(t *testing.T) {
	podNs, pod := testNetns(t, "pod")
	nodeNs, node := testNetns(t, "node")
	guestNs, guest := testNetns(t, "guest")
	nic := vmispec.PodNIC{Name: "default", Model: "virtio", Tap: "tap0", Queues: 1, Binding: vmispec.BindingBridge, PodInterface: vmispec.PodInterface}
	require.True(t, nic.PodBridge())
	require.True(t, nic.TakesPodMAC(), "no macAddress: the guest takes eth0's")

	veth(t, podNs, vmispec.PodInterface, "10.244.0.7/24", node, "vethpod", "10.244.0.1/24", nodeNs)
	hp, err := podNs.Handle()
	require.NoError(t, err)
	defer hp.Close()
	eth0, err := hp.LinkByName(vmispec.PodInterface)
	require.NoError(t, err)
	require.NoError(t, hp.LinkSetMTU(eth0, 1400))
	guestMAC := eth0.Attrs().HardwareAddr                  // the CNI's, the guest's to be
	derived := net.HardwareAddr{0x02, 0x6b, 0x76, 0, 0, 7} // MACFor's: not the guest's
	gw := net.IPv4(10, 244, 0, 1)
	require.NoError(t, hp.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}))
	_, svc, _ := net.ParseCIDR("10.96.0.0/12")
	require.NoError(t, hp.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: svc, Gw: gw}))

	require.NoError(t, setupNIC(pod, nic, derived, 107))
	eth0, err = hp.LinkByName(vmispec.PodInterface)
	require.NoError(t, err)
	podMAC := eth0.Attrs().HardwareAddr
	assert.NotEqual(t, guestMAC.String(), podMAC.String(), "eth0 gave its MAC to the guest")
	require.NoError(t, setupNIC(pod, nic, derived, 107), "a second pass changes nothing")
	// A pass after the tap is made (a restarted handler) is idempotent
	// even without the tap's shortcut.
	require.NoError(t, setupBridge(pod, nic, derived, 107))

	br := vmispec.BridgeName(vmispec.PodInterface)
	eth0, err = hp.LinkByName(vmispec.PodInterface)
	require.NoError(t, err)
	assert.Equal(t, podMAC.String(), eth0.Attrs().HardwareAddr.String(), "eth0 keeps its new MAC")
	pn, ok, err := recordedPodNet(pod)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, guestMAC.String(), pn.MAC, "eth0's original MAC is recorded")
	addrs, err := hp.AddrList(eth0, netlink.FAMILY_V4)
	require.NoError(t, err)
	assert.Empty(t, addrs, "the pod's address left eth0")
	routes, err := hp.RouteList(eth0, netlink.FAMILY_V4)
	require.NoError(t, err)
	assert.Empty(t, routes, "and its routes")
	bl, err := hp.LinkByName(br)
	require.NoError(t, err)
	assert.Equal(t, bl.Attrs().Index, eth0.Attrs().MasterIndex, "eth0 is a port of %s", br)
	baddrs, err := hp.AddrList(bl, netlink.FAMILY_V4)
	require.NoError(t, err)
	require.Len(t, baddrs, 1)
	assert.Equal(t, vmispec.PodBridgeFakeIP+"/32", baddrs[0].IPNet.String())

	// The guest: a veth on the bridge in place of the tap (a DHCP client
	// needs an interface), with the guest's MAC.
	veth(t, podNs, "gst0", "", guest, "ge0", "", guestNs)
	require.NoError(t, link.Attach(hp, "gst0", br))
	hg, err := guestNs.Handle()
	require.NoError(t, err)
	defer hg.Close()
	ge, err := hg.LinkByName("ge0")
	require.NoError(t, err)
	require.NoError(t, hg.LinkSetHardwareAddr(ge, guestMAC))

	var d dhcpServers
	key := types.NamespacedName{Namespace: "ns1", Name: "vm1"}
	resolv := []byte("search ns1.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n")
	require.NoError(t, d.start(logr.Discard(), key, "pod-1", pod, resolv, derived, true, "vm1"), "the recorded MAC's server")
	t.Cleanup(func() { d.stop(logr.Discard(), key) })
	require.True(t, d.running(key, "pod-1"))
	require.NoError(t, d.start(logr.Discard(), key, "pod-1", pod, resolv, derived, true, "vm1"), "a second start is a no-op")

	udhcpc := func(iface string) (map[string]string, error) {
		return netnstest.Udhcpc(t, guestNs, iface, "mtu", "staticroutes", "search")
	}
	env, err := udhcpc("ge0")
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.7", env["ip"])
	assert.Equal(t, "255.255.255.0", env["subnet"])
	assert.Equal(t, "24", env["mask"])
	assert.Equal(t, "10.244.0.1", env["router"])
	assert.Equal(t, "1400", env["mtu"])
	assert.Equal(t, "10.96.0.10", env["dns"])
	assert.Equal(t, "ns1.svc.cluster.local svc.cluster.local", env["search"])
	assert.Equal(t, "vm1", env["hostname"])
	assert.Equal(t, "0.0.0.0/0 10.244.0.1 10.96.0.0/12 10.244.0.1 169.254.75.10/32 0.0.0.0", env["staticroutes"])
	assert.Equal(t, vmispec.PodBridgeFakeIP, env["serverid"])

	// Another MAC on the bridge is not answered.
	veth(t, podNs, "gst1", "", guest, "ge1", "", guestNs)
	require.NoError(t, link.Attach(hp, "gst1", br))
	_, err = udhcpc("ge1")
	assert.Error(t, err, "no lease for another MAC")

	// The guest configures its lease as a guest does; the pod reaches it
	// at the pod IP (port-forward's path), the node too.
	require.NoError(t, link.Up(hg, "ge0", env["ip"]+"/24"))
	require.NoError(t, hg.RouteAdd(&netlink.Route{LinkIndex: ge.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: net.ParseIP(vmispec.PodBridgeFakeIP), Mask: net.CIDRMask(32, 32)}}))
	require.NoError(t, hg.RouteAdd(&netlink.Route{LinkIndex: ge.Attrs().Index, Gw: gw}))
	var ln net.Listener
	require.NoError(t, guestNs.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":8080")
		return err
	}))
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ip, err := podBridgeGuestIP(pod)
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.7", ip.String(), "the guest's address, from the record")
	c, err := dialInNetns(pod, net.JoinHostPort(ip.String(), "8080"))
	require.NoError(t, err, "the pod reaches its guest")
	c.Close()
	c, err = dialInNetns(node, "10.244.0.7:8080")
	require.NoError(t, err, "the node reaches the guest at the pod IP")
	c.Close()

	d.stop(logr.Discard(), key)
	assert.False(t, d.running(key, "pod-1"))
}
