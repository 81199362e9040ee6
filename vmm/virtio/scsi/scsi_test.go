package scsi_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

const (
	diskSize = 1 << 20
	reqLen   = 19 + 32 // header with the default cdb_size
	respLen  = 12 + 96 // response with the default sense_size
)

func newImage(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	data := make([]byte, diskSize)
	for i := range data {
		data[i] = byte(i / 512)
	}
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

func open(t *testing.T, path string, ro bool) block.Disk {
	t.Helper()
	d, err := block.Open(path, block.Options{Format: block.FormatRaw, ReadOnly: ro})
	require.NoError(t, err)
	return d
}

// req is a virtio_scsi_req_cmd header for target t, LUN lun, with cdb.
func req(t, lun int, cdb ...byte) []byte {
	b := make([]byte, reqLen)
	b[0], b[1] = 1, byte(t)
	b[2], b[3] = 0x40|byte(lun>>8), byte(lun)
	copy(b[19:], cdb)
	return b
}

func read10(lba uint32, n uint16) []byte {
	c := []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], n)
	return c
}

func write10(lba uint32, n uint16) []byte {
	c := read10(lba, n)
	c[0] = 0x2a
	return c
}

// response is a parsed virtio_scsi_resp_cmd.
type response struct {
	senseLen, residual uint32
	status, response   byte
	sense              []byte
}

func parseResp(b []byte) response {
	return response{
		senseLen: binary.LittleEndian.Uint32(b[0:]), residual: binary.LittleEndian.Uint32(b[4:]),
		status: b[10], response: b[11], sense: b[12:],
	}
}

// rig is an active controller with its harness.
type rig struct {
	dev *scsi.Device
	h   *virtiotest.Harness
}

func newRig(t *testing.T) *rig {
	dev := scsi.New()
	h := virtiotest.Activate(t, dev, ^uint64(0))
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return &rig{dev: dev, h: h}
}

// do sends one command on the request queue and returns the response and
// the data-in bytes.
func (r *rig) do(t *testing.T, hdr []byte, out []byte, in uint32) (response, []byte, uint32) {
	t.Helper()
	q := r.h.Queues[2]
	bufs := []queuetest.Buf{{Data: hdr}}
	if len(out) > 0 {
		bufs = append(bufs, queuetest.Buf{Data: out})
	}
	bufs = append(bufs, queuetest.Buf{Write: true, Len: respLen})
	if in > 0 {
		bufs = append(bufs, queuetest.Buf{Write: true, Len: in})
	}
	_, addrs := q.Add(bufs...)
	var used [][2]uint32
	r.h.RequireTracked(func() { used = r.h.WaitUsed(2, 1, true) })
	ri := len(bufs) - 1
	if in > 0 {
		ri--
	}
	resp := parseResp(q.Read(addrs[ri], respLen))
	var data []byte
	if in > 0 {
		data = q.Read(addrs[ri+1], int(in))
	}
	return resp, data, used[0][1]
}

func senseOf(s scsi.Sense) []byte { b := s.Fixed(); return b[:] }

