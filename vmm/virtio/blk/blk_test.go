package blk_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

const diskSize = 1 << 20

func hdr(typ uint32, sector uint64) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], typ)
	binary.LittleEndian.PutUint64(b[8:], sector)
	return b
}

func seg(sector uint64, n, flags uint32) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b[0:], sector)
	binary.LittleEndian.PutUint32(b[8:], n)
	binary.LittleEndian.PutUint32(b[12:], flags)
	return b
}

func pattern(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

func newDisk(t *testing.T, ro bool) (string, block.Disk) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.raw")
	data := make([]byte, diskSize)
	for i := range data {
		data[i] = byte(i / 512)
	}
	require.NoError(t, os.WriteFile(p, data, 0o644))
	d, err := block.OpenRaw(p, ro)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return p, d
}

func TestRequests(t *testing.T) {
	W := func(n uint32) queuetest.Buf { return queuetest.Buf{Write: true, Len: n} }
	R := func(b []byte) queuetest.Buf { return queuetest.Buf{Data: b} }
	cases := []struct {
		name     string
		ro       bool
		indirect bool
		bufs     []queuetest.Buf
		status   byte
		used     uint32
		check    func(t *testing.T, path string, h *virtiotest.Harness, addrs []uint64)
	}{
		{name: "read two sectors", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 3)), W(1024), W(1)}, status: blk.StatusOK, used: 1025,
			check: func(t *testing.T, _ string, h *virtiotest.Harness, a []uint64) {
				got := h.Queues[0].Read(a[1], 1024)
				assert.Equal(t, append(pattern(512, 3), pattern(512, 4)...), got)
			}},
		{name: "read scattered, header split, indirect", indirect: true,
			bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 1)[:5]), R(hdr(blk.TypeIn, 1)[5:]), W(100), W(412), W(1)}, status: blk.StatusOK, used: 513,
			check: func(t *testing.T, _ string, h *virtiotest.Harness, a []uint64) {
				assert.Equal(t, pattern(100, 1), h.Queues[0].Read(a[2], 100))
				assert.Equal(t, pattern(412, 1), h.Queues[0].Read(a[3], 412))
			}},
		{name: "write", bufs: []queuetest.Buf{R(hdr(blk.TypeOut, 10)), R(pattern(512, 0xee)), W(1)}, status: blk.StatusOK, used: 1,
			check: func(t *testing.T, path string, _ *virtiotest.Harness, _ []uint64) {
				b, _ := os.ReadFile(path)
				assert.Equal(t, pattern(512, 0xee), b[10*512:11*512])
			}},
		{name: "flush", bufs: []queuetest.Buf{R(hdr(blk.TypeFlush, 0)), W(1)}, status: blk.StatusOK, used: 1},
		{name: "get id", bufs: []queuetest.Buf{R(hdr(blk.TypeGetID, 0)), W(20), W(1)}, status: blk.StatusOK, used: 21,
			check: func(t *testing.T, _ string, h *virtiotest.Harness, a []uint64) {
				assert.Equal(t, append([]byte("serial-1"), make([]byte, 12)...), h.Queues[0].Read(a[1], 20))
			}},
		{name: "discard", bufs: []queuetest.Buf{R(hdr(blk.TypeDiscard, 0)), R(seg(8, 8, 0)), W(1)}, status: blk.StatusOK, used: 1,
			check: func(t *testing.T, path string, _ *virtiotest.Harness, _ []uint64) {
				b, _ := os.ReadFile(path)
				assert.Equal(t, make([]byte, 4096), b[8*512:16*512])
			}},
		{name: "write zeroes unmap", bufs: []queuetest.Buf{R(hdr(blk.TypeWriteZeroes, 0)), R(seg(20, 2, 1)), R(seg(30, 1, 0)), W(1)}, status: blk.StatusOK, used: 1,
			check: func(t *testing.T, path string, _ *virtiotest.Harness, _ []uint64) {
				b, _ := os.ReadFile(path)
				assert.Equal(t, make([]byte, 1024), b[20*512:22*512])
				assert.Equal(t, make([]byte, 512), b[30*512:31*512])
				assert.Equal(t, pattern(512, 22), b[22*512:23*512])
			}},
		{name: "discard with unmap flag", bufs: []queuetest.Buf{R(hdr(blk.TypeDiscard, 0)), R(seg(8, 8, 1)), W(1)}, status: blk.StatusUnsupp, used: 1},
		{name: "discard past the end", bufs: []queuetest.Buf{R(hdr(blk.TypeDiscard, 0)), R(seg(2040, 9, 0)), W(1)}, status: blk.StatusIOErr, used: 1},
		{name: "read past the end", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 2047)), W(1024), W(1)}, status: blk.StatusIOErr, used: 1},
		{name: "read sector overflow", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 1<<63)), W(512), W(1)}, status: blk.StatusIOErr, used: 1},
		{name: "unaligned length", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 0)), W(100), W(1)}, status: blk.StatusIOErr, used: 1},
		{name: "unknown type", bufs: []queuetest.Buf{R(hdr(99, 0)), W(1)}, status: blk.StatusUnsupp, used: 1},
		{name: "no status byte", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 0))}, status: 0xff, used: 0},
		{name: "short header", bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 0)[:8]), W(1)}, status: 0xff, used: 0},
		{name: "read-only write", ro: true, bufs: []queuetest.Buf{R(hdr(blk.TypeOut, 0)), R(pattern(512, 1)), W(1)}, status: blk.StatusIOErr, used: 1,
			check: func(t *testing.T, path string, _ *virtiotest.Harness, _ []uint64) {
				b, _ := os.ReadFile(path)
				assert.Equal(t, pattern(512, 0), b[:512], "disk unchanged")
			}},
		{name: "read-only discard", ro: true, bufs: []queuetest.Buf{R(hdr(blk.TypeDiscard, 0)), R(seg(0, 8, 0)), W(1)}, status: blk.StatusUnsupp, used: 1},
		{name: "read-only read", ro: true, bufs: []queuetest.Buf{R(hdr(blk.TypeIn, 5)), W(512), W(1)}, status: blk.StatusOK, used: 513},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, disk := newDisk(t, tc.ro)
			dev, err := blk.New(blk.Config{Disk: disk, Serial: "serial-1"})
			require.NoError(t, err)
			if tc.ro {
				assert.NotZero(t, dev.Features()&blk.FRO)
				assert.Zero(t, dev.Features()&blk.FDiscard)
			}
			h := virtiotest.Activate(t, dev, ^uint64(0))
			q := h.Queues[0]
			var head uint16
			var addrs []uint64
			if tc.indirect {
				head, addrs = q.AddIndirect(tc.bufs...)
			} else {
				head, addrs = q.Add(tc.bufs...)
			}
			statusAddr := addrs[len(addrs)-1] + uint64(tc.bufs[len(tc.bufs)-1].Len) - 1
			q.Mem.WriteAt([]byte{0xff}, statusAddr)
			var used [][2]uint32
			h.RequireTracked(func() { used = h.WaitUsed(0, 1, true) })
			assert.Equal(t, uint32(head), used[0][0])
			assert.Equal(t, tc.used, used[0][1])
			assert.Equal(t, []byte{tc.status}, q.Read(statusAddr, 1))
			if tc.check != nil {
				tc.check(t, path, h, addrs)
			}
		})
	}
}

func TestConfigSpace(t *testing.T) {
	_, disk := newDisk(t, false)
	dev, err := blk.New(blk.Config{Disk: disk})
	require.NoError(t, err)
	b := make([]byte, 8)
	dev.ReadConfig(0, b)
	assert.Equal(t, uint64(diskSize/512), binary.LittleEndian.Uint64(b))
	dev.ReadConfig(1000, b)
	assert.Equal(t, make([]byte, 8), b, "past the end reads zero")
	assert.NotZero(t, dev.Features()&virtio.FVersion1)
	_, err = blk.New(blk.Config{Disk: disk, Serial: "this serial is far too long"})
	assert.Error(t, err)

	s := dev.Save()
	dev2, _ := blk.New(blk.Config{Disk: disk})
	assert.NoError(t, dev2.Restore(s))
	s.Sectors++
	assert.Error(t, dev2.Restore(s))
}
