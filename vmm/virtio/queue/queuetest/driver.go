// Package queuetest is a minimal virtio driver for tests: it lays out a
// split ring in real guest memory, adds descriptor chains (well-formed or
// deliberately broken) and reads the used ring back.
package queuetest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// NewMem creates size bytes of guest RAM at GPA 0, released at test end.
func NewMem(t testing.TB, size uint64) *memory.Guest {
	t.Helper()
	m, err := memory.New([]memory.Layout{{GPA: 0, Size: size}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Desc is one raw descriptor.
type Desc struct {
	Addr  uint64
	Len   uint32
	Flags uint16
	Next  uint16
}

// Buf describes one buffer of a chain: readable with Data as content, or
// device-writable (Write) of Len bytes.
type Buf struct {
	Data  []byte
	Write bool
	Len   uint32
}

// Driver drives one queue.
type Driver struct {
	t        testing.TB
	Mem      *memory.Guest
	Cfg      queue.Config
	nextDesc uint16
	availIdx uint16
	usedSeen uint16
	heap     uint64 // bump allocator for buffers and indirect tables
	heapEnd  uint64
	fence    atomic.Uint32 // a locked add: a full barrier on amd64
}

// NewDriver lays out a queue of size entries at base and uses the memory
// after the rings, up to base+span, for buffers.
func NewDriver(t testing.TB, mem *memory.Guest, base, span uint64, size uint16) *Driver {
	n := uint64(size)
	desc := base
	avail := desc + 16*n
	used := (avail + 6 + 2*n + 3) &^ 3
	heap := (used + 6 + 8*n + 15) &^ 15
	return &Driver{
		t: t, Mem: mem,
		Cfg:  queue.Config{Size: size, Ready: true, DescTable: desc, AvailRing: avail, UsedRing: used},
		heap: heap, heapEnd: base + span,
	}
}

// Alloc reserves n bytes of buffer space and returns its address.
func (d *Driver) Alloc(n uint64) uint64 {
	a := (d.heap + 15) &^ 15
	if a+n > d.heapEnd {
		d.heap = (d.Cfg.UsedRing + 6 + 8*uint64(d.Cfg.Size) + 15) &^ 15 // wrap: tests reuse space
		a = d.heap
	}
	d.heap = a + n
	return a
}

// WriteDesc writes descriptor i of the main table.
func (d *Driver) WriteDesc(i uint16, desc Desc) { d.writeDescAt(d.Cfg.DescTable+16*uint64(i), desc) }

func (d *Driver) writeDescAt(gpa uint64, desc Desc) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], desc.Addr)
	binary.LittleEndian.PutUint32(b[8:], desc.Len)
	binary.LittleEndian.PutUint16(b[12:], desc.Flags)
	binary.LittleEndian.PutUint16(b[14:], desc.Next)
	if err := d.Mem.WriteAt(b[:], gpa); err != nil {
		d.t.Fatal(err)
	}
}

// Publish makes head available.
func (d *Driver) Publish(head uint16) {
	slot := uint64(d.availIdx % d.Cfg.Size)
	d.put16(d.Cfg.AvailRing+4+2*slot, head)
	d.availIdx++
	d.put16(d.Cfg.AvailRing+2, d.availIdx)
	d.fence.Add(1) // avail->idx before a read of avail_event (NeedsKick)
}

// AvailIdx is the driver's avail->idx: what it has published so far.
func (d *Driver) AvailIdx() uint16 { return d.availIdx }

// NeedsKick reports whether the device wants a notification for the
// chains published since the avail index was old, as Linux's
// virtqueue_kick_prepare decides: with EVENT_IDX from avail_event,
// otherwise from used->flags.
func (d *Driver) NeedsKick(old uint16, eventIdx bool) bool {
	if !eventIdx {
		f, err := d.Mem.Uint16(d.Cfg.UsedRing)
		if err != nil {
			d.t.Fatal(err)
		}
		return f&queue.UsedFNoNotify == 0
	}
	return d.availIdx-d.AvailEvent()-1 < d.availIdx-old
}

// put16 writes a ring field; the rings lie in guest RAM, so a failure is
// the test's own bug.
func (d *Driver) put16(gpa uint64, v uint16) {
	if err := d.Mem.PutUint16(gpa, v); err != nil {
		d.t.Fatal(err)
	}
}

