package net_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/net/tap"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

var guestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

type env struct {
	ns      *link.Netns
	tap     *tap.Tap
	queues  []*tap.Tap
	hostMAC net.HardwareAddr
	hostIP  net.IP
	guestIP net.IP
}

// setup creates a tap, moves it into a fresh network namespace with
// 10.199.0.1/24 on it and a static neighbour entry for the guest.
func setup(t testing.TB) *env {
	t.Helper()
	return setupQueues(t, 0)
}

// setupQueues is setup with a multi-queue tap of queues queues (0: a
// single-queue tap); env.queues are the queues after the first.
func setupQueues(t testing.TB, queues int) *env {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root for tap devices and network namespaces")
	}
	name := fmt.Sprintf("kvt%d", os.Getpid()%100000)
	ns, err := link.NewNetns("kvmtest-" + name)
	require.NoError(t, err)
	t.Cleanup(func() { ns.Delete() })
	taps := []*tap.Tap{nil}
	if queues == 0 {
		taps[0], err = tap.Open(name)
	} else {
		taps, err = tap.OpenQueues(name, queues)
	}
	require.NoError(t, err)
	for _, tp := range taps {
		t.Cleanup(func() { tp.Close() })
	}
	tp := taps[0]
	require.NoError(t, link.MoveTo(name, ns))
	// No IPv6 on the tap: a link coming up sends MLD reports and router
	// solicitations, which would reach the guest's receive queue before
	// (or instead of) the frames a test sends.
	require.NoError(t, ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0)
	}))
	h, err := ns.Handle()
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, link.Up(h, name, "10.199.0.1/24"))
	l, err := h.LinkByName(name)
	require.NoError(t, err)
	require.NoError(t, h.LinkSetMTU(l, 9000)) // frames larger than one rx buffer
	require.NoError(t, h.NeighAdd(&netlink.Neigh{
		LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: net.IPv4(10, 199, 0, 2), HardwareAddr: guestMAC,
	}))
	return &env{ns: ns, tap: tp, queues: taps[1:], hostMAC: l.Attrs().HardwareAddr, hostIP: net.IPv4(10, 199, 0, 1).To4(), guestIP: net.IPv4(10, 199, 0, 2).To4()}
}

func csum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// udpFrame builds Ethernet+IPv4+UDP (UDP checksum 0: none).
func udpFrame(dst, src net.HardwareAddr, sip, dip net.IP, sport, dport uint16, payload []byte) []byte {
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:], dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	copy(ip[12:], sip)
	copy(ip[16:], dip)
	binary.BigEndian.PutUint16(ip[10:], csum(ip))
	u := f[34:42]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	copy(f[42:], payload)
	return f
}

func TestTapRoundTrip(t *testing.T) {
	e := setup(t)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(t, err)
	h := virtiotest.Activate(t, dev, ^uint64(0))
	rxq, txq := h.Queues[0], h.Queues[1]

	var conn *net.UDPConn
	require.NoError(t, e.ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: e.hostIP, Port: 7000})
		return err
	}))
	defer conn.Close()

	// guest -> host
	payload := []byte("hello from the guest")
	frame := udpFrame(e.hostMAC, guestMAC, e.guestIP, e.hostIP, 5000, 7000, payload)
	txq.Add(queuetest.Buf{Data: make([]byte, vnet.HdrSize)}, queuetest.Buf{Data: frame})
	h.WaitUsed(1, 1, true)
	buf := make([]byte, 100)
	n, from, err := conn.ReadFromUDP(buf)
	require.NoError(t, err)
	assert.Equal(t, payload, buf[:n])
	assert.Equal(t, e.guestIP.String(), from.IP.String())

	// host -> guest: a 4000-byte datagram spans several mergeable buffers
	var addrs []uint64
	for i := 0; i < 8; i++ {
		_, a := rxq.Add(queuetest.Buf{Write: true, Len: 1536})
		addrs = append(addrs, a[0])
	}
	h.Kick(0)
	big := bytes.Repeat([]byte("0123456789abcdef"), 250)
	var used [][2]uint32
	h.RequireTracked(func() {
		_, err = conn.WriteToUDP(big, &net.UDPAddr{IP: e.guestIP, Port: 5000})
		require.NoError(t, err)
		used = h.WaitUsed(0, 1, false) // mergeable buffers are published together
	})
	var got []byte
	first := rxq.Read(addrs[used[0][0]], int(used[0][1]))
	hdr := vnet.ParseHdr(first)
	got = append(got, first...)
	if hdr.NumBuffers > 1 {
		for _, u := range h.WaitUsed(0, int(hdr.NumBuffers)-1, false) {
			got = append(got, rxq.Read(addrs[u[0]], int(u[1]))...)
		}
	}
	require.Greater(t, len(got), vnet.HdrSize+42)
	eth := got[vnet.HdrSize:]
	assert.Equal(t, []byte(guestMAC), eth[0:6])
	assert.True(t, bytes.Contains(eth, big[:100]), "payload start arrives")
	assert.GreaterOrEqual(t, int(hdr.NumBuffers), 3, "a 4000-byte frame needs three 1536-byte buffers")
	assert.Equal(t, uint64(1), dev.Metrics.TxFrames.Load())
}

