package scsi

import (
	"errors"
	"io"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// memDisk is an in-memory disk for the request fuzzer: an access outside
// it is an error the fuzzer looks for.
type memDisk struct {
	b  []byte
	ro bool
}

var errOutside = errors.New("access outside the disk")

func (m *memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errOutside
	}
	return copy(p, m.b[off:]), nil
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if m.ro || off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, errOutside
	}
	return copy(m.b[off:], p), nil
}

func (m *memDisk) Size() uint64   { return uint64(len(m.b)) }
func (m *memDisk) ReadOnly() bool { return m.ro }
func (m *memDisk) Flush() error   { return nil }
func (m *memDisk) Close() error   { return io.EOF }

// FuzzRequest feeds arbitrary chains (header, CDB, data, split anyhow)
// through the request and control queues' parsers and the SCSI command
// layer, with the CDB and sense sizes the driver may set: nothing may
// panic, touch a disk outside its capacity or write to a read-only one,
// or claim more bytes written than the chain holds.
func FuzzRequest(f *testing.F) {
	hdr := func(target byte, cdb ...byte) []byte {
		b := make([]byte, reqHeader+defaultCDBSize)
		b[0], b[1], b[2] = 1, target, 0x40
		copy(b[reqHeader:], cdb)
		return b
	}
	f.Add(hdr(0, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0), []byte{51}, []byte{108, 200, 200, 200}, uint8(0), uint16(32<<8|96))
	f.Add(append(hdr(1, 0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0), make([]byte, 512)...), []byte{51, 255, 255, 2}, []byte{108}, uint8(0), uint16(32<<8|96))
	f.Add(hdr(0, 0x12, 1, 0x83, 0, 255, 0), []byte{51}, []byte{108, 255}, uint8(0), uint16(32<<8|96))
	f.Add(hdr(0, 0x5a, 0, 0x3f, 0, 0, 0, 0, 1, 0, 0), []byte{51}, []byte{108, 255}, uint8(0), uint16(16<<8|18))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{24}, []byte{1}, uint8(1), uint16(32<<8|96))
	f.Fuzz(func(t *testing.T, readable []byte, rsplit, wsplit []byte, queueSel uint8, sizes uint16) {
		var c queue.Chain
		for _, n := range rsplit {
			k := min(int(n), len(readable))
			c.Readable = append(c.Readable, readable[:k])
			c.ReadableLen += uint64(k)
			readable = readable[k:]
		}
		for _, n := range wsplit {
			c.Writable = append(c.Writable, make([]byte, int(n)))
			c.WritableLen += uint64(n)
		}
		d := New()
		d.cdbSize.Store(uint32(sizes >> 8))
		d.senseSize.Store(uint32(sizes&0xff) % (maxSenseSize + 1))
		ro := &memDisk{b: make([]byte, 8<<10), ro: true}
		d.targets[0] = &slot{vol: Volume{Name: "rw"}, lun: LUN{Disk: &memDisk{b: make([]byte, 64<<10)}, Serial: "rw"}}
		d.targets[1] = &slot{vol: Volume{Name: "ro"}, lun: LUN{Disk: ro, Serial: "ro"}}
		var n uint32
		if queueSel&1 == 0 {
			n = d.request(&c)
		} else {
			n = d.control(&c)
		}
		if uint64(n) > c.WritableLen {
			t.Fatalf("claims %d bytes written into %d", n, c.WritableLen)
		}
		if e := d.Metrics.IOErrors.Load(); e != 0 {
			t.Fatalf("%d disk accesses failed: outside a disk or a write to a read-only one", e)
		}
	})
}
