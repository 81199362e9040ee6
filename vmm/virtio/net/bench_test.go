package net_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

// The guest-less device benchmarks: the benchmark goroutine, locked to
// its thread, plays the guest's driver at full speed (descriptors and
// rings in guest memory, kicks on the queue's notify eventfd as KVM's
// ioeventfd signals them, waits on the interrupt eventfd) and the host
// side of the tap. What the rest of the process spends is the device's
// cost, reported per MiB and per frame (virtiotest.CPU).

// benchBufs is where the benchmarks' buffers live in the harness's 64 MiB
// guest, above the queues' rings.
const benchBufs = 16 << 20

// benchFeatures are what Linux negotiates with this device.
const benchFeatures = virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc | vnet.FMAC | vnet.FStatus |
	vnet.FMrgRxbuf | vnet.FCsum | vnet.FHostTSO4 | vnet.FHostTSO6 | vnet.FGuestCsum | vnet.FGuestTSO4 | vnet.FGuestTSO6

// frameSizes are a full standard frame and a 64 KiB frame, the size a
// guest's TSO (tx) and the host's GSO (rx) hand the device.
var frameSizes = []int{1514, 65000}

// BenchmarkDevice runs each direction at full speed and, for standard
// frames, one frame per wake-up: the driver pauses between frames long
// enough for the device's worker to go back to sleep, as it does behind
// a guest much slower than the device (as this host's emulated guest
// kernels are), so every frame pays a kick, a wake-up and an interrupt.
func BenchmarkDevice(b *testing.B) {
	for _, size := range frameSizes {
		b.Run(fmt.Sprintf("tx/%d", size), func(b *testing.B) { benchTx(b, size, false) })
	}
	b.Run("tx/1514_one_per_wake-up", func(b *testing.B) { benchTx(b, 1514, true) })
	for _, size := range frameSizes {
		b.Run(fmt.Sprintf("rx/%d", size), func(b *testing.B) { benchRx(b, size, false) })
	}
	b.Run("rx/1514_one_per_wake-up", func(b *testing.B) { benchRx(b, 1514, true) })
}

// pause sleeps on the driver's thread without the Go scheduler, so that
// the device's worker, not the driver, is what is left to run.
func pause() {
	ts := unix.Timespec{Nsec: 100_000}
	_ = unix.Nanosleep(&ts, nil) // an early wake-up only shortens the pause
}

// benchTx sends b.N frames of size bytes from the guest, as many at a
// time as the ring holds or (paced) one at a time. The tap's side
// drops them at once (a unicast destination that is not the tap's, an
// ethertype no one handles), so what is measured is the device and the
// tap, not a protocol stack.
func benchTx(b *testing.B, size int, paced bool) {
	e := setup(b)
	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(b, err)
	h := virtiotest.Activate(b, dev, benchFeatures)
	q := h.Queues[1]
	n := q.Cfg.Size
	// As Linux sends a linear frame: its header pushed in front, one
	// descriptor.
	buf := make([]byte, vnet.HdrSize+size)
	eth := buf[vnet.HdrSize:]
	copy(eth, []byte{0x02, 0, 0, 0, 0, 0x99})
	copy(eth[6:], guestMAC)
	binary.BigEndian.PutUint16(eth[12:], 0x88b5) // IEEE local experimental
	stride := uint64(len(buf)+4095) &^ 4095
	require.LessOrEqual(b, benchBufs+uint64(n)*stride, uint64(64<<20))
	for i := uint16(0); i < n; i++ {
		require.NoError(b, h.Mem.WriteAt(buf, benchBufs+uint64(i)*stride))
	}
	post := func(i uint16) {
		q.WriteDesc(i, queuetest.Desc{Addr: benchBufs + uint64(i)*stride, Len: uint32(len(buf))})
		q.Publish(i)
	}
	b.ResetTimer()
	cpu := virtiotest.StartCPU(b)
	var free []uint16
	for i := uint16(0); i < n; i++ {
		free = append(free, i)
	}
	posted, done := 0, 0
	for done < b.N {
		old := q.AvailIdx()
		for len(free) > 0 && posted < b.N && (!paced || posted == done) {
			if paced {
				pause()
			}
			post(free[len(free)-1])
			free = free[:len(free)-1]
			posted++
		}
		if q.AvailIdx() != old && q.NeedsKick(old, true) {
			h.Kick(1)
		}
		reaped := false
		for {
			head, _, ok := q.Used()
			if !ok {
				break
			}
			free = append(free, head)
			done++
			reaped = true
		}
		if !reaped && done < b.N {
			h.WaitInterrupt()
		}
	}
	used := cpu.Stop(b)
	b.StopTimer()
	require.Equal(b, uint64(b.N), dev.Metrics.TxFrames.Load(), "frames the tap took")
	virtiotest.ReportCPU(b, used, int64(b.N)*int64(size), b.N)
}

// benchRx delivers b.N frames of size bytes to the guest: the host side
// sends them into the tap through a packet socket, in bursts the guest's
// 4 KiB mergeable receive buffers can take (a 64 KiB frame takes 16 of
// them) or (paced) one at a time.
func benchRx(b *testing.B, size int, paced bool) {
	e := setup(b)
	hdl, err := e.ns.Handle()
	require.NoError(b, err)
	defer hdl.Close()
	l, err := hdl.LinkByName(e.tap.Name())
	require.NoError(b, err)
	require.NoError(b, hdl.LinkSetMTU(l, size-14))
	var sock int
	require.NoError(b, e.ns.Do(func() error {
		// protocol 0: the socket only sends
		sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	}))
	defer unix.Close(sock)
	to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index}
	frame := udpFrame(guestMAC, e.hostMAC, e.hostIP, e.guestIP, 7000, 5000, make([]byte, size-42))

	dev, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC})
	require.NoError(b, err)
	h := virtiotest.Activate(b, dev, benchFeatures)
	q := h.Queues[0]
	n := q.Cfg.Size
	const bufLen = 4096
	post := func(i uint16) {
		q.WriteDesc(i, queuetest.Desc{Addr: benchBufs + uint64(i)*bufLen, Len: bufLen, Flags: 2})
		q.Publish(i)
	}
	perFrame := (vnet.HdrSize + size + bufLen - 1) / bufLen
	burst := int(n) / perFrame
	if paced {
		burst = 1
	}
	b.ResetTimer()
	cpu := virtiotest.StartCPU(b)
	old := q.AvailIdx()
	for i := uint16(0); i < n; i++ {
		post(i)
	}
	if q.NeedsKick(old, true) {
		h.Kick(0)
	}
	for done := 0; done < b.N; {
		k := min(burst, b.N-done)
		if paced {
			pause()
		}
		for i := 0; i < k; i++ {
			if err := unix.Sendto(sock, frame, 0, to); err != nil {
				b.Fatalf("send into the tap: %v", err)
			}
		}
		want := k * (vnet.HdrSize + size)
		old := q.AvailIdx()
		for got := 0; got < want; {
			head, l, ok := q.Used()
			if !ok {
				h.WaitInterrupt()
				continue
			}
			got += int(l)
			post(head)
		}
		if q.NeedsKick(old, true) {
			h.Kick(0)
		}
		done += k
	}
	used := cpu.Stop(b)
	b.StopTimer()
	require.Equal(b, uint64(b.N), dev.Metrics.RxFrames.Load(), "frames delivered")
	virtiotest.ReportCPU(b, used, int64(b.N)*int64(size), b.N)
}
