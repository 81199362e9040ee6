package memory

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func twoRegions(t *testing.T) *Guest {
	t.Helper()
	g, err := New([]Layout{{GPA: 0, Size: 4 * PageSize}, {GPA: 0x100000, Size: 2 * PageSize}})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

func TestAccessInsideAndOutsideRAM(t *testing.T) {
	g := twoRegions(t)
	assert.Equal(t, uint64(6*PageSize), g.Size())
	require.NoError(t, g.PutUint64(0x100008, 0x1122334455667788))
	v, err := g.Uint64(0x100008)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x1122334455667788), v)

	for _, tc := range []struct {
		name    string
		gpa, n  uint64
		allowed bool
	}{
		{"first byte", 0, 1, true},
		{"last byte of region 0", 4*PageSize - 1, 1, true},
		{"straddles region 0's end", 4*PageSize - 4, 8, false},
		{"in the hole", 0x80000, 1, false},
		{"second region", 0x100000, 2 * PageSize, true},
		{"past the end", 0x100000 + 2*PageSize, 1, false},
		{"length overflows", 0x100000, ^uint64(0), false},
		{"address near 2^64", ^uint64(0) - 3, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.Slice(tc.gpa, tc.n)
			if tc.allowed {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrOutOfRange)
			}
			assert.Equal(t, tc.allowed, g.Contains(tc.gpa, tc.n))
		})
	}
	assert.ErrorIs(t, g.WriteAt(make([]byte, 16), 4*PageSize-8), ErrOutOfRange, "a write straddling the end changes nothing")
}

func TestSliceCapacityStopsAtTheRequest(t *testing.T) {
	g := twoRegions(t)
	s, err := g.Slice(0, 8)
	require.NoError(t, err)
	assert.Equal(t, 8, cap(s), "append on a returned slice can't spill into neighbouring guest memory")
}

func TestLayoutValidation(t *testing.T) {
	_, err := New([]Layout{{GPA: 0, Size: 100}})
	assert.Error(t, err, "not page aligned")
	_, err = New([]Layout{{GPA: 0, Size: 2 * PageSize}, {GPA: PageSize, Size: PageSize}})
	assert.Error(t, err, "overlapping regions")
}

func TestMapPrivateReadsFileLazilyAndNeverWritesBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem")
	content := make([]byte, 2*PageSize)
	copy(content[PageSize:], "saved page")
	require.NoError(t, os.WriteFile(path, content, 0o600))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	g, err := Map(f, []Layout{{GPA: 0, Size: 2 * PageSize}}, unix.MAP_PRIVATE)
	require.NoError(t, err)
	b := make([]byte, 10)
	require.NoError(t, g.ReadAt(b, PageSize))
	assert.Equal(t, "saved page", string(b))
	require.NoError(t, g.WriteAt([]byte("guest wrote"), PageSize))
	require.NoError(t, g.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, content, after, "a private mapping leaves the snapshot file as it was")
}

func TestDirtyTrackingOfVMMWrites(t *testing.T) {
	g := twoRegions(t)
	require.NoError(t, g.WriteAt([]byte{1}, 0), "untracked write before tracking starts")
	g.StartDirtyTracking()
	require.NoError(t, g.WriteAt(make([]byte, 2), 2*PageSize-1)) // straddles pages 1 and 2
	require.NoError(t, g.PutUint32(0x100000+PageSize, 7))
	_, err := g.Slice(3*PageSize, 8) // read access: not dirty
	require.NoError(t, err)

	r0, r1 := g.Regions()[0], g.Regions()[1]
	b0, b1 := make([]uint64, 1), make([]uint64, 1)
	r0.TakeDirty(b0)
	r1.TakeDirty(b1)
	assert.Equal(t, uint64(0b0110), b0[0], "pages 1 and 2 of region 0")
	assert.Equal(t, uint64(0b10), b1[0], "page 1 of region 1")
	b0[0] = 0
	r0.TakeDirty(b0)
	assert.Zero(t, b0[0], "taking clears")
	g.StopDirtyTracking()
	require.NoError(t, g.WriteAt([]byte{1}, 0))
	r0.TakeDirty(b0)
	assert.Zero(t, b0[0])
}

func TestPopulatedSkipsPagesNeverWritten(t *testing.T) {
	g, err := New([]Layout{{GPA: 0, Size: 64 * PageSize}, {GPA: 0x100000, Size: 16 * PageSize}})
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.WriteAt([]byte{1}, 5*PageSize+10))
	require.NoError(t, g.WriteAt(make([]byte, 2*PageSize), 9*PageSize))
	require.NoError(t, g.WriteAt([]byte{1}, 0x100000+15*PageSize))
	r0, r1 := g.Regions()[0], g.Regions()[1]
	covered := func(rs []Range, off uint64) bool {
		for _, r := range rs {
			if off >= r.Off && off < r.Off+r.Len {
				return true
			}
		}
		return false
	}
	p0 := g.Populated(r0)
	assert.True(t, covered(p0, 5*PageSize))
	assert.True(t, covered(p0, 9*PageSize), "written zeros still count as data")
	assert.True(t, covered(p0, 10*PageSize))
	assert.False(t, covered(p0, 30*PageSize), "never-touched page is a hole")
	var total uint64
	for _, r := range p0 {
		total += r.Len
	}
	assert.Less(t, total, r0.Size)
	p1 := g.Populated(r1)
	assert.True(t, covered(p1, 15*PageSize))
	assert.False(t, covered(p1, 0))
}
