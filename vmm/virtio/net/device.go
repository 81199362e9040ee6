// Package net is virtio-net (virtio 1.2 section 5.1) on a tap device: one
// rx/tx queue pair per queue of the tap (several with VIRTIO_NET_F_MQ and a
// multi-queue tap), mergeable rx buffers, and checksum/TSO offloads passed
// through the tap's virtio-net header (the tap is told which offloads the
// guest accepted with TUNSETOFFLOAD).
package net

import (
	"encoding/binary"
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
	FCtrlVQ      = 1 << 17
	FMQ          = 1 << 22
	statusLinkUp = 1
)

// Control queue commands (5.1.6.5): the one class the device takes.
const (
	CtrlClassMQ    = 4
	CtrlMQPairsSet = 0
	CtrlOK         = 0
	CtrlErr        = 1
)

const (
	queueSize = 256
	iovMax    = 1024
	// MaxPairs bounds the queue pairs of one NIC (one per vCPU).
	MaxPairs = 64
)

// Tap is the host side: a non-blocking tap queue with 12-byte vnet headers
// (*tap.Tap).
type Tap interface {
	Fd() int
	SetOffload(flags int) error
	// SetQueueEnabled attaches or detaches a queue of a multi-queue tap.
	SetQueueEnabled(on bool) error
}

// Config describes a NIC.
type Config struct {
	Tap Tap
	// Queues are the further queues of a multi-queue tap, one per further
	// queue pair: with them the device offers VIRTIO_NET_F_MQ.
	Queues []Tap
	MAC    net.HardwareAddr
	// LinkDown clears VIRTIO_NET_S_LINK_UP in the status the guest reads
	// (a VMI interface's state: down): its driver keeps the carrier off.
	LinkDown bool
}

// Device is a virtio-net device.
type Device struct {
	virtio.Worker
	mac      net.HardwareAddr
	features uint64
	config   [10]byte

	mu     sync.Mutex
	pairs  []*pair
	ctrlq  *queue.Queue
	ctrl   queue.Chain
	irq    virtio.Interrupt
	acked  uint64
	broken bool
	// active is how many pairs the driver uses (VQ_PAIRS_SET, 1 until
	// then and after a reset); attached which tap queues take frames.
	active   int
	attached []bool

	Metrics Metrics
}

// New creates the device; the taps stay owned by the caller.
func New(cfg Config) (*Device, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("virtio-net: MAC %q is not 6 bytes", cfg.MAC)
	}
	if 1+len(cfg.Queues) > MaxPairs {
		return nil, fmt.Errorf("virtio-net: %d queue pairs, at most %d", 1+len(cfg.Queues), MaxPairs)
	}
	d := &Device{mac: append(net.HardwareAddr(nil), cfg.MAC...)}
	d.setActive(1)
	for _, t := range append([]Tap{cfg.Tap}, cfg.Queues...) {
		d.pairs = append(d.pairs, &pair{d: d, tap: t})
		d.attached = append(d.attached, true) // as a tap queue opens
	}
	d.features = virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc |
		FMAC | FStatus | FMrgRxbuf |
		FCsum | FHostTSO4 | FHostTSO6 | // guest -> host: the tap takes partial checksums and TSO frames
		FGuestCsum | FGuestTSO4 | FGuestTSO6 | FGuestECN // host -> guest, enabled on the tap at activation
	if len(d.pairs) > 1 {
		d.features |= FCtrlVQ | FMQ
	}
	copy(d.config[:], d.mac)
	if !cfg.LinkDown {
		d.config[6] = statusLinkUp
	}
	binary.LittleEndian.PutUint16(d.config[8:], uint16(len(d.pairs))) // max_virtqueue_pairs
	return d, nil
}

// Type is virtio.TypeNet.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeNet }

// Features offered.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes is receive and transmit for each pair, then with several
// pairs the control queue (5.1.2).
func (d *Device) QueueMaxSizes() []uint16 {
	n := 2 * len(d.pairs)
	if len(d.pairs) > 1 {
		n++
	}
	s := make([]uint16, n)
	for i := range s {
		s[i] = queueSize
	}
	return s
}

