package sparse

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// image is a chunk of data, two chunks of zeros and a short tail.
func image() []byte {
	b := make([]byte, 3*Chunk+100)
	copy(b, "boot sector")
	copy(b[3*Chunk:], "tail")
	return b
}

// allocated is how many bytes of the file are stored.
func allocated(t *testing.T, path string) int64 {
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Blocks * 512
}

func TestCopy(t *testing.T) {
	img := image()
	for _, tc := range []struct {
		name      string
		skipZeros bool
		maxStored int64 // bytes the file may hold on disk
	}{
		{"file: the zero chunks are holes", true, 2*Chunk + 64<<10},
		{"device: every chunk written", false, 4 * Chunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "disk.img")
			f, err := os.Create(path)
			require.NoError(t, err)
			defer f.Close()
			n, err := Copy(f, bytes.NewReader(img), tc.skipZeros, -1)
			require.NoError(t, err)
			assert.EqualValues(t, len(img), n)
			require.NoError(t, f.Truncate(n))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(img, got), "the file reads as the image")
			if tc.skipZeros {
				assert.LessOrEqual(t, allocated(t, path), tc.maxStored)
			} else {
				assert.GreaterOrEqual(t, allocated(t, path), int64(3*Chunk), "zeros written over what a device held")
			}
		})
	}
}

func TestCopyLimitAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	img := image()
	n, err := Copy(f, bytes.NewReader(img), true, 2*Chunk)
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.LessOrEqual(t, n, int64(2*Chunk), "nothing past the limit")
	st, err := f.Stat()
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Size(), int64(2*Chunk))

	// The reader's own error comes back as it is.
	_, err = Copy(f, io.MultiReader(bytes.NewReader(img[:10]), errReader{io.ErrUnexpectedEOF}), true, -1)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	// A write that fails says so.
	ro, err := os.Open(path)
	require.NoError(t, err)
	defer ro.Close()
	_, err = Copy(ro, bytes.NewReader(img), false, -1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "writing the disk")
	assert.False(t, errors.Is(err, ErrTooLarge))
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestAllZero(t *testing.T) {
	assert.True(t, AllZero(nil))
	assert.True(t, AllZero(make([]byte, 13)))
	for _, i := range []int{0, 7, 8, 12} {
		b := make([]byte, 13)
		b[i] = 1
		assert.False(t, AllZero(b), "byte %d", i)
	}
}
