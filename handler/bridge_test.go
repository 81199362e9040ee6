package handler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/net/tap"
	"github.com/kubevmm/kubevmm/test/netnstest"
)

// testNetns is a named network namespace and its handle, removed with the test.
func testNetns(t *testing.T, role string) (*link.Netns, netns.NsHandle) {
	t.Helper()
	ns := netnstest.New(t, role)
	h, err := netns.GetFromName(ns.Name)
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return ns, h
}

// veth creates a veth pair: name in a, peer in b, both up, with the
// addresses given (empty: none).
func veth(t *testing.T, a *link.Netns, name, cidrA string, b netns.NsHandle, peer, cidrB string, bns *link.Netns) {
	t.Helper()
	h, err := a.Handle()
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}))
	p, err := h.LinkByName(peer)
	require.NoError(t, err)
	require.NoError(t, h.LinkSetNsFd(p, int(b)))
	require.NoError(t, link.Up(h, name, cidrA))
	hb, err := bns.Handle()
	require.NoError(t, err)
	defer hb.Close()
	require.NoError(t, link.Up(hb, peer, cidrB))
}

// openTapIn opens the NIC's tap inside ns, as the VMM does in the pod.
func openTapIn(t *testing.T, ns *link.Netns, name string) *tap.Tap {
	t.Helper()
	var tp *tap.Tap
	require.NoError(t, ns.Do(func() error {
		var err error
		tp, err = tap.Open(name)
		return err
	}))
	t.Cleanup(func() { tp.Close() })
	return tp
}

