package net_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

// mqDevice is a device with one queue pair per queue of a two-queue tap.
func mqDevice(t *testing.T) (*env, *vnet.Device, *virtiotest.Harness) {
	e := setupQueues(t, 2)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, Queues: []vnet.Tap{e.queues[0]}, MAC: guestMAC})
	require.NoError(t, err)
	return e, dev, virtiotest.Activate(t, dev, ^uint64(0))
}

// ctrl sends a control command and returns the device's ack.
func ctrl(h *virtiotest.Harness, cmd []byte) byte {
	q := len(h.Queues) - 1
	_, addrs := h.Queues[q].Add(queuetest.Buf{Data: cmd}, queuetest.Buf{Write: true, Len: 1})
	h.WaitUsed(q, 1, true)
	return h.Queues[q].Read(addrs[1], 1)[0]
}

// received waits until n frames have arrived over the rx queues (0, 2,
// ...) and returns how many came on each pair.
func received(h *virtiotest.Harness, n int) []int {
	per := make([]int, len(h.Queues)/2)
	for got := 0; got < n; {
		progress := false
		for p := range per {
			if _, _, ok := h.Queues[2*p].Used(); ok {
				per[p]++
				got++
				progress = true
			}
		}
		if !progress {
			<-h.IRQ.Used
		}
	}
	return per
}

// With two queue pairs the driver starts on the first alone; once it
// sets two with VQ_PAIRS_SET, the tap spreads flows over both and the
// second pair sends too. A pair count the device lacks is refused.
func TestMultiQueue(t *testing.T) {
	e, dev, h := mqDevice(t)
	assert.Equal(t, 5, len(h.Queues), "two pairs and the control queue")
	cfg := make([]byte, 10)
	dev.ReadConfig(0, cfg)
	assert.Equal(t, []byte{2, 0}, cfg[8:10], "max_virtqueue_pairs")
	for _, q := range []int{0, 2} {
		for i := 0; i < 128; i++ {
			h.Queues[q].Add(queuetest.Buf{Write: true, Len: 2048})
		}
		h.Kick(q)
	}
	var conn *net.UDPConn
	require.NoError(t, e.ns.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: e.hostIP})
		return err
	}))
	defer conn.Close()
	flows := func(n int) {
		for port := 0; port < n; port++ {
			_, err := conn.WriteToUDP([]byte("a flow of its own"), &net.UDPAddr{IP: e.guestIP, Port: 5000 + port})
			require.NoError(t, err)
		}
	}

	flows(32)
	assert.Equal(t, []int{32, 0}, received(h, 32), "one pair until the driver sets more")

	assert.Equal(t, byte(vnet.CtrlOK), ctrl(h, []byte{vnet.CtrlClassMQ, vnet.CtrlMQPairsSet, 2, 0}))
	flows(64)
	per := received(h, 64)
	assert.Positive(t, per[0], "flows on the first pair")
	assert.Positive(t, per[1], "flows on the second pair")

	// the second pair's transmit queue
	frame := udpFrame(e.hostMAC, guestMAC, e.guestIP, e.hostIP, 5000, uint16(conn.LocalAddr().(*net.UDPAddr).Port), []byte("from pair 2"))
	h.Queues[3].Add(queuetest.Buf{Data: make([]byte, vnet.HdrSize)}, queuetest.Buf{Data: frame})
	h.WaitUsed(3, 1, true)
	buf := make([]byte, 64)
	n, _, err := conn.ReadFromUDP(buf)
	require.NoError(t, err)
	assert.Equal(t, "from pair 2", string(buf[:n]))

	assert.Equal(t, byte(vnet.CtrlErr), ctrl(h, []byte{vnet.CtrlClassMQ, vnet.CtrlMQPairsSet, 3, 0}), "three pairs of two")
	assert.Equal(t, byte(vnet.CtrlErr), ctrl(h, []byte{vnet.CtrlClassMQ, vnet.CtrlMQPairsSet, 0, 0}), "no pair")
	assert.Equal(t, byte(vnet.CtrlErr), ctrl(h, []byte{1, 0, 1}), "a class the device lacks")
	assert.Equal(t, uint64(3), dev.Metrics.CtrlErrors.Load())

	s := dev.Save()
	assert.Equal(t, 2, s.Pairs)
	assert.Equal(t, 2, s.ActivePairs)
}

// A restored device uses the pairs the driver had set; a state for
// another number of pairs is refused.
func TestMultiQueueRestore(t *testing.T) {
	e := setupQueues(t, 2)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, Queues: []vnet.Tap{e.queues[0]}, MAC: guestMAC})
	require.NoError(t, err)
	s := dev.Save()
	assert.Equal(t, 1, s.ActivePairs)
	s.ActivePairs = 2
	require.NoError(t, dev.Restore(s))
	assert.Equal(t, 2, dev.Save().ActivePairs)

	one, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(t, err)
	assert.ErrorContains(t, one.Restore(s), "features", "a single-pair device offers no MQ")
	s.ActivePairs = 3
	assert.ErrorContains(t, dev.Restore(s), "uses 3 of 2")
	old := one.Save()
	old.Pairs, old.ActivePairs = 0, 0 // saved before multi-queue
	require.NoError(t, one.Restore(old))
}
