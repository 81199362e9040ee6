package block_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// A qcow2 image qemu-img compressed (`convert -c`, what cloud images
// ship) reads as its source; writing into a compressed cluster is
// refused; compressed bytes that do not inflate are corruption, not a
// panic.
func TestQcow2CompressedClusters(t *testing.T) {
	src := append(bytes.Repeat([]byte("compressible "), 100000), randomBytes(300000, 7)...)
	src = append(src, make([]byte, 1<<20)...)
	raw := writeFile(t, "src.raw", src)
	img := filepath.Join(t.TempDir(), "c.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", raw, img)

	d, err := block.OpenQcow2(img, true)
	require.NoError(t, err)
	assert.Equal(t, src, readAll(t, d)[:len(src)])
	require.NoError(t, d.Close())

	w, err := block.OpenQcow2(img, false)
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, block.ErrQcow2Unsupported)
	assert.Contains(t, err.Error(), "compressed cluster")
	require.NoError(t, w.Close())

	// The compressed data follows the tables: garbage over the file's
	// second half.
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	for i := len(b) / 2; i < len(b); i++ {
		b[i] = byte(i * 13)
	}
	bad := writeFile(t, "bad.qcow2", b)
	d, err = block.OpenQcow2(bad, true)
	require.NoError(t, err)
	defer d.Close()
	_, err = d.ReadAt(make([]byte, len(src)), 0)
	require.ErrorIs(t, err, block.ErrQcow2Corrupt)
}

type span struct {
	data bool
	n    int64
}

func statusOf(t *testing.T, d interface {
	Status(off, n int64) (bool, int64, error)
}, size int64,
) []span {
	t.Helper()
	var out []span
	for off := int64(0); off < size; {
		data, n, err := d.Status(off, size-off)
		require.NoError(t, err)
		require.Positive(t, n)
		if len(out) > 0 && out[len(out)-1].data == data {
			out[len(out)-1].n += n
		} else {
			out = append(out, span{data, n})
		}
		off += n
	}
	return out
}

// Status tells data from zeros by the tables alone: written clusters are
// data, zero clusters (qemu-io write -z) and unallocated ones zeros, an
// unallocated one over a backing file data; with 512-byte clusters
// every 32 KiB has its own L2 table, between the data clusters.
func TestQcow2Status(t *testing.T) {
	const k = 1 << 10
	dir := t.TempDir()
	for _, cs := range []string{"65536", "512"} {
		t.Run(cs, func(t *testing.T) {
			img := filepath.Join(dir, "s"+cs+".qcow2")
			hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size="+cs, img, "4M")
			hosttools.Run(t, "qemu-io", "-f", "qcow2",
				"-c", "write -P 0xaa 0 128k", "-c", "write -P 0xbb 1M 64k", "-c", "write -z 192k 64k",
				"-c", "write -P 0xcc 3M 64k", "-c", "write -z 3M 64k", img)
			d, err := block.OpenQcow2(img, true)
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, []span{{true, 128 * k}, {false, 896 * k}, {true, 64 * k}, {false, 3008 * k}}, statusOf(t, d, 4<<20))
			got := readAll(t, d)
			want := make([]byte, 4<<20)
			copy(want, bytes.Repeat([]byte{0xaa}, 128*k))
			copy(want[1<<20:], bytes.Repeat([]byte{0xbb}, 64*k))
			assert.Equal(t, want, got)
			_, _, err = d.Status(4<<20, 1)
			require.Error(t, err, "past the end")
		})
	}
	t.Run("backing file", func(t *testing.T) {
		base := filepath.Join(dir, "base.qcow2")
		hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", base, "2M")
		over := filepath.Join(dir, "over.qcow2")
		hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, over, "4M")
		hosttools.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -z 0 64k", over)
		d, err := block.OpenQcow2(over, true)
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, []span{{false, 64 * k}, {true, 2048*k - 64*k}, {false, 2048 * k}}, statusOf(t, d, 4<<20))
	})
	t.Run("raw", func(t *testing.T) {
		p := filepath.Join(dir, "sparse.raw")
		f, err := os.Create(p)
		require.NoError(t, err)
		_, err = f.WriteAt(bytes.Repeat([]byte{1}, 64*k), 1<<20)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(4<<20))
		require.NoError(t, f.Close())
		d, err := block.OpenRaw(p, true)
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, []span{{false, 1024 * k}, {true, 64 * k}, {false, 3008 * k}}, statusOf(t, d, 4<<20))
	})
}
