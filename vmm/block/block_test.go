package block_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

func readAll(t *testing.T, d block.Disk) []byte {
	t.Helper()
	b := make([]byte, d.Size())
	n, err := d.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	require.Equal(t, len(b), n)
	return b
}

func TestRaw(t *testing.T) {
	const size = 1 << 20
	want := randomBytes(size, 1)
	path := writeFile(t, "disk.raw", want)
	d, err := block.OpenRaw(path, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(size), d.Size())

	copy(want[4096:], "written by the test")
	_, err = d.WriteAt([]byte("written by the test"), 4096)
	require.NoError(t, err)
	require.NoError(t, d.Flush())
	require.NoError(t, d.Discard(65536, 65536))
	clear(want[65536:131072])
	require.NoError(t, d.WriteZeroes(200000, 1000, false))
	clear(want[200000:201000])
	require.NoError(t, d.WriteZeroes(300000, 4096, true))
	clear(want[300000:304096])
	require.NoError(t, d.Close())

	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "file contents differ")

	ro, err := block.OpenRaw(path, true)
	require.NoError(t, err)
	defer ro.Close()
	assert.True(t, ro.ReadOnly())
	_, err = ro.WriteAt([]byte("x"), 0)
	assert.ErrorIs(t, err, block.ErrReadOnly)
	assert.ErrorIs(t, ro.Discard(0, 512), block.ErrReadOnly)
}

// qcow2 images made by qemu-img from random data read back byte for byte,
// for both versions and the extreme cluster sizes.
func TestQcow2ReadsQemuImages(t *testing.T) {
	const size = 3<<20 + 4096
	data := randomBytes(size, 2)
	clear(data[1<<20 : 2<<20]) // a hole: unallocated clusters read as zeros
	raw := writeFile(t, "src.raw", data)
	for _, tc := range []struct{ name, opts string }{
		{"v3 64k", "compat=1.1,cluster_size=65536"},
		{"v2 64k", "compat=0.10,cluster_size=65536"},
		{"v3 512", "compat=1.1,cluster_size=512"},
		{"v3 2M", "compat=1.1,cluster_size=2097152"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img.qcow2")
			hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", "-o", tc.opts, raw, img)
			d, err := block.OpenQcow2(img, true)
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, uint64(size), d.Size())
			assert.True(t, bytes.Equal(data, readAll(t, d)), "contents differ")
		})
	}
}

// A writable overlay over a raw base: our writes land in the overlay,
// `qemu-img check` is clean, and QEMU reads what we wrote.
func TestQcow2Overlay(t *testing.T) {
	const size = 8 << 20
	base := randomBytes(size, 3)
	basePath := writeFile(t, "base.raw", base)
	for _, cs := range []string{"65536", "512", "4096"} {
		t.Run("cluster "+cs, func(t *testing.T) {
			dir := t.TempDir()
			ov := filepath.Join(dir, "overlay.qcow2")
			hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size="+cs,
				"-b", basePath, "-F", "raw", ov)
			d, err := block.OpenQcow2(ov, false)
			require.NoError(t, err)
			want := append([]byte(nil), base...)
			w := func(off int, n int, seed uint64) {
				b := randomBytes(n, seed)
				_, err := d.WriteAt(b, int64(off))
				require.NoError(t, err)
				copy(want[off:], b)
			}
			w(0, 512, 10)          // partial first cluster
			w(70000, 200000, 11)   // spans clusters, unaligned
			w(70000+512, 1024, 12) // rewrite in place
			w(size-4096, 4096, 13) // last cluster
			w(3<<20, 1<<20, 14)    // whole clusters
			w(5<<20+100, 3, 15)    // tiny
			require.NoError(t, d.Flush())
			assert.True(t, bytes.Equal(want, readAll(t, d)), "our reads differ")
			require.NoError(t, d.Close())

			hosttools.Run(t, "qemu-img", "check", ov)
			out := filepath.Join(dir, "out.raw")
			hosttools.Run(t, "qemu-img", "convert", "-O", "raw", ov, out)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "qemu reads differ")
			b, err := os.ReadFile(basePath)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(base, b), "base image changed")
		})
	}
}