func TestCommands(t *testing.T) {
	r := newRig(t)
	path := newImage(t, "a.raw")
	at, err := r.dev.Attach(scsi.Volume{Name: "vol-a", Path: path, Format: block.FormatRaw}, open(t, path, false))
	require.NoError(t, err)
	assert.Equal(t, 0, at.Target)
	roPath := newImage(t, "ro.raw")
	_, err = r.dev.Attach(scsi.Volume{Name: "vol-ro", Path: roPath, Format: block.FormatRaw}, open(t, roPath, true))
	require.NoError(t, err)

	cases := []struct {
		name   string
		hdr    []byte
		out    []byte
		in     uint32
		resp   byte
		status byte
		sense  scsi.Sense
		check  func(t *testing.T, data []byte, used uint32, res response)
	}{
		{name: "inquiry", hdr: req(0, 0, 0x12, 0, 0, 0, 96, 0), in: 96, check: func(t *testing.T, d []byte, used uint32, res response) {
			assert.Equal(t, byte(0), d[0], "a disk")
			assert.Equal(t, "KUBEVMM VIRTUAL DISK    1.0 ", string(d[8:36]))
			assert.Equal(t, uint32(respLen+36), used)
			assert.Equal(t, uint32(96-36), res.residual)
		}},
		{name: "inquiry unit serial", hdr: req(0, 0, 0x12, 1, 0x80, 0, 255, 0), in: 255, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, "vol-a", string(d[4:4+int(d[3])]))
		}},
		{name: "inquiry cut to allocation length", hdr: req(0, 0, 0x12, 0, 0, 0, 5, 0), in: 96, check: func(t *testing.T, _ []byte, used uint32, _ response) {
			assert.Equal(t, uint32(respLen+5), used)
		}},
		{name: "inquiry unknown VPD page", hdr: req(0, 0, 0x12, 1, 0x42, 0, 255, 0), in: 255, status: scsi.StatusCheckCondition, sense: scsi.SenseInvalidField},
		{name: "inquiry of LUN 1: not connected", hdr: req(0, 1, 0x12, 0, 0, 0, 36, 0), in: 36, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, byte(0x7f), d[0])
		}},
		{name: "read of LUN 1", hdr: req(0, 1, read10(0, 1)...), in: 512, status: scsi.StatusCheckCondition, sense: scsi.SenseLUNUnsupported},
		{name: "empty target", hdr: req(5, 0, 0x00), resp: scsi.RespBadTarget},
		{name: "target past the last", hdr: req(200, 0, 0x00), resp: scsi.RespBadTarget},
		{name: "test unit ready", hdr: req(0, 0, 0x00)},
		{name: "report luns", hdr: req(0, 0, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0), in: 16, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, []byte{0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, d)
		}},
		{name: "read capacity 10", hdr: req(0, 0, 0x25), in: 8, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, uint32(diskSize/512-1), binary.BigEndian.Uint32(d[0:]))
			assert.Equal(t, uint32(512), binary.BigEndian.Uint32(d[4:]))
		}},
		{name: "read capacity 16", hdr: req(0, 0, 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0), in: 32, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, uint64(diskSize/512-1), binary.BigEndian.Uint64(d[0:]))
		}},
		{name: "read two blocks", hdr: req(0, 0, read10(3, 2)...), in: 1024, check: func(t *testing.T, d []byte, used uint32, _ response) {
			assert.Equal(t, append(bytes.Repeat([]byte{3}, 512), bytes.Repeat([]byte{4}, 512)...), d)
			assert.Equal(t, uint32(respLen+1024), used)
		}},
		{name: "read(6) of block 7", hdr: req(0, 0, 0x08, 0, 0, 7, 1, 0), in: 512, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, bytes.Repeat([]byte{7}, 512), d)
		}},
		{name: "write", hdr: req(0, 0, write10(10, 1)...), out: bytes.Repeat([]byte{0xee}, 512), check: func(t *testing.T, _ []byte, _ uint32, _ response) {
			b, _ := os.ReadFile(path)
			assert.Equal(t, bytes.Repeat([]byte{0xee}, 512), b[10*512:11*512])
		}},
		{name: "read past the end", hdr: req(0, 0, read10(diskSize/512-1, 2)...), in: 1024, status: scsi.StatusCheckCondition, sense: scsi.SenseLBAOutOfRange},
		{name: "read(16) LBA overflow", hdr: req(0, 0, 0x88, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2, 0, 0), in: 1024, status: scsi.StatusCheckCondition, sense: scsi.SenseLBAOutOfRange},
		{name: "read into a short buffer", hdr: req(0, 0, read10(0, 2)...), in: 512, status: scsi.StatusCheckCondition, sense: scsi.SenseInvalidField},
		{name: "unknown opcode", hdr: req(0, 0, 0xc1), status: scsi.StatusCheckCondition, sense: scsi.SenseInvalidOpcode},
		{name: "write same: not offered", hdr: req(0, 0, 0x41), status: scsi.StatusCheckCondition, sense: scsi.SenseInvalidOpcode},
		{name: "synchronize cache", hdr: req(0, 0, 0x35)},
		{name: "mode sense all pages", hdr: req(0, 0, 0x1a, 0, 0x3f, 0, 255, 0), in: 255, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, byte(0), d[2]&0x80, "writable")
			assert.Equal(t, byte(8), d[3], "a block descriptor")
			assert.Equal(t, byte(0x08), d[12], "caching page first")
			assert.Equal(t, byte(0x04), d[14]&0x04, "write cache enabled")
		}},
		{name: "mode sense of a read-only disk", hdr: req(1, 0, 0x5a, 0x08, 0x3f, 0, 0, 0, 0, 0, 255, 0), in: 255, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, byte(0x80), d[3]&0x80, "write protected")
		}},
		{name: "mode sense unknown page", hdr: req(0, 0, 0x1a, 0, 0x1c, 0, 255, 0), in: 255, status: scsi.StatusCheckCondition, sense: scsi.SenseInvalidField},
		{name: "write to a read-only disk", hdr: req(1, 0, write10(0, 1)...), out: bytes.Repeat([]byte{1}, 512), status: scsi.StatusCheckCondition, sense: scsi.SenseWriteProtected,
			check: func(t *testing.T, _ []byte, _ uint32, _ response) {
				b, _ := os.ReadFile(roPath)
				assert.Equal(t, make([]byte, 512), b[:512], "unchanged")
			}},
		{name: "request sense", hdr: req(0, 0, 0x03, 0, 0, 0, 18, 0), in: 18, check: func(t *testing.T, d []byte, _ uint32, _ response) {
			assert.Equal(t, byte(0x70), d[0])
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, data, used := r.do(t, tc.hdr, tc.out, tc.in)
			assert.Equal(t, tc.resp, res.response, "virtio response")
			assert.Equal(t, tc.status, res.status, "SCSI status")
			if tc.status == scsi.StatusCheckCondition {
				assert.Equal(t, uint32(18), res.senseLen)
				assert.Equal(t, senseOf(tc.sense), res.sense[:18])
			} else {
				assert.Zero(t, res.senseLen)
			}
			if tc.check != nil {
				tc.check(t, data, used, res)
			}
		})
	}
	m := r.dev.Counters()
	assert.NotZero(t, m["reads"])
	assert.Equal(t, uint64(1), m["writes"])
	assert.Equal(t, uint64(2), m["bad_target"])
	assert.Equal(t, uint64(1), m["read_only_writes"])
}

