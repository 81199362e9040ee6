package launcher

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/test/netnstest"
)

// The launcher's DHCP server, in real network namespaces: a pod with the
// masquerade NIC's device (a veth named as the tap, with the gateway's
// address) and a guest on its other end running a real DHCP client
// (busybox udhcpc) with the NIC's MAC. The guest gets KubeVirt's
// masquerade lease with the pod's MTU, DNS and the VMI's hostname;
// another MAC gets nothing. A bridge NIC on the pod network whose record
// is missing is a clear error, and the launcher holds no socket after it.
func TestServeDHCP(t *testing.T) {
	pod := netnstest.New(t, "pod")
	guest := netnstest.New(t, "guest")
	hp, err := pod.Handle()
	require.NoError(t, err)
	defer hp.Close()
	require.NoError(t, hp.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tap0"}, PeerName: "ge0"}))
	ge, err := hp.LinkByName("ge0")
	require.NoError(t, err)
	gfd, err := netns.GetFromName(guest.Name)
	require.NoError(t, err)
	defer gfd.Close()
	require.NoError(t, hp.LinkSetNsFd(ge, int(gfd)))
	require.NoError(t, link.Up(hp, "tap0", vmispec.GatewayIP+"/24"))
	hg, err := guest.Handle()
	require.NoError(t, err)
	defer hg.Close()
	guestMAC := net.HardwareAddr{0x02, 0x6b, 0x76, 0, 0, 9}
	ge, err = hg.LinkByName("ge0")
	require.NoError(t, err)
	require.NoError(t, hg.LinkSetHardwareAddr(ge, guestMAC))
	require.NoError(t, link.Up(hg, "ge0", ""))

	p := testPaths(t)
	p.ResolvConf = filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(p.ResolvConf, []byte("search ns1.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(p.SysClassNet, vmispec.PodInterface), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(p.SysClassNet, vmispec.PodInterface, "mtu"), []byte("1400\n"), 0o644))
	masq := NICConfig{Name: "default", Tap: "tap0", MAC: guestMAC, DHCP: masqueradeLease}
	noRecord := NICConfig{Name: "pb", Tap: "tap1", MAC: guestMAC, DHCP: podBridgeLease}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	serve := func(nics ...NICConfig) (stop func(), err error) {
		// The sockets are made in the pod's namespace, as the launcher's are.
		derr := pod.Do(func() error {
			stop, err = serveDHCP(p, nics, "vm1", log)
			return nil
		})
		require.NoError(t, derr)
		return stop, err
	}
	_, err = serve(masq, noRecord)
	assert.ErrorContains(t, err, "interface pb: DHCP server: the pod network recorded on "+vmispec.BridgeName(vmispec.PodInterface))
	stop, err := serve(masq)
	require.NoError(t, err, "port 67 is free again: the failed start closed its socket")
	t.Cleanup(stop)

	env, err := netnstest.Udhcpc(t, guest, "ge0", "mtu", "search")
	require.NoError(t, err)
	assert.Equal(t, vmispec.GuestIP, env["ip"])
	assert.Equal(t, "24", env["mask"])
	assert.Equal(t, vmispec.GatewayIP, env["router"])
	assert.Equal(t, vmispec.GatewayIP, env["serverid"])
	assert.Equal(t, "1400", env["mtu"])
	assert.Equal(t, "10.96.0.10", env["dns"])
	assert.Equal(t, "ns1.svc.cluster.local svc.cluster.local", env["search"])
	assert.Equal(t, "vm1", env["hostname"])

	require.NoError(t, hg.LinkSetHardwareAddr(ge, net.HardwareAddr{0x02, 0x6b, 0x76, 0, 0, 10}))
	env, err = netnstest.Udhcpc(t, guest, "ge0", "mtu", "search")
	assert.Error(t, err, "no lease for another MAC")
	assert.Nil(t, env)
}
