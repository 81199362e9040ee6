package blk

import (
	"errors"
	"io"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// memDisk is an in-memory disk for the request fuzzer.
type memDisk struct {
	b  []byte
	ro bool
}

func (m *memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errors.New("write out of range")
	}
	return copy(m.b[off:], p), nil
}

func (m *memDisk) Size() uint64   { return uint64(len(m.b)) }
func (m *memDisk) ReadOnly() bool { return m.ro }
func (m *memDisk) Flush() error   { return nil }
func (m *memDisk) Close() error   { return nil }

func (m *memDisk) Discard(off, n int64) error {
	if off < 0 || n < 0 || off+n > int64(len(m.b)) {
		return errors.New("discard out of range")
	}
	clear(m.b[off : off+n])
	return nil
}

func (m *memDisk) WriteZeroes(off, n int64, _ bool) error { return m.Discard(off, n) }

// FuzzRequest feeds arbitrary readable/writable splits through Parse and
// Execute: a disk access may only happen inside the disk, and nothing may
// panic.
func FuzzRequest(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, []byte{16}, []byte{200, 1}, uint8(0))
	f.Add([]byte{11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0}, []byte{16, 16}, []byte{1}, uint8(3))
	f.Fuzz(func(t *testing.T, readable []byte, rsplit, wsplit []byte, flags uint8) {
		var c queue.Chain
		for _, n := range rsplit {
			k := min(int(n), len(readable))
			c.Readable = append(c.Readable, readable[:k])
			c.ReadableLen += uint64(k)
			readable = readable[k:]
		}
		for _, n := range wsplit {
			c.Writable = append(c.Writable, make([]byte, int(n)*7))
			c.WritableLen += uint64(n) * 7
		}
		disk := &memDisk{b: make([]byte, 64<<10), ro: flags&1 != 0}
		lim := Limits{Sectors: disk.Size() / 512, ReadOnly: disk.ro, Discard: flags&2 != 0, WriteZeroes: flags&4 != 0, MaxSegments: 4, MaxSegSector: 1 << 22}
		var r Request
		if err := Parse(&c, &r); err != nil {
			return
		}
		if len(r.Status) != 1 {
			t.Fatalf("status is %d bytes", len(r.Status))
		}
		var m Metrics
		status, n := Execute(&r, disk, lim, []byte("fuzz"), &m)
		if status > StatusUnsupp {
			t.Fatalf("status %d", status)
		}
		if uint64(n) > c.WritableLen {
			t.Fatalf("claims %d bytes written into %d", n, c.WritableLen)
		}
	})
}