func TestMalformedRequests(t *testing.T) {
	r := newRig(t)
	q := r.h.Queues[2]
	for _, bufs := range [][]queuetest.Buf{
		{{Data: make([]byte, reqLen-1)}, {Write: true, Len: respLen}}, // short header
		{{Data: req(0, 0, 0)}, {Write: true, Len: respLen - 1}},       // short response
		{{Data: req(0, 0, 0)}}, // no response at all
	} {
		q.Add(bufs...)
		used := r.h.WaitUsed(2, 1, true)
		assert.Zero(t, used[0][1], "nothing written")
	}
	assert.Equal(t, uint64(3), r.dev.Counters()["malformed_chains"])
}

// failingDisk fails every transfer: the error path of a real image whose
// storage went away.
type failingDisk struct{ block.Disk }

var errIO = errors.New("input/output error")

func (failingDisk) ReadAt([]byte, int64) (int, error)  { return 0, errIO }
func (failingDisk) WriteAt([]byte, int64) (int, error) { return 0, errIO }
func (failingDisk) Flush() error                       { return errIO }

func TestIOErrorsAreMediumErrors(t *testing.T) {
	r := newRig(t)
	path := newImage(t, "a.raw")
	_, err := r.dev.Attach(scsi.Volume{Name: "v", Path: path}, failingDisk{open(t, path, false)})
	require.NoError(t, err)
	res, _, _ := r.do(t, req(0, 0, read10(0, 1)...), nil, 512)
	assert.Equal(t, senseOf(scsi.SenseReadError), res.sense[:18])
	res, _, _ = r.do(t, req(0, 0, write10(0, 1)...), make([]byte, 512), 0)
	assert.Equal(t, senseOf(scsi.SenseWriteError), res.sense[:18])
	res, _, _ = r.do(t, req(0, 0, 0x35), nil, 0)
	assert.Equal(t, senseOf(scsi.SenseWriteError), res.sense[:18])
	assert.Equal(t, uint64(3), r.dev.Counters()["io_errors"])
	_, err = r.dev.Detach("v")
	assert.ErrorIs(t, err, errIO, "a failed flush at detach is reported")
}

