package scsi

import (
	"encoding/binary"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// The SCSI commands a Linux guest's sd driver and SCSI midlayer send to a
// disk (SPC-3, SBC-3): scanning (INQUIRY with its VPD pages, REPORT
// LUNS), probing (TEST UNIT READY, READ CAPACITY, MODE SENSE for the
// write-protect bit and the write cache) and I/O. Every other opcode is
// refused with CHECK CONDITION, ILLEGAL REQUEST / INVALID COMMAND
// OPERATION CODE, which the midlayer takes as "not supported".
const (
	opTestUnitReady  = 0x00
	opRequestSense   = 0x03
	opRead6          = 0x08
	opWrite6         = 0x0a
	opInquiry        = 0x12
	opModeSense6     = 0x1a
	opStartStopUnit  = 0x1b
	opReadCapacity10 = 0x25
	opRead10         = 0x28
	opWrite10        = 0x2a
	opSyncCache10    = 0x35
	opModeSense10    = 0x5a
	opRead16         = 0x88
	opWrite16        = 0x8a
	opSyncCache16    = 0x91
	opServiceIn16    = 0x9e // SERVICE ACTION IN(16); action 0x10 is READ CAPACITY(16)
	opReportLUNs     = 0xa0
	opRead12         = 0xa8
	opWrite12        = 0xaa

	saReadCapacity16 = 0x10
)

// SCSI status codes (SAM).
const (
	StatusGood           = 0x00
	StatusCheckCondition = 0x02
)

// Sense is a sense key with its additional sense code and qualifier.
type Sense struct{ Key, ASC, ASCQ byte }

// The sense data this device reports.
var (
	SenseInvalidOpcode  = Sense{0x05, 0x20, 0x00} // ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE
	SenseLBAOutOfRange  = Sense{0x05, 0x21, 0x00} // ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE
	SenseInvalidField   = Sense{0x05, 0x24, 0x00} // ILLEGAL REQUEST, INVALID FIELD IN CDB
	SenseLUNUnsupported = Sense{0x05, 0x25, 0x00} // ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED
	SenseWriteProtected = Sense{0x07, 0x27, 0x00} // DATA PROTECT, WRITE PROTECTED
	SenseReadError      = Sense{0x03, 0x11, 0x00} // MEDIUM ERROR, UNRECOVERED READ ERROR
	SenseWriteError     = Sense{0x03, 0x0c, 0x00} // MEDIUM ERROR, WRITE ERROR
)

// senseLen is the fixed-format sense data's length.
const senseLen = 18

// Fixed is the sense in fixed format (SPC-3 4.5.3), current error.
func (s Sense) Fixed() [senseLen]byte {
	var b [senseLen]byte
	b[0] = 0x70
	b[2] = s.Key
	b[7] = senseLen - 8 // additional sense length
	b[12], b[13] = s.ASC, s.ASCQ
	return b
}

// Result is what a command did.
type Result struct {
	Status  byte
	Sense   Sense  // with StatusCheckCondition
	DataIn  uint64 // bytes written to the data-in buffers
	DataOut uint64 // bytes taken from the data-out buffers
}

func good(n uint64) Result { return Result{Status: StatusGood, DataIn: n} }
func check(s Sense) Result { return Result{Status: StatusCheckCondition, Sense: s} }

// LUN is a logical unit: a disk image with 512-byte blocks.
type LUN struct {
	Disk   block.Disk
	Serial string // VPD page 0x80, the guest's /sys/block/sdX/device/vpd_pg80
}

// blocks is the capacity in 512-byte blocks (a trailing partial block of
// the image is not visible).
func (l *LUN) blocks() uint64 { return l.Disk.Size() / block.SectorSize }

// lastLBA is the address of the last block (0 for a disk smaller than a
// block too: the field can say no less).
func (l *LUN) lastLBA() uint64 { return max(l.blocks(), 1) - 1 }

// maxTransfer bounds one READ/WRITE, in blocks (the config's max_sectors).
const maxTransfer = 0xffff

// cdbLength is the length of the CDB for op by its group code (SPC-3
// 4.3.4.1); 0 for the reserved and vendor-specific groups.
func cdbLength(op byte) int {
	switch op >> 5 {
	case 0:
		return 6
	case 1, 2:
		return 10
	case 4:
		return 16
	case 5:
		return 12
	}
	return 0
}

// Execute runs one command. lu is nil for a LUN its target does not have
// (the target exists: addressing a missing target is the transport's
// BAD_TARGET). in is the data-in (device-writable) buffer, out the data-out
// (device-readable) one. cdb is as long as the transport's cdb_size; a
// command longer than that is refused. Nothing the guest sends makes it
// touch the disk outside its capacity.
func Execute(lu *LUN, cdb []byte, in, out queue.Buffers, m *Metrics) Result {
	if len(cdb) == 0 {
		m.Unsupported.Add(1)
		return check(SenseInvalidOpcode)
	}
	op := cdb[0]
	n := cdbLength(op)
	if n == 0 || len(cdb) < n {
		m.Unsupported.Add(1)
		return check(SenseInvalidOpcode)
	}
	cdb = cdb[:n]
	if lu == nil {
		// What a target answers for a LUN it lacks (SPC-3 4.5 and
		// 6.4.2): INQUIRY with peripheral qualifier 3, its LUN list,
		// sense; everything else LOGICAL UNIT NOT SUPPORTED.
		switch op {
		case opInquiry:
			if cdb[1]&1 != 0 || cdb[2] != 0 {
				return check(SenseInvalidField)
			}
			data := make([]byte, 36)
			data[0] = 0x7f
			return reply(in, data, uint64(binary.BigEndian.Uint16(cdb[3:])))
		case opReportLUNs:
			return reportLUNs(cdb, in)
		case opRequestSense:
			return requestSense(cdb, in, SenseLUNUnsupported)
		}
		m.InvalidRequests.Add(1)
		return check(SenseLUNUnsupported)
	}
	switch op {
	case opTestUnitReady, opStartStopUnit:
		return good(0)
	case opRequestSense:
		return requestSense(cdb, in, Sense{})
	case opInquiry:
		return lu.inquiry(cdb, in, m)
	case opReportLUNs:
		return reportLUNs(cdb, in)
	case opModeSense6, opModeSense10:
		return lu.modeSense(cdb, in, m)
	case opReadCapacity10:
		var b [8]byte
		// 0xffffffff says "use READ CAPACITY(16)".
		binary.BigEndian.PutUint32(b[0:], uint32(min(lu.lastLBA(), 0xffffffff)))
		binary.BigEndian.PutUint32(b[4:], block.SectorSize)
		return reply(in, b[:], 8)
	case opServiceIn16:
		if cdb[1]&0x1f != saReadCapacity16 {
			m.Unsupported.Add(1)
			return check(SenseInvalidField)
		}
		var b [32]byte
		binary.BigEndian.PutUint64(b[0:], lu.lastLBA())
		binary.BigEndian.PutUint32(b[8:], block.SectorSize)
		return reply(in, b[:], uint64(binary.BigEndian.Uint32(cdb[10:])))
	case opRead6, opRead10, opRead12, opRead16, opWrite6, opWrite10, opWrite12, opWrite16:
		return lu.readWrite(cdb, in, out, m)
	case opSyncCache10, opSyncCache16:
		m.Flushes.Add(1)
		if lu.Disk.ReadOnly() {
			return good(0)
		}
		if err := lu.Disk.Flush(); err != nil {
			m.IOErrors.Add(1)
			return check(SenseWriteError)
		}
		return good(0)
	}
	m.Unsupported.Add(1)
	return check(SenseInvalidOpcode)
}

// reply writes data, cut to the allocation length the CDB gave and to
// the buffer, as SPC-3 says a short allocation length truncates.
func reply(in queue.Buffers, data []byte, alloc uint64) Result {
	n := min(uint64(len(data)), alloc)
	return good(uint64(in.WriteAt(data[:n], 0)))
}

func requestSense(cdb []byte, in queue.Buffers, s Sense) Result {
	if cdb[1]&1 != 0 { // descriptor format: not offered
		return check(SenseInvalidField)
	}
	b := s.Fixed()
	return reply(in, b[:], uint64(cdb[4]))
}

// reportLUNs lists the one LUN of a target, LUN 0 (SPC-3 6.21).
func reportLUNs(cdb []byte, in queue.Buffers) Result {
	alloc := uint64(binary.BigEndian.Uint32(cdb[6:]))
	if alloc < 16 || cdb[2] > 2 {
		return check(SenseInvalidField)
	}
	var b [16]byte
	binary.BigEndian.PutUint32(b[0:], 8) // LUN list length; entry 0 is LUN 0
	return reply(in, b[:], alloc)
}

// VPD pages served.
var vpdPages = []byte{0x00, 0x80, 0x83, 0xb0}

func (l *LUN) inquiry(cdb []byte, in queue.Buffers, m *Metrics) Result {
	alloc := uint64(binary.BigEndian.Uint16(cdb[3:]))
	if cdb[1]&1 == 0 {
		if cdb[2] != 0 {
			m.InvalidRequests.Add(1)
			return check(SenseInvalidField)
		}
		data := make([]byte, 36)
		data[0] = 0x00 // peripheral qualifier 0, direct-access block device
		data[2] = 0x05 // SPC-3
		data[3] = 0x02 // response data format 2
		data[4] = byte(len(data) - 5)
		data[7] = 0x02 // CMDQUE: the guest may queue commands
		copy(data[8:16], "KUBEVMM ")
		copy(data[16:32], "VIRTUAL DISK    ")
		copy(data[32:36], "1.0 ")
		return reply(in, data, alloc)
	}
	var page []byte
	switch cdb[2] {
	case 0x00: // supported pages
		page = vpdPages
	case 0x80: // unit serial number
		page = []byte(l.Serial)
	case 0x83: // device identification: one vendor-specific ASCII designator
		id := "KUBEVMM " + l.Serial
		page = append([]byte{0x02, 0x01, 0x00, byte(len(id))}, id...)
	case 0xb0: // block limits: the largest transfer, in blocks
		page = make([]byte, 0x3c)
		binary.BigEndian.PutUint32(page[4:], maxTransfer)
	default:
		m.InvalidRequests.Add(1)
		return check(SenseInvalidField)
	}
	data := make([]byte, 4, 4+len(page))
	data[1] = cdb[2]
	binary.BigEndian.PutUint16(data[2:], uint16(len(page)))
	return reply(in, append(data, page...), alloc)
}

// modeSense returns the caching page (a write-back cache: the guest
// sends SYNCHRONIZE CACHE to make its writes durable) and the control
// page, with the write-protect bit of a read-only disk in the header
// (SPC-3 6.9, SBC-3 6.3).
func (l *LUN) modeSense(cdb []byte, in queue.Buffers, m *Metrics) Result {
	ten := cdb[0] == opModeSense10
	dbd := cdb[1]&0x08 != 0
	pc, code := cdb[2]>>6, cdb[2]&0x3f
	if pc == 3 || cdb[3] != 0 { // saved values; subpages
		m.InvalidRequests.Add(1)
		return check(SenseInvalidField)
	}
	caching := make([]byte, 20)
	caching[0], caching[1] = 0x08, 18
	control := make([]byte, 12)
	control[0], control[1] = 0x0a, 10
	if pc != 1 { // current or default values; changeable ones are all zero
		caching[2] = 0x04 // WCE
	}
	var pages []byte
	switch code {
	case 0x08:
		pages = caching
	case 0x0a:
		pages = control
	case 0x3f:
		pages = append(append(pages, caching...), control...)
	default:
		m.InvalidRequests.Add(1)
		return check(SenseInvalidField)
	}
	var desc []byte
	if !dbd {
		desc = make([]byte, 8)
		binary.BigEndian.PutUint32(desc[0:], uint32(min(l.blocks(), 0xffffff)))
		binary.BigEndian.PutUint32(desc[4:], block.SectorSize)
	}
	var wp byte
	if l.Disk.ReadOnly() {
		wp = 0x80
	}
	var data []byte
	var alloc uint64
	if ten {
		data = make([]byte, 8)
		binary.BigEndian.PutUint16(data[0:], uint16(6+len(desc)+len(pages)))
		data[3] = wp
		binary.BigEndian.PutUint16(data[6:], uint16(len(desc)))
		alloc = uint64(binary.BigEndian.Uint16(cdb[7:]))
	} else {
		data = make([]byte, 4)
		data[0] = byte(3 + len(desc) + len(pages))
		data[2] = wp
		data[3] = byte(len(desc))
		alloc = uint64(cdb[4])
	}
	data = append(append(data, desc...), pages...)
	return reply(in, data, alloc)
}

// readWrite serves READ and WRITE (6, 10, 12, 16). The transfer must fit
// the disk and the guest's buffer; a buffer larger than the transfer is
// left partly unused (the transport reports the residual).
func (l *LUN) readWrite(cdb []byte, in, out queue.Buffers, m *Metrics) Result {
	var lba, count uint64
	switch len(cdb) {
	case 6:
		lba = uint64(cdb[1]&0x1f)<<16 | uint64(binary.BigEndian.Uint16(cdb[2:]))
		count = uint64(cdb[4])
		if count == 0 {
			count = 256 // READ(6)/WRITE(6): 0 means 256 blocks
		}
	case 10:
		lba = uint64(binary.BigEndian.Uint32(cdb[2:]))
		count = uint64(binary.BigEndian.Uint16(cdb[7:]))
	case 12:
		lba = uint64(binary.BigEndian.Uint32(cdb[2:]))
		count = uint64(binary.BigEndian.Uint32(cdb[6:]))
	default:
		lba = binary.BigEndian.Uint64(cdb[2:])
		count = uint64(binary.BigEndian.Uint32(cdb[10:]))
	}
	write := cdb[0] == opWrite6 || cdb[0] == opWrite10 || cdb[0] == opWrite12 || cdb[0] == opWrite16
	capacity := l.blocks()
	if lba > capacity || count > capacity-lba {
		m.InvalidRequests.Add(1)
		return check(SenseLBAOutOfRange)
	}
	if count > maxTransfer {
		m.InvalidRequests.Add(1)
		return check(SenseInvalidField)
	}
	if write && l.Disk.ReadOnly() {
		m.ReadOnlyWrites.Add(1)
		return check(SenseWriteProtected)
	}
	n := count * block.SectorSize
	buf := in
	if write {
		buf = out
	}
	if buf.Len() < n {
		m.InvalidRequests.Add(1)
		return check(SenseInvalidField)
	}
	if n == 0 {
		return good(0)
	}
	buf = buf.Slice(nil, 0, n)
	off := int64(lba * block.SectorSize)
	if write {
		if err := block.WritevAt(l.Disk, buf, off); err != nil {
			m.IOErrors.Add(1)
			return check(SenseWriteError)
		}
		m.Writes.Add(1)
		m.WriteBytes.Add(n)
		return Result{Status: StatusGood, DataOut: n}
	}
	if err := block.ReadvAt(l.Disk, buf, off); err != nil {
		m.IOErrors.Add(1)
		return check(SenseReadError)
	}
	m.Reads.Add(1)
	m.ReadBytes.Add(n)
	return good(n)
}
