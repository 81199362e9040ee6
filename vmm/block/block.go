// Package block opens the disk images behind virtio-blk: raw files (and
// block devices) and qcow2 images, read-only or with a writable qcow2
// overlay. A Disk is a flat array of bytes; the device translates guest
// requests into ReadAt/WriteAt/Flush on it.
package block

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// SectorSize is the unit of virtio-blk addressing.
const SectorSize = 512

// ErrReadOnly is returned by writes to a read-only disk.
var ErrReadOnly = errors.New("disk is read-only")

// Disk is an open disk image.
type Disk interface {
	io.ReaderAt
	io.WriterAt
	// Size is the virtual size in bytes.
	Size() uint64
	ReadOnly() bool
	// Flush makes every completed write durable (fdatasync).
	Flush() error
	Close() error
}

// Discarder is a Disk that can deallocate a byte range (reads of it then
// return zeros).
type Discarder interface {
	Discard(off, n int64) error
}

// ZeroWriter is a Disk that can zero a byte range without a data transfer;
// with unmap it may also deallocate it.
type ZeroWriter interface {
	WriteZeroes(off, n int64, unmap bool) error
}

// Format is an image format.
type Format string

// Supported formats.
const (
	FormatRaw   Format = "raw"
	FormatQcow2 Format = "qcow2"
)

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatRaw, FormatQcow2:
		return Format(s), nil
	}
	return "", fmt.Errorf("unknown image format %q (want raw or qcow2)", s)
}

// Options say how to open an image.
type Options struct {
	// Format must be said: probing would let a guest that writes a qcow2
	// header into a raw disk make the host open a backing file of its
	// choice on the next boot.
	Format   Format
	ReadOnly bool
}

// Open opens the image at path.
func Open(path string, opt Options) (Disk, error) {
	switch opt.Format {
	case FormatRaw, "":
		return OpenRaw(path, opt.ReadOnly)
	case FormatQcow2:
		return OpenQcow2(path, opt.ReadOnly)
	}
	return nil, fmt.Errorf("open %s: unknown image format %q", path, opt.Format)
}

// OpenFile is Open for an image already open at f (see OpenRawFile):
// raw only, as a qcow2's backing file would have to be opened by name.
func OpenFile(f *os.File, opt Options) (Disk, error) {
	switch opt.Format {
	case FormatRaw, "":
		return OpenRawFile(f, opt.ReadOnly)
	}
	return nil, fmt.Errorf("%w: a %s image handed over as a descriptor: only raw ones are", ErrQcow2Unsupported, opt.Format)
}