func TestTxRejectsUnnegotiatedOffload(t *testing.T) {
	e := setup(t)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(t, err)
	h := virtiotest.Activate(t, dev, virtio.FVersion1) // no CSUM, no TSO
	hdr := make([]byte, vnet.HdrSize)
	vnet.Hdr{Flags: vnet.HdrFNeedsCsum, CsumStart: 34, CsumOffset: 6}.Put(hdr)
	frame := udpFrame(e.hostMAC, guestMAC, e.guestIP, e.hostIP, 5000, 7000, []byte("x"))
	h.Queues[1].Add(queuetest.Buf{Data: hdr}, queuetest.Buf{Data: frame})
	h.Queues[1].Add(queuetest.Buf{Data: hdr[:4]}) // shorter than a header
	h.WaitUsed(1, 2, true)
	assert.Equal(t, uint64(2), dev.Metrics.TxMalformed.Load())
	assert.Zero(t, dev.Metrics.TxFrames.Load())
}

func TestCheckTX(t *testing.T) {
	all := uint64(vnet.FCsum | vnet.FHostTSO4 | vnet.FHostTSO6)
	for _, tc := range []struct {
		name     string
		h        vnet.Hdr
		features uint64
		n        int
		ok       bool
	}{
		{"plain", vnet.Hdr{}, 0, 60, true},
		{"runt", vnet.Hdr{}, 0, 10, false},
		{"jumbo", vnet.Hdr{}, all, vnet.MaxFrame + 1, false},
		{"csum", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, CsumStart: 34, CsumOffset: 6}, all, 60, true},
		{"csum not negotiated", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, CsumStart: 34, CsumOffset: 6}, 0, 60, false},
		{"csum outside frame", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, CsumStart: 60, CsumOffset: 6}, all, 60, false},
		{"data valid is rx only", vnet.Hdr{Flags: vnet.HdrFDataValid}, all, 60, false},
		{"tso4", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, all, 9000, true},
		{"tso4 not negotiated", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, GSOType: vnet.GSOTCPv4, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, vnet.FCsum, 9000, false},
		{"tso without csum", vnet.Hdr{GSOType: vnet.GSOTCPv6, GSOSize: 1448}, all, 9000, false},
		{"tso size 0", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, GSOType: vnet.GSOTCPv4, CsumStart: 34, CsumOffset: 16}, all, 9000, false},
		{"ufo", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, GSOType: vnet.GSOUDP, GSOSize: 1400, CsumStart: 34, CsumOffset: 6}, all, 9000, false},
		{"ecn", vnet.Hdr{Flags: vnet.HdrFNeedsCsum, GSOType: vnet.GSOTCPv4 | vnet.GSOECN, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, all, 9000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := vnet.CheckTX(tc.h, tc.features, tc.n)
			assert.Equal(t, tc.ok, err == nil, "err = %v", err)
		})
	}
}

// FuzzHeader: any 12 bytes and frame length either pass CheckTX with
// offsets inside the frame and only negotiated offloads, or are refused.
func FuzzHeader(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0xa8, 5, 34, 0, 16, 0, 0, 0}, uint64(vnet.FCsum|vnet.FHostTSO4), 9000)
	f.Fuzz(func(t *testing.T, b []byte, features uint64, n int) {
		if len(b) < vnet.HdrSize {
			return
		}
		h := vnet.ParseHdr(b)
		var round [vnet.HdrSize]byte
		h.Put(round[:])
		if !bytes.Equal(round[:], b[:vnet.HdrSize]) {
			t.Fatal("header does not round-trip")
		}
		out, err := vnet.CheckTX(h, features, n)
		if err != nil {
			return
		}
		if out.NumBuffers != 0 || n < 14 || n > vnet.MaxFrame {
			t.Fatalf("accepted %+v for %d bytes", out, n)
		}
		if out.Flags&vnet.HdrFNeedsCsum != 0 && (features&vnet.FCsum == 0 || int(out.CsumStart)+int(out.CsumOffset)+2 > n) {
			t.Fatalf("accepted bad checksum request %+v", out)
		}
		if out.GSOType != vnet.GSONone && features&(vnet.FHostTSO4|vnet.FHostTSO6) == 0 {
			t.Fatalf("accepted GSO without TSO: %+v", out)
		}
	})
}

// A receive buffer the device can't write into is a broken driver: the
// device asks for a reset instead of guessing.
func TestRxBadBufferNeedsReset(t *testing.T) {
	e := setup(t)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(t, err)
	h := virtiotest.Activate(t, dev, ^uint64(0))
	h.Queues[0].Add(queuetest.Buf{Data: make([]byte, 2048)}) // device-readable: useless for rx
	h.Kick(0)
	require.NoError(t, e.ns.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: e.guestIP, Port: 9})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("to a guest with a broken rx ring"))
		return err
	}))
	err = <-h.IRQ.Failed
	assert.ErrorContains(t, err, "receive buffer")
}
