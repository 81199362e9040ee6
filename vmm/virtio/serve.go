package virtio

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Served counts what one Serve call did.
type Served struct {
	Chains    int // chains handled and returned
	Malformed int // malformed chains returned with nothing written
}

// Serve pops every available chain of q (re-enabling notifications when
// the ring runs dry), hands each to handle and returns it to the driver
// with the byte count handle reports. Malformed chains go back with
// nothing written. An error wraps queue.ErrBroken: the queue is unusable
// and the device should Fail.
func Serve(q *queue.Queue, c *queue.Chain, handle func(c *queue.Chain) uint32) (Served, error) {
	var s Served
	for {
		ok, err := q.Next(c)
		if errors.Is(err, queue.ErrChain) {
			q.Push(c, 0)
			s.Malformed++
			continue
		}
		if err != nil {
			return s, err
		}
		if !ok {
			return s, nil
		}
		q.Push(c, handle(c))
		s.Chains++
	}
}

// Drain is how a device's worker answers a kick on q: Serve, count
// malformed chains in the device's metric, interrupt the driver if it
// asked for one (event-idx aware), and on a broken queue fail the device
// through irq. It reports whether the queue is still usable; once it
// returns false the device must not touch q again.
func Drain(q *queue.Queue, c *queue.Chain, irq Interrupt, malformed *atomic.Uint64, name string, handle func(c *queue.Chain) uint32) bool {
	s, err := Serve(q, c, handle)
	malformed.Add(uint64(s.Malformed))
	// Chains already returned are signalled even when the queue then
	// broke: the driver may be waiting on them.
	if s.Chains+s.Malformed > 0 && q.NeedsInterrupt() {
		irq.UsedBuffer()
	}
	if err != nil {
		irq.Fail(fmt.Errorf("%s: %w", name, err))
		return false
	}
	return true
}
