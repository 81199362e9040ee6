// Package net is virtio-net (virtio 1.2 section 5.1) on a tap device: one
// rx/tx queue pair, mergeable rx buffers, and checksum/TSO offloads passed
// through the tap's virtio-net header (the tap is told which offloads the
// guest accepted with TUNSETOFFLOAD).
package net

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/net/tap"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Feature bits (5.1.3).
const (
	FCsum        = 1 << 0
	FGuestCsum   = 1 << 1
	FMAC         = 1 << 5
	FGuestTSO4   = 1 << 7
	FGuestTSO6   = 1 << 8
	FGuestECN    = 1 << 9
	FHostTSO4    = 1 << 11
	FHostTSO6    = 1 << 12
	FMrgRxbuf    = 1 << 15
	FStatus      = 1 << 16
	statusLinkUp = 1
)

const (
	rxQueue   = 0
	txQueue   = 1
	queueSize = 256
	iovMax    = 1024
)

// Tap is the host side: a non-blocking tap with 12-byte vnet headers
// (*tap.Tap).
type Tap interface {
	Fd() int
	SetOffload(flags int) error
}

// Config describes a NIC.
type Config struct {
	Tap Tap
	MAC net.HardwareAddr
}

// Device is a virtio-net device.
type Device struct {
	virtio.Worker
	tap      Tap
	mac      net.HardwareAddr
	features uint64
	config   [8]byte

	mu     sync.Mutex
	rxq    *queue.Queue
	txq    *queue.Queue
	irq    virtio.Interrupt
	acked  uint64
	broken bool

	rxBuf    []byte // one frame read from the tap, with its header
	rxLen    int    // a frame waiting for guest buffers
	rxChains []queue.Chain
	txChain  queue.Chain
	txHdr    [HdrSize]byte
	txIov    [][]byte
	txBuf    []byte

	Metrics Metrics
}

// New creates the device; the tap stays owned by the caller.
func New(cfg Config) (*Device, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("virtio-net: MAC %q is not 6 bytes", cfg.MAC)
	}
	d := &Device{tap: cfg.Tap, mac: append(net.HardwareAddr(nil), cfg.MAC...)}
	d.features = virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc |
		FMAC | FStatus | FMrgRxbuf |
		FCsum | FHostTSO4 | FHostTSO6 | // guest -> host: the tap takes partial checksums and TSO frames
		FGuestCsum | FGuestTSO4 | FGuestTSO6 | FGuestECN // host -> guest, enabled on the tap at activation
	copy(d.config[:], d.mac)
	d.config[6] = statusLinkUp
	return d, nil
}

// Type is virtio.TypeNet.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeNet }

// Features offered.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes is receive and transmit.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{queueSize, queueSize} }

// ReadConfig reads struct virtio_net_config (mac, status).
func (d *Device) ReadConfig(off uint64, data []byte) { virtio.ReadConfigBytes(d.config[:], off, data) }

// WriteConfig ignores writes (the MAC is the host's choice).
func (d *Device) WriteConfig(uint64, []byte) {}

// tapOffload maps the guest's accepted receive offloads to TUN_F_*.
func tapOffload(acked uint64) int {
	f := 0
	if acked&FGuestCsum != 0 {
		f |= tap.OffloadCsum
		if acked&FGuestTSO4 != 0 {
			f |= tap.OffloadTSO4
		}
		if acked&FGuestTSO6 != 0 {
			f |= tap.OffloadTSO6
		}
		if acked&FGuestECN != 0 && f&(tap.OffloadTSO4|tap.OffloadTSO6) != 0 {
			f |= tap.OffloadTSOECN
		}
	}
	return f
}

// Activate starts the worker.
func (d *Device) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(a.Queues) != 2 || len(a.Notify) != 2 {
		return fmt.Errorf("virtio-net: want 2 queues, got %d", len(a.Queues))
	}
	if err := d.tap.SetOffload(tapOffload(a.Features)); err != nil {
		return err
	}
	d.rxq, d.txq, d.irq, d.acked, d.broken = a.Queues[rxQueue], a.Queues[txQueue], a.Interrupt, a.Features, false
	if d.rxBuf == nil {
		d.rxBuf = make([]byte, HdrSize+MaxFrame)
	}
	d.rxLen = 0
	rxKick, txKick := a.Notify[rxQueue], a.Notify[txQueue]
	return d.StartWorker(
		virtio.Watch{FD: rxKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { rxKick.Drain(); d.rx() }},
		virtio.Watch{FD: txKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { txKick.Drain(); d.tx() }},
		// edge-triggered: rx reads until EAGAIN, or until the guest runs
		// out of buffers, and then an rx kick resumes it
		virtio.Watch{FD: d.tap.Fd(), Events: unix.EPOLLIN | unix.EPOLLET, Handle: func(uint32) { d.rx() }},
	)
}

