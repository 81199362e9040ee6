package disk

import (
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf16"
)

// A read-only FAT12/16/32 reader with long names: what an EFI system
// partition or a separate vfat /boot holds. Names match case-insensitively,
// as on FAT.

type fat struct {
	r        io.ReaderAt
	bps      int64 // bytes per sector
	cs       int64 // bytes per cluster
	bits     int   // 12, 16 or 32
	table    []byte
	clusters uint32 // data clusters; valid numbers are 2..clusters+1
	rootOff  int64  // FAT12/16: the fixed root directory
	rootLen  int64
	rootClus uint32 // FAT32: the root directory's first cluster
	dataOff  int64
	uuid     string
	dirs     map[uint32][]fatEntry // directory listings read so far, by first cluster (0: the root)
}

type fatEntry struct {
	name    string
	dir     bool
	cluster uint32
	size    uint32
}

func openFAT(r io.ReaderAt, size int64) (*fat, error) {
	le := binary.LittleEndian
	b := make([]byte, 512)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("vfat: read boot sector: %w", err)
	}
	bps, spc := int64(le.Uint16(b[11:])), int64(b[13])
	rsvd, nfats, rootEnts := int64(le.Uint16(b[14:])), int64(b[16]), int64(le.Uint16(b[17:]))
	tot, fatSz := int64(le.Uint16(b[19:])), int64(le.Uint16(b[22:]))
	if tot == 0 {
		tot = int64(le.Uint32(b[32:]))
	}
	fat32 := fatSz == 0
	if fat32 {
		fatSz = int64(le.Uint32(b[36:]))
	}
	if bps < 512 || bps > 4096 || bps&(bps-1) != 0 || spc == 0 || spc&(spc-1) != 0 || rsvd == 0 || nfats == 0 || fatSz == 0 {
		return nil, fmt.Errorf("vfat: boot sector geometry out of range")
	}
	if tot*bps > size {
		return nil, fmt.Errorf("vfat: %d sectors do not fit the partition of %d bytes", tot, size)
	}
	rootSecs := (rootEnts*32 + bps - 1) / bps
	meta := rsvd + nfats*fatSz + rootSecs
	if meta >= tot {
		return nil, fmt.Errorf("vfat: no room for data")
	}
	f := &fat{r: r, bps: bps, cs: bps * spc, clusters: uint32((tot - meta) / spc), dirs: map[uint32][]fatEntry{}}
	f.rootOff, f.rootLen = (rsvd+nfats*fatSz)*bps, rootEnts*32
	f.dataOff = meta * bps
	volID := b[39:43]
	switch {
	case f.clusters < 4085:
		f.bits = 12
	case f.clusters < 65525:
		f.bits = 16
	default:
		f.bits = 32
		f.rootClus, volID = le.Uint32(b[44:]), b[67:71]
	}
	if fat32 != (f.bits == 32) {
		return nil, fmt.Errorf("vfat: FAT size fields disagree with %d clusters", f.clusters)
	}
	f.uuid = fmt.Sprintf("%04X-%04X", le.Uint16(volID[2:]), le.Uint16(volID))
	need := (int64(f.clusters) + 2) * int64(f.bits) / 8
	if need > fatSz*bps {
		return nil, fmt.Errorf("vfat: FAT of %d bytes too small for %d clusters", fatSz*bps, f.clusters)
	}
	f.table = make([]byte, need+1)
	if _, err := r.ReadAt(f.table[:need], rsvd*bps); err != nil {
		return nil, fmt.Errorf("vfat: read FAT: %w", err)
	}
	return f, nil
}

// next returns the cluster after c, or 0 at the end of the chain.
func (f *fat) next(c uint32) (uint32, error) {
	le := binary.LittleEndian
	var v, eoc uint32
	switch f.bits {
	case 12:
		v = uint32(le.Uint16(f.table[c+c/2:]))
		if c&1 != 0 {
			v >>= 4
		}
		v, eoc = v&0xfff, 0xff8
	case 16:
		v, eoc = uint32(le.Uint16(f.table[2*c:])), 0xfff8
	default:
		v, eoc = le.Uint32(f.table[4*c:])&0x0fffffff, 0x0ffffff8
	}
	if v >= eoc {
		return 0, nil
	}
	if v < 2 || v > f.clusters+1 {
		return 0, fmt.Errorf("vfat: cluster %d links to bad cluster %#x", c, v)
	}
	return v, nil
}

// readChain reads n bytes from the chain starting at c; n < 0 reads to
// the chain's end, up to max bytes.
func (f *fat) readChain(c uint32, n, max int64) ([]byte, error) {
	var out []byte
	for c != 0 && (n < 0 || int64(len(out)) < n) {
		if c < 2 || c > f.clusters+1 {
			return nil, fmt.Errorf("vfat: cluster %d out of range", c)
		}
		if int64(len(out))+f.cs > max+f.cs { // also ends a looping chain
			return nil, fmt.Errorf("vfat: cluster chain longer than %d bytes", max)
		}
		b := make([]byte, f.cs)
		if _, err := f.r.ReadAt(b, f.dataOff+int64(c-2)*f.cs); err != nil {
			return nil, fmt.Errorf("vfat: read cluster %d: %w", c, err)
		}
		out = append(out, b...)
		var err error
		if c, err = f.next(c); err != nil {
			return nil, err
		}
	}
	if n >= 0 {
		if int64(len(out)) < n {
			return nil, fmt.Errorf("vfat: cluster chain ends before the file's %d bytes", n)
		}
		out = out[:n]
	}
	return out, nil
}

