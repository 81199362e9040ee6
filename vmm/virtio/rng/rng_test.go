package rng_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/rng"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

func TestFill(t *testing.T) {
	dev := rng.New()
	h := virtiotest.Activate(t, dev, virtio.FVersion1|virtio.FRingIndirectDesc)
	q := h.Queues[0]
	_, a1 := q.Add(queuetest.Buf{Write: true, Len: 32}, queuetest.Buf{Write: true, Len: 32})
	_, a2 := q.AddIndirect(queuetest.Buf{Write: true, Len: 128 << 10}) // more than one request gets
	q.WriteDesc(10, queuetest.Desc{Addr: 1 << 40, Len: 16, Flags: 2})  // outside guest RAM
	q.Publish(10)
	var used [][2]uint32
	h.RequireTracked(func() { used = h.WaitUsed(0, 3, true) })
	assert.Equal(t, uint32(64), used[0][1])
	assert.Equal(t, uint32(64<<10), used[1][1], "capped per request")
	assert.Equal(t, [2]uint32{10, 0}, used[2], "malformed chain fails, nothing written")
	assert.False(t, bytes.Equal(make([]byte, 32), q.Read(a1[0], 32)))
	assert.False(t, bytes.Equal(make([]byte, 32), q.Read(a1[1], 32)))
	assert.Equal(t, make([]byte, 64), q.Read(a2[0]+(64<<10), 64), "nothing past the cap")
	assert.Equal(t, uint64(1), dev.Metrics.MalformedChain.Load())
	require.NoError(t, dev.Restore(dev.Save()))
}
