package machine

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// A snapshot written by an earlier build of the VMM must restore in this
// one, and a migration between builds must carry the same state: the
// state's JSON (State, SavedConfig and every device's own state) is a
// format, on disk and on the wire. testdata/compat/v<StateVersion> holds
// a real snapshot of a small VM, written once by TestWriteCompatSnapshot
// (go test -run TestWriteCompatSnapshot -compat.write) with the code of
// that time, before vmm/machine was split into its CPU, memory and device
// managers; TestCompatSnapshotRestores proves every later build reads it.
//
//	state.json        the snapshot's manifest, as vmm/snapshot wrote it
//	memory.pages.gz   the memory file's non-zero pages (offset, page), gzipped:
//	                  the file itself is 32 MiB, mostly holes
//	disk.raw          a read-only virtio-blk disk (two queues)
//	volume.raw        a read-only volume hot-plugged on the SCSI controller
//	header-nics.json  the migration header (SavedConfig) of a VM with NICs
//
// The VM: 2 vCPUs (the BSP counting, the AP waiting for its SIPI), 32 MiB,
// an RTC offset, and every virtio device kubevmm has but a NIC (that needs
// a tap): blk, rng, scsi with a volume, vsock; each one activated by a
// driver (this test playing the guest's part through the registers), so
// that their transports carry live queues.

var compatWrite = flag.Bool("compat.write", false, "write testdata/compat from this build (once per StateVersion, then commit it)")

// compatDir is relative: the disks' paths saved in the state are too, and
// tests run in the package's directory.
var compatDir = filepath.Join("testdata", "compat", "v2")

const compatCID = 42

func compatConfig(vsockSocket string) Config {
	return Config{
		CPUs: 2, MemoryBytes: 32 << 20, Kernel: counterKernel, RTCOffset: 90 * time.Minute,
		Disks: []DiskConfig{{Path: filepath.Join(compatDir, "disk.raw"), ReadOnly: true, Serial: "compat-disk", Queues: 2}},
		RNG:   true,
		Vsock: &VsockConfig{CID: compatCID, Socket: vsockSocket},
		SCSI:  true,
	}
}

// TestWriteCompatSnapshot writes testdata/compat/v<StateVersion>; it runs
// only with -compat.write.
func TestWriteCompatSnapshot(t *testing.T) {
	if !*compatWrite {
		t.Skip("writes the golden snapshot: run with -compat.write")
	}
	require.Equal(t, 2, StateVersion, "a new state version gets a new golden directory; keep the old one")
	require.NoError(t, os.MkdirAll(compatDir, 0o755))
	for _, f := range []string{"disk.raw", "volume.raw"} {
		require.NoError(t, os.WriteFile(filepath.Join(compatDir, f), make([]byte, 64<<10), 0o644))
	}
	m, err := New(compatConfig(filepath.Join(t.TempDir(), "vsock")))
	require.NoError(t, err)
	defer m.Close()
	for i, d := range m.Virtio() {
		driveToDriverOK(t, d.Transport, 0x800000+uint64(i)*0x40000)
	}
	exited := run(m)
	waitCounter(t, m, 1000)
	_, err = m.AttachVolume(scsi.Volume{Name: "compat-volume", Path: filepath.Join(compatDir, "volume.raw"), ReadOnly: true})
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = m.Snapshot(dir, false)
	require.NoError(t, err)
	stopAndWait(t, m, exited)

	man, err := os.ReadFile(filepath.Join(dir, snapshot.ManifestFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(compatDir, snapshot.ManifestFile), man, 0o644))
	mem, err := os.ReadFile(filepath.Join(dir, snapshot.MemoryFile))
	require.NoError(t, err)
	var pages bytes.Buffer
	zw, err := gzip.NewWriterLevel(&pages, gzip.BestCompression)
	require.NoError(t, err)
	zero := make([]byte, memory.PageSize)
	for off := 0; off < len(mem); off += memory.PageSize {
		p := mem[off : off+memory.PageSize]
		if bytes.Equal(p, zero) {
			continue
		}
		require.NoError(t, binary.Write(zw, binary.LittleEndian, uint64(off)))
		_, err := zw.Write(p)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(compatDir, "memory.pages.gz"), pages.Bytes(), 0o644))

	// NICs need taps to be built: the migration header of a VM with
	// some is written from its configuration alone.
	n := &Machine{cfg: compatNICConfig(), Cmdline: DefaultCmdline, Nested: true}
	hdr, err := json.MarshalIndent(n.savedConfig(), "", " ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(compatDir, "header-nics.json"), hdr, 0o644))
}

