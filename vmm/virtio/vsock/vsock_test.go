package vsock_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
	"github.com/kubevmm/kubevmm/vmm/virtio/vsock"
)

const guestCID = 42

// guest is the test's stand-in for the Linux vsock driver.
type guest struct {
	t     *testing.T
	h     *virtiotest.Harness
	addrs map[uint16]uint64 // rx buffer address by head
}

func newGuest(t *testing.T) (*guest, *vsock.Device, string) {
	sock := filepath.Join(t.TempDir(), "v.sock")
	dev, err := vsock.New(vsock.Config{CID: guestCID, Socket: sock})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	g := &guest{t: t, h: virtiotest.Activate(t, dev, virtio.FVersion1|virtio.FRingEventIdx), addrs: map[uint16]uint64{}}
	for i := 0; i < 16; i++ {
		g.post()
	}
	g.h.Kick(0)
	return g, dev, sock
}

func (g *guest) post() {
	head, a := g.h.Queues[0].Add(queuetest.Buf{Write: true, Len: vsock.HdrSize + 4096})
	g.addrs[head] = a[0]
}

// recv waits for the next packet the device sends the guest.
func (g *guest) recv() (vsock.Hdr, []byte) {
	u := g.h.WaitUsed(0, 1, false)[0]
	b := g.h.Queues[0].Read(g.addrs[uint16(u[0])], int(u[1]))
	g.post()
	g.h.Kick(0)
	return vsock.ParseHdr(b), b[vsock.HdrSize:]
}

func (g *guest) send(h vsock.Hdr, payload []byte) {
	h.Type, h.BufAlloc, h.Len = vsock.TypeStream, 64<<10, uint32(len(payload))
	if h.SrcCID == 0 {
		h.SrcCID = guestCID
	}
	if h.DstCID == 0 {
		h.DstCID = vsock.HostCID
	}
	b := make([]byte, vsock.HdrSize)
	h.Put(b)
	g.h.Queues[1].Add(queuetest.Buf{Data: b}, queuetest.Buf{Data: payload})
	g.h.WaitUsed(1, 1, true)
}

func TestHostConnects(t *testing.T) {
	g, dev, sock := newGuest(t)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	var req vsock.Hdr
	g.h.RequireTracked(func() {
		fmt.Fprintf(c, "CONNECT 5000\n")
		req, _ = g.recv()
	})
	assert.Equal(t, uint16(vsock.OpRequest), req.Op)
	assert.Equal(t, uint64(vsock.HostCID), req.SrcCID)
	assert.Equal(t, uint64(guestCID), req.DstCID)
	assert.Equal(t, uint32(5000), req.DstPort)
	g.send(vsock.Hdr{Op: vsock.OpResponse, SrcPort: 5000, DstPort: req.SrcPort}, nil)

	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("OK %d\n", req.SrcPort), line)

	var h vsock.Hdr
	var payload []byte
	g.h.RequireTracked(func() {
		_, err = c.Write([]byte("ping from the host"))
		require.NoError(t, err)
		h, payload = g.recv()
	})
	assert.Equal(t, uint16(vsock.OpRW), h.Op)
	assert.Equal(t, "ping from the host", string(payload))
	assert.Equal(t, uint32(256<<10), h.BufAlloc)

	g.send(vsock.Hdr{Op: vsock.OpRW, SrcPort: 5000, DstPort: req.SrcPort}, []byte("pong"))
	got := make([]byte, 4)
	_, err = io.ReadFull(r, got)
	require.NoError(t, err)
	assert.Equal(t, "pong", string(got))

	// the host closes: the guest hears SHUTDOWN(send); the guest closes fully: RST
	c.(*net.UnixConn).CloseWrite()
	h, _ = g.recv()
	assert.Equal(t, uint16(vsock.OpShutdown), h.Op)
	assert.Equal(t, uint32(vsock.ShutdownSend), h.Flags)
	g.send(vsock.Hdr{Op: vsock.OpShutdown, Flags: vsock.ShutdownSend | vsock.ShutdownRcv, SrcPort: 5000, DstPort: req.SrcPort}, nil)
	h, _ = g.recv()
	assert.Equal(t, uint16(vsock.OpRst), h.Op)
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, uint64(1), dev.Metrics.Connections.Load())
}

func TestGuestConnects(t *testing.T) {
	g, _, sock := newGuest(t)
	l, err := net.Listen("unix", sock+"_6000")
	require.NoError(t, err)
	defer l.Close()

	g.send(vsock.Hdr{Op: vsock.OpRequest, SrcPort: 1234, DstPort: 6000}, nil)
	h, _ := g.recv()
	assert.Equal(t, uint16(vsock.OpResponse), h.Op)
	assert.Equal(t, uint32(6000), h.SrcPort)
	assert.Equal(t, uint32(1234), h.DstPort)
	c, err := l.Accept()
	require.NoError(t, err)
	defer c.Close()
	g.send(vsock.Hdr{Op: vsock.OpRW, SrcPort: 1234, DstPort: 6000}, []byte("hello host"))
	got := make([]byte, 10)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, "hello host", string(got))

	// nobody listens on 6001: refused with RST
	g.send(vsock.Hdr{Op: vsock.OpRequest, SrcPort: 1235, DstPort: 6001}, nil)
	h, _ = g.recv()
	assert.Equal(t, uint16(vsock.OpRst), h.Op)
	assert.Equal(t, uint32(1235), h.DstPort)
}

