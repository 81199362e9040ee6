package queue_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
)

const memSize = 1 << 20

func setup(t *testing.T, size uint16, opt queue.Options) (*queuetest.Driver, *queue.Queue) {
	t.Helper()
	mem := queuetest.NewMem(t, memSize)
	d := queuetest.NewDriver(t, mem, 0x1000, 0x80000, size)
	q, err := queue.New(mem, d.Cfg, 256, opt)
	require.NoError(t, err)
	return d, q
}

func TestPopDirectAndIndirectChains(t *testing.T) {
	d, q := setup(t, 16, queue.Options{Indirect: true})
	h1, _ := d.Add(queuetest.Buf{Data: []byte("hello ")}, queuetest.Buf{Data: []byte("world")}, queuetest.Buf{Write: true, Len: 8})
	h2, a2 := d.AddIndirect(queuetest.Buf{Data: []byte("abc")}, queuetest.Buf{Write: true, Len: 4}, queuetest.Buf{Write: true, Len: 2})

	var c queue.Chain
	ok, err := q.Pop(&c)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, h1, c.Head)
	assert.Equal(t, uint64(11), c.ReadableLen)
	assert.Equal(t, uint64(8), c.WritableLen)
	got := make([]byte, 11)
	assert.Equal(t, 11, c.Readable.ReadAt(got, 0))
	assert.Equal(t, "hello world", string(got))
	q.Push(&c, 3)

	ok, err = q.Pop(&c)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, h2, c.Head)
	assert.Equal(t, 6, c.Writable.WriteAt([]byte("XYZWVU"), 0))
	q.Push(&c, 6)
	assert.Equal(t, []byte("XYZW"), d.Read(a2[1], 4))
	assert.Equal(t, []byte("VU"), d.Read(a2[2], 2))

	ok, err = q.Pop(&c)
	require.NoError(t, err)
	assert.False(t, ok, "ring is empty")

	for _, want := range []struct {
		head uint16
		n    uint32
	}{{h1, 3}, {h2, 6}} {
		head, n, ok := d.Used()
		require.True(t, ok)
		assert.Equal(t, want.head, head)
		assert.Equal(t, want.n, n)
	}
}

// Malformed chains fail that request (ErrChain, head known) or, when the
// ring itself is garbage, the queue (ErrBroken); never a panic, a hang or
// an access outside guest RAM.
func TestMalformedChains(t *testing.T) {
	const tbl = 0x60000 // scratch area for indirect tables
	cases := []struct {
		name    string
		noIndir bool
		build   func(d *queuetest.Driver)
		want    error
	}{
		{"buffer outside RAM", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: memSize - 8, Len: 16})
			d.Publish(0)
		}, queue.ErrChain},
		{"huge length wraps", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: 0x70000, Len: 0xffffffff})
			d.Publish(0)
		}, queue.ErrChain},
		{"address wraps 64 bits", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: ^uint64(0) - 4, Len: 16})
			d.Publish(0)
		}, queue.ErrChain},
		{"cyclic chain", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 1})
			d.WriteDesc(1, queuetest.Desc{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 0})
			d.Publish(0)
		}, queue.ErrChain},
		{"self loop (longer than the queue)", false, func(d *queuetest.Driver) {
			d.WriteDesc(3, queuetest.Desc{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 3})
			d.Publish(3)
		}, queue.ErrChain},
		{"next out of range", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 400})
			d.Publish(0)
		}, queue.ErrChain},
		{"readable after writable", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: 0x70000, Len: 8, Flags: queue.DescFNext | queue.DescFWrite, Next: 1})
			d.WriteDesc(1, queuetest.Desc{Addr: 0x70000, Len: 8})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect not negotiated", true, func(d *queuetest.Driver) {
			d.WriteTable(tbl, []queuetest.Desc{{Addr: 0x70000, Len: 8}})
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 16, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect inside indirect", false, func(d *queuetest.Driver) {
			d.WriteTable(tbl, []queuetest.Desc{{Addr: tbl + 0x100, Len: 16, Flags: queue.DescFIndirect}})
			d.WriteTable(tbl+0x100, []queuetest.Desc{{Addr: 0x70000, Len: 8}})
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 16, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect with next", false, func(d *queuetest.Driver) {
			d.WriteTable(tbl, []queuetest.Desc{{Addr: 0x70000, Len: 8}})
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 16, Flags: queue.DescFIndirect | queue.DescFNext, Next: 1})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect table outside RAM", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: memSize - 16, Len: 64, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect table length not a multiple of 16", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 20, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect table too large", false, func(d *queuetest.Driver) {
			d.WriteDesc(0, queuetest.Desc{Addr: 0, Len: 16 * (queue.MaxIndirect + 1), Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"cycle inside indirect table", false, func(d *queuetest.Driver) {
			d.WriteTable(tbl, []queuetest.Desc{
				{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 1},
				{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 0},
			})
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 32, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"indirect next outside its table", false, func(d *queuetest.Driver) {
			d.WriteTable(tbl, []queuetest.Desc{{Addr: 0x70000, Len: 8, Flags: queue.DescFNext, Next: 5}})
			d.WriteDesc(0, queuetest.Desc{Addr: tbl, Len: 16, Flags: queue.DescFIndirect})
			d.Publish(0)
		}, queue.ErrChain},
		{"head out of range", false, func(d *queuetest.Driver) {
			d.Publish(999)
		}, queue.ErrBroken},
		{"avail idx far ahead", false, func(d *queuetest.Driver) {
			d.Mem.PutUint16(d.Cfg.AvailRing+2, 1000)
		}, queue.ErrBroken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, q := setup(t, 16, queue.Options{Indirect: !tc.noIndir})
			tc.build(d)
			var c queue.Chain
			_, err := q.Pop(&c)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
			if errors.Is(err, queue.ErrChain) {
				// the request fails: returned with nothing written, and the queue goes on
				q.Push(&c, 0)
				_, n, ok := d.Used()
				require.True(t, ok)
				assert.Zero(t, n)
				d.WriteDesc(7, queuetest.Desc{Addr: 0x70000, Len: 4})
				d.Publish(7)
				ok, err := q.Pop(&c)
				require.NoError(t, err)
				assert.True(t, ok)
				assert.Equal(t, uint16(7), c.Head)
			}
		})
	}
}

