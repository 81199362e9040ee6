// Package queue implements the device side of a virtio split virtqueue
// (spec 2.7): descriptor chains (with indirect tables), the available and
// used rings, and notification suppression both ways (flags or
// VIRTIO_F_EVENT_IDX).
//
// Every write the device makes to guest RAM through a queue is dirty-
// tracked for live migration (KVM's dirty log sees only vCPU writes): a
// chain goes back to the driver only through Push or Add, which take the
// Chain and mark its device-writable buffers, and the queue marks the
// used-ring entries, used->idx and avail_event it writes itself. Marking
// after the write, when the chain is returned, is what makes it safe: a
// page the migration copied before the device filled it is dirty again
// by the time the driver can see the data, so a later round resends it;
// and the machine holds every device's worker before the final round.
//
// Everything in the rings is written by the guest and untrusted: every
// ring, table and buffer address is bounds-checked against guest RAM (via
// memory.Guest.Slice) before it is touched, and a chain walk is bounded by
// the size of the table it walks, so a cyclic or over-long chain fails
// instead of looping.
package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Descriptor flags.
const (
	DescFNext     = 1
	DescFWrite    = 2
	DescFIndirect = 4
)

// Ring flags.
const (
	AvailFNoInterrupt = 1
	UsedFNoNotify     = 1
)

const (
	descSize = 16
	// MaxSize is the largest queue size the spec allows for a split ring.
	MaxSize = 32768
	// MaxIndirect bounds an indirect table (QEMU uses the same limit).
	MaxIndirect = 1024
)

var (
	// ErrBroken means the queue itself is unusable (a ring index or head
	// out of range): the device must stop using it and ask for a reset.
	ErrBroken = errors.New("virtqueue broken")
	// ErrChain means one descriptor chain is malformed: that request
	// fails (returned to the driver with nothing written); the queue
	// goes on.
	ErrChain = errors.New("malformed descriptor chain")
)

// Config is what the driver programs through the transport.
type Config struct {
	Size      uint16
	Ready     bool
	DescTable uint64
	AvailRing uint64 // "driver area"
	UsedRing  uint64 // "device area"
}

// Queue is one activated split virtqueue. It is used by one goroutine (the
// device's worker) at a time.
type Queue struct {
	mem      *memory.Guest
	cfg      Config
	eventIdx bool
	indirect bool

	// host views of the rings, bounds-checked once at activation
	desc  []byte
	avail []byte
	used  []byte

	nextAvail uint16
	nextUsed  uint16
	// held chains are taken but kept unused across the worker's runs
	// (Hold): a saved queue is placed before them.
	held      uint16
	usedFlags uint16
	// last used idx the driver was interrupted for (EVENT_IDX)
	signalledUsed  uint16
	signalledValid bool

	fence atomic.Uint32
}

// Options are the negotiated ring features.
type Options struct {
	EventIdx bool // VIRTIO_F_EVENT_IDX
	Indirect bool // VIRTIO_F_INDIRECT_DESC
}

// New validates cfg against guest RAM and maxSize and returns the queue.
func New(mem *memory.Guest, cfg Config, maxSize uint16, opt Options) (*Queue, error) {
	if err := cfg.Validate(maxSize); err != nil {
		return nil, err
	}
	n := uint64(cfg.Size)
	q := &Queue{mem: mem, cfg: cfg, eventIdx: opt.EventIdx, indirect: opt.Indirect}
	var err error
	if q.desc, err = mem.Slice(cfg.DescTable, n*descSize); err != nil {
		return nil, fmt.Errorf("descriptor table: %w", err)
	}
	if q.avail, err = mem.Slice(cfg.AvailRing, 6+2*n); err != nil {
		return nil, fmt.Errorf("available ring: %w", err)
	}
	if q.used, err = mem.Slice(cfg.UsedRing, 6+8*n); err != nil {
		return nil, fmt.Errorf("used ring: %w", err)
	}
	return q, nil
}

// Validate checks the size and alignments the spec requires (2.7).
func (c Config) Validate(maxSize uint16) error {
	switch {
	case c.Size == 0 || c.Size > maxSize || c.Size&(c.Size-1) != 0:
		return fmt.Errorf("queue size %d: must be a power of two in 1..%d", c.Size, maxSize)
	case c.DescTable%16 != 0:
		return fmt.Errorf("descriptor table %#x: not 16-byte aligned", c.DescTable)
	case c.AvailRing%2 != 0:
		return fmt.Errorf("available ring %#x: not 2-byte aligned", c.AvailRing)
	case c.UsedRing%4 != 0:
		return fmt.Errorf("used ring %#x: not 4-byte aligned", c.UsedRing)
	}
	return nil
}

// Size is the queue size the driver chose.
func (q *Queue) Size() uint16 { return q.cfg.Size }

// EventIdx reports whether VIRTIO_F_EVENT_IDX is in use.
func (q *Queue) EventIdx() bool { return q.eventIdx }

