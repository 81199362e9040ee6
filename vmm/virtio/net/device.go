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
	"unsafe"

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

	rxBuf []byte // one frame read from the tap, with its header
	rxLen int    // a frame waiting in rxBuf for guest buffers
	// rxChains is a ring of the receive buffers rx has taken from the
	// queue and not used yet: rxHeld of them from rxFirst, rxRoom bytes.
	rxChains        []queue.Chain
	rxFirst, rxHeld int
	rxRoom          uint64
	rxIov           []unix.Iovec
	bounced         bool // readTap read into rxBuf
	txChain         queue.Chain
	txHdr           [HdrSize]byte
	txBufs          queue.Buffers
	txIov           []unix.Iovec
	txBuf           []byte

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
	d.rxLen, d.rxFirst, d.rxHeld, d.rxRoom = 0, 0, 0, 0
	if len(d.rxChains) != int(d.rxq.Size()) {
		d.rxChains = make([]queue.Chain, d.rxq.Size())
	}
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
	// the checked header, then the frame straight from guest memory
	d.txBufs = append(d.txBufs[:0], d.txHdr[:])
	d.txBufs = c.Readable.Slice(d.txBufs, HdrSize, frameLen)
	iov := d.txBufs.Iovecs(d.txIov[:0])
	if len(iov) > iovMax {
		if d.txBuf == nil {
			d.txBuf = make([]byte, HdrSize+MaxFrame)
		}
		n := copy(d.txBuf, d.txHdr[:])
		n += c.Readable.ReadAt(d.txBuf[n:n+int(frameLen)], HdrSize)
		iov = queue.Buffers{d.txBuf[:n]}.Iovecs(iov[:0])
	}
	d.txIov = iov[:0]
	if _, err := vectorIO(unix.SYS_WRITEV, d.tap.Fd(), iov); err != nil {
		d.Metrics.TxDropped.Add(1)
		return
	}
	d.Metrics.TxFrames.Add(1)
	d.Metrics.TxBytes.Add(frameLen)
}

