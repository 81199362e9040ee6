package block

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Raw is a raw image file or block device.
type Raw struct {
	f    *os.File
	size uint64
	ro   bool
}

// OpenRaw opens a raw image and locks it (lock.go).
func OpenRaw(path string, readOnly bool) (*Raw, error) {
	f, err := openLocked(path, readOnly)
	if err != nil {
		return nil, fmt.Errorf("open raw image: %w", err)
	}
	return newRaw(f, readOnly)
}

// newRaw is the raw image open (and locked) at f, which it owns.
func newRaw(f *os.File, readOnly bool) (*Raw, error) {
	// Seek works for regular files and block devices alike.
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close() // nothing written yet
		return nil, fmt.Errorf("size of raw image %s: %w", f.Name(), err)
	}
	return &Raw{f: f, size: uint64(end), ro: readOnly}, nil
}

// OpenRawFile opens the raw image already open at f (a descriptor handed
// over by a process that could open what this one cannot, such as a
// block device outside this process's device cgroup) and locks it. The
// image holds its own duplicate of f: the caller keeps and closes f.
func OpenRawFile(f *os.File, readOnly bool) (*Raw, error) {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("open raw image %s: %w", f.Name(), err)
	}
	if !readOnly && fl&unix.O_ACCMODE == unix.O_RDONLY {
		return nil, fmt.Errorf("open raw image %s: the descriptor is read-only", f.Name())
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open raw image %s: %w", f.Name(), err)
	}
	d := os.NewFile(uintptr(fd), f.Name())
	if err := lockFile(d, !readOnly); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("open raw image: %w", err)
	}
	return newRaw(d, readOnly)
}

// Size is the image size in bytes.
func (r *Raw) Size() uint64 { return r.size }

// ReadOnly reports whether writes are refused.
func (r *Raw) ReadOnly() bool { return r.ro }

// ReadAt reads from the image; past the end it returns io.EOF.
func (r *Raw) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }

// WriteAt writes to the image.
func (r *Raw) WriteAt(p []byte, off int64) (int, error) {
	if r.ro {
		return 0, ErrReadOnly
	}
	return r.f.WriteAt(p, off)
}

// Flush makes written data durable.
func (r *Raw) Flush() error {
	if err := unix.Fdatasync(int(r.f.Fd())); err != nil {
		return fmt.Errorf("fdatasync %s: %w", r.f.Name(), err)
	}
	return nil
}

// Discard punches a hole: the range reads as zeros and frees its space.
func (r *Raw) Discard(off, n int64) error {
	if r.ro {
		return ErrReadOnly
	}
	if err := unix.Fallocate(int(r.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("punch hole [%d+%d]: %w", off, n, err)
	}
	return nil
}

// WriteZeroes zeroes a range, by fallocate where the file system can and
// by writing zeros where it can't.
func (r *Raw) WriteZeroes(off, n int64, unmap bool) error {
	if r.ro {
		return ErrReadOnly
	}
	fd := int(r.f.Fd())
	mode := unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	if unmap {
		mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	}
	err := unix.Fallocate(fd, uint32(mode), off, n)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("zero range [%d+%d]: %w", off, n, err)
	}
	return writeZeros(r, off, n)
}

func writeZeros(w io.WriterAt, off, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(buf)))
		if _, err := w.WriteAt(buf[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// Close closes the file (which drops its lock).
func (r *Raw) Close() error { return r.f.Close() }

// Unlock lets go of the image's lock; the image stays open.
func (r *Raw) Unlock() error { return unlockFile(r.f) }

// Lock takes the image's lock again after Unlock.
func (r *Raw) Lock() error { return lockFile(r.f, !r.ro) }

// VectorIO is a Disk that transfers a scatter-gather list in one call.
type VectorIO interface {
	ReadvAt(bufs [][]byte, off int64) error
	WritevAt(bufs [][]byte, off int64) error
}

// ReadvAt fills bufs from disk at off, with one vectored read where the
// disk can (VectorIO), else a read per buffer.
func ReadvAt(disk Disk, bufs [][]byte, off int64) error {
	if v, ok := disk.(VectorIO); ok {
		return v.ReadvAt(bufs, off)
	}
	for _, b := range bufs {
		if _, err := disk.ReadAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

// WritevAt writes bufs to disk at off, with one vectored write where the
// disk can (VectorIO), else a write per buffer.
func WritevAt(disk Disk, bufs [][]byte, off int64) error {
	if v, ok := disk.(VectorIO); ok {
		return v.WritevAt(bufs, off)
	}
	for _, b := range bufs {
		if _, err := disk.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

// iovMax is Linux's UIO_MAXIOV.
const iovMax = 1024

// ReadvAt fills bufs from off with preadv; a short read (past the end of
// the file) is an error.
func (r *Raw) ReadvAt(bufs [][]byte, off int64) error { return r.vectorAt(bufs, off, false) }

// WritevAt writes bufs at off with pwritev.
func (r *Raw) WritevAt(bufs [][]byte, off int64) error {
	if r.ro {
		return ErrReadOnly
	}
	return r.vectorAt(bufs, off, true)
}

// vectorAt reads (preadv) or writes (pwritev) bufs at off, iovMax buffers
// at a time.
func (r *Raw) vectorAt(bufs [][]byte, off int64, write bool) error {
	op, name := unix.Preadv, "preadv"
	if write {
		op, name = unix.Pwritev, "pwritev"
	}
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), iovMax)]
		want := 0
		for _, b := range chunk {
			want += len(b)
		}
		n, err := op(int(r.f.Fd()), chunk, off)
		if err != nil {
			return fmt.Errorf("%s %s at %d: %w", name, r.f.Name(), off, err)
		}
		if n != want {
			// rare (signals, end of file): finish buffer by buffer
			return r.finish(chunk, off, n, write)
		}
		bufs, off = bufs[len(chunk):], off+int64(n)
	}
	return nil
}

// finish completes a partial vectored transfer of chunk that moved done
// bytes, with plain ReadAt/WriteAt.
func (r *Raw) finish(chunk [][]byte, off int64, done int, write bool) error {
	for _, b := range chunk {
		if done >= len(b) {
			done -= len(b)
			off += int64(len(b))
			continue
		}
		b = b[done:]
		off += int64(done)
		done = 0
		var err error
		if write {
			_, err = r.f.WriteAt(b, off)
		} else {
			_, err = r.f.ReadAt(b, off)
		}
		if err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