func TestBadPackets(t *testing.T) {
	g, dev, _ := newGuest(t)
	g.send(vsock.Hdr{Op: vsock.OpRequest, SrcCID: 7, SrcPort: 1, DstPort: 2}, nil)  // spoofed source
	g.send(vsock.Hdr{Op: vsock.OpRequest, DstCID: 99, SrcPort: 1, DstPort: 2}, nil) // not the host
	assert.Equal(t, uint64(2), dev.Metrics.BadPackets.Load())
	g.send(vsock.Hdr{Op: vsock.OpRW, SrcPort: 9, DstPort: 9}, []byte("x")) // no such stream
	h, _ := g.recv()
	assert.Equal(t, uint16(vsock.OpRst), h.Op)
}

func TestBadConnectCommand(t *testing.T) {
	_, dev, sock := newGuest(t)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	fmt.Fprintf(c, "HELLO\n")
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the device hangs up")
	assert.Equal(t, uint64(1), dev.Metrics.BadConnects.Load())
}

func TestSocketPathIsNotClobbered(t *testing.T) {
	p := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(p, []byte("data"), 0o644))
	_, err := vsock.New(vsock.Config{CID: 3, Socket: p})
	require.Error(t, err, "a regular file at the socket path is not removed")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "data", string(b))

	// a socket another VMM serves is not taken from it
	s := filepath.Join(t.TempDir(), "v.sock")
	d1, err := vsock.New(vsock.Config{CID: 3, Socket: s})
	require.NoError(t, err)
	_, err = vsock.New(vsock.Config{CID: 3, Socket: s})
	require.ErrorContains(t, err, "another process serves this socket")

	// a socket left by a VMM that died is replaced
	stale := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	l.Close()
	d2, err := vsock.New(vsock.Config{CID: 3, Socket: stale})
	require.NoError(t, err, "stale socket replaced")
	d2.Close()
	d1.Close()
}

// After a restore the machine asks for a transport reset: the guest gets
// exactly one event (id 0) in its first usable event buffer, a buffer too
// small for it goes back empty, and a reset asked for before the guest
// posted any buffer waits for one.
func TestTransportReset(t *testing.T) {
	g, dev, _ := newGuest(t)
	ev := g.h.Queues[2]

	dev.TransportReset()
	small, _ := ev.Add(queuetest.Buf{Write: true, Len: vsock.EventSize - 1})
	head, a := ev.Add(queuetest.Buf{Write: true, Len: 8})
	spare, _ := ev.Add(queuetest.Buf{Write: true, Len: 8})
	used := g.h.WaitUsed(2, 2, true)
	assert.Equal(t, [][2]uint32{{uint32(small), 0}, {uint32(head), vsock.EventSize}}, used)
	assert.Equal(t, []byte{0, 0, 0, 0}, ev.Read(a[0], vsock.EventSize))
	assert.Equal(t, uint64(1), dev.Metrics.MalformedChains.Load())

	// The spare buffer stays with the device until the next reset.
	_, _, ok := ev.Used()
	assert.False(t, ok)
	dev.TransportReset()
	assert.Equal(t, [][2]uint32{{uint32(spare), vsock.EventSize}}, g.h.WaitUsed(2, 1, false))
	assert.Equal(t, uint64(2), dev.Metrics.TransportResets.Load())
}

// A restored device owes the guest a transport reset (its streams' host
// ends stayed with the old VMM): it goes out at the first look at the
// event queue, which the restored transport makes. A state saved with
// another CID is refused.
func TestRestoreOwesTransportReset(t *testing.T) {
	src, err := vsock.New(vsock.Config{CID: guestCID, Socket: filepath.Join(t.TempDir(), "a.sock")})
	require.NoError(t, err)
	defer src.Close()
	st, err := src.SaveState()
	require.NoError(t, err)

	other, err := vsock.New(vsock.Config{CID: guestCID + 1, Socket: filepath.Join(t.TempDir(), "c.sock")})
	require.NoError(t, err)
	defer other.Close()
	assert.ErrorContains(t, other.RestoreState(st), "CID")

	dev, err := vsock.New(vsock.Config{CID: guestCID, Socket: filepath.Join(t.TempDir(), "b.sock")})
	require.NoError(t, err)
	defer dev.Close()
	require.NoError(t, dev.RestoreState(st))
	h := virtiotest.Activate(t, dev, virtio.FVersion1|virtio.FRingEventIdx)
	ev := h.Queues[2]
	head, a := ev.Add(queuetest.Buf{Write: true, Len: 8})
	assert.Equal(t, [][2]uint32{{uint32(head), vsock.EventSize}}, h.WaitUsed(2, 1, true))
	assert.Equal(t, []byte{0, 0, 0, 0}, ev.Read(a[0], vsock.EventSize))
	assert.Equal(t, uint64(1), dev.Metrics.TransportResets.Load())
}