// ReadConfig reads struct virtio_net_config (mac, status,
// max_virtqueue_pairs).
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
	want := len(d.QueueMaxSizes())
	if len(a.Queues) != want || len(a.Notify) != want {
		return fmt.Errorf("virtio-net: want %d queues, got %d", want, len(a.Queues))
	}
	if len(d.pairs) > 1 && a.Features&FMQ == 0 {
		return fmt.Errorf("virtio-net: %d queue pairs, and the driver did not accept VIRTIO_NET_F_MQ", len(d.pairs))
	}
	for _, p := range d.pairs {
		if err := p.tap.SetOffload(tapOffload(a.Features)); err != nil {
			return err
		}
	}
	if err := d.attach(); err != nil {
		return err
	}
	d.irq, d.acked, d.broken = a.Interrupt, a.Features, false
	var ws []virtio.Watch
	for i, p := range d.pairs {
		p.start(a.Queues[2*i], a.Queues[2*i+1])
		rxKick, txKick := a.Notify[2*i], a.Notify[2*i+1]
		ws = append(ws,
			virtio.Watch{FD: rxKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { rxKick.Drain(); p.rx() }},
			virtio.Watch{FD: txKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { txKick.Drain(); p.tx() }},
			// edge-triggered: rx reads until EAGAIN, or until the guest
			// runs out of buffers, and then an rx kick resumes it
			virtio.Watch{FD: p.tap.Fd(), Events: unix.EPOLLIN | unix.EPOLLET, Handle: func(uint32) { p.rx() }},
		)
	}
	if len(d.pairs) > 1 {
		d.ctrlq = a.Queues[want-1]
		kick := a.Notify[want-1]
		ws = append(ws, virtio.Watch{FD: kick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { kick.Drain(); d.control() }})
	}
	return d.StartWorker(ws...)
}

// attach makes the tap queues of the active pairs, and only those, take
// frames: the kernel would leave frames on a queue no one reads.
func (d *Device) attach() error {
	for i, p := range d.pairs {
		on := i < d.active
		if i == 0 || d.attached[i] == on {
			continue // the first pair is always in use
		}
		if err := p.tap.SetQueueEnabled(on); err != nil {
			return err
		}
		d.attached[i] = on
	}
	return nil
}

// control answers the driver's commands on the control queue.
func (d *Device) control() {
	if d.broken {
		return
	}
	d.broken = !virtio.Drain(d.ctrlq, &d.ctrl, d.irq, &d.Metrics.MalformedChains, "control queue", func(c *queue.Chain) uint32 {
		if c.WritableLen == 0 {
			d.Metrics.CtrlErrors.Add(1)
			return 0 // nowhere to put the ack
		}
		ack := []byte{CtrlOK}
		if err := d.command(c); err != nil {
			d.Metrics.CtrlErrors.Add(1)
			ack[0] = CtrlErr
		}
		c.Writable.WriteAt(ack, c.WritableLen-1)
		return 1
	})
}

// command runs one control command: VQ_PAIRS_SET is the one there is.
func (d *Device) command(c *queue.Chain) error {
	var b [4]byte // class, command, virtio_net_ctrl_mq.virtqueue_pairs
	if c.Readable.ReadAt(b[:], 0) < len(b) || b[0] != CtrlClassMQ || b[1] != CtrlMQPairsSet {
		return errors.New("unsupported command")
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n < 1 || n > len(d.pairs) {
		return fmt.Errorf("%d queue pairs of %d", n, len(d.pairs))
	}
	old := d.active
	d.setActive(n)
	if err := d.attach(); err != nil {
		d.setActive(old)
		return err
	}
	return nil
}

// setActive records how many pairs the driver uses.
func (d *Device) setActive(n int) {
	d.active = n
	d.Metrics.QueuePairs.Store(uint64(n))
}

func (d *Device) fail(err error) {
	d.broken = true
	d.irq.Fail(err)
}

// Reset stops the worker, turns the taps' offloads off and leaves the
// first pair alone in use.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.StopWorker() {
		// The next driver negotiates offloads again before any packet.
		for _, p := range d.pairs {
			_ = p.tap.SetOffload(0)
		}
	}
	d.setActive(1)
	_ = d.attach() // a queue left attached only holds frames until the next activation
	d.ctrlq, d.irq, d.acked = nil, nil, 0
	for _, p := range d.pairs {
		p.rxq, p.txq, p.rxLen = nil, nil, 0
	}
}
