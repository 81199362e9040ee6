package memory

import (
	"sync/atomic"
)

// Dirty tracking of writes the VMM itself makes to guest RAM (devices
// filling buffers, instruction assists). KVM's dirty log only sees writes
// by vCPUs, so live migration and incremental snapshots merge both.

// dirtyLog is one bit per page of a region, set atomically.
type dirtyLog struct {
	bits []uint64
}

// StartDirtyTracking clears and enables tracking of VMM writes made
// through the write accessors (WriteAt, Put*, SliceForWrite, MarkDirty).
func (g *Guest) StartDirtyTracking() {
	for _, r := range g.regions {
		pages := (r.Size + PageSize - 1) / PageSize
		r.dirty.Store(&dirtyLog{bits: make([]uint64, (pages+63)/64)})
	}
}

// StopDirtyTracking disables it.
func (g *Guest) StopDirtyTracking() {
	for _, r := range g.regions {
		r.dirty.Store(nil)
	}
}

// MarkDirty records that the VMM wrote [gpa, gpa+n). Out-of-RAM ranges are
// ignored: the write itself was refused.
func (g *Guest) MarkDirty(gpa, n uint64) {
	if n == 0 {
		return
	}
	for _, r := range g.regions {
		if gpa < r.GPA || gpa >= r.End() {
			continue
		}
		d := r.dirty.Load()
		if d == nil {
			return
		}
		first := (gpa - r.GPA) / PageSize
		last := (min(gpa+n, r.End()) - 1 - r.GPA) / PageSize
		for p := first; p <= last; p++ {
			w := &d.bits[p/64]
			bit := uint64(1) << (p % 64)
			if atomic.LoadUint64(w)&bit == 0 {
				atomic.OrUint64(w, bit)
			}
		}
		return
	}
}

// TakeDirty ORs the region's VMM-dirty pages into bitmap (one bit per page
// of the region) and clears them.
func (r *Region) TakeDirty(bitmap []uint64) {
	d := r.dirty.Load()
	if d == nil {
		return
	}
	for i := range d.bits {
		if i >= len(bitmap) {
			return
		}
		if d.bits[i] != 0 {
			bitmap[i] |= atomic.SwapUint64(&d.bits[i], 0)
		}
	}
}

// SliceForWrite is Slice for a range the caller is about to write: the
// pages are marked dirty for migration.
func (g *Guest) SliceForWrite(gpa, n uint64) ([]byte, error) {
	s, err := g.Slice(gpa, n)
	if err == nil {
		g.MarkDirty(gpa, n)
	}
	return s, err
}