func (d *Device) fail(err error) {
	d.broken = true
	d.irq.Fail(err)
}

// tx sends every frame the guest queued.
func (d *Device) tx() {
	if d.broken {
		return
	}
	d.broken = !virtio.Drain(d.txq, &d.txChain, d.irq, &d.Metrics.MalformedChains, "tx queue",
		func(c *queue.Chain) uint32 { d.send(c); return 0 })
}

func (d *Device) send(c *queue.Chain) {
	if c.ReadableLen < HdrSize {
		d.Metrics.TxMalformed.Add(1)
		return
	}
	frameLen := c.ReadableLen - HdrSize
	c.Readable.ReadAt(d.txHdr[:], 0) // a private copy: the guest can't change it after the check
	h, err := CheckTX(ParseHdr(d.txHdr[:]), d.acked, int(min(frameLen, 1<<20)))
	if err != nil {
		d.Metrics.TxMalformed.Add(1)
		return
	}
	h.Put(d.txHdr[:])
	iov := d.txIov[:0]
	iov = append(iov, d.txHdr[:])
	iov = c.Readable.Slice(iov, HdrSize, frameLen)
	if len(iov) > iovMax {
		if d.txBuf == nil {
			d.txBuf = make([]byte, HdrSize+MaxFrame)
		}
		n := copy(d.txBuf, d.txHdr[:])
		n += c.Readable.ReadAt(d.txBuf[n:n+int(frameLen)], HdrSize)
		iov = append(iov[:0], d.txBuf[:n])
	}
	d.txIov = iov[:0]
	if _, err := unix.Writev(d.tap.Fd(), iov); err != nil {
		d.Metrics.TxDropped.Add(1)
		return
	}
	d.Metrics.TxFrames.Add(1)
	d.Metrics.TxBytes.Add(frameLen)
}

// rx moves frames from the tap into the guest's receive buffers.
func (d *Device) rx() {
	if d.broken {
		return
	}
	delivered := 0
	for {
		if d.rxLen == 0 {
			n, err := unix.Read(d.tap.Fd(), d.rxBuf)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				d.Metrics.TapReadErrors.Add(1)
				break
			}
			if n < HdrSize+14 {
				d.Metrics.RxDropped.Add(1)
				continue
			}
			d.rxLen = n
		}
		ok, err := d.deliver()
		if err != nil {
			d.fail(fmt.Errorf("rx queue: %w", err))
			break
		}
		if !ok {
			d.Metrics.RxNoBuffers.Add(1)
			break // the frame waits; the guest's next rx kick resumes
		}
		d.rxLen = 0
		delivered++
	}
	if delivered > 0 && d.rxq.NeedsInterrupt() {
		d.irq.UsedBuffer()
	}
}

// deliver places the pending frame in guest buffers: one chain, or with
// mergeable buffers as many as it takes (num_buffers in the header). It
// reports false, taking nothing, when the guest has too few buffers.
func (d *Device) deliver() (bool, error) {
	q := d.rxq
	frame := d.rxBuf[:d.rxLen]
	mrg := d.acked&FMrgRxbuf != 0
	var room uint64
	k := 0
	for room < uint64(len(frame)) {
		if k == len(d.rxChains) {
			d.rxChains = append(d.rxChains, queue.Chain{})
		}
		c := &d.rxChains[k]
		ok, err := q.Next(c)
		if err != nil {
			// Linux never posts malformed receive buffers; a guest
			// that does loses the device until it resets it.
			return false, err
		}
		if !ok {
			q.Undo(uint16(k))
			return false, nil
		}
		if c.WritableLen == 0 || c.ReadableLen != 0 {
			return false, fmt.Errorf("%w: receive buffer %d with %d writable and %d readable bytes", queue.ErrChain, c.Head, c.WritableLen, c.ReadableLen)
		}
		k++
		room += c.WritableLen
		if !mrg && room < uint64(len(frame)) {
			// without mergeable buffers one buffer must hold the frame
			q.Undo(uint16(k))
			d.Metrics.RxDropped.Add(1)
			return true, nil
		}
	}
	nb := uint16(1)
	if mrg {
		nb = uint16(k)
	}
	frame[10], frame[11] = byte(nb), byte(nb>>8)
	off := 0
	for i := 0; i < k; i++ {
		c := &d.rxChains[i]
		n := c.Writable.WriteAt(frame[off:], 0)
		q.Add(c, uint32(n))
		off += n
	}
	q.Publish()
	d.Metrics.RxFrames.Add(1)
	d.Metrics.RxBytes.Add(uint64(len(frame) - HdrSize))
	return true, nil
}

// Reset stops the worker and turns the tap's offloads off.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.StopWorker() {
		// The next driver negotiates offloads again before any packet.
		_ = d.tap.SetOffload(0)
	}
	d.rxq, d.txq, d.irq, d.acked, d.rxLen = nil, nil, nil, 0, 0
}