// readFrame reads frames from the tap (after the virtio-net header) until
// one matches; a test that never gets one fails by the deadline. send,
// if set, is called first and then every half second, as a guest's ARP
// retransmits: the bridge forwards from the tap's port only once it has
// seen the tap's carrier come up (the VMM opening it), which the kernel
// reports asynchronously (linkwatch).
func readFrame(t *testing.T, tp *tap.Tap, send func(), match func(eth []byte) bool) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	buf := make([]byte, 65536)
	var sent time.Time
	for time.Now().Before(deadline) {
		if send != nil && time.Since(sent) > 500*time.Millisecond {
			send()
			sent = time.Now()
		}
		fds := []unix.PollFd{{Fd: int32(tp.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 200); err != nil && !errors.Is(err, unix.EINTR) {
			require.NoError(t, err)
		}
		n, err := unix.Read(tp.Fd(), buf)
		if errors.Is(err, unix.EAGAIN) {
			continue
		}
		require.NoError(t, err)
		if eth := buf[tap.VnetHdrSize:n]; match(eth) {
			return append([]byte(nil), eth...)
		}
	}
	t.Fatal("no matching frame on the tap")
	return nil
}

// writeFrame sends eth into the tap, as the guest's NIC would.
func writeFrame(t *testing.T, tp *tap.Tap, eth []byte) {
	t.Helper()
	_, err := unix.Write(tp.Fd(), append(make([]byte, tap.VnetHdrSize), eth...))
	require.NoError(t, err)
}

// arpRequest asks, from mac/ip, who has target.
func arpRequest(mac net.HardwareAddr, ip, target net.IP) []byte {
	f := append(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac...)
	f = append(f, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1)
	f = append(f, mac...)
	f = append(f, ip.To4()...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	return append(f, target.To4()...)
}

// Bridge binding: the guest's tap and the pod interface on the in-pod
// bridge, so a frame the guest sends reaches another machine on the
// node's bridge (another VM's pod, here a namespace) and its answer comes
// back to the guest, even when the pod interface had the guest's MAC.
func TestSetupBridgeBinding(t *testing.T) {
	podNs, pod := testNetns(t, "pod")
	nodeNs, node := testNetns(t, "node")
	peerNs, peer := testNetns(t, "peer")
	guestMAC := net.HardwareAddr{0x02, 0, 0, 0, 0x0b, 0x01}
	nic := vmispec.PodNIC{Name: "br1", Model: "virtio", Tap: "tap1", Queues: 1, Binding: vmispec.BindingBridge,
		PodInterface: vmispec.MultusInterfaceName("br1"), Multus: "br1"}

	// The node's bridge br1 with the pod's veth (what the bridge CNI
	// plugin makes) and another machine at 192.168.50.2.
	hn, err := nodeNs.Handle()
	require.NoError(t, err)
	defer hn.Close()
	require.NoError(t, link.EnsureBridge(hn, "br1"))
	veth(t, podNs, nic.PodInterface, "", node, "vethpod", "", nodeNs)
	veth(t, peerNs, "eth0", "192.168.50.2/24", node, "vethpeer", "", nodeNs)
	require.NoError(t, link.Attach(hn, "vethpod", "br1"))
	require.NoError(t, link.Attach(hn, "vethpeer", "br1"))
	hp, err := podNs.Handle()
	require.NoError(t, err)
	defer hp.Close()
	l, err := hp.LinkByName(nic.PodInterface)
	require.NoError(t, err)
	require.NoError(t, hp.LinkSetHardwareAddr(l, guestMAC), "Multus set the interface's macAddress on the pod interface")
	_ = peer

	require.NoError(t, setupNIC(pod, nic, guestMAC, 107))
	require.NoError(t, setupNIC(pod, nic, guestMAC, 107), "a second pass changes nothing")

	for _, name := range []string{nic.PodInterface, nic.Tap} {
		l, err := hp.LinkByName(name)
		require.NoError(t, err)
		br, err := hp.LinkByIndex(l.Attrs().MasterIndex)
		require.NoError(t, err, "%s has a master", name)
		assert.Equal(t, vmispec.BridgeName(nic.PodInterface), br.Attrs().Name, "%s is a port of the in-pod bridge", name)
	}
	l, err = hp.LinkByName(nic.PodInterface)
	require.NoError(t, err)
	assert.NotEqual(t, guestMAC.String(), l.Attrs().HardwareAddr.String(), "the pod interface gave up the guest's MAC")

	tp := openTapIn(t, podNs, nic.Tap)
	guestIP, peerIP := net.IPv4(192, 168, 50, 1), net.IPv4(192, 168, 50, 2)
	reply := readFrame(t, tp, func() { writeFrame(t, tp, arpRequest(guestMAC, guestIP, peerIP)) }, func(eth []byte) bool {
		return len(eth) >= 42 && binary.BigEndian.Uint16(eth[12:]) == 0x0806 && binary.BigEndian.Uint16(eth[20:]) == 2
	})
	assert.Equal(t, []byte(guestMAC), reply[0:6], "the answer is addressed to the guest")
	assert.Equal(t, []byte(peerIP.To4()), reply[28:32], "from the other machine")
}

// A bridge NIC whose pod interface is missing (Multus did not attach the
// network) is an error naming it, and no tap is made.
func TestSetupBridgeWithoutPodInterface(t *testing.T) {
	podNs, pod := testNetns(t, "pod")
	nic := vmispec.PodNIC{Name: "br1", Tap: "tap0", Queues: 1, Binding: vmispec.BindingBridge, PodInterface: vmispec.MultusInterfaceName("br1")}
	err := setupNIC(pod, nic, net.HardwareAddr{2, 0, 0, 0, 0, 1}, 107)
	require.ErrorContains(t, err, "pod interface "+nic.PodInterface)
	h, err := podNs.Handle()
	require.NoError(t, err)
	defer h.Close()
	_, err = h.LinkByName("tap0")
	assert.Error(t, err, "no tap: the launcher keeps waiting")
}

// Masquerade ports: with ports, only those reach the guest (a SYN to them
// comes out of the tap, addressed to the guest); another port is the
// pod's, where nothing listens (refused), as is the migration port.
// Without ports every port but the migration port reaches the guest.
func TestMasqueradePorts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ports   []v1.Port
		toGuest []int
		refused []int
	}{
		{"all ports", nil, []int{22, 80}, []int{vmispec.MigrationPort}},
		{"port 80 only", []v1.Port{{Port: 80}}, []int{80}, []int{22, 81, vmispec.MigrationPort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podNs, pod := testNetns(t, "pod")
			clientNs, client := testNetns(t, "client")
			veth(t, podNs, vmispec.PodInterface, "10.200.0.2/24", client, "c0", "10.200.0.1/24", clientNs)
			nic := vmispec.PodNIC{Name: "default", Model: "virtio", Tap: "tap0", Queues: 1, Binding: vmispec.BindingMasquerade, PodInterface: vmispec.PodInterface, Ports: tc.ports}
			require.NoError(t, setupNIC(pod, nic, nil, 107))
			tp := openTapIn(t, podNs, nic.Tap)
			// The guest's neighbour entry, so the DNAT'ed SYN leaves at once.
			h, err := podNs.Handle()
			require.NoError(t, err)
			defer h.Close()
			l, err := h.LinkByName(nic.Tap)
			require.NoError(t, err)
			require.NoError(t, h.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT,
				IP: net.ParseIP(vmispec.GuestIP), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 2}}))

			dial := func(port int) error {
				return clientNs.Do(func() error {
					c, err := net.DialTimeout("tcp", fmt.Sprintf("10.200.0.2:%d", port), 2*time.Second)
					if err == nil {
						c.Close()
					}
					return err
				})
			}
			for _, port := range tc.refused {
				assert.ErrorIs(t, dial(port), syscall.ECONNREFUSED, "port %d is the pod's", port)
			}
			for _, port := range tc.toGuest {
				go dial(port) //nolint:errcheck // nothing answers as the guest: the SYN is what counts
				syn := readFrame(t, tp, nil, func(eth []byte) bool {
					if len(eth) < 34 || binary.BigEndian.Uint16(eth[12:]) != 0x0800 || eth[23] != unix.IPPROTO_TCP {
						return false
					}
					tcp := eth[14+int(eth[14]&0xf)*4:]
					return len(tcp) >= 4 && int(binary.BigEndian.Uint16(tcp[2:])) == port
				})
				assert.Equal(t, net.ParseIP(vmispec.GuestIP).To4(), net.IP(syn[30:34]), "port %d is DNAT'ed to the guest", port)
			}
		})
	}
}
