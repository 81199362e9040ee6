package block_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// A deferred disk answers for its image before it is open exactly as the
// open image does: size, read-only, the features a device offers, the
// identity a saved VM records.
func TestDeferredMatchesTheOpenImage(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "d.raw")
	require.NoError(t, os.WriteFile(raw, randomBytes(1<<20, 7), 0o644))
	ov := filepath.Join(dir, "d.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", raw, "-F", "raw", ov)
	for _, tc := range []struct {
		path string
		opt  block.Options
	}{
		{raw, block.Options{Format: block.FormatRaw}},
		{raw, block.Options{Format: block.FormatRaw, ReadOnly: true}},
		{ov, block.Options{Format: block.FormatQcow2}},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			open, err := block.Open(tc.path, tc.opt)
			require.NoError(t, err)
			wantDiscard, wantZeroes := block.Features(open)
			wantID := block.Identify(open)
			require.NoError(t, open.Close())

			d := block.NewDeferred(tc.path, tc.opt, 1<<20)
			defer d.Close()
			assert.Equal(t, uint64(1<<20), d.Size())
			assert.Equal(t, tc.opt.ReadOnly, d.ReadOnly())
			discard, zeroes := block.Features(d)
			assert.Equal(t, wantDiscard, discard, "discard")
			assert.Equal(t, wantZeroes, zeroes, "write zeroes")
			assert.Equal(t, wantID.Format, block.Identify(d).Format)
			_, err = d.ReadAt(make([]byte, 512), 0)
			assert.Error(t, err, "no I/O before Open")
			assert.Error(t, d.Flush())

			require.NoError(t, d.Open())
			assert.Equal(t, wantID, block.Identify(d))
			b := make([]byte, 4096)
			require.NoError(t, d.ReadvAt([][]byte{b[:512], b[512:]}, 4096))
			assert.Equal(t, randomBytes(1<<20, 7)[4096:8192], b)
		})
	}

	d := block.NewDeferred(raw, block.Options{}, 2<<20)
	err := d.Open()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the image is 1048576 bytes, the VM's disk 2097152")
	assert.Nil(t, d.Disk())
	again, err := block.OpenRaw(raw, false)
	require.NoError(t, err, "a refused image is not left locked")
	again.Close()
}

func TestIdentityCheck(t *testing.T) {
	saved := block.Identity{Format: block.FormatQcow2, Size: 1 << 30, Qcow2Version: 3, ClusterBits: 16, BackingFile: "base.raw", BackingFormat: "raw"}
	require.NoError(t, saved.Check(saved))
	now := saved
	now.Size, now.BackingFile = 2<<30, "other.raw"
	err := saved.Check(now)
	require.Error(t, err)
	assert.Equal(t, `the image is not the one saved: virtual size 2147483648, saved 1073741824; backing file "other.raw", saved "base.raw"`, err.Error())
	assert.Error(t, saved.Check(block.Identity{Format: block.FormatRaw, Size: 1 << 30}))
}
