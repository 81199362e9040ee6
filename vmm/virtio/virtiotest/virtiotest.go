// Package virtiotest activates a virtio device directly (no transport) on
// real guest memory for device tests, and records its interrupts.
package virtiotest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
)

// Interrupt records what a device signals.
type Interrupt struct {
	Used   chan struct{}
	Failed chan error
}

// UsedBuffer implements virtio.Interrupt.
func (i *Interrupt) UsedBuffer() {
	select {
	case i.Used <- struct{}{}:
	default: // one pending wake-up is enough
	}
}

// ConfigChanged implements virtio.Interrupt.
func (i *Interrupt) ConfigChanged() {}

// Fail implements virtio.Interrupt.
func (i *Interrupt) Fail(err error) {
	select {
	case i.Failed <- err:
	default:
	}
}

// Harness is an activated device with a test driver per queue.
type Harness struct {
	t      testing.TB
	Mem    *memory.Guest
	Dev    virtio.Device
	Queues []*queuetest.Driver
	Notify []*event.FD
	IRQ    *Interrupt
}

// Activate negotiates features (masked by what the device offers) and
// starts dev with one test driver per queue, each in its own 1 MiB of a
// 64 MiB guest.
func Activate(t testing.TB, dev virtio.Device, features uint64) *Harness {
	t.Helper()
	mem := queuetest.NewMem(t, 64<<20)
	h := &Harness{t: t, Mem: mem, Dev: dev, IRQ: &Interrupt{Used: make(chan struct{}, 1), Failed: make(chan error, 1)}}
	features &= dev.Features()
	opt := queue.Options{EventIdx: features&virtio.FRingEventIdx != 0, Indirect: features&virtio.FRingIndirectDesc != 0}
	var qs []*queue.Queue
	for i, max := range dev.QueueMaxSizes() {
		size := min(max, 256)
		d := queuetest.NewDriver(t, mem, uint64(i+1)<<20, 1<<20, size)
		q, err := queue.New(mem, d.Cfg, max, opt)
		require.NoError(t, err)
		fd, err := event.NewFD()
		require.NoError(t, err)
		t.Cleanup(func() { fd.Close() })
		h.Queues = append(h.Queues, d)
		h.Notify = append(h.Notify, fd)
		qs = append(qs, q)
	}
	require.NoError(t, dev.Activate(virtio.Activation{Mem: mem, Features: features, Queues: qs, Notify: h.Notify, Interrupt: h.IRQ}))
	t.Cleanup(dev.Reset)
	return h
}

// Kick notifies queue i.
func (h *Harness) Kick(i int) { require.NoError(h.t, h.Notify[i].Signal()) }

// WaitUsed kicks queue i (if kick) and waits until the device has
// returned n chains on it, returning their (head, length) pairs.
func (h *Harness) WaitUsed(i, n int, kick bool) [][2]uint32 {
	h.t.Helper()
	if kick {
		h.Kick(i)
	}
	var out [][2]uint32
	for len(out) < n {
		if head, l, ok := h.Queues[i].Used(); ok {
			out = append(out, [2]uint32{uint32(head), l})
			continue
		}
		select {
		case <-h.IRQ.Used:
		case err := <-h.IRQ.Failed:
			h.t.Fatalf("device failed: %v", err)
		}
	}
	return out
}

// RequireTracked runs op (kicks and waits, no driver writes) and fails the
// test for any guest page the device changed without marking it dirty for
// live migration (queuetest.RequireTracked).
func (h *Harness) RequireTracked(op func()) {
	h.t.Helper()
	queuetest.RequireTracked(h.t, h.Mem, op)
}