func compatNICConfig() Config {
	return Config{CPUs: 2, MemoryBytes: 64 << 20, NICs: []NICConfig{
		{Tap: "tap0", MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}},
		{Tap: "tap1", MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}, Queues: 2, LinkDown: true},
	}}
}

// TestCompatNICHeader: a header with NICs decodes into this build's
// SavedConfig, turns into the same NICs, and is written back byte for
// byte.
func TestCompatNICHeader(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(compatDir, "header-nics.json"))
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var sc SavedConfig
	require.NoError(t, dec.Decode(&sc))
	require.NoError(t, validateConfig(&sc))
	c, err := configFrom(sc, Config{})
	require.NoError(t, err)
	assert.Equal(t, compatNICConfig().NICs, c.NICs)
	n := &Machine{cfg: c, Cmdline: c.Cmdline, Nested: *c.HostProfile}
	again, err := json.Marshal(n.savedConfig())
	require.NoError(t, err)
	assert.Equal(t, compactJSON(t, b), string(again))
}

// driveToDriverOK does what a guest's virtio driver does to start a
// device: reset, ACKNOWLEDGE, DRIVER, accept every offered feature,
// FEATURES_OK, each queue at 8 entries with its rings from at, DRIVER_OK.
func driveToDriverOK(t *testing.T, tr *mmio.Transport, at uint64) {
	t.Helper()
	w := func(off uint64, v uint32) { tr.Write(off, binary.LittleEndian.AppendUint32(nil, v)) }
	r := func(off uint64) uint32 {
		b := make([]byte, 4)
		tr.Read(off, b)
		return binary.LittleEndian.Uint32(b)
	}
	const (
		featuresSel, features, drvFeaturesSel, drvFeatures = 0x014, 0x010, 0x024, 0x020
		queueSel, queueNumMax, queueNum, queueReady        = 0x030, 0x034, 0x038, 0x044
		descLo, descHi, availLo, availHi, usedLo, usedHi   = 0x080, 0x084, 0x090, 0x094, 0x0a0, 0x0a4
		status                                             = 0x070
	)
	w(status, 0)
	w(status, 1)
	w(status, 3)
	for sel := uint32(0); sel < 2; sel++ {
		w(featuresSel, sel)
		offered := r(features)
		w(drvFeaturesSel, sel)
		w(drvFeatures, offered)
	}
	w(status, 11)
	require.Equal(t, uint32(11), r(status), "the device takes the features it offered")
	for q := uint32(0); ; q++ {
		w(queueSel, q)
		if r(queueNumMax) == 0 {
			break
		}
		base := at + uint64(q)*0x3000
		w(queueNum, 8)
		w(descLo, uint32(base))
		w(descHi, uint32(base>>32))
		w(availLo, uint32(base+0x1000))
		w(availHi, 0)
		w(usedLo, uint32(base+0x2000))
		w(usedHi, 0)
		w(queueReady, 1)
	}
	w(status, 15)
	require.Equal(t, uint32(15), r(status), "DRIVER_OK: the device is active")
}

// compatSnapshot rebuilds the golden snapshot in a directory of its own
// and returns it and the manifest.
func compatSnapshot(t *testing.T) (string, *snapshot.Manifest) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(compatDir, snapshot.ManifestFile))
	require.NoError(t, err)
	var man snapshot.Manifest
	require.NoError(t, json.Unmarshal(b, &man))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), b, 0o600))
	var size int64
	for _, r := range man.Memory {
		size = max(size, r.Offset+int64(r.Size))
	}
	f, err := os.Create(filepath.Join(dir, snapshot.MemoryFile))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(size))
	z, err := os.Open(filepath.Join(compatDir, "memory.pages.gz"))
	require.NoError(t, err)
	defer z.Close()
	zr, err := gzip.NewReader(z)
	require.NoError(t, err)
	page := make([]byte, memory.PageSize)
	for {
		var off uint64
		if err := binary.Read(zr, binary.LittleEndian, &off); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		_, err := io.ReadFull(zr, page)
		require.NoError(t, err)
		_, err = f.WriteAt(page, int64(off))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	return dir, &man
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, json.Compact(&out, b))
	return out.String()
}