// openFDs is how many file descriptors this process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// A guest connecting to the host in a loop gets MaxConnections streams
// and RST after that, counted; the streams it has keep working, one it
// closes frees a place, and the VMM's goroutines and fds stay within
// what the cap allows (two goroutines and a socket per stream).
func TestGuestConnectFloodIsCapped(t *testing.T) {
	g, dev, sock := newGuest(t)
	l, err := net.Listen("unix", sock+"_6000")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 2*vsock.MaxConnections)
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		l.Close()
		<-acceptDone
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	}()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

	const extra = 100
	for i := 0; i < vsock.MaxConnections+extra; i++ {
		port := uint32(10000 + i)
		g.send(vsock.Hdr{Op: vsock.OpRequest, SrcPort: port, DstPort: 6000}, nil)
		h, _ := g.recv()
		require.Equal(t, port, h.DstPort)
		if i < vsock.MaxConnections {
			require.Equal(t, uint16(vsock.OpResponse), h.Op, "stream %d", i)
		} else {
			require.Equal(t, uint16(vsock.OpRst), h.Op, "stream %d is past the cap", i)
		}
	}
	assert.Equal(t, uint64(extra), dev.Metrics.RefusedConnections.Load())
	assert.Equal(t, uint64(vsock.MaxConnections), dev.Metrics.Connections.Load())
	assert.Equal(t, uint64(extra), dev.Counters()["refused_connections"])
	// The test's side holds one socket per stream, the device one and
	// two goroutines; some room for the runtime's own and for dialers still on their way out.
	assert.LessOrEqual(t, runtime.NumGoroutine()-goroutines, 2*vsock.MaxConnections+32)
	assert.LessOrEqual(t, openFDs(t)-fds, 2*vsock.MaxConnections+32)

	// The first stream still carries data.
	first := <-accepted
	defer first.Close()
	g.send(vsock.Hdr{Op: vsock.OpRW, SrcPort: 10000, DstPort: 6000}, []byte("still here"))
	got := make([]byte, 10)
	_, err = io.ReadFull(first, got)
	require.NoError(t, err)
	assert.Equal(t, "still here", string(got))

	// The guest closes it: a new stream fits again.
	g.send(vsock.Hdr{Op: vsock.OpRst, SrcPort: 10000, DstPort: 6000}, nil)
	g.send(vsock.Hdr{Op: vsock.OpRequest, SrcPort: 20000, DstPort: 6000}, nil)
	h, _ := g.recv()
	assert.Equal(t, uint16(vsock.OpResponse), h.Op)
	assert.Equal(t, uint32(20000), h.DstPort)
}

// Host clients connecting in a loop: past MaxConnections streams the
// device hangs up on a CONNECT, and past MaxConnections clients that
// have not sent their CONNECT line it hangs up at once; both counted.
// The streams already asked for still complete.
func TestHostConnectFloodIsCapped(t *testing.T) {
	g, dev, sock := newGuest(t)
	clients := make([]net.Conn, 0, vsock.MaxConnections)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	var ports []uint32
	for i := 0; i < vsock.MaxConnections; i++ {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		clients = append(clients, c)
		fmt.Fprintf(c, "CONNECT 5000\n")
		h, _ := g.recv()
		require.Equal(t, uint16(vsock.OpRequest), h.Op)
		ports = append(ports, h.SrcPort)
	}
	hungUp := func(c net.Conn) {
		t.Helper()
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "the device hangs up")
		c.Close()
	}
	over, err := net.Dial("unix", sock)
	require.NoError(t, err)
	fmt.Fprintf(over, "CONNECT 5000\n")
	hungUp(over)
	assert.Equal(t, uint64(1), dev.Metrics.RefusedConnections.Load())

	// Clients that never say CONNECT.
	idle := make([]net.Conn, 0, vsock.MaxConnections)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < vsock.MaxConnections; i++ {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	over, err = net.Dial("unix", sock)
	require.NoError(t, err)
	hungUp(over)
	assert.Equal(t, uint64(2), dev.Metrics.RefusedConnections.Load())

	// The guest accepts the first stream: its client gets OK.
	g.send(vsock.Hdr{Op: vsock.OpResponse, SrcPort: 5000, DstPort: ports[0]}, nil)
	line, err := bufio.NewReader(clients[0]).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("OK %d\n", ports[0]), line)
}