// rx moves frames from the tap into the guest's receive buffers until the
// tap is empty or the guest runs out of buffers, then interrupts once.
// When the buffers the guest made available can hold any frame, the tap
// is read straight into them (one readv); otherwise a frame is read into
// rxBuf and waits there for enough buffers.
func (d *Device) rx() {
	if d.broken {
		return
	}
	delivered := 0
	for {
		if d.rxLen == 0 {
			n, err := d.readTap()
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				if !errors.Is(err, queue.ErrBroken) && !errors.Is(err, queue.ErrChain) {
					d.Metrics.TapReadErrors.Add(1)
					break
				}
				// Linux never posts malformed receive buffers; a guest
				// that does loses the device until it resets it.
				d.fail(fmt.Errorf("rx queue: %w", err))
				break
			}
			// The tap reports a frame's whole length even when it did
			// not fit (a host that raised the tap's GSO size past
			// 64 KiB): such a frame was cut short, and is dropped.
			if n < HdrSize+14 || n > HdrSize+MaxFrame {
				d.Metrics.RxDropped.Add(1)
				continue
			}
			if !d.bounced {
				d.complete(n)
				delivered++
				continue
			}
			d.rxLen = n
		}
		ok, err := d.deliver()
		if err != nil {
			// as above
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
	// Buffers taken but not filled are kept for the next frames (taking
	// enough for the largest frame again on every wake-up would cost
	// more than the frame); a snapshot leaves them to the guest.
	d.rxq.Hold(uint16(d.rxHeld))
	if delivered > 0 && d.rxq.NeedsInterrupt() {
		d.irq.UsedBuffer()
	}
}

// readTap reads one frame: into the guest's buffers if those it has made
// available can hold the largest frame, else into rxBuf (d.bounced). An
// error wrapping queue.ErrBroken or queue.ErrChain is the guest's.
func (d *Device) readTap() (int, error) {
	d.bounced = true
	ok, err := d.take(HdrSize + MaxFrame)
	if err != nil {
		return 0, err
	}
	if ok {
		iov := d.rxIov[:0]
		for i := 0; i < d.rxHeld && len(iov) <= iovMax; i++ {
			iov = d.held(i).Writable.Iovecs(iov)
		}
		d.rxIov = iov[:0]
		if len(iov) <= iovMax {
			d.bounced = false
			return vectorIO(unix.SYS_READV, d.tap.Fd(), iov)
		}
	}
	return unix.Read(d.tap.Fd(), d.rxBuf)
}

// vectorIO is readv(2) or writev(2) over iovecs the caller keeps
// (unix.Readv and unix.Writev allocate theirs on every call).
func vectorIO(trap uintptr, fd int, iov []unix.Iovec) (int, error) {
	n, _, errno := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// held is the i-th chain taken from the rx queue and not yet used.
func (d *Device) held(i int) *queue.Chain {
	return &d.rxChains[(d.rxFirst+i)%len(d.rxChains)]
}

// take takes receive buffers from the queue until those held hold need
// bytes, and reports whether they do. Without mergeable buffers a frame
// must fit one buffer, so it takes one.
func (d *Device) take(need uint64) (bool, error) {
	mrg := d.acked&FMrgRxbuf != 0
	for d.rxRoom < need && d.rxHeld < len(d.rxChains) && (mrg || d.rxHeld == 0) {
		c := d.held(d.rxHeld)
		ok, err := d.rxq.Next(c)
		if err != nil || !ok {
			return false, err
		}
		d.rxHeld++
		if c.WritableLen == 0 || c.ReadableLen != 0 {
			return false, fmt.Errorf("%w: receive buffer %d with %d writable and %d readable bytes", queue.ErrChain, c.Head, c.WritableLen, c.ReadableLen)
		}
		d.rxRoom += c.WritableLen
	}
	return d.rxRoom >= need, nil
}

// deliver places the frame waiting in rxBuf in guest buffers. It reports
// false, keeping the frame, when the guest has too few buffers.
func (d *Device) deliver() (bool, error) {
	frame := d.rxBuf[:d.rxLen]
	ok, err := d.take(uint64(len(frame)))
	if err != nil {
		return false, err
	}
	if !ok {
		if d.acked&FMrgRxbuf == 0 && d.rxHeld > 0 {
			// without mergeable buffers one buffer must hold the
			// frame: it is dropped, the buffer serves the next one
			d.Metrics.RxDropped.Add(1)
			return true, nil
		}
		return false, nil
	}
	for i, off := 0, 0; off < len(frame); i++ {
		off += d.held(i).Writable.WriteAt(frame[off:], 0)
	}
	d.complete(len(frame))
	return true, nil
}

// complete returns the held buffers that the n bytes of a frame (header
// first) fill, from the first, with num_buffers set, all published at
// once so the driver never sees part of a frame.
func (d *Device) complete(n int) {
	q := d.rxq
	k := 0
	for left := uint64(n); left > 0; k++ {
		left -= min(left, d.held(k).WritableLen)
	}
	var nb [2]byte
	if d.acked&FMrgRxbuf != 0 {
		nb[0], nb[1] = byte(k), byte(k>>8)
	} else {
		nb[0] = 1
	}
	// num_buffers is the header's last field, at 10 in the stream the
	// buffers make (the tap leaves it as it was)
	for i, pos, done := 0, uint64(10), 0; done < len(nb); i++ {
		c := d.held(i)
		if pos >= c.WritableLen {
			pos -= c.WritableLen
			continue
		}
		done += c.Writable.WriteAt(nb[done:], pos)
		pos = 0
	}
	left := uint64(n)
	for i := 0; i < k; i++ {
		c := d.held(i)
		w := min(left, c.WritableLen)
		q.Add(c, uint32(w))
		left -= w
		d.rxRoom -= c.WritableLen
	}
	q.Publish()
	d.rxFirst, d.rxHeld = (d.rxFirst+k)%len(d.rxChains), d.rxHeld-k
	d.Metrics.RxFrames.Add(1)
	d.Metrics.RxBytes.Add(uint64(n - HdrSize))
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