// TestCompatStateDecodesAndEncodesBack: the golden state decodes into this
// build's State with no key unknown to it, and encodes back to the same
// bytes (the same keys, in the same order, with the same values): what
// this build writes, an earlier one reads, and the other way round.
func TestCompatStateDecodesAndEncodesBack(t *testing.T) {
	_, man := compatSnapshot(t)
	dec := json.NewDecoder(bytes.NewReader(man.State))
	dec.DisallowUnknownFields()
	var s State
	require.NoError(t, dec.Decode(&s))
	require.NoError(t, validateState(&s))
	got, err := json.Marshal(&s)
	require.NoError(t, err)
	assert.Equal(t, compactJSON(t, man.State), string(got))

	// The migration header is the configuration alone.
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(man.State, &top))
	hdr, err := json.Marshal(s.Config)
	require.NoError(t, err)
	assert.Equal(t, compactJSON(t, top["config"]), string(hdr))
}

// TestCompatSnapshotRestores restores the golden snapshot: the machine is
// built from its configuration, its disks and volume are the ones saved,
// every device takes its state back, a save of the restored machine gives
// the saved state again (bar what moves with time), and the guest runs on
// from where it was.
func TestCompatSnapshotRestores(t *testing.T) {
	dir, man := compatSnapshot(t)
	var saved State
	require.NoError(t, json.Unmarshal(man.State, &saved))
	socket := filepath.Join(t.TempDir(), "vsock")
	r, err := Restore(dir, Config{Vsock: &VsockConfig{Socket: socket}})
	require.NoError(t, err)
	defer r.Close()

	want := saved
	want.Config.Vsock = &VsockConfig{CID: compatCID, Socket: socket} // the caller's socket, the guest's CID
	hdr, err := r.Header()
	require.NoError(t, err)
	wantHdr, err := json.Marshal(want.Config)
	require.NoError(t, err)
	assert.Equal(t, string(wantHdr), string(hdr), "the restored VM describes itself as the saved one")
	assert.Equal(t, compatConfig(socket).Disks, r.Config().Disks)
	assert.Equal(t, []scsi.Attached{{Volume: scsi.Volume{Name: "compat-volume", Path: filepath.Join(compatDir, "volume.raw"),
		Format: "raw", ReadOnly: true}, Target: 0, Size: 64 << 10}}, r.Volumes())

	b, err := r.State()
	require.NoError(t, err)
	var again State
	require.NoError(t, json.Unmarshal(b, &again))
	// What moves with time between the save and this one: the kvmclock,
	// the PIT's counters (their load time), and the MSRs that count time.
	again.VM.Clock, want.VM.Clock = 0, 0
	again.VM.PIT, want.VM.PIT = nil, nil
	for i := range want.VCPUs {
		w := *want.VCPUs[i]
		w.MSRs = append(w.MSRs[:0:0], w.MSRs...)
		for j := range w.MSRs {
			if timeMSRs[w.MSRs[j].Index] {
				w.MSRs[j].Data = 0
				again.VCPUs[i].MSRs[j].Data = 0
			}
		}
		want.VCPUs[i] = &w
	}
	wantJSON, err := json.Marshal(&want)
	require.NoError(t, err)
	againJSON, err := json.Marshal(&again)
	require.NoError(t, err)
	assert.JSONEq(t, string(wantJSON), string(againJSON), "a save of the restored machine gives the saved state back")

	at, err := r.Memory().Uint64(counterAddr)
	require.NoError(t, err)
	require.Positive(t, at)
	exited := run(r)
	waitCounter(t, r, at)
	assert.Equal(t, ExitStopped, stopAndWait(t, r, exited).Reason)
}

// timeMSRs are the MSRs whose value moves while a VM is saved and
// restored: the TSC and what is derived from it.
var timeMSRs = map[uint32]bool{
	0x10:  true, // IA32_TSC
	0x3b:  true, // IA32_TSC_ADJUST
	0x6e0: true, // IA32_TSC_DEADLINE
}
