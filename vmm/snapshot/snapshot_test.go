package snapshot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

func guestWithData(t *testing.T) *memory.Guest {
	g, err := memory.New([]memory.Layout{{GPA: 0, Size: 1 << 20}, {GPA: 1 << 32, Size: 256 << 10}})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	require.NoError(t, g.WriteAt([]byte("low page"), 0x3000))
	require.NoError(t, g.WriteAt([]byte("high page"), 1<<32+0x1000))
	require.NoError(t, g.WriteAt(make([]byte, 8192), 0x8000)) // touched but zero
	return g
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	g := guestWithData(t)
	stored, err := Write(dir, g, map[string]int{"answer": 42})
	require.NoError(t, err)
	assert.Equal(t, int64(2*memory.PageSize), stored, "only non-zero pages are stored")

	m, mem, err := Read(dir)
	require.NoError(t, err)
	defer mem.Close()
	var st map[string]int
	require.NoError(t, json.Unmarshal(m.State, &st))
	assert.Equal(t, 42, st["answer"])
	b := make([]byte, 9)
	require.NoError(t, mem.ReadAt(b, 1<<32+0x1000))
	assert.Equal(t, "high page", string(b))
	require.NoError(t, mem.ReadAt(b[:8], 0x3000))
	assert.Equal(t, "low page", string(b[:8]))

	// the restored guest writes: the snapshot stays as it was
	require.NoError(t, mem.WriteAt([]byte("changed"), 0x3000))
	_, mem2, err := Read(dir)
	require.NoError(t, err)
	defer mem2.Close()
	require.NoError(t, mem2.ReadAt(b[:8], 0x3000))
	assert.Equal(t, "low page", string(b[:8]))
}

func TestBrokenSnapshotsAreRefused(t *testing.T) {
	good := t.TempDir()
	_, err := Write(good, guestWithData(t), struct{}{})
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(good, ManifestFile))
	require.NoError(t, err)

	variant := func(t *testing.T, edit func(dir string)) string {
		dir := t.TempDir()
		for _, f := range []string{ManifestFile, MemoryFile} {
			b, err := os.ReadFile(filepath.Join(good, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
		}
		edit(dir)
		return dir
	}
	rewrite := func(f func(m map[string]any)) func(string) {
		return func(dir string) {
			var m map[string]any
			require.NoError(t, json.Unmarshal(manifest, &m))
			f(m)
			b, _ := json.Marshal(m)
			require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600))
		}
	}
	for _, tc := range []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"no manifest", func(d string) { os.Remove(filepath.Join(d, ManifestFile)) }, "no such file"},
		{"manifest not JSON", func(d string) { os.WriteFile(filepath.Join(d, ManifestFile), []byte("{trunc"), 0o600) }, "state.json"},
		{"other format", rewrite(func(m map[string]any) { m["format"] = "qemu" }), "format"},
		{"newer version", rewrite(func(m map[string]any) { m["version"] = 2 }), "version 2, this VMM reads version 1"},
		{"memory truncated", func(d string) { os.Truncate(filepath.Join(d, MemoryFile), 4096) }, "truncated"},
		{"memory missing", func(d string) { os.Remove(filepath.Join(d, MemoryFile)) }, "no such file"},
		{"no regions", rewrite(func(m map[string]any) { m["memory"] = []any{} }), "no memory regions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, mem, err := Read(variant(t, tc.edit))
			require.Error(t, err)
			assert.Nil(t, mem)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Regions the memory file does hold, but that are no guest RAM a VM can
// map: refused by Read itself, not left to whoever uses the mapping.
func TestSnapshotRegionsThatAreNotWholePagesAreRefused(t *testing.T) {
	good := t.TempDir()
	_, err := Write(good, guestWithData(t), struct{}{})
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(good, ManifestFile))
	require.NoError(t, err)
	for name, r := range map[string]Region{
		"not whole pages":   {GPA: 0, Size: 100},
		"unaligned address": {GPA: 7, Size: 4096},
	} {
		t.Run(name, func(t *testing.T) {
			var m Manifest
			require.NoError(t, json.Unmarshal(manifest, &m))
			m.Memory = []Region{r}
			b, err := json.Marshal(m)
			require.NoError(t, err)
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600))
			// the memory file is as large as the manifest says
			require.NoError(t, os.WriteFile(filepath.Join(dir, MemoryFile), make([]byte, r.Size), 0o600))
			_, mem, err := Read(dir)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Nil(t, mem)
		})
	}
}
