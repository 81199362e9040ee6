package mmio_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/rng"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// fuzzOpSize is one guest access in FuzzTransport's input: a kind byte
// (bit 7 write, bits 0-1 the width: 1, 2, 4 or 8 bytes), the offset in
// the window (16 bits, little-endian, taken modulo the window) and a
// 32-bit value (zero-extended for an 8-byte write).
const fuzzOpSize = 7

// fuzzMem is the guest RAM under the fuzzed device: small, so that a
// fuzzed ring address is as likely to hit it as to miss it.
const fuzzMem = 64 << 10

type fuzzOp struct {
	write bool
	width int
	off   uint64
	val   uint32
}

func (o fuzzOp) encode() []byte {
	b := make([]byte, fuzzOpSize)
	b[0] = byte(map[int]int{1: 0, 2: 1, 4: 2, 8: 3}[o.width])
	if o.write {
		b[0] |= 0x80
	}
	binary.LittleEndian.PutUint16(b[1:], uint16(o.off))
	binary.LittleEndian.PutUint32(b[3:], o.val)
	return b
}

func decodeOps(b []byte) []fuzzOp {
	var ops []fuzzOp
	for ; len(b) >= fuzzOpSize; b = b[fuzzOpSize:] {
		ops = append(ops, fuzzOp{
			write: b[0]&0x80 != 0,
			width: 1 << (b[0] & 3),
			off:   uint64(binary.LittleEndian.Uint16(b[1:])) % mmio.Size,
			val:   binary.LittleEndian.Uint32(b[3:]),
		})
	}
	return ops
}

// fuzzInit is what Linux's virtio_mmio does to bring a device up, as ops:
// reset, ACKNOWLEDGE, DRIVER, features, FEATURES_OK, each queue placed in
// guest RAM at 0x8000+i*0x1000 (size 8), DRIVER_OK, a kick of queue 0,
// and config reads and a write (virtio-scsi's sense_size).
func fuzzInit(tb testing.TB, queues int, features uint64) []byte {
	w := func(off uint64, v uint32) fuzzOp { return fuzzOp{write: true, width: 4, off: off, val: v} }
	r := func(off uint64) fuzzOp { return fuzzOp{width: 4, off: off} }
	const ack, drv, featOK, drvOK = virtio.StatusAcknowledge, virtio.StatusDriver, virtio.StatusFeaturesOK, virtio.StatusDriverOK
	ops := []fuzzOp{
		r(0x000), r(0x004), r(0x008), w(0x070, 0), w(0x070, ack), w(0x070, ack|drv),
		w(0x014, 0), r(0x010), w(0x014, 1), r(0x010),
		w(0x024, 0), w(0x020, uint32(features)), w(0x024, 1), w(0x020, uint32(features>>32)),
		w(0x070, ack|drv|featOK), r(0x070),
	}
	for i := range queues {
		q := queuetest.NewDriver(tb, nil, 0x8000+uint64(i)*0x1000, 0x1000, 8).Cfg
		ops = append(ops, w(0x030, uint32(i)), r(0x044), r(0x034), w(0x038, uint32(q.Size)),
			w(0x080, uint32(q.DescTable)), w(0x084, 0), w(0x090, uint32(q.AvailRing)), w(0x094, 0),
			w(0x0a0, uint32(q.UsedRing)), w(0x0a4, 0), w(0x044, 1))
	}
	ops = append(ops, w(0x070, ack|drv|featOK|drvOK), r(0x070), w(0x050, 0), r(0x060), w(0x064, 1),
		fuzzOp{width: 1, off: 0x100}, fuzzOp{width: 4, off: 0x114}, fuzzOp{write: true, width: 4, off: 0x114, val: 64})
	var b []byte
	for _, o := range ops {
		b = append(b, o.encode()...)
	}
	return b
}

