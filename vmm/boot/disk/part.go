package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

const sector = 512

// ErrNoPartitionTable is returned for a disk with neither a GPT nor an MBR.
var ErrNoPartitionTable = errors.New("no partition table (neither GPT nor MBR)")

// Partition is one entry of the partition table.
type Partition struct {
	Index int   // 1-based, as Linux numbers them (vda1, ...)
	Start int64 // bytes
	Size  int64 // bytes
}

// GPT limits: the UEFI spec's default table is 128 entries of 128 bytes;
// anything far beyond that is not a disk we should spend time on.
const (
	maxGPTEntries   = 1024
	maxGPTEntrySize = 4096
	maxGPTTable     = 1 << 20
)

// Partitions reads the GPT (preferred, as firmware does when the MBR is
// protective) or the MBR of a disk of the given size.
func Partitions(r io.ReaderAt, size int64) ([]Partition, error) {
	mbr := make([]byte, sector)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return nil, fmt.Errorf("read MBR: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		return nil, ErrNoPartitionTable
	}
	protective := false
	for i := 0; i < 4; i++ {
		if mbr[446+i*16+4] == 0xee {
			protective = true
		}
	}
	if protective {
		return gpt(r, size)
	}
	return mbrPartitions(mbr, size)
}

func gpt(r io.ReaderAt, size int64) ([]Partition, error) {
	le := binary.LittleEndian
	h := make([]byte, sector)
	if _, err := r.ReadAt(h, sector); err != nil {
		return nil, fmt.Errorf("read GPT header: %w", err)
	}
	if !bytes.Equal(h[:8], []byte("EFI PART")) {
		return nil, fmt.Errorf("protective MBR but no GPT header at LBA 1")
	}
	hsize := le.Uint32(h[12:])
	if hsize < 92 || hsize > sector {
		return nil, fmt.Errorf("GPT header size %d out of range", hsize)
	}
	want := le.Uint32(h[16:])
	c := append([]byte(nil), h[:hsize]...)
	le.PutUint32(c[16:], 0)
	if crc32.ChecksumIEEE(c) != want {
		return nil, fmt.Errorf("GPT header checksum mismatch")
	}
	lba, n, esize := le.Uint64(h[72:]), le.Uint32(h[80:]), le.Uint32(h[84:])
	if n > maxGPTEntries || esize < 128 || esize > maxGPTEntrySize || esize%8 != 0 || uint64(n)*uint64(esize) > maxGPTTable {
		return nil, fmt.Errorf("GPT partition array of %d entries of %d bytes out of range", n, esize)
	}
	if lba > uint64(size)/sector {
		return nil, fmt.Errorf("GPT partition array at LBA %d is beyond the disk", lba)
	}
	tbl := make([]byte, int(n)*int(esize))
	if _, err := r.ReadAt(tbl, int64(lba)*sector); err != nil {
		return nil, fmt.Errorf("read GPT partition array: %w", err)
	}
	if crc32.ChecksumIEEE(tbl) != le.Uint32(h[88:]) {
		return nil, fmt.Errorf("GPT partition array checksum mismatch")
	}
	var parts []Partition
	for i := 0; i < int(n); i++ {
		e := tbl[i*int(esize):]
		if isZero(e[:16]) { // unused entry: zero type GUID
			continue
		}
		first, last := le.Uint64(e[32:]), le.Uint64(e[40:])
		p, err := newPartition(i+1, first, last-first+1, size)
		if err != nil || last < first {
			return nil, fmt.Errorf("GPT partition %d (LBA %d-%d) does not fit the disk", i+1, first, last)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func mbrPartitions(mbr []byte, size int64) ([]Partition, error) {
	le := binary.LittleEndian
	var parts []Partition
	for i := 0; i < 4; i++ {
		e := mbr[446+i*16:]
		if e[0] != 0 && e[0] != 0x80 {
			// A boot sector of a filesystem (FAT) also ends in 55 AA;
			// its "entries" are code and have no valid status byte.
			return nil, ErrNoPartitionTable
		}
		switch e[4] {
		case 0: // unused
			continue
		case 0x05, 0x0f, 0x85:
			// Extended partitions hold logical ones (vda5...); boot and
			// root filesystems are primary partitions in the installs we
			// boot, so the chain of EBRs is not followed.
			continue
		}
		p, err := newPartition(i+1, uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:])), size)
		if err != nil {
			return nil, fmt.Errorf("MBR partition %d: %w", i+1, err)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func newPartition(idx int, startLBA, sectors uint64, size int64) (Partition, error) {
	max := uint64(size) / sector
	if startLBA == 0 || sectors == 0 || startLBA > max || sectors > max-startLBA {
		return Partition{}, fmt.Errorf("sectors %d+%d do not fit the disk of %d sectors", startLBA, sectors, max)
	}
	return Partition{Index: idx, Start: int64(startLBA) * sector, Size: int64(sectors) * sector}, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