// event reads one delivered virtio_scsi_event.
func event(t *testing.T, r *rig, addr uint64) (typ uint32, target byte, reason uint32) {
	t.Helper()
	b := r.h.Queues[1].Read(addr, 16)
	assert.Equal(t, []byte{1, b[5], 0, 0, 0, 0, 0, 0}, b[4:12], "LUN 0 of the target, as REPORT LUNS lists it")
	return binary.LittleEndian.Uint32(b[0:]), b[5], binary.LittleEndian.Uint32(b[12:])
}

func TestHotplug(t *testing.T) {
	r := newRig(t)
	eq := r.h.Queues[1]
	var evs []uint64
	for range 4 {
		_, a := eq.Add(queuetest.Buf{Write: true, Len: 16})
		evs = append(evs, a[0])
	}
	r.h.Kick(1)
	pathA, pathB := newImage(t, "a.raw"), newImage(t, "b.raw")

	at, err := r.dev.Attach(scsi.Volume{Name: "a", Path: pathA, Format: block.FormatRaw}, open(t, pathA, false))
	require.NoError(t, err)
	assert.Equal(t, scsi.Attached{Volume: scsi.Volume{Name: "a", Path: pathA, Format: block.FormatRaw}, Target: 0, Size: diskSize}, at)
	r.h.WaitUsed(1, 1, false)
	typ, target, reason := event(t, r, evs[0])
	// VIRTIO_SCSI_T_TRANSPORT_RESET, VIRTIO_SCSI_EVT_RESET_RESCAN (<linux/virtio_scsi.h>)
	assert.Equal(t, []any{uint32(1), byte(0), uint32(1)}, []any{typ, target, reason})

	at, err = r.dev.Attach(scsi.Volume{Name: "b", Path: pathB, Format: block.FormatRaw}, open(t, pathB, false))
	require.NoError(t, err)
	assert.Equal(t, 1, at.Target)
	r.h.WaitUsed(1, 1, false)

	_, err = r.dev.Attach(scsi.Volume{Name: "a", Path: pathB}, open(t, newImage(t, "c.raw"), false))
	assert.ErrorContains(t, err, "attached already")

	// a marker written through the guest's queue
	marker := bytes.Repeat([]byte("kubevmm!"), 64)
	res, _, _ := r.do(t, req(0, 0, write10(100, 1)...), marker, 0)
	require.Equal(t, byte(scsi.StatusGood), res.status)

	at, err = r.dev.Detach("a")
	require.NoError(t, err)
	assert.Equal(t, 0, at.Target)
	r.h.WaitUsed(1, 1, false)
	typ, target, reason = event(t, r, evs[2])
	// VIRTIO_SCSI_EVT_RESET_REMOVED
	assert.Equal(t, []any{uint32(1), byte(0), uint32(2)}, []any{typ, target, reason})
	res, _, _ = r.do(t, req(0, 0, read10(100, 1)...), nil, 512)
	assert.Equal(t, byte(scsi.RespBadTarget), res.response, "gone from the bus")
	b, err := os.ReadFile(pathA)
	require.NoError(t, err)
	assert.Equal(t, marker, b[100*512:101*512], "on the image once detached")
	_, err = r.dev.Detach("a")
	assert.ErrorIs(t, err, scsi.ErrNotAttached)

	// Re-attached, it takes the free target 0 again and shows the data.
	at, err = r.dev.Attach(scsi.Volume{Name: "a", Path: pathA, Format: block.FormatRaw}, open(t, pathA, false))
	require.NoError(t, err)
	assert.Equal(t, 0, at.Target)
	r.h.WaitUsed(1, 1, false)
	_, data, _ := r.do(t, req(0, 0, read10(100, 1)...), nil, 512)
	assert.Equal(t, marker, data)
	assert.Len(t, r.dev.Volumes(), 2)
}

