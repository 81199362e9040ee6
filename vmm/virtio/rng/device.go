// Package rng is virtio-rng (virtio 1.2 section 5.4): the guest's
// hw_random source, fed from the host's crypto/rand.
package rng

import (
	"crypto/rand"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

const (
	queueSize = 256
	// maxRequest caps the bytes given per request: a guest asking for a
	// huge buffer gets a short fill, not a long stall of the worker.
	maxRequest = 64 << 10
)

// Device is a virtio-rng device.
type Device struct {
	src io.Reader

	virtio.Worker
	mu     sync.Mutex // activation state, against Reset
	q      *queue.Queue
	irq    virtio.Interrupt
	chain  queue.Chain
	broken bool

	Metrics Metrics
}

// New returns a virtio-rng device reading from crypto/rand.
func New() *Device { return &Device{src: rand.Reader} }

// Type is virtio.TypeRNG.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeRNG }

// Features offered.
func (d *Device) Features() uint64 {
	return virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc
}

// QueueMaxSizes is one request queue.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{queueSize} }

// ReadConfig reads zeros: virtio-rng has no configuration space.
func (d *Device) ReadConfig(off uint64, data []byte) { clear(data) }

// WriteConfig ignores writes.
func (d *Device) WriteConfig(uint64, []byte) {}

// Activate starts the worker.
func (d *Device) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(a.Queues) != 1 || len(a.Notify) != 1 {
		return fmt.Errorf("virtio-rng: want 1 queue, got %d", len(a.Queues))
	}
	kick := a.Notify[0]
	d.q, d.irq, d.broken = a.Queues[0], a.Interrupt, false
	return d.StartWorker(virtio.Watch{FD: kick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) {
		kick.Drain()
		d.process()
	}})
}

func (d *Device) process() {
	if d.broken {
		return
	}
	d.broken = !virtio.Drain(d.q, &d.chain, d.irq, &d.Metrics.MalformedChain, "request queue", d.fill)
}

func (d *Device) fill(c *queue.Chain) uint32 {
	d.Metrics.Requests.Add(1)
	var n uint32
	for _, b := range c.Writable {
		if n >= maxRequest {
			break
		}
		b = b[:min(uint32(len(b)), maxRequest-n)]
		if _, err := io.ReadFull(d.src, b); err != nil {
			d.Metrics.SourceErrors.Add(1)
			break
		}
		n += uint32(len(b))
	}
	d.Metrics.Bytes.Add(uint64(n))
	return n
}

// Reset stops the worker.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.StopWorker()
	d.q, d.irq = nil, nil
}
