package block_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// An overlay we create over a raw base is one QEMU agrees with (`qemu-img
// check` clean, the backing file and format and size it says), reads as
// the base until written, takes writes without touching the base, and
// still checks clean after them.
func TestCreateQcow2Overlay(t *testing.T) {
	const size = 8<<20 + 3*512 // not a whole number of clusters
	base := randomBytes(size, 21)
	basePath := writeFile(t, "base.raw", base)
	ov := filepath.Join(t.TempDir(), "disk.qcow2")
	require.NoError(t, block.CreateQcow2Overlay(ov, basePath, block.FormatRaw))

	hosttools.Run(t, "qemu-img", "check", ov)
	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
		Backing     string `json:"backing-filename"`
		BackingFmt  string `json:"backing-filename-format"`
	}
	require.NoError(t, json.Unmarshal([]byte(hosttools.Run(t, "qemu-img", "info", "--output=json", ov)), &info))
	assert.Equal(t, "qcow2", info.Format)
	assert.Equal(t, int64(size), info.VirtualSize)
	assert.Equal(t, basePath, info.Backing)
	assert.Equal(t, "raw", info.BackingFmt)

	d, err := block.OpenQcow2(ov, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(size), d.Size())
	assert.True(t, bytes.Equal(base, readAll(t, d)), "an empty overlay reads as its base")
	want := append([]byte(nil), base...)
	for i, w := range []struct{ off, n int }{{0, 512}, {70000, 200000}, {size - 512, 512}, {3 << 20, 1 << 20}} {
		b := randomBytes(w.n, uint64(30+i))
		_, err := d.WriteAt(b, int64(w.off))
		require.NoError(t, err)
		copy(want[w.off:], b)
	}
	require.NoError(t, d.Flush())
	require.NoError(t, d.Close())

	hosttools.Run(t, "qemu-img", "check", ov)
	out := filepath.Join(t.TempDir(), "out.raw")
	hosttools.Run(t, "qemu-img", "convert", "-O", "raw", ov, out)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "QEMU reads our writes over the base")
	b, err := os.ReadFile(basePath)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(base, b), "the base is untouched")
}

// A base too large for one cluster of L1 table (one entry maps 512 MiB
// with 64 KiB clusters: 8192 entries map 4 TiB) gets a longer table.
func TestCreateQcow2OverlayLargeBase(t *testing.T) {
	basePath := filepath.Join(t.TempDir(), "base.raw")
	f, err := os.Create(basePath)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(5<<40)) // sparse
	require.NoError(t, f.Close())
	ov := filepath.Join(t.TempDir(), "disk.qcow2")
	require.NoError(t, block.CreateQcow2Overlay(ov, basePath, block.FormatRaw))
	hosttools.Run(t, "qemu-img", "check", ov)
	d, err := block.OpenQcow2(ov, false)
	require.NoError(t, err)
	_, err = d.WriteAt([]byte("end"), 5<<40-3)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	hosttools.Run(t, "qemu-img", "check", ov)
}

func TestCreateQcow2OverlayRefusals(t *testing.T) {
	basePath := writeFile(t, "base.raw", make([]byte, 1<<20))
	dir := t.TempDir()
	existing := filepath.Join(dir, "kept.qcow2")
	require.NoError(t, os.WriteFile(existing, []byte("the guest's data"), 0o600))
	err := block.CreateQcow2Overlay(existing, basePath, block.FormatRaw)
	require.ErrorIs(t, err, os.ErrExist, "an existing file is never replaced")
	b, err := os.ReadFile(existing)
	require.NoError(t, err)
	assert.Equal(t, "the guest's data", string(b))

	for name, tc := range map[string]struct{ backing, want string }{
		"relative backing": {"base.raw", "not an absolute path"},
		"missing backing":  {filepath.Join(dir, "none.raw"), "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			err := block.CreateQcow2Overlay(filepath.Join(dir, name+".qcow2"), tc.backing, block.FormatRaw)
			require.ErrorContains(t, err, tc.want)
			assert.NoFileExists(t, filepath.Join(dir, name+".qcow2"))
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no scratch files are left")
}