// entries parses a directory's 32-byte entries, joining long names.
func fatEntries(b []byte) []fatEntry {
	le := binary.LittleEndian
	var out []fatEntry
	var lfn []uint16
	var lfnSum byte
	for off := 0; off+32 <= len(b); off += 32 {
		e := b[off : off+32]
		if e[0] == 0 {
			break
		}
		if e[0] == 0xe5 {
			lfn = nil
			continue
		}
		if e[11]&0x3f == 0x0f { // a long-name slot: 13 UTF-16 units
			seq := int(e[0] & 0x1f)
			if e[0]&0x40 != 0 {
				lfn, lfnSum = make([]uint16, 13*seq), e[13]
			}
			if seq == 0 || 13*seq > len(lfn) || e[13] != lfnSum {
				lfn = nil
				continue
			}
			slot := lfn[13*(seq-1):]
			for i, o := range []int{1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30} {
				slot[i] = le.Uint16(e[o:])
			}
			continue
		}
		if e[11]&0x08 != 0 { // volume label
			lfn = nil
			continue
		}
		var sum byte
		for _, c := range e[:11] {
			sum = (sum&1)<<7 + sum>>1 + c
		}
		name := ""
		if lfn != nil && sum == lfnSum {
			for i, u := range lfn {
				if u == 0 || u == 0xffff {
					lfn = lfn[:i]
					break
				}
			}
			name = string(utf16.Decode(lfn))
		}
		lfn = nil
		if name == "" {
			name = shortName(e)
		}
		out = append(out, fatEntry{name: name, dir: e[11]&0x10 != 0,
			cluster: uint32(le.Uint16(e[20:]))<<16 | uint32(le.Uint16(e[26:])), size: le.Uint32(e[28:])})
	}
	return out
}

func shortName(e []byte) string {
	base, ext := []byte(strings.TrimRight(string(e[:8]), " ")), strings.TrimRight(string(e[8:11]), " ")
	if len(base) > 0 && base[0] == 0x05 {
		base[0] = 0xe5
	}
	if e[12]&0x08 != 0 {
		base = []byte(strings.ToLower(string(base)))
	}
	if e[12]&0x10 != 0 {
		ext = strings.ToLower(ext)
	}
	if ext == "" {
		return string(base)
	}
	return string(base) + "." + ext
}

func (f *fat) dir(e *fatEntry) ([]fatEntry, error) {
	var c uint32 // the root (".." of a top directory is 0 too)
	if e != nil {
		c = e.cluster
	}
	if ents, ok := f.dirs[c]; ok {
		return ents, nil
	}
	ents, err := f.readDir(c)
	if err != nil {
		return nil, err
	}
	f.dirs[c] = ents
	return ents, nil
}

func (f *fat) readDir(c uint32) ([]fatEntry, error) {
	if c == 0 {
		if f.bits != 32 {
			b := make([]byte, f.rootLen)
			if _, err := f.r.ReadAt(b, f.rootOff); err != nil {
				return nil, fmt.Errorf("vfat: read root directory: %w", err)
			}
			return fatEntries(b), nil
		}
		b, err := f.readChain(f.rootClus, -1, min(maxDirSize, f.dataSize()))
		if err != nil {
			return nil, err
		}
		return fatEntries(b), nil
	}
	b, err := f.readChain(c, -1, min(maxDirSize, f.dataSize()))
	if err != nil {
		return nil, err
	}
	return fatEntries(b), nil
}

// dataSize bounds every chain: a longer one loops.
func (f *fat) dataSize() int64 { return int64(f.clusters) * f.cs }

func (f *fat) lookup(p string) (*fatEntry, error) {
	var cur *fatEntry // nil: the root
	for _, name := range strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/") {
		if name == "" {
			continue
		}
		if cur != nil && !cur.dir {
			return nil, errNotFound
		}
		ents, err := f.dir(cur)
		if err != nil {
			return nil, err
		}
		var found *fatEntry
		for i := range ents {
			if strings.EqualFold(ents[i].name, name) {
				found = &ents[i]
				break
			}
		}
		if found == nil {
			return nil, errNotFound
		}
		cur = found
	}
	return cur, nil
}

func (f *fat) ReadFile(p string, max int64) ([]byte, error) {
	e, err := f.lookup(p)
	if err != nil {
		return nil, err
	}
	if e == nil || e.dir {
		return nil, fmt.Errorf("not a regular file")
	}
	if int64(e.size) > max {
		return nil, fmt.Errorf("file of %d bytes is over the limit of %d", e.size, max)
	}
	if int64(e.size) > f.dataSize() {
		return nil, fmt.Errorf("vfat: file of %d bytes is larger than the filesystem", e.size)
	}
	if e.size == 0 {
		return []byte{}, nil
	}
	return f.readChain(e.cluster, int64(e.size), max)
}

func (f *fat) ReadDir(p string) ([]string, error) {
	e, err := f.lookup(p)
	if err != nil {
		return nil, err
	}
	if e != nil && !e.dir { // as in ext4: not a directory is no directory
		return nil, errNotFound
	}
	ents, err := f.dir(e)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, x := range ents {
		if x.name != "." && x.name != ".." {
			names = append(names, x.name)
		}
	}
	return names, nil
}

func (f *fat) UUID() string { return f.uuid }
func (f *fat) Type() string { return "vfat" }