func TestNewRejectsBadRings(t *testing.T) {
	mem := queuetest.NewMem(t, memSize)
	good := queue.Config{Size: 16, Ready: true, DescTable: 0x1000, AvailRing: 0x2000, UsedRing: 0x3000}
	for _, tc := range []struct {
		name string
		mod  func(c *queue.Config)
	}{
		{"size zero", func(c *queue.Config) { c.Size = 0 }},
		{"size not power of two", func(c *queue.Config) { c.Size = 12 }},
		{"size above max", func(c *queue.Config) { c.Size = 512 }},
		{"desc misaligned", func(c *queue.Config) { c.DescTable = 0x1008 }},
		{"avail misaligned", func(c *queue.Config) { c.AvailRing = 0x2001 }},
		{"used misaligned", func(c *queue.Config) { c.UsedRing = 0x3002 }},
		{"desc outside RAM", func(c *queue.Config) { c.DescTable = memSize - 0x80 }},
		{"avail outside RAM", func(c *queue.Config) { c.AvailRing = memSize }},
		{"used outside RAM", func(c *queue.Config) { c.UsedRing = 1 << 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			_, err := queue.New(mem, c, 256, queue.Options{})
			assert.Error(t, err)
		})
	}
	_, err := queue.New(mem, good, 256, queue.Options{})
	assert.NoError(t, err)
}

func TestInterruptSuppression(t *testing.T) {
	t.Run("flags", func(t *testing.T) {
		d, q := setup(t, 8, queue.Options{})
		d.Add(queuetest.Buf{Write: true, Len: 4})
		var c queue.Chain
		_, err := q.Pop(&c)
		require.NoError(t, err)
		q.Push(&c, 0)
		assert.True(t, q.NeedsInterrupt())
		d.SetAvailFlags(queue.AvailFNoInterrupt)
		assert.False(t, q.NeedsInterrupt())
	})
	t.Run("event idx", func(t *testing.T) {
		d, q := setup(t, 8, queue.Options{EventIdx: true})
		var c queue.Chain
		push := func() {
			d.Add(queuetest.Buf{Write: true, Len: 4})
			ok, err := q.Pop(&c)
			require.NoError(t, err)
			require.True(t, ok)
			q.Push(&c, 0)
		}
		push() // used idx 1
		assert.True(t, q.NeedsInterrupt(), "first interrupt always goes out")
		d.SetUsedEvent(2) // driver: interrupt me when used idx passes 2
		push()            // used idx 2
		assert.False(t, q.NeedsInterrupt())
		push() // used idx 3: crossed used_event
		assert.True(t, q.NeedsInterrupt())
		assert.False(t, q.NeedsInterrupt(), "nothing new")
	})
	t.Run("avail event", func(t *testing.T) {
		d, q := setup(t, 8, queue.Options{EventIdx: true})
		var c queue.Chain
		d.Add(queuetest.Buf{Write: true, Len: 4})
		d.Add(queuetest.Buf{Write: true, Len: 4})
		for i := 0; i < 2; i++ {
			ok, err := q.Next(&c)
			require.NoError(t, err)
			require.True(t, ok)
		}
		ok, err := q.Next(&c)
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Equal(t, uint16(2), d.AvailEvent(), "device asks to be kicked for the next buffer")
	})
}

