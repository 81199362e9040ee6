package memory

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// nextFault waits for the next reported fault.
func nextFault(t *testing.T, u *Userfault) uint64 {
	t.Helper()
	for {
		f, err := u.Faults(nil)
		require.NoError(t, err)
		if len(f) > 0 {
			return f[0]
		}
	}
}

// TestUserfaultMissingPagesWaitForInstall makes pages of guest RAM
// missing, touches them from other goroutines (the kernel reading guest
// RAM, as KVM does for a vCPU, and the VMM's accessor) and serves the
// faults: each access sees the installed page, never the stale data the
// page held before, while pages that were not missing keep theirs.
//
// No goroutine here loads a missing page directly: a Go thread blocked on
// a plain page fault keeps its scheduler slot and can't be preempted,
// which is why the VMM's own accesses go through Slice.
func TestUserfaultMissingPagesWaitForInstall(t *testing.T) {
	g := twoRegions(t)
	r0 := g.Regions()[0]
	stale := bytes.Repeat([]byte{0xee}, PageSize)
	for _, gpa := range []uint64{0, PageSize, 0x100000} {
		require.NoError(t, g.WriteAt(stale, gpa))
	}
	missing := [][]uint64{{1<<1 | 1<<2}, {1 << 0}} // region 0 pages 1, 2; region 1 page 0
	u, err := g.Userfault(missing)
	require.NoError(t, err)

	// The kernel copying out of a missing page (write(2) to a pipe) waits
	// in the fault, as KVM's accesses for a vCPU do.
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	wrote := make(chan error)
	go func() {
		_, err := unix.Write(p[1], r0.Data[PageSize+10:PageSize+11])
		wrote <- err
	}()
	assert.Equal(t, uint64(PageSize), nextFault(t, u), "the access faults on its page")
	fresh := bytes.Repeat([]byte{0x5a}, PageSize)
	require.NoError(t, u.Install(PageSize, fresh))
	require.NoError(t, <-wrote)
	got := make([]byte, 1)
	_, err = unix.Read(p[0], got)
	require.NoError(t, err)
	assert.Equal(t, byte(0x5a), got[0], "the access sees the installed page, not the stale one")

	// The VMM's accessor waits in the kernel the same way.
	read := make(chan uint64)
	go func() {
		v, err := g.Uint64(0x100000)
		assert.NoError(t, err)
		read <- v
	}()
	assert.Equal(t, uint64(0x100000), nextFault(t, u))
	require.NoError(t, u.Zero(0x100000, PageSize))
	assert.Equal(t, uint64(0), <-read, "a zero page arrived in region 1")

	// Installing a present page again changes nothing.
	require.NoError(t, u.Install(PageSize, stale))
	assert.Equal(t, byte(0x5a), r0.Data[PageSize])
	// A run over present and missing pages fills only the missing one.
	require.NoError(t, u.Install(PageSize, append(bytes.Repeat([]byte{1}, PageSize), bytes.Repeat([]byte{2}, PageSize)...)))
	assert.Equal(t, byte(0x5a), r0.Data[PageSize])
	assert.Equal(t, byte(2), r0.Data[2*PageSize])
	assert.Equal(t, byte(0xee), r0.Data[0], "a page that was not missing keeps its data")

	assert.Error(t, u.Install(PageSize+1, fresh), "not page aligned")
	assert.Error(t, u.Install(uint64(len(r0.Data)), fresh), "outside RAM")

	require.NoError(t, u.Close())
	_, err = u.Faults(nil)
	assert.Error(t, err, "no faults after Close")
	require.NoError(t, g.PutUint64(3*PageSize, 7), "RAM is plain memory again")
}

func TestUserfaultRefusesBadBitmaps(t *testing.T) {
	g := twoRegions(t)
	_, err := g.Userfault([][]uint64{{0}})
	assert.ErrorContains(t, err, "2 memory regions")
	_, err = g.Userfault([][]uint64{{0}, {0, 0}})
	assert.ErrorContains(t, err, "bitmap of region 1")
}
