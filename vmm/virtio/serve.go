package virtio

import (
	"errors"

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
			q.Push(c.Head, 0)
			s.Malformed++
			continue
		}
		if err != nil {
			return s, err
		}
		if !ok {
			return s, nil
		}
		q.Push(c.Head, handle(c))
		s.Chains++
	}
}