func u32ptr(b []byte) *uint32 { return (*uint32)(unsafe.Pointer(&b[0])) }

// availIdx loads the driver's avail->idx with an aligned 32-bit atomic
// load (Go has no 16-bit atomics): the ring is 2-aligned, so idx is either
// the low half of the word at +2 or the high half of the word at +0.
func (q *Queue) availIdx() uint16 {
	if (q.cfg.AvailRing+2)%4 == 0 {
		return uint16(atomic.LoadUint32(u32ptr(q.avail[2:6])))
	}
	return uint16(atomic.LoadUint32(u32ptr(q.avail[0:4])) >> 16)
}

// publishUsed stores used->flags and used->idx in one aligned atomic
// store (the used ring is 4-aligned). On amd64 that is an XCHG: a full
// barrier, which orders the used elements before the index (spec 2.7.8)
// and the index before the suppression checks that follow.
func (q *Queue) publishUsed() {
	atomic.StoreUint32(u32ptr(q.used[0:4]), uint32(q.usedFlags)|uint32(q.nextUsed)<<16)
}

// Pending is the number of chains the driver has made available that the
// device has not taken.
func (q *Queue) Pending() (uint16, error) {
	n := q.availIdx() - q.nextAvail
	if n > q.cfg.Size {
		return 0, fmt.Errorf("%w: avail idx %d is %d ahead of the device in a queue of %d", ErrBroken, q.availIdx(), n, q.cfg.Size)
	}
	return n, nil
}

// Pop takes the next available chain into c (reusing c's slices). It
// reports false when the ring is empty. An error wrapping ErrChain leaves
// c.Head set: the caller fails that request with Push(c.Head, 0). An error
// wrapping ErrBroken means the queue can't be used any more.
func (q *Queue) Pop(c *Chain) (bool, error) {
	n, err := q.Pending()
	if err != nil || n == 0 {
		return false, err
	}
	slot := uint64(q.nextAvail % q.cfg.Size)
	head := binary.LittleEndian.Uint16(q.avail[4+2*slot:])
	if head >= q.cfg.Size {
		return false, fmt.Errorf("%w: available ring slot %d names descriptor %d of %d", ErrBroken, slot, head, q.cfg.Size)
	}
	q.nextAvail++
	return true, q.walk(head, c)
}

// Next is Pop that, when the ring is empty and EVENT_IDX is in use, asks
// the driver to notify again (avail_event = next index) and then looks
// once more, so a buffer made available in between is not missed. Without
// EVENT_IDX the device never suppresses notifications.
func (q *Queue) Next(c *Chain) (bool, error) {
	ok, err := q.Pop(c)
	if ok || err != nil || !q.eventIdx {
		return ok, err
	}
	binary.LittleEndian.PutUint16(q.used[4+8*uint64(q.cfg.Size):], q.nextAvail)
	q.mem.MarkDirty(q.cfg.UsedRing+4+8*uint64(q.cfg.Size), 2)
	q.fence.Add(1) // store avail_event before re-reading avail->idx (spec 2.7.10)
	return q.Pop(c)
}

// Undo gives back the last n popped chains, so the next Pop returns them
// again (a device that found too few buffers for a packet).
func (q *Queue) Undo(n uint16) { q.nextAvail -= n }

// Hold says that the last n popped chains are kept, unused and untouched,
// while the device's worker is idle (virtio-net takes receive buffers
// ahead of the frames that fill them). Save places the queue before
// them, so a restored device takes them again and the driver loses none;
// the device itself goes on with them.
func (q *Queue) Hold(n uint16) { q.held = n }

func (q *Queue) walk(head uint16, c *Chain) error {
	c.reset(head)
	table, tableLen := q.desc, uint32(q.cfg.Size)
	idx := uint32(head)
	seen := uint32(0)
	inIndirect := false
	for {
		if idx >= tableLen {
			return fmt.Errorf("%w: next descriptor %d outside a table of %d", ErrChain, idx, tableLen)
		}
		seen++
		if seen > tableLen {
			return fmt.Errorf("%w: chain longer than its table of %d (cyclic?)", ErrChain, tableLen)
		}
		d := table[idx*descSize : idx*descSize+descSize]
		addr := binary.LittleEndian.Uint64(d[0:])
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])

		if flags&DescFIndirect != 0 {
			switch {
			case !q.indirect:
				return fmt.Errorf("%w: indirect descriptor without VIRTIO_F_INDIRECT_DESC", ErrChain)
			case inIndirect:
				return fmt.Errorf("%w: indirect descriptor inside an indirect table", ErrChain)
			case flags&DescFNext != 0:
				return fmt.Errorf("%w: indirect descriptor with NEXT", ErrChain)
			case length == 0 || length%descSize != 0 || length/descSize > MaxIndirect:
				return fmt.Errorf("%w: indirect table of %d bytes", ErrChain, length)
			}
			t, err := q.mem.Slice(addr, uint64(length))
			if err != nil {
				return fmt.Errorf("%w: indirect table: %v", ErrChain, err)
			}
			table, tableLen, idx, seen, inIndirect = t, length/descSize, 0, 0, true
			continue
		}
		if length > 0 {
			b, err := q.mem.Slice(addr, uint64(length))
			if err != nil {
				return fmt.Errorf("%w: descriptor %d: %v", ErrChain, idx, err)
			}
			if flags&DescFWrite != 0 {
				c.Writable = append(c.Writable, b)
				c.WritableLen += uint64(length)
				c.writableAt = append(c.writableAt, span{addr, uint64(length)})
			} else {
				if len(c.Writable) > 0 {
					return fmt.Errorf("%w: device-readable descriptor after a device-writable one", ErrChain)
				}
				c.Readable = append(c.Readable, b)
				c.ReadableLen += uint64(length)
			}
		}
		if flags&DescFNext == 0 {
			return nil
		}
		idx = uint32(next)
	}
}