// FuzzTransport is a hostile guest on a virtio-mmio window: any sequence
// of reads and writes of any width at any offset (identity, feature,
// queue, status, notify and interrupt registers and the device's config
// space), with rings wherever the guest puts them, over guest RAM holding
// whatever the guest wrote there. The device is a real one (virtio-rng,
// one queue, no config; or virtio-scsi, three queues and a config space
// the driver writes). Nothing may panic or touch memory outside RAM;
// every register read answers a value the spec allows; and a reset, then
// a plain driver init, brings the device back up whatever came before.
func FuzzTransport(f *testing.F) {
	v1 := uint64(virtio.FVersion1 | virtio.FRingEventIdx)
	f.Add(fuzzInit(f, 1, v1), []byte{}, false)
	f.Add(fuzzInit(f, 3, v1|virtio.FRingIndirectDesc), []byte{}, true)
	// The same with an available ring announcing chains: descriptors of
	// zeros at the rings' base (0x8000), avail->idx 5.
	ring := make([]byte, 0x8100)
	binary.LittleEndian.PutUint16(ring[0x8000+16*8+2:], 5)
	f.Add(fuzzInit(f, 1, v1), ring, false)
	f.Add(fuzzInit(f, 3, v1), ring, true)
	f.Fuzz(func(t *testing.T, ops, ram []byte, useSCSI bool) {
		mem := queuetest.NewMem(t, fuzzMem)
		if len(ram) > fuzzMem {
			ram = ram[:fuzzMem]
		}
		if err := mem.WriteAt(ram, 0); err != nil {
			t.Fatal(err)
		}
		var dev virtio.Device = rng.New()
		if useSCSI {
			dev = scsi.New()
		}
		maxSizes := dev.QueueMaxSizes()
		vm := &fakeVM{}
		tr, err := mmio.New(dev, mem, vm, mmio.Config{Base: base, GSI: 5})
		if err != nil {
			t.Fatal(err)
		}
		// Closed before RAM is unmapped (a t.Cleanup of NewMem): Close
		// stops the device's worker, which may be walking the rings.
		defer tr.Close()
		d := drv{t, tr}

		queueSel, kicks := uint32(0), 0
		for _, o := range decodeOps(ops) {
			if o.off+uint64(o.width) > mmio.Size {
				continue // the bus only dispatches accesses inside the window
			}
			if o.write {
				tr.Write(o.off, binary.LittleEndian.AppendUint64(nil, uint64(o.val))[:o.width])
				switch {
				case o.width != 4:
				case o.off == 0x030:
					queueSel = o.val
				case o.off == 0x070 && o.val == 0: // reset
					queueSel = 0
				case o.off == 0x050 && kicks < 4 && d.r(0x070)&virtio.StatusDriverOK != 0:
					// The worker serves a kick on its own goroutine: give
					// it a moment (the interrupt ends the wait) so that
					// the rings are walked before the next access, not
					// only sometimes before Close.
					kicks++
					pollIRQ(vm.irqfd, time.Millisecond)
				}
				continue
			}
			data := bytes.Repeat([]byte{0xa5}, o.width) // what the transport leaves is seen
			tr.Read(o.off, data)
			checkRead(t, o, data, dev, maxSizes, queueSel)
		}

		// Reset: every register back to power-on, whatever came before.
		d.w(0x070, 0)
		if s := d.r(0x070); s != 0 {
			t.Fatalf("status %#x after reset", s)
		}
		if s := d.r(0x060); s != 0 {
			t.Fatalf("interrupt status %#x after reset", s)
		}
		for i := range maxSizes {
			d.w(0x030, uint32(i))
			if d.r(0x044) != 0 {
				t.Fatalf("queue %d still ready after reset", i)
			}
		}
		// And a well-behaved driver gets a working device.
		if !d.negotiate(virtio.FVersion1) {
			t.Fatalf("FEATURES_OK refused after reset")
		}
		for i := range maxSizes {
			d.setupQueue(uint32(i), queuetest.NewDriver(t, mem, 0x8000+uint64(i)*0x1000, 0x1000, 8))
		}
		d.driverOK()
		if s := d.r(0x070); s != 0xf {
			t.Fatalf("status %#x after a clean init following reset, want 0xf", s)
		}
	})
}

// checkRead checks one read's answer against what virtio-mmio allows.
func checkRead(t *testing.T, o fuzzOp, data []byte, dev virtio.Device, maxSizes []uint16, queueSel uint32) {
	t.Helper()
	if o.off >= 0x100 {
		if _, isRNG := dev.(*rng.Device); isRNG && !allZero(data) {
			t.Fatalf("virtio-rng config read at %#x gave %x, it has no config", o.off, data)
		}
		if o.off >= 0x100+64 && !allZero(data) { // past any config struct here
			t.Fatalf("config read past the end at %#x gave %x", o.off, data)
		}
		return
	}
	if o.width != 4 || o.off%4 != 0 {
		if !allZero(data) {
			t.Fatalf("refused %d-byte register read at %#x gave %x", o.width, o.off, data)
		}
		return
	}
	v := binary.LittleEndian.Uint32(data)
	bad := false
	switch o.off {
	case 0x000:
		bad = v != 0x74726976
	case 0x004:
		bad = v != 2
	case 0x008:
		bad = v != uint32(dev.Type())
	case 0x00c:
		bad = v != 0x4d564b
	case 0x034: // QueueNumMax: the selected queue's, 0 past the last
		want := uint32(0)
		if queueSel < uint32(len(maxSizes)) {
			want = uint32(maxSizes[queueSel])
		}
		bad = v != want
	case 0x044: // QueueReady
		bad = v > 1
	case 0x060: // InterruptStatus: used buffer, config change
		bad = v&^uint32(mmio.IntUsedBuffer|mmio.IntConfigChange) != 0
	case 0x070: // Status: a prefix of the init sequence, plus the error bits
		switch v &^ (virtio.StatusDeviceNeedsReset | virtio.StatusFailed) {
		case 0, 1, 3, 11, 15:
		default:
			bad = true
		}
	}
	if bad {
		t.Fatalf("register %#x read %#x", o.off, v)
	}
}

// pollIRQ waits up to d for the device's interrupt and consumes it.
func pollIRQ(fd int, d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, int(d.Milliseconds())); n == 1 {
		var b [8]byte
		_, _ = unix.Read(fd, b[:])
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
