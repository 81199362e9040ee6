package memory

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Range is a span of a region, as offsets from the region's start.
type Range struct{ Off, Len uint64 }

// Populated returns the parts of region r that may hold non-zero data. For
// RAM in a shared memfd the holes are asked from the file (SEEK_DATA /
// SEEK_HOLE), so pages the guest never touched are neither read (which
// would allocate them) nor sent; otherwise the whole region is returned.
func (g *Guest) Populated(r *Region) []Range {
	whole := []Range{{0, r.Size}}
	if !g.shared || g.file == nil {
		return whole
	}
	fd := int(g.file.Fd())
	var out []Range
	end := r.Offset + int64(r.Size)
	for off := r.Offset; off < end; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) || (err == nil && data >= end) {
			break // no more data in this region
		}
		if err != nil {
			return whole
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return whole
		}
		hole = min(hole, end)
		out = append(out, Range{uint64(data - r.Offset), uint64(hole - data)})
		off = hole
	}
	return out
}