func TestSaveRestoreContinues(t *testing.T) {
	d, q := setup(t, 8, queue.Options{EventIdx: true, Indirect: true})
	var c queue.Chain
	d.Add(queuetest.Buf{Data: []byte("one")})
	_, err := q.Pop(&c)
	require.NoError(t, err)
	q.Push(&c, 0)
	s := q.Save()
	q2, err := queue.Restore(d.Mem, s, 256)
	require.NoError(t, err)
	assert.Equal(t, s, q2.Save())
	d.Add(queuetest.Buf{Data: []byte("two")})
	ok, err := q2.Pop(&c)
	require.NoError(t, err)
	require.True(t, ok)
	got := make([]byte, 3)
	c.Readable.ReadAt(got, 0)
	assert.Equal(t, "two", string(got))
}

// Chains a device holds across its worker's runs are the driver's again
// in a saved queue: the restored device takes them anew.
func TestSaveLeavesHeldChains(t *testing.T) {
	d, q := setup(t, 8, queue.Options{EventIdx: true})
	var heads []uint16
	for i := 0; i < 3; i++ {
		h, _ := d.Add(queuetest.Buf{Write: true, Len: 64})
		heads = append(heads, h)
	}
	var c queue.Chain
	for i := 0; i < 3; i++ {
		ok, err := q.Pop(&c)
		require.NoError(t, err)
		require.True(t, ok)
	}
	q.Hold(2) // the first is used, the other two kept
	s := q.Save()
	assert.Equal(t, uint16(1), s.NextAvail)
	q2, err := queue.Restore(d.Mem, s, 256)
	require.NoError(t, err)
	for _, want := range heads[1:] {
		ok, err := q2.Pop(&c)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, want, c.Head)
	}
}

func TestBuffers(t *testing.T) {
	b := queue.Buffers{[]byte("ab"), []byte(""), []byte("cde"), []byte("f")}
	assert.Equal(t, uint64(6), b.Len())
	iov := b.Iovecs(nil)
	require.Len(t, iov, 3, "the empty buffer is left out")
	for i, s := range [][]byte{b[0], b[2], b[3]} {
		assert.Equal(t, &s[0], iov[i].Base)
		assert.Equal(t, uint64(len(s)), iov[i].Len)
	}
	got := make([]byte, 4)
	assert.Equal(t, 4, b.ReadAt(got, 1))
	assert.Equal(t, "bcde", string(got))
	assert.Equal(t, 1, b.ReadAt(got, 5))
	assert.Equal(t, 0, b.ReadAt(got, 9))
	s := b.Slice(nil, 1, 3)
	assert.Equal(t, queue.Buffers{[]byte("b"), []byte("cd")}, s)
	assert.Equal(t, 2, b.WriteAt([]byte("XYZ"), 4))
	assert.Equal(t, "cdX", string(b[2]))
	assert.Equal(t, "Y", string(b[3]))
}

// FuzzWalk puts random bytes in guest RAM (rings, tables and all) and
// drains the queue: the walker must terminate, never panic, and only hand
// out buffers inside guest RAM.
func FuzzWalk(f *testing.F) {
	f.Add([]byte{4, 0, 1, 0x10, 0, 0, 0, 0, 0, 0})
	seed := make([]byte, 512)
	binary.LittleEndian.PutUint16(seed[0x102:], 3) // avail idx
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		const size = 64 << 10
		mem, err := memory.New([]memory.Layout{{GPA: 0, Size: size}})
		if err != nil {
			t.Skip(err)
		}
		defer mem.Close()
		region := mem.Regions()[0].Data
		copy(region, data)
		var p [8]byte
		copy(p[:], data)
		qs := uint16(1) << (p[0] % 9) // 1..256
		cfg := queue.Config{
			Size:      qs,
			DescTable: uint64(p[1]) << 8,
			AvailRing: uint64(p[2])<<8 | uint64(p[3]&0xfe),
			UsedRing:  uint64(p[4])<<8 | uint64(p[5]&0xfc),
		}
		q, err := queue.New(mem, cfg, 256, queue.Options{EventIdx: p[6]&1 != 0, Indirect: p[6]&2 != 0})
		if err != nil {
			return
		}
		var c queue.Chain
		for i := 0; i < int(qs)+1; i++ {
			ok, err := q.Next(&c)
			if errors.Is(err, queue.ErrBroken) {
				return
			}
			if !ok && err == nil {
				break
			}
			for _, b := range append(append(queue.Buffers{}, c.Readable...), c.Writable...) {
				if !inside(region, b) {
					t.Fatalf("buffer outside guest RAM")
				}
			}
			c.Writable.WriteAt([]byte{0xaa}, 0)
			q.Push(&c, 0)
			q.NeedsInterrupt()
		}
	})
}

