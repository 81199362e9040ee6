package net

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// pair is one receive/transmit queue pair and the tap queue behind it:
// the data path. Its methods run on the device's worker.
type pair struct {
	d        *Device
	tap      Tap
	rxq, txq *queue.Queue

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
}

// start readies the pair for newly activated queues.
func (p *pair) start(rxq, txq *queue.Queue) {
	p.rxq, p.txq = rxq, txq
	if p.rxBuf == nil {
		p.rxBuf = make([]byte, HdrSize+MaxFrame)
	}
	p.rxLen, p.rxFirst, p.rxHeld, p.rxRoom = 0, 0, 0, 0
	if len(p.rxChains) != int(rxq.Size()) {
		p.rxChains = make([]queue.Chain, rxq.Size())
	}
}

// tx sends every frame the guest queued.
func (p *pair) tx() {
	if p.d.broken {
		return
	}
	p.d.broken = !virtio.Drain(p.txq, &p.txChain, p.d.irq, &p.d.Metrics.MalformedChains, "tx queue",
		func(c *queue.Chain) uint32 { p.send(c); return 0 })
}

func (p *pair) send(c *queue.Chain) {
	if c.ReadableLen < HdrSize {
		p.d.Metrics.TxMalformed.Add(1)
		return
	}
	frameLen := c.ReadableLen - HdrSize
	c.Readable.ReadAt(p.txHdr[:], 0) // a private copy: the guest can't change it after the check
	h, err := CheckTX(ParseHdr(p.txHdr[:]), p.d.acked, int(min(frameLen, 1<<20)))
	if err != nil {
		p.d.Metrics.TxMalformed.Add(1)
		return
	}
	h.Put(p.txHdr[:])
	// the checked header, then the frame straight from guest memory
	p.txBufs = append(p.txBufs[:0], p.txHdr[:])
	p.txBufs = c.Readable.Slice(p.txBufs, HdrSize, frameLen)
	iov := p.txBufs.Iovecs(p.txIov[:0])
	if len(iov) > iovMax {
		if p.txBuf == nil {
			p.txBuf = make([]byte, HdrSize+MaxFrame)
		}
		n := copy(p.txBuf, p.txHdr[:])
		n += c.Readable.ReadAt(p.txBuf[n:n+int(frameLen)], HdrSize)
		iov = queue.Buffers{p.txBuf[:n]}.Iovecs(iov[:0])
	}
	p.txIov = iov[:0]
	if _, err := vectorIO(unix.SYS_WRITEV, p.tap.Fd(), iov); err != nil {
		p.d.Metrics.TxDropped.Add(1)
		return
	}
	p.d.Metrics.TxFrames.Add(1)
	p.d.Metrics.TxBytes.Add(frameLen)
}

// rx moves frames from the tap into the guest's receive buffers until the
// tap is empty or the guest runs out of buffers, then interrupts once.
// When the buffers the guest made available can hold any frame, the tap
// is read straight into them (one readv); otherwise a frame is read into
// rxBuf and waits there for enough buffers.
func (p *pair) rx() {
	if p.d.broken {
		return
	}
	delivered := 0
	for {
		if p.rxLen == 0 {
			n, err := p.readTap()
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				if !errors.Is(err, queue.ErrBroken) && !errors.Is(err, queue.ErrChain) {
					p.d.Metrics.TapReadErrors.Add(1)
					break
				}
				// Linux never posts malformed receive buffers; a guest
				// that does loses the device until it resets it.
				p.d.fail(fmt.Errorf("rx queue: %w", err))
				break
			}
			// The tap reports a frame's whole length even when it did
			// not fit (a host that raised the tap's GSO size past
			// 64 KiB): such a frame was cut short, and is dropped.
			if n < HdrSize+14 || n > HdrSize+MaxFrame {
				p.d.Metrics.RxDropped.Add(1)
				continue
			}
			if !p.bounced {
				p.complete(n)
				delivered++
				continue
			}
			p.rxLen = n
		}
		ok, err := p.deliver()
		if err != nil {
			// as above
			p.d.fail(fmt.Errorf("rx queue: %w", err))
			break
		}
		if !ok {
			p.d.Metrics.RxNoBuffers.Add(1)
			break // the frame waits; the guest's next rx kick resumes
		}
		p.rxLen = 0
		delivered++
	}
	// Buffers taken but not filled are kept for the next frames (taking
	// enough for the largest frame again on every wake-up would cost
	// more than the frame); a snapshot leaves them to the guest.
	p.rxq.Hold(uint16(p.rxHeld))
	if delivered > 0 && p.rxq.NeedsInterrupt() {
		p.d.irq.UsedBuffer()
	}
}