func TestEventsWaitForBuffers(t *testing.T) {
	r := newRig(t)
	path := newImage(t, "a.raw")
	_, err := r.dev.Attach(scsi.Volume{Name: "a", Path: path}, open(t, path, false))
	require.NoError(t, err)
	// the driver gives the event queue a buffer only now
	_, a := r.h.Queues[1].Add(queuetest.Buf{Write: true, Len: 16})
	r.h.WaitUsed(1, 1, true)
	typ, target, reason := event(t, r, a[0])
	assert.Equal(t, []any{uint32(scsi.EventTransportReset), byte(0), uint32(scsi.ReasonRescan)}, []any{typ, target, reason})
}

func TestTooManyEventsAreMissed(t *testing.T) {
	r := newRig(t)
	path := newImage(t, "a.raw")
	for range 40 { // 80 events, more than the device keeps
		_, err := r.dev.Attach(scsi.Volume{Name: "a", Path: path}, open(t, path, false))
		require.NoError(t, err)
		_, err = r.dev.Detach("a")
		require.NoError(t, err)
	}
	var first uint64
	for i := range 64 {
		_, a := r.h.Queues[1].Add(queuetest.Buf{Write: true, Len: 16})
		if i == 0 {
			first = a[0]
		}
	}
	r.h.WaitUsed(1, 64, true)
	typ, _, _ := event(t, r, first)
	assert.Equal(t, uint32(scsi.EventsMissed), typ&scsi.EventsMissed, "the driver learns at once that it must rescan")
	assert.Equal(t, uint64(1), r.dev.Counters()["events_missed"])
}

func TestTaskManagement(t *testing.T) {
	r := newRig(t)
	path := newImage(t, "a.raw")
	_, err := r.dev.Attach(scsi.Volume{Name: "a", Path: path}, open(t, path, false))
	require.NoError(t, err)
	tmf := func(target byte) []byte {
		b := make([]byte, 24)
		binary.LittleEndian.PutUint32(b[4:], 5) // LOGICAL UNIT RESET
		b[8], b[9], b[10] = 1, target, 0x40
		return b
	}
	q := r.h.Queues[0]
	for _, tc := range []struct {
		target byte
		want   byte
	}{{0, scsi.RespOK}, {3, scsi.RespBadTarget}} {
		_, a := q.Add(queuetest.Buf{Data: tmf(tc.target)}, queuetest.Buf{Write: true, Len: 1})
		used := r.h.WaitUsed(0, 1, true)
		assert.Equal(t, uint32(1), used[0][1])
		assert.Equal(t, []byte{tc.want}, q.Read(a[1], 1))
	}
	an := make([]byte, 16)
	binary.LittleEndian.PutUint32(an, 1) // AN_QUERY
	_, a := q.Add(queuetest.Buf{Data: an}, queuetest.Buf{Write: true, Len: 5})
	r.h.WaitUsed(0, 1, true)
	assert.Equal(t, []byte{0, 0, 0, 0, scsi.RespOK}, q.Read(a[1], 5), "no notifications offered")
}

