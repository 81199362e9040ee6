package net_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

// rxEnv is a device on a tap whose MTU lets the host send 64 KiB frames,
// a UDP socket in the tap's namespace, and a guest that has posted rx
// buffers.
type rxEnv struct {
	*env
	dev   *vnet.Device
	h     *virtiotest.Harness
	conn  *net.UDPConn
	addrs map[uint16]uint64 // rx buffer head -> guest address
}

func newRxEnv(t *testing.T, features uint64) *rxEnv {
	e := setup(t)
	hdl, err := e.ns.Handle()
	require.NoError(t, err)
	defer hdl.Close()
	l, err := hdl.LinkByName(e.tap.Name())
	require.NoError(t, err)
	require.NoError(t, hdl.LinkSetMTU(l, 65521))
	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(t, err)
	r := &rxEnv{env: e, dev: dev, h: virtiotest.Activate(t, dev, features), addrs: map[uint16]uint64{}}
	require.NoError(t, e.ns.Do(func() error {
		r.conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: e.hostIP, Port: 7000})
		return err
	}))
	t.Cleanup(func() { r.conn.Close() })
	return r
}

// post makes n receive buffers of size bytes available, each one
// descriptor or (parts > 1) a chain of parts descriptors.
func (r *rxEnv) post(n int, size uint32, parts int) {
	for i := 0; i < n; i++ {
		bufs := make([]queuetest.Buf, parts)
		for j := range bufs {
			bufs[j] = queuetest.Buf{Write: true, Len: size / uint32(parts)}
		}
		head, a := r.h.Queues[0].Add(bufs...)
		r.addrs[head] = a[0]
	}
	r.h.Kick(0)
}

// send sends a UDP datagram to the guest.
func (r *rxEnv) send(t *testing.T, payload []byte) {
	_, err := r.conn.WriteToUDP(payload, &net.UDPAddr{IP: r.guestIP, Port: 5000})
	require.NoError(t, err)
}

// recv waits for the next frame and returns its header and bytes, read
// from as many buffers as num_buffers says (each buffer one descriptor).
func (r *rxEnv) recv() (vnet.Hdr, []byte) {
	used := r.h.WaitUsed(0, 1, false)
	got := r.h.Queues[0].Read(r.addrs[uint16(used[0][0])], int(used[0][1]))
	hdr := vnet.ParseHdr(got)
	if hdr.NumBuffers > 1 {
		for _, u := range r.h.WaitUsed(0, int(hdr.NumBuffers)-1, false) {
			got = append(got, r.h.Queues[0].Read(r.addrs[uint16(u[0])], int(u[1]))...)
		}
	}
	return hdr, got[vnet.HdrSize:]
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// With room for the largest frame posted, frames are read from the tap
// straight into the guest's mergeable buffers: a 60 KiB frame fills 40
// of 1536 bytes, the next frames continue in the buffers after it, every
// byte and num_buffers right, every page written marked for migration.
func TestRxMergeableLargeFrames(t *testing.T) {
	r := newRxEnv(t, ^uint64(0))
	r.post(128, 1536, 1) // 192 KiB: room for the largest frame, twice
	for _, size := range []int{60000, 100, 4000} {
		payload := pattern(size)
		var hdr vnet.Hdr
		var frame []byte
		r.h.RequireTracked(func() {
			r.send(t, payload)
			hdr, frame = r.recv()
		})
		require.Len(t, frame, 42+size, "Ethernet, IPv4 and UDP headers, then the payload")
		assert.Equal(t, []byte(guestMAC), frame[0:6])
		assert.Equal(t, payload, frame[42:])
		assert.Equal(t, (vnet.HdrSize+len(frame)+1535)/1536, int(hdr.NumBuffers))
	}
	assert.Equal(t, uint64(3), r.dev.Metrics.RxFrames.Load())
	assert.Zero(t, r.dev.Metrics.RxDropped.Load())
}

// Without mergeable buffers a frame goes into one buffer (chain): a chain
// large enough takes it whole, straight from the tap; a frame larger than
// the chain offered is dropped and that chain takes the next frame.
func TestRxWithoutMergeable(t *testing.T) {
	r := newRxEnv(t, ^uint64(0)&^vnet.FMrgRxbuf)
	r.post(1, 68<<10, 17) // Linux's "big packets": a chain of pages
	payload := pattern(50000)
	r.send(t, payload)
	hdr, frame := r.recv()
	assert.Equal(t, uint16(1), hdr.NumBuffers)
	// the chain's parts are contiguous in guest memory here
	require.Len(t, frame, 42+len(payload))
	assert.Equal(t, payload, frame[42:])

	r.post(1, 2048, 1)
	r.send(t, pattern(4000)) // too large for the 2 KiB buffer: dropped
	small := pattern(300)
	r.send(t, small)
	_, frame = r.recv()
	assert.Equal(t, small, frame[42:])
	assert.Equal(t, uint64(1), r.dev.Metrics.RxDropped.Load())
}

// Buffers the device has taken ahead of frames are the guest's again in a
// snapshot: the saved queue is placed after the buffers used, and a
// restored device takes the first unused one next.
func TestRxHeldBuffersInSnapshot(t *testing.T) {
	r := newRxEnv(t, virtio.FVersion1|virtio.FRingEventIdx|vnet.FMrgRxbuf)
	q := r.h.Queues[0]
	var heads []uint16
	for i := 0; i < 64; i++ {
		head, a := q.Add(queuetest.Buf{Write: true, Len: 2048})
		r.addrs[head] = a[0]
		heads = append(heads, head)
	}
	r.h.Kick(0)
	r.send(t, pattern(3000)) // two buffers
	hdr, _ := r.recv()
	require.Equal(t, uint16(2), hdr.NumBuffers)
	var s queue.State
	r.dev.Quiesce(func() { s = r.h.Active[0].Save() })
	assert.Equal(t, uint16(2), s.NextAvail)
	restored, err := queue.Restore(r.h.Mem, s, 256)
	require.NoError(t, err)
	var c queue.Chain
	ok, err := restored.Pop(&c)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, heads[2], c.Head)
}