// Push returns chain c to the driver with written bytes placed in its
// device-writable buffers.
func (q *Queue) Push(c *Chain, written uint32) {
	q.Add(c, written)
	q.Publish()
}

// Add writes a used element for c without making it visible: a device
// that returns several chains for one packet (mergeable rx buffers) adds
// them all and then publishes once, so the driver never sees half a
// packet. Every device-writable buffer of c is marked dirty, whatever
// written says: a device may have written past what it reports.
func (q *Queue) Add(c *Chain, written uint32) {
	for _, s := range c.writableAt {
		q.mem.MarkDirty(s.gpa, s.n)
	}
	slot := uint64(q.nextUsed % q.cfg.Size)
	e := q.used[4+8*slot : 12+8*slot]
	binary.LittleEndian.PutUint32(e[0:], uint32(c.Head))
	binary.LittleEndian.PutUint32(e[4:], written)
	q.mem.MarkDirty(q.cfg.UsedRing+4+8*slot, 8)
	q.nextUsed++
}

// Publish makes the elements added so far visible to the driver.
func (q *Queue) Publish() {
	q.publishUsed()
	q.mem.MarkDirty(q.cfg.UsedRing, 4)
}

// NeedsInterrupt reports whether the driver wants an interrupt for the
// chains pushed since the last time it returned true (spec 2.7.7 and
// 2.7.10).
func (q *Queue) NeedsInterrupt() bool {
	q.fence.Add(1) // used idx is visible before we read the driver's wishes
	if !q.eventIdx {
		return binary.LittleEndian.Uint16(q.avail[0:])&AvailFNoInterrupt == 0
	}
	usedEvent := binary.LittleEndian.Uint16(q.avail[4+2*uint64(q.cfg.Size):])
	newIdx, old, valid := q.nextUsed, q.signalledUsed, q.signalledValid
	q.signalledUsed, q.signalledValid = newIdx, true
	if !valid {
		return true
	}
	return newIdx-usedEvent-1 < newIdx-old
}

// Chain is one descriptor chain, resolved to host slices of guest RAM.
// Readable buffers (driver to device) come before writable ones.
type Chain struct {
	Head        uint16
	Readable    Buffers
	Writable    Buffers
	ReadableLen uint64
	WritableLen uint64
	// writableAt are the guest ranges behind Writable, marked dirty
	// when the chain is returned.
	writableAt []span
}

// span is a range of guest-physical memory.
type span struct{ gpa, n uint64 }

func (c *Chain) reset(head uint16) {
	c.Head = head
	c.Readable = c.Readable[:0]
	c.Writable = c.Writable[:0]
	c.writableAt = c.writableAt[:0]
	c.ReadableLen, c.WritableLen = 0, 0
}

// State is the queue's part of a device snapshot.
type State struct {
	Config         Config
	EventIdx       bool
	Indirect       bool
	NextAvail      uint16
	NextUsed       uint16
	SignalledUsed  uint16
	SignalledValid bool
}

// Save captures the queue's position. The device's worker must be idle.
func (q *Queue) Save() State {
	return State{
		Config: q.cfg, EventIdx: q.eventIdx, Indirect: q.indirect,
		NextAvail: q.nextAvail - q.held, NextUsed: q.nextUsed,
		SignalledUsed: q.signalledUsed, SignalledValid: q.signalledValid,
	}
}

// Restore rebuilds a queue from s over mem, re-validating everything.
func Restore(mem *memory.Guest, s State, maxSize uint16) (*Queue, error) {
	q, err := New(mem, s.Config, maxSize, Options{EventIdx: s.EventIdx, Indirect: s.Indirect})
	if err != nil {
		return nil, err
	}
	q.nextAvail, q.nextUsed = s.NextAvail, s.NextUsed
	q.signalledUsed, q.signalledValid = s.SignalledUsed, s.SignalledValid
	return q, nil
}