func TestConfig(t *testing.T) {
	dev := scsi.New()
	assert.Equal(t, virtio.TypeSCSI, dev.Type())
	assert.NotZero(t, dev.Features()&scsi.FHotplug)
	b := make([]byte, 36)
	dev.ReadConfig(0, b)
	le := binary.LittleEndian
	assert.Equal(t, uint32(1), le.Uint32(b[0:]), "num_queues")
	assert.Equal(t, uint32(96), le.Uint32(b[20:]), "sense_size")
	assert.Equal(t, uint32(32), le.Uint32(b[24:]), "cdb_size")
	assert.Equal(t, uint16(scsi.MaxTargets-1), le.Uint16(b[30:]), "max_target")
	dev.WriteConfig(24, []byte{16, 0, 0, 0})
	dev.WriteConfig(20, []byte{0, 1, 0, 0}) // 256: too large, ignored
	dev.ReadConfig(20, b[:8])
	assert.Equal(t, []byte{96, 0, 0, 0, 16, 0, 0, 0}, b[:8])
	dev.Reset()
	dev.ReadConfig(24, b[:4])
	assert.Equal(t, []byte{32, 0, 0, 0}, b[:4], "a reset restores the defaults")
}

func TestSaveRestore(t *testing.T) {
	dev := scsi.New()
	pathA, pathB := newImage(t, "a.raw"), newImage(t, "b.raw")
	_, err := dev.Attach(scsi.Volume{Name: "a", Path: pathA, Format: block.FormatRaw}, open(t, pathA, false))
	require.NoError(t, err)
	_, err = dev.Attach(scsi.Volume{Name: "b", Path: pathB, Format: block.FormatRaw}, open(t, pathB, true))
	require.NoError(t, err)
	_, err = dev.Detach("a") // b stays at target 1
	require.NoError(t, err)
	saved, err := dev.SaveState()
	require.NoError(t, err)
	require.NoError(t, dev.Close())

	dev2 := scsi.New()
	require.NoError(t, dev2.RestoreState(saved))
	vols := dev2.Volumes()
	require.Len(t, vols, 1)
	assert.Equal(t, scsi.Attached{Volume: scsi.Volume{Name: "b", Path: pathB, Format: block.FormatRaw, ReadOnly: true}, Target: 1, Size: diskSize}, vols[0])
	assert.True(t, dev2.Disks()["b"].ReadOnly())
	require.NoError(t, dev2.Close())

	var s scsi.State
	require.NoError(t, json.Unmarshal(saved, &s))
	for _, tc := range []struct {
		name  string
		edit  func(s *scsi.State)
		prep  func()
		error string
	}{
		{name: "missing image", prep: func() { require.NoError(t, os.Rename(pathB, pathB+".gone")) }, error: `virtio-scsi volume "b": open raw image: open ` + pathB + ": no such file"},
		{name: "another image", prep: func() {
			require.NoError(t, os.Rename(pathB+".gone", pathB))
			require.NoError(t, os.Truncate(pathB, 2*diskSize))
		}, error: "virtual size"},
		{name: "target out of range", edit: func(s *scsi.State) { s.Volumes[0].Target = scsi.MaxTargets }, error: "at target 16"},
		{name: "version", edit: func(s *scsi.State) { s.Version = 9 }, error: "version 9"},
		{name: "cdb size", edit: func(s *scsi.State) { s.CDBSize = 4096 }, error: "CDB size 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prep != nil {
				tc.prep()
			}
			bad := s
			bad.Volumes = append([]scsi.SavedVolume(nil), s.Volumes...)
			if tc.edit != nil {
				tc.edit(&bad)
			}
			b, err := json.Marshal(bad)
			require.NoError(t, err)
			d := scsi.New()
			assert.ErrorContains(t, d.RestoreState(b), tc.error)
			assert.Empty(t, d.Volumes(), "nothing left open")
		})
	}
}
