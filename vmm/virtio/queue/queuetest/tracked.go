package queuetest

import (
	"bytes"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// RequireTracked runs op with the memory package's tracking of VMM writes
// on and fails the test for every page of mem that op changed without
// marking it dirty: a write live migration would not resend. op should
// only make the device work (kick a queue, wait for used chains): writes
// the test driver itself makes through mem are marked too and would hide
// a miss on the same page. It also fails if op changed nothing, since the
// check would then prove nothing.
func RequireTracked(t testing.TB, mem *memory.Guest, op func()) {
	t.Helper()
	regions := mem.Regions()
	before := make([][]byte, len(regions))
	for i, r := range regions {
		before[i] = bytes.Clone(r.Data)
	}
	mem.StartDirtyTracking()
	defer mem.StopDirtyTracking()
	op()
	changed := 0
	for i, r := range regions {
		pages := r.Size / memory.PageSize
		dirty := make([]uint64, (pages+63)/64)
		r.TakeDirty(dirty)
		for p := uint64(0); p < pages; p++ {
			lo, hi := p*memory.PageSize, (p+1)*memory.PageSize
			if bytes.Equal(before[i][lo:hi], r.Data[lo:hi]) {
				continue
			}
			changed++
			if dirty[p/64]&(1<<(p%64)) == 0 {
				t.Errorf("the page at %#x changed but was not marked dirty: migration would lose the write", r.GPA+lo)
			}
		}
	}
	if changed == 0 {
		t.Fatal("the operation wrote no guest memory: the dirty-tracking check proved nothing")
	}
}