// Corrupt or unsupported headers give a clear error, never a panic.
func TestQcow2BadHeaders(t *testing.T) {
	img := filepath.Join(t.TempDir(), "good.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", img, "16M")
	good, err := os.ReadFile(img)
	require.NoError(t, err)
	be := binary.BigEndian
	for _, tc := range []struct {
		name  string
		patch func(b []byte)
		want  error
		text  string
	}{
		{"bad magic", func(b []byte) { b[0] = 'X' }, block.ErrQcow2Corrupt, "magic"},
		{"version 4", func(b []byte) { be.PutUint32(b[4:], 4) }, block.ErrQcow2Unsupported, "version"},
		{"cluster bits 30", func(b []byte) { be.PutUint32(b[20:], 30) }, block.ErrQcow2Corrupt, "cluster_bits"},
		{"encrypted", func(b []byte) { be.PutUint32(b[32:], 1) }, block.ErrQcow2Unsupported, "encrypted"},
		{"L1 too small", func(b []byte) { be.PutUint32(b[36:], 0) }, block.ErrQcow2Corrupt, "L1 table"},
		{"L1 past end", func(b []byte) { be.PutUint64(b[40:], 1<<40) }, block.ErrQcow2Corrupt, "past the end"},
		{"L1 misaligned", func(b []byte) { be.PutUint64(b[40:], 0x30008) }, block.ErrQcow2Corrupt, "aligned"},
		{"refcount table past end", func(b []byte) { be.PutUint32(b[56:], 10) }, block.ErrQcow2Corrupt, "refcount table"},
		{"marked corrupt", func(b []byte) { be.PutUint64(b[72:], 2) }, block.ErrQcow2Corrupt, "marked corrupt"},
		{"extended L2", func(b []byte) { be.PutUint64(b[72:], 16) }, block.ErrQcow2Unsupported, "extended L2"},
		{"external data file", func(b []byte) { be.PutUint64(b[72:], 4) }, block.ErrQcow2Unsupported, "external data"},
		{"header length", func(b []byte) { be.PutUint32(b[100:], 7) }, block.ErrQcow2Corrupt, "header_length"},
		{"backing name outside cluster", func(b []byte) {
			be.PutUint64(b[8:], 65530)
			be.PutUint32(b[16:], 100)
		}, block.ErrQcow2Corrupt, "backing file name"},
		{"backing name of NULs", func(b []byte) {
			be.PutUint64(b[8:], 0x1000) // zeros inside the first cluster
			be.PutUint32(b[16:], 64)
		}, block.ErrQcow2Corrupt, "NUL byte"},
		{"truncated", nil, block.ErrQcow2Corrupt, "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			if tc.patch != nil {
				tc.patch(b)
			} else {
				b = b[:40]
			}
			p := writeFile(t, "bad.qcow2", b)
			_, err := block.OpenQcow2(p, true)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
}

func TestOpenFormats(t *testing.T) {
	p := writeFile(t, "d.raw", make([]byte, 4096))
	d, err := block.Open(p, block.Options{Format: block.FormatRaw, ReadOnly: true})
	require.NoError(t, err)
	d.Close()
	_, err = block.Open(p, block.Options{Format: block.FormatQcow2})
	assert.ErrorIs(t, err, block.ErrQcow2Corrupt)
	_, err = block.ParseFormat("vmdk")
	assert.Error(t, err)
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Log("qemu-img not installed")
	}
}

// Small clusters fill the refcount table quickly: writing 12 MiB with
// 512-byte clusters makes the overlay move its refcount table (twice), and
// qemu-img still finds it consistent.
func TestQcow2GrowsRefcountTable(t *testing.T) {
	const size = 16 << 20
	dir := t.TempDir()
	img := filepath.Join(dir, "small.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=512", img, "16M")
	d, err := block.OpenQcow2(img, false)
	require.NoError(t, err)
	before := d.Header().RefcountTableOffset
	want := make([]byte, size)
	data := randomBytes(12<<20, 20)
	copy(want[1<<20:], data)
	_, err = d.WriteAt(data, 1<<20)
	require.NoError(t, err)
	assert.NotEqual(t, before, d.Header().RefcountTableOffset, "the table moved")
	assert.True(t, bytes.Equal(want, readAll(t, d)))
	require.NoError(t, d.Close())
	hosttools.Run(t, "qemu-img", "check", img)
	out := filepath.Join(dir, "out.raw")
	hosttools.Run(t, "qemu-img", "convert", "-O", "raw", img, out)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "qemu reads differ")
}
