package blk

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Request types (virtio 1.2 section 5.2.6).
const (
	TypeIn          = 0
	TypeOut         = 1
	TypeFlush       = 4
	TypeGetID       = 8
	TypeDiscard     = 11
	TypeWriteZeroes = 13
)

// Status values.
const (
	StatusOK     = 0
	StatusIOErr  = 1
	StatusUnsupp = 2
)

const (
	headerSize  = 16
	segmentSize = 16 // discard / write-zeroes segment
	idBytes     = 20 // VIRTIO_BLK_ID_BYTES
	flagUnmap   = 1
)

var (
	errNoStatus    = errors.New("request has no device-writable status byte")
	errUnsupported = errors.New("operation not supported by this disk")
)

// Request is a parsed virtio-blk request. Data aliases guest memory.
type Request struct {
	Type   uint32
	Sector uint64
	// Data is the payload: device-writable for IN and GET_ID,
	// device-readable for OUT, DISCARD and WRITE_ZEROES.
	Data    queue.Buffers
	DataLen uint64
	// Status is the one-byte status the device writes last.
	Status []byte
}

// Parse splits a chain into a request. The layout is free (VERSION_1
// implies ANY_LAYOUT): a 16-byte header at the start of the readable bytes
// and the status byte at the end of the writable ones. An error means not
// even a status can be reported: the chain goes back with nothing written.
func Parse(c *queue.Chain, r *Request) error {
	var hdr [headerSize]byte
	if c.Readable.ReadAt(hdr[:], 0) != headerSize {
		return fmt.Errorf("request header: %d readable bytes, want %d", c.ReadableLen, headerSize)
	}
	if c.WritableLen == 0 {
		return errNoStatus
	}
	r.Type = binary.LittleEndian.Uint32(hdr[0:])
	r.Sector = binary.LittleEndian.Uint64(hdr[8:])
	r.Status = nil
	st := c.Writable.Slice(nil, c.WritableLen-1, 1)
	r.Status = st[0]
	r.Data = r.Data[:0]
	switch r.Type {
	case TypeIn, TypeGetID:
		r.DataLen = c.WritableLen - 1
		r.Data = c.Writable.Slice(r.Data, 0, r.DataLen)
	default:
		r.DataLen = c.ReadableLen - headerSize
		r.Data = c.Readable.Slice(r.Data, headerSize, r.DataLen)
	}
	return nil
}

// Limits are the device's bounds on requests.
type Limits struct {
	Sectors      uint64 // capacity
	ReadOnly     bool
	Discard      bool // VIRTIO_BLK_F_DISCARD negotiated
	WriteZeroes  bool // VIRTIO_BLK_F_WRITE_ZEROES negotiated
	MaxSegments  uint32
	MaxSegSector uint32 // max sectors per discard / write-zeroes segment
}

// Execute runs r against disk and returns the status and the number of
// bytes written to the driver's buffers (excluding the status byte).
func Execute(r *Request, disk block.Disk, lim Limits, serial []byte, m *Metrics) (byte, uint32) {
	switch r.Type {
	case TypeIn, TypeOut:
		if r.DataLen%block.SectorSize != 0 || !inRange(r.Sector, r.DataLen/block.SectorSize, lim.Sectors) {
			m.InvalidRequests.Add(1)
			return StatusIOErr, 0
		}
		off := int64(r.Sector * block.SectorSize)
		if r.Type == TypeIn {
			if err := block.ReadvAt(disk, r.Data, off); err != nil {
				m.IOErrors.Add(1)
				return StatusIOErr, uint32(r.DataLen)
			}
			m.ReadBytes.Add(r.DataLen)
			m.Reads.Add(1)
			return StatusOK, uint32(r.DataLen)
		}
		if lim.ReadOnly {
			m.ReadOnlyWrites.Add(1)
			return StatusIOErr, 0
		}
		if err := block.WritevAt(disk, r.Data, off); err != nil {
			m.IOErrors.Add(1)
			return StatusIOErr, 0
		}
		m.WriteBytes.Add(r.DataLen)
		m.Writes.Add(1)
		return StatusOK, 0
	case TypeFlush:
		m.Flushes.Add(1)
		if err := disk.Flush(); err != nil {
			m.IOErrors.Add(1)
			return StatusIOErr, 0
		}
		return StatusOK, 0
	case TypeGetID:
		n := min(r.DataLen, idBytes)
		id := make([]byte, n)
		copy(id, serial)
		r.Data.WriteAt(id, 0)
		return StatusOK, uint32(n)
	case TypeDiscard, TypeWriteZeroes:
		return discard(r, disk, lim, m)
	}
	m.Unsupported.Add(1)
	return StatusUnsupp, 0
}

func inRange(sector, count, capacity uint64) bool {
	return sector <= capacity && count <= capacity-sector
}

func discard(r *Request, disk block.Disk, lim Limits, m *Metrics) (byte, uint32) {
	wz := r.Type == TypeWriteZeroes
	if (wz && !lim.WriteZeroes) || (!wz && !lim.Discard) {
		m.Unsupported.Add(1)
		return StatusUnsupp, 0
	}
	if lim.ReadOnly {
		m.ReadOnlyWrites.Add(1)
		return StatusIOErr, 0
	}
	n := r.DataLen / segmentSize
	if r.DataLen%segmentSize != 0 || n == 0 || n > uint64(lim.MaxSegments) {
		m.InvalidRequests.Add(1)
		return StatusIOErr, 0
	}
	var seg [segmentSize]byte
	for i := uint64(0); i < n; i++ {
		r.Data.ReadAt(seg[:], i*segmentSize)
		sector := binary.LittleEndian.Uint64(seg[0:])
		count := uint64(binary.LittleEndian.Uint32(seg[8:]))
		flags := binary.LittleEndian.Uint32(seg[12:])
		if (!wz && flags != 0) || flags&^flagUnmap != 0 {
			m.Unsupported.Add(1)
			return StatusUnsupp, 0
		}
		if count > uint64(lim.MaxSegSector) || !inRange(sector, count, lim.Sectors) {
			m.InvalidRequests.Add(1)
			return StatusIOErr, 0
		}
		off, length := int64(sector*block.SectorSize), int64(count*block.SectorSize)
		err := errUnsupported
		if zw, ok := disk.(block.ZeroWriter); wz && ok {
			err = zw.WriteZeroes(off, length, flags&flagUnmap != 0)
		} else if dc, ok := disk.(block.Discarder); !wz && ok {
			err = dc.Discard(off, length)
		}
		if err != nil {
			m.IOErrors.Add(1)
			return StatusIOErr, 0
		}
	}
	m.Discards.Add(1)
	return StatusOK, 0
}