func inside(region, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	r0 := &region[0]
	return uintptrOf(&b[0]) >= uintptrOf(r0) && uintptrOf(&b[len(b)-1]) <= uintptrOf(&region[len(region)-1])
}

// TestDeviceWritesAreDirtyTracked: everything a device writes to guest RAM
// through a queue (its writable buffers, the used ring, avail_event) is
// marked dirty, or live migration would hand the target stale pages.
func TestDeviceWritesAreDirtyTracked(t *testing.T) {
	// 8 KiB buffers reach past the page the rings share with the start of
	// the buffer heap, so the buffers' own marking is checked too.
	fill := func(c *queue.Chain) uint32 {
		b := make([]byte, c.WritableLen)
		for i := range b {
			b[i] = byte(i%251) + 1
		}
		return uint32(c.Writable.WriteAt(b, 0))
	}
	cases := []struct {
		name string
		opt  queue.Options
		post func(d *queuetest.Driver)
		op   func(t *testing.T, q *queue.Queue)
	}{
		{name: "direct chain", post: func(d *queuetest.Driver) {
			d.Add(queuetest.Buf{Data: []byte("request")}, queuetest.Buf{Write: true, Len: 8192}, queuetest.Buf{Write: true, Len: 1})
		}, op: func(t *testing.T, q *queue.Queue) {
			var c queue.Chain
			ok, err := q.Pop(&c)
			require.True(t, ok)
			require.NoError(t, err)
			q.Push(&c, fill(&c))
		}},
		{name: "indirect chain", opt: queue.Options{Indirect: true}, post: func(d *queuetest.Driver) {
			d.AddIndirect(queuetest.Buf{Write: true, Len: 4096}, queuetest.Buf{Write: true, Len: 8192})
		}, op: func(t *testing.T, q *queue.Queue) {
			var c queue.Chain
			ok, err := q.Pop(&c)
			require.True(t, ok)
			require.NoError(t, err)
			q.Push(&c, fill(&c))
		}},
		{name: "several chains published at once", post: func(d *queuetest.Driver) {
			d.Add(queuetest.Buf{Write: true, Len: 8192})
			d.Add(queuetest.Buf{Write: true, Len: 8192})
		}, op: func(t *testing.T, q *queue.Queue) {
			var c1, c2 queue.Chain
			for _, c := range []*queue.Chain{&c1, &c2} {
				ok, err := q.Pop(c)
				require.True(t, ok)
				require.NoError(t, err)
			}
			q.Add(&c1, fill(&c1))
			q.Add(&c2, fill(&c2))
			q.Publish()
		}},
		{name: "used ring only", post: func(d *queuetest.Driver) {
			d.Add(queuetest.Buf{Data: []byte("read-only request")})
		}, op: func(t *testing.T, q *queue.Queue) {
			var c queue.Chain
			ok, err := q.Pop(&c)
			require.True(t, ok)
			require.NoError(t, err)
			q.Push(&c, 0)
		}},
		{name: "avail event", opt: queue.Options{EventIdx: true}, post: func(d *queuetest.Driver) {
			d.Add(queuetest.Buf{Data: []byte("x")})
		}, op: func(t *testing.T, q *queue.Queue) {
			var c queue.Chain
			ok, err := q.Next(&c)
			require.True(t, ok)
			require.NoError(t, err)
			ok, err = q.Next(&c) // empty: the device writes avail_event
			require.False(t, ok)
			require.NoError(t, err)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, q := setup(t, 16, tc.opt)
			tc.post(d)
			queuetest.RequireTracked(t, d.Mem, func() { tc.op(t, q) })
		})
	}
}
