package blk_test

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

// A three-queue disk says so in num_queues and serves every queue: a
// sector written through queue 1 reads back through queue 2, each request
// completes on the queue it came on, and every page the device writes is
// tracked for migration.
func TestMultiQueue(t *testing.T) {
	_, disk := newDisk(t, false)
	dev, err := blk.New(blk.Config{Disk: disk, Queues: 3})
	require.NoError(t, err)
	assert.NotZero(t, dev.Features()&blk.FMQ)
	cfg := make([]byte, 2)
	dev.ReadConfig(34, cfg)
	assert.Equal(t, uint16(3), binary.LittleEndian.Uint16(cfg), "num_queues")

	h := virtiotest.Activate(t, dev, ^uint64(0))
	require.Len(t, h.Queues, 3)
	R := func(b []byte) queuetest.Buf { return queuetest.Buf{Data: b} }
	W := func(n uint32) queuetest.Buf { return queuetest.Buf{Write: true, Len: n} }

	head, addrs := h.Queues[1].Add(R(hdr(blk.TypeOut, 7)), R(pattern(512, 0xab)), W(1))
	var used [][2]uint32
	h.RequireTracked(func() { used = h.WaitUsed(1, 1, true) })
	assert.Equal(t, [][2]uint32{{uint32(head), 1}}, used)
	assert.Equal(t, []byte{blk.StatusOK}, h.Queues[1].Read(addrs[2], 1))

	head, addrs = h.Queues[2].Add(R(hdr(blk.TypeIn, 7)), W(512), W(1))
	h.RequireTracked(func() { used = h.WaitUsed(2, 1, true) })
	assert.Equal(t, [][2]uint32{{uint32(head), 513}}, used)
	assert.Equal(t, []byte{blk.StatusOK}, h.Queues[2].Read(addrs[2], 1))
	assert.Equal(t, pattern(512, 0xab), h.Queues[2].Read(addrs[1], 512))

	for _, q := range []int{0, 1} {
		_, _, ok := h.Queues[q].Used()
		assert.False(t, ok, "queue %d has no request of its own to complete", q)
	}
}

// A driver that does not accept VIRTIO_BLK_F_MQ knows only the first
// queue: a multi-queue disk refuses it instead of leaving queues unserved.
func TestMultiQueueNeedsFeature(t *testing.T) {
	_, disk := newDisk(t, false)
	dev, err := blk.New(blk.Config{Disk: disk, Queues: 2})
	require.NoError(t, err)
	err = dev.Activate(virtio.Activation{Features: dev.Features() &^ blk.FMQ,
		Queues: make([]*queue.Queue, 2), Notify: make([]*event.FD, 2)})
	assert.ErrorContains(t, err, "VIRTIO_BLK_F_MQ")

	_, err = blk.New(blk.Config{Disk: disk, Queues: blk.MaxQueues + 1})
	assert.ErrorContains(t, err, "at most")
}

// A snapshot keeps the queue count: it restores onto a disk with as many
// queues and no other, and a state saved before multi-queue (no Queues)
// is a one-queue disk's.
func TestMultiQueueRestore(t *testing.T) {
	_, disk := newDisk(t, false)
	newDev := func(queues int) *blk.Device {
		d, err := blk.New(blk.Config{Disk: disk, Queues: queues})
		require.NoError(t, err)
		return d
	}
	two, one := newDev(2), newDev(1)
	b, err := two.SaveState()
	require.NoError(t, err)
	require.NoError(t, newDev(2).RestoreState(b))
	assert.ErrorContains(t, one.RestoreState(b), "2 queues, this disk 1")

	old := one.Save()
	old.Queues = 0
	b, err = json.Marshal(old)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "Queues")
	require.NoError(t, newDev(1).RestoreState(b))
	assert.ErrorContains(t, two.RestoreState(b), "1 queues, this disk 2")
}
