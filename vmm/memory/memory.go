// Package memory owns guest RAM: memfd-backed regions mapped into the VMM
// and registered with KVM as memory slots, with bounds-checked access by
// guest-physical address. Every access the VMM makes on the guest's behalf
// goes through here, so a guest-supplied address can never reach outside
// guest RAM.
package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// PageSize is the granularity of dirty tracking and of region sizes.
const PageSize = 4096

// ErrOutOfRange is wrapped by every access that falls outside guest RAM.
var ErrOutOfRange = errors.New("guest physical address outside RAM")

// Region is one contiguous range of guest RAM.
type Region struct {
	Slot   uint32
	GPA    uint64
	Size   uint64
	Offset int64  // offset of this region in the backing file
	Data   []byte // host mapping
	dirty  atomic.Pointer[dirtyLog]
}

// End is the first guest-physical address after the region.
func (r *Region) End() uint64 { return r.GPA + r.Size }

// Layout is a requested region: guest-physical start and size.
type Layout struct {
	GPA, Size uint64
}

// Guest is the guest's RAM.
type Guest struct {
	regions []*Region
	file    *os.File // memfd (or snapshot file) backing all regions
	shared  bool     // mapped MAP_SHARED: the file holds exactly guest RAM
	// uf is set while pages may be missing (post-copy migration).
	uf atomic.Pointer[Userfault]
}

// New creates guest RAM for the given layout, backed by one memfd (so a
// snapshot can write it out or another process can map it).
func New(layout []Layout) (*Guest, error) {
	var total uint64
	for _, l := range layout {
		if l.Size == 0 || l.Size%PageSize != 0 || l.GPA%PageSize != 0 {
			return nil, fmt.Errorf("memory region [%#x+%#x]: not page aligned", l.GPA, l.Size)
		}
		total += l.Size
	}
	fd, err := unix.MemfdCreate("kubevmm-guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kubevmm-guest-ram")
	if err := f.Truncate(int64(total)); err != nil {
		_ = f.Close() // an empty memfd
		return nil, fmt.Errorf("size guest RAM to %d bytes: %w", total, err)
	}
	g, err := Map(f, layout, unix.MAP_SHARED)
	if err != nil {
		_ = f.Close() // a fresh memfd, never mapped
		return nil, err
	}
	return g, nil
}

// Map maps the regions of layout from f, consecutively from offset 0. With
// MAP_PRIVATE the file (e.g. a snapshot's memory file) is read lazily, page
// by page, as the guest touches it, and never written back.
func Map(f *os.File, layout []Layout, flags int) (*Guest, error) {
	g := &Guest{file: f, shared: flags&unix.MAP_SHARED != 0}
	var off int64
	for i, l := range layout {
		data, err := unix.Mmap(int(f.Fd()), off, int(l.Size), unix.PROT_READ|unix.PROT_WRITE, flags|unix.MAP_NORESERVE)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("mmap guest RAM region %d (%d MiB): %w", i, l.Size>>20, err)
		}
		g.regions = append(g.regions, &Region{Slot: uint32(i), GPA: l.GPA, Size: l.Size, Offset: off, Data: data})
		off += int64(l.Size)
	}
	sort.Slice(g.regions, func(i, j int) bool { return g.regions[i].GPA < g.regions[j].GPA })
	for i := 1; i < len(g.regions); i++ {
		if g.regions[i].GPA < g.regions[i-1].End() {
			g.Close()
			return nil, fmt.Errorf("memory regions overlap at %#x", g.regions[i].GPA)
		}
	}
	return g, nil
}

// Close unmaps all regions and closes the backing file.
func (g *Guest) Close() error {
	for _, r := range g.regions {
		if r.Data != nil {
			unix.Munmap(r.Data)
			r.Data = nil
		}
	}
	if g.file != nil {
		f := g.file
		g.file = nil
		return f.Close()
	}
	return nil
}

// Regions lists the regions in ascending address order.
func (g *Guest) Regions() []*Region { return g.regions }

// File is the backing file (memfd or snapshot file).
func (g *Guest) File() *os.File { return g.file }

// Size is the total RAM size.
func (g *Guest) Size() uint64 {
	var n uint64
	for _, r := range g.regions {
		n += r.Size
	}
	return n
}

// Slice returns the host bytes backing [gpa, gpa+n). The range must lie in
// one region; guest RAM regions are never adjacent across the MMIO hole, so
// a range that spans two is a guest error, not a case to stitch together.
func (g *Guest) Slice(gpa, n uint64) ([]byte, error) {
	s, err := g.slice(gpa, n)
	if err == nil && g.uf.Load() != nil {
		populate(s)
	}
	return s, err
}

// slice is Slice without waiting for missing pages.
func (g *Guest) slice(gpa, n uint64) ([]byte, error) {
	for _, r := range g.regions {
		if gpa >= r.GPA && gpa < r.End() {
			off := gpa - r.GPA
			if n > r.Size-off {
				break
			}
			return r.Data[off : off+n : off+n], nil
		}
	}
	return nil, fmt.Errorf("%w: [%#x+%#x]", ErrOutOfRange, gpa, n)
}

// Contains reports whether [gpa, gpa+n) lies entirely in RAM.
func (g *Guest) Contains(gpa, n uint64) bool {
	_, err := g.Slice(gpa, n)
	return err == nil
}

// ReadAt copies guest memory at gpa into b.
func (g *Guest) ReadAt(b []byte, gpa uint64) error {
	s, err := g.Slice(gpa, uint64(len(b)))
	if err != nil {
		return err
	}
	copy(b, s)
	return nil
}

// WriteAt copies b into guest memory at gpa.
func (g *Guest) WriteAt(b []byte, gpa uint64) error {
	s, err := g.SliceForWrite(gpa, uint64(len(b)))
	if err != nil {
		return err
	}
	copy(s, b)
	return nil
}

// Uint64 reads a little-endian 64-bit value.
func (g *Guest) Uint64(gpa uint64) (uint64, error) {
	s, err := g.Slice(gpa, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(s), nil
}

// PutUint64 writes a little-endian 64-bit value.
func (g *Guest) PutUint64(gpa, v uint64) error {
	s, err := g.SliceForWrite(gpa, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(s, v)
	return nil
}

// Uint32 reads a little-endian 32-bit value.
func (g *Guest) Uint32(gpa uint64) (uint32, error) {
	s, err := g.Slice(gpa, 4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(s), nil
}

// Uint16 reads a little-endian 16-bit value.
func (g *Guest) Uint16(gpa uint64) (uint16, error) {
	s, err := g.Slice(gpa, 2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(s), nil
}

// PutUint16 writes a little-endian 16-bit value.
func (g *Guest) PutUint16(gpa uint64, v uint16) error {
	s, err := g.SliceForWrite(gpa, 2)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint16(s, v)
	return nil
}

// PutUint32 writes a little-endian 32-bit value.
func (g *Guest) PutUint32(gpa uint64, v uint32) error {
	s, err := g.SliceForWrite(gpa, 4)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(s, v)
	return nil
}