// readTap reads one frame: into the guest's buffers if those it has made
// available can hold the largest frame, else into rxBuf (p.bounced). An
// error wrapping queue.ErrBroken or queue.ErrChain is the guest's.
func (p *pair) readTap() (int, error) {
	p.bounced = true
	ok, err := p.take(HdrSize + MaxFrame)
	if err != nil {
		return 0, err
	}
	if ok {
		iov := p.rxIov[:0]
		for i := 0; i < p.rxHeld && len(iov) <= iovMax; i++ {
			iov = p.held(i).Writable.Iovecs(iov)
		}
		p.rxIov = iov[:0]
		if len(iov) <= iovMax {
			p.bounced = false
			return vectorIO(unix.SYS_READV, p.tap.Fd(), iov)
		}
	}
	return unix.Read(p.tap.Fd(), p.rxBuf)
}

// vectorIO is readv(2) or writev(2) over iovecs the caller keeps:
// unix.Readv and unix.Writev build theirs on every call, on the heap past
// eight buffers (a receive into 4 KiB buffers takes 17 for 64 KiB).
func vectorIO(trap uintptr, fd int, iov []unix.Iovec) (int, error) {
	n, _, errno := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// held is the i-th chain taken from the rx queue and not yet used.
func (p *pair) held(i int) *queue.Chain {
	return &p.rxChains[(p.rxFirst+i)%len(p.rxChains)]
}

// take takes receive buffers from the queue until those held hold need
// bytes, and reports whether they do. Without mergeable buffers a frame
// must fit one buffer, so it takes one.
func (p *pair) take(need uint64) (bool, error) {
	mrg := p.d.acked&FMrgRxbuf != 0
	for p.rxRoom < need && p.rxHeld < len(p.rxChains) && (mrg || p.rxHeld == 0) {
		c := p.held(p.rxHeld)
		ok, err := p.rxq.Next(c)
		if err != nil || !ok {
			return false, err
		}
		p.rxHeld++
		if c.WritableLen == 0 || c.ReadableLen != 0 {
			return false, fmt.Errorf("%w: receive buffer %d with %d writable and %d readable bytes", queue.ErrChain, c.Head, c.WritableLen, c.ReadableLen)
		}
		p.rxRoom += c.WritableLen
	}
	return p.rxRoom >= need, nil
}

// deliver places the frame waiting in rxBuf in guest buffers. It reports
// false, keeping the frame, when the guest has too few buffers.
func (p *pair) deliver() (bool, error) {
	frame := p.rxBuf[:p.rxLen]
	ok, err := p.take(uint64(len(frame)))
	if err != nil {
		return false, err
	}
	if !ok {
		if p.d.acked&FMrgRxbuf == 0 && p.rxHeld > 0 {
			// without mergeable buffers one buffer must hold the
			// frame: it is dropped, the buffer serves the next one
			p.d.Metrics.RxDropped.Add(1)
			return true, nil
		}
		return false, nil
	}
	for i, off := 0, 0; off < len(frame); i++ {
		off += p.held(i).Writable.WriteAt(frame[off:], 0)
	}
	p.complete(len(frame))
	return true, nil
}

// complete returns the held buffers that the n bytes of a frame (header
// first) fill, from the first, with num_buffers set, all published at
// once so the driver never sees part of a frame.
func (p *pair) complete(n int) {
	q := p.rxq
	k := 0
	for left := uint64(n); left > 0; k++ {
		left -= min(left, p.held(k).WritableLen)
	}
	var nb [2]byte
	if p.d.acked&FMrgRxbuf != 0 {
		nb[0], nb[1] = byte(k), byte(k>>8)
	} else {
		nb[0] = 1
	}
	// num_buffers is the header's last field, at 10 in the stream the
	// buffers make (the tap leaves it as it was)
	for i, pos, done := 0, uint64(10), 0; done < len(nb); i++ {
		c := p.held(i)
		if pos >= c.WritableLen {
			pos -= c.WritableLen
			continue
		}
		done += c.Writable.WriteAt(nb[done:], pos)
		pos = 0
	}
	left := uint64(n)
	for i := 0; i < k; i++ {
		c := p.held(i)
		w := min(left, c.WritableLen)
		q.Add(c, uint32(w))
		left -= w
		p.rxRoom -= c.WritableLen
	}
	q.Publish()
	p.rxFirst, p.rxHeld = (p.rxFirst+k)%len(p.rxChains), p.rxHeld-k
	p.d.Metrics.RxFrames.Add(1)
	p.d.Metrics.RxBytes.Add(uint64(n - HdrSize))
}