func (d *Driver) place(bufs []Buf) []Desc {
	out := make([]Desc, len(bufs))
	for i, b := range bufs {
		n := b.Len
		if !b.Write {
			n = uint32(len(b.Data))
		}
		a := d.Alloc(uint64(n))
		if !b.Write {
			if err := d.Mem.WriteAt(b.Data, a); err != nil {
				d.t.Fatal(err)
			}
		}
		out[i] = Desc{Addr: a, Len: n}
		if b.Write {
			out[i].Flags |= queue.DescFWrite
		}
	}
	return out
}

// Add places bufs as a chain of direct descriptors, publishes it and
// returns its head and the buffers' guest addresses.
func (d *Driver) Add(bufs ...Buf) (uint16, []uint64) {
	descs := d.place(bufs)
	head := d.nextDesc
	addrs := make([]uint64, len(descs))
	for i, desc := range descs {
		idx := (head + uint16(i)) % d.Cfg.Size
		if i+1 < len(descs) {
			desc.Flags |= queue.DescFNext
			desc.Next = (idx + 1) % d.Cfg.Size
		}
		d.WriteDesc(idx, desc)
		addrs[i] = desc.Addr
	}
	d.nextDesc = (head + uint16(len(descs))) % d.Cfg.Size
	d.Publish(head)
	return head, addrs
}

// AddIndirect places bufs in an indirect table referenced by one
// descriptor, publishes it and returns the head and buffer addresses.
func (d *Driver) AddIndirect(bufs ...Buf) (uint16, []uint64) {
	descs := d.place(bufs)
	table := d.Alloc(16 * uint64(len(descs)))
	addrs := make([]uint64, len(descs))
	for i, desc := range descs {
		if i+1 < len(descs) {
			desc.Flags |= queue.DescFNext
			desc.Next = uint16(i + 1)
		}
		d.writeDescAt(table+16*uint64(i), desc)
		addrs[i] = desc.Addr
	}
	head := d.nextDesc
	d.WriteDesc(head, Desc{Addr: table, Len: 16 * uint32(len(descs)), Flags: queue.DescFIndirect})
	d.nextDesc = (head + 1) % d.Cfg.Size
	d.Publish(head)
	return head, addrs
}

// WriteTable writes raw descriptors at gpa (an indirect table).
func (d *Driver) WriteTable(gpa uint64, descs []Desc) {
	for i, desc := range descs {
		d.writeDescAt(gpa+16*uint64(i), desc)
	}
}

// Used returns the next used element, if the device has pushed one, and
// (like Linux) asks for an interrupt for the following one (used_event).
func (d *Driver) Used() (head uint16, length uint32, ok bool) {
	idx, err := d.Mem.Uint16(d.Cfg.UsedRing + 2)
	if err != nil {
		d.t.Fatal(err)
	}
	if idx == d.usedSeen {
		return 0, 0, false
	}
	slot := uint64(d.usedSeen % d.Cfg.Size)
	id, _ := d.Mem.Uint32(d.Cfg.UsedRing + 4 + 8*slot)
	l, _ := d.Mem.Uint32(d.Cfg.UsedRing + 8 + 8*slot)
	d.usedSeen++
	d.SetUsedEvent(d.usedSeen) // as Linux does: interrupt me for the next one
	return uint16(id), l, true
}

// Read returns n bytes of guest memory at gpa.
func (d *Driver) Read(gpa uint64, n int) []byte {
	b := make([]byte, n)
	if err := d.Mem.ReadAt(b, gpa); err != nil {
		d.t.Fatal(err)
	}
	return b
}

// SetAvailFlags writes avail->flags.
func (d *Driver) SetAvailFlags(f uint16) { d.put16(d.Cfg.AvailRing, f) }

// SetUsedEvent writes used_event (EVENT_IDX).
func (d *Driver) SetUsedEvent(v uint16) {
	d.put16(d.Cfg.AvailRing+4+2*uint64(d.Cfg.Size), v)
	// Before the next read of used->idx: otherwise the store can wait in
	// the store buffer while the device, publishing meanwhile, reads the
	// old used_event and skips the interrupt this driver then sleeps on.
	d.fence.Add(1)
}

// AvailEvent reads avail_event (EVENT_IDX).
func (d *Driver) AvailEvent() uint16 {
	v, _ := d.Mem.Uint16(d.Cfg.UsedRing + 4 + 8*uint64(d.Cfg.Size))
	return v
}
