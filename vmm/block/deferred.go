package block

import (
	"errors"
	"fmt"
)

// errNotOpen answers I/O on a Deferred disk before Open. The device can't
// see it in practice: the guest runs only after the disk is open.
var errNotOpen = errors.New("disk image is not open yet")

// Deferred is a disk whose image is opened later. A migration target
// builds its devices from the source's description while the source
// still writes the images, and opens them (taking their locks) only at
// the switchover, once the source has stopped, flushed and released
// them. Until then it answers Size and ReadOnly from that description.
type Deferred struct {
	path string
	opt  Options
	size uint64
	disk Disk
}

// NewDeferred describes an image of virtual size bytes to be opened by
// Open.
func NewDeferred(path string, opt Options, size uint64) *Deferred {
	return &Deferred{path: path, opt: opt, size: size}
}

// Open opens and locks the image, which must have the size described.
func (d *Deferred) Open() error {
	if d.disk != nil {
		return nil
	}
	disk, err := Open(d.path, d.opt)
	if err != nil {
		return err
	}
	if disk.Size() != d.size {
		_ = disk.Close() // opened only to be refused: nothing written
		return fmt.Errorf("%s: the image is %d bytes, the VM's disk %d", d.path, disk.Size(), d.size)
	}
	d.disk = disk
	return nil
}

// Disk is the open image, nil before Open.
func (d *Deferred) Disk() Disk { return d.disk }

// Size is the virtual size.
func (d *Deferred) Size() uint64 { return d.size }

// ReadOnly reports whether writes are refused.
func (d *Deferred) ReadOnly() bool { return d.opt.ReadOnly }

// ReadAt reads from the open image.
func (d *Deferred) ReadAt(p []byte, off int64) (int, error) {
	if d.disk == nil {
		return 0, errNotOpen
	}
	return d.disk.ReadAt(p, off)
}

// WriteAt writes to the open image.
func (d *Deferred) WriteAt(p []byte, off int64) (int, error) {
	if d.disk == nil {
		return 0, errNotOpen
	}
	return d.disk.WriteAt(p, off)
}

// Flush flushes the open image.
func (d *Deferred) Flush() error {
	if d.disk == nil {
		return errNotOpen
	}
	return d.disk.Flush()
}

// Close closes the image if it was opened.
func (d *Deferred) Close() error {
	if d.disk == nil {
		return nil
	}
	return d.disk.Close()
}

// Discard forwards to an image that can discard (see Features).
func (d *Deferred) Discard(off, n int64) error {
	if dc, ok := d.disk.(Discarder); ok {
		return dc.Discard(off, n)
	}
	if d.disk == nil {
		return errNotOpen
	}
	return fmt.Errorf("discard on %s: the image format can't", d.path)
}

// WriteZeroes forwards to an image that can write zeroes (see Features).
func (d *Deferred) WriteZeroes(off, n int64, unmap bool) error {
	if zw, ok := d.disk.(ZeroWriter); ok {
		return zw.WriteZeroes(off, n, unmap)
	}
	if d.disk == nil {
		return errNotOpen
	}
	return fmt.Errorf("write zeroes on %s: the image format can't", d.path)
}

// ReadvAt is the image's vectored read, or a read per buffer.
func (d *Deferred) ReadvAt(bufs [][]byte, off int64) error {
	if d.disk == nil {
		return errNotOpen
	}
	return ReadvAt(d.disk, bufs, off)
}

// WritevAt is the image's vectored write, or a write per buffer.
func (d *Deferred) WritevAt(bufs [][]byte, off int64) error {
	if d.disk == nil {
		return errNotOpen
	}
	return WritevAt(d.disk, bufs, off)
}

// Unlock lets go of the open image's lock.
func (d *Deferred) Unlock() error {
	if l, ok := d.disk.(Locker); ok {
		return l.Unlock()
	}
	return nil
}

// Lock takes the open image's lock again.
func (d *Deferred) Lock() error {
	if l, ok := d.disk.(Locker); ok {
		return l.Lock()
	}
	return nil
}

// Features reports whether d can discard and write zeroes. A Deferred
// disk answers for the format it will open, so a device built before
// the image is open offers the guest what the image will do.
func Features(d Disk) (discard, writeZeroes bool) {
	if df, ok := d.(*Deferred); ok {
		if df.disk != nil {
			return Features(df.disk)
		}
		raw := df.opt.Format == FormatRaw || df.opt.Format == ""
		return raw, raw
	}
	_, discard = d.(Discarder)
	_, writeZeroes = d.(ZeroWriter)
	return discard, writeZeroes
}
