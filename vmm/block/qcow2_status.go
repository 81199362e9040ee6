package block

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// compressedMapping maps a compressed cluster's L2 entry e (qcow2.txt,
// "Compressed Clusters Descriptor"): with x = 62 - (cluster_bits - 8),
// bits 0..x-1 are the host offset of the compressed bytes (any byte, not
// a cluster boundary) and bits x..61 the number of 512-byte sectors they
// take beyond the one holding that offset.
func (q *Qcow2) compressedMapping(vc, e uint64, m mapping) (mapping, error) {
	x := 62 - (uint64(q.h.ClusterBits) - 8)
	m.kind = clusterCompressed
	m.host = e & (1<<x - 1)
	sectors := (e>>x)&(1<<(uint64(q.h.ClusterBits)-8)-1) + 1
	m.clen = sectors*512 - m.host%512
	if m.host < q.cs {
		return mapping{}, corrupt("L2 entry for guest cluster %d: compressed data at %#x is inside the header", vc, m.host)
	}
	return m, nil
}

// readCompressed inflates the cluster m maps (raw deflate, as QEMU
// writes with the default zlib compression type) and copies seg from in
// bytes into it. A cluster that does not inflate to exactly a cluster's
// bytes is corruption.
func (q *Qcow2) readCompressed(m mapping, in uint64, seg []byte) error {
	buf := make([]byte, m.clen)
	// The last cluster's sectors may run past the end of the file.
	n, err := q.f.ReadAt(buf, int64(m.host))
	if err != nil && (!errors.Is(err, io.EOF) || n == 0) {
		return corrupt("compressed cluster at %#x: %v", m.host, err)
	}
	out := make([]byte, q.cs)
	if _, err := io.ReadFull(flate.NewReader(bytes.NewReader(buf[:n])), out); err != nil {
		return corrupt("compressed cluster at %#x+%d: %v", m.host, n, err)
	}
	copy(seg, out[in:])
	return nil
}

// contiguous is how many of the next max guest bytes from pos (a cluster
// boundary) are data clusters that follow host in the file, whole
// clusters only but at most max. A lookup error ends the run: the caller
// meets it again on its own lookup.
func (q *Qcow2) contiguous(pos, host uint64, max int) int {
	n := 0
	for n < max {
		m, err := q.lookup((pos + uint64(n)) / q.cs)
		if err != nil || m.kind != clusterData || m.host != host+uint64(n) {
			break
		}
		n = min(max, n+int(q.cs))
	}
	return n
}

// Status says how the guest bytes from off read: data (an allocated or
// compressed cluster, or one the backing file may hold) or zeros (a zero
// cluster, or an unallocated one with nothing behind it), and for how
// many bytes from off, at most n, that holds. A converter skips the zeros
// without reading them, as qemu-img's block status does.
func (q *Qcow2) Status(off, n int64) (data bool, length int64, err error) {
	if off < 0 || n <= 0 || uint64(off) >= q.h.Size {
		return false, 0, fmt.Errorf("qcow2 status of [%d+%d] outside the %d-byte disk", off, n, q.h.Size)
	}
	end := min(uint64(off)+uint64(n), q.h.Size)
	q.mu.Lock()
	defer q.mu.Unlock()
	pos := uint64(off)
	for first := true; pos < end; first = false {
		m, err := q.lookup(pos / q.cs)
		if err != nil {
			return false, 0, err
		}
		d := m.kind == clusterData || m.kind == clusterCompressed ||
			(m.kind == clusterUnallocated && q.backing != nil && pos < q.backing.Size())
		if first {
			data = d
		} else if d != data {
			break
		}
		pos = min(end, (pos/q.cs+1)*q.cs)
	}
	return data, int64(pos) - off, nil
}

// Status says whether the bytes from off are data or a hole (reading as
// zeros) and for how many bytes from off, at most n, that holds, by
// SEEK_DATA/SEEK_HOLE. Where the file cannot say (a block device), it is
// all data.
func (r *Raw) Status(off, n int64) (data bool, length int64, err error) {
	if off < 0 || n <= 0 || uint64(off) >= r.size {
		return false, 0, fmt.Errorf("raw status of [%d+%d] outside the %d-byte image", off, n, r.size)
	}
	end := min(off+n, int64(r.size)) //nolint:gosec // an image's size fits int64
	fd := int(r.f.Fd())
	next, err := unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO): // nothing but a hole to the end
		return false, end - off, nil
	case err != nil:
		return true, end - off, nil //nolint:nilerr // no hole information: read it all
	case next > off:
		return false, min(next, end) - off, nil
	}
	hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
	if err != nil {
		return true, end - off, nil //nolint:nilerr // as above
	}
	return true, min(hole, end) - off, nil
}

// readerFile is a read-only image file that is only an io.ReaderAt.
type readerFile struct{ io.ReaderAt }

func (readerFile) WriteAt([]byte, int64) (int, error) { return 0, ErrReadOnly }
func (readerFile) Sync() error                        { return nil }
func (readerFile) Close() error                       { return nil }

// OpenQcow2ReaderAt opens, read-only, the size-byte qcow2 image r reads
// (an image read in place over the network, say); name names it in
// errors. A backing file is refused: there is nothing to resolve its
// name against.
func OpenQcow2ReaderAt(r io.ReaderAt, name string, size int64) (*Qcow2, error) {
	q, err := newQcow2(readerFile{r}, name, size, true, func(file, _ string) (Disk, error) {
		return nil, unsupported("backing file %q of an image read in place", file)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return q, nil
}
