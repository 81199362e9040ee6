package cloudinit

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"
	"unicode/utf16"
)

// A FAT12 writer with long names, for the small read-only disks cloud-init
// reads its data from (NoCloud and ConfigDrive accept vfat as well as
// iso9660). Sectors are 2048 bytes, a CD-ROM's, so that the same image
// mounts from a virtio or SATA disk and from a CD-ROM. The image is a pure
// function of its contents: fixed timestamps, a volume ID hashed from the
// data (a migration target renders the very same disk).

const (
	sectorSize  = 2048
	rootEntries = sectorSize / 32 // the root directory is one sector
	// maxClusters is FAT12's limit (4085 clusters or more make it FAT16),
	// 8 MiB of data: a Secret holds at most 1 MiB.
	maxClusters = 4084
	// fatDate is 1980-01-01, the first date FAT can say.
	fatDate = 1<<5 | 1
)

// file is one file of the image; its path's directories are created.
type file struct {
	path string
	data []byte
}

type node struct {
	name    string
	short   [11]byte
	data    []byte
	dir     bool
	kids    []*node
	cluster uint32
	nclus   uint32
}

// fatImage builds a FAT12 filesystem labelled label holding files.
func fatImage(label string, files []file) ([]byte, error) {
	if len(label) > 11 {
		return nil, fmt.Errorf("vfat: label %q is longer than 11 bytes", label)
	}
	root := &node{dir: true}
	for _, f := range files {
		if err := root.add(strings.Split(f.path, "/"), f.data); err != nil {
			return nil, fmt.Errorf("vfat: %s: %w", f.path, err)
		}
	}
	root.shortNames()
	if n := root.dirEntries() + 1; n > rootEntries { // + the label
		return nil, fmt.Errorf("vfat: %d root directory entries, at most %d", n, rootEntries)
	}
	next := uint32(2) // the first data cluster
	root.allocate(&next)
	clusters := next - 2
	if clusters > maxClusters {
		return nil, fmt.Errorf("vfat: %d KiB of data do not fit a FAT12 image (at most %d KiB)", clusters*sectorSize>>10, maxClusters*sectorSize>>10)
	}
	fatSecs := ((clusters+2)*3/2 + 1 + sectorSize - 1) / sectorSize
	dataStart := 1 + 2*fatSecs + 1
	img := make([]byte, (dataStart+clusters)*sectorSize)

	crc := crc32.NewIEEE()
	for _, f := range files {
		crc.Write([]byte(f.path))
		crc.Write(f.data)
	}
	bootSector(img[:sectorSize], label, dataStart+clusters, fatSecs, crc.Sum32())

	fat := img[sectorSize : (1+fatSecs)*sectorSize]
	setFAT(fat, 0, 0xff8)
	setFAT(fat, 1, 0xfff)
	root.chain(fat)
	copy(img[(1+fatSecs)*sectorSize:], fat) // the second FAT

	rootDir := img[(1+2*fatSecs)*sectorSize : dataStart*sectorSize]
	var name [11]byte
	copy(name[:], pad(label, 11))
	lab := entry(name, 0x08, 0, 0) // the volume label
	copy(rootDir, lab[:])
	root.writeEntries(rootDir[32:])

	root.writeData(img, dataStart, 0) // ".." of a directory in the root is cluster 0
	return img, nil
}

func bootSector(b []byte, label string, sectors, fatSecs, volID uint32) {
	le := binary.LittleEndian
	copy(b, []byte{0xeb, 0x3c, 0x90})
	copy(b[3:11], "KUBEVMM ")
	le.PutUint16(b[11:], sectorSize)
	b[13] = 1               // sectors per cluster
	le.PutUint16(b[14:], 1) // reserved sectors: the boot sector
	b[16] = 2               // FATs
	le.PutUint16(b[17:], rootEntries)
	le.PutUint16(b[19:], uint16(sectors))
	b[21] = 0xf8 // fixed disk
	le.PutUint16(b[22:], uint16(fatSecs))
	le.PutUint16(b[24:], 32) // sectors per track, heads: unused, but set
	le.PutUint16(b[26:], 64)
	b[36] = 0x80
	b[38] = 0x29 // the next three fields are present
	le.PutUint32(b[39:], volID)
	copy(b[43:54], pad(label, 11))
	copy(b[54:62], "FAT12   ")
	b[510], b[511] = 0x55, 0xaa
}

// writeData writes the contents of n's children into the data area, which
// starts at sector dataStart; parent is n's first cluster.
func (n *node) writeData(img []byte, dataStart, parent uint32) {
	cluster := func(c uint32) []byte { return img[(dataStart+c-2)*sectorSize:] }
	for _, k := range n.kids {
		if !k.dir {
			copy(cluster(k.cluster), k.data)
			continue
		}
		d := cluster(k.cluster)[:k.nclus*sectorSize]
		dot := entry([11]byte{'.', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '}, 0x10, k.cluster, 0)
		dotdot := entry([11]byte{'.', '.', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '}, 0x10, parent, 0)
		copy(d, dot[:])
		copy(d[32:], dotdot[:])
		k.writeEntries(d[64:])
		k.writeData(img, dataStart, k.cluster)
	}
}

func pad(s string, n int) []byte {
	return []byte(s + strings.Repeat(" ", n-len(s)))
}

func (n *node) add(parts []string, data []byte) error {
	name := parts[0]
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return fmt.Errorf("bad name %q", name)
	}
	var k *node
	for _, c := range n.kids {
		if strings.EqualFold(c.name, name) {
			k = c
		}
	}
	if len(parts) == 1 {
		if k != nil {
			return fmt.Errorf("given twice")
		}
		n.kids = append(n.kids, &node{name: name, data: data})
		return nil
	}
	if k == nil {
		k = &node{name: name, dir: true}
		n.kids = append(n.kids, k)
	} else if !k.dir {
		return fmt.Errorf("%s is a file", name)
	}
	return k.add(parts[1:], data)
}

// shortNames gives every entry an 8.3 alias (BASE~N.EXT); the long name
// is what Linux shows.
func (n *node) shortNames() {
	sort.Slice(n.kids, func(i, j int) bool { return n.kids[i].name < n.kids[j].name })
	taken := map[string]bool{}
	for _, k := range n.kids {
		base, ext := k.name, ""
		if i := strings.LastIndexByte(base, '.'); i > 0 {
			base, ext = base[:i], base[i+1:]
		}
		base, ext = shortChars(base), shortChars(ext)
		if base == "" {
			base = "FILE"
		}
		if len(ext) > 3 {
			ext = ext[:3]
		}
		for i := 1; ; i++ {
			tail := fmt.Sprintf("~%d", i)
			b := base
			if len(b) > 8-len(tail) {
				b = b[:8-len(tail)]
			}
			s := string(pad(b+tail, 8)) + string(pad(ext, 3))
			if !taken[s] {
				taken[s] = true
				copy(k.short[:], s)
				break
			}
		}
		if k.dir {
			k.shortNames()
		}
	}
}

func shortChars(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dirEntries is the number of 32-byte entries n's children take.
func (n *node) dirEntries() uint32 {
	e := uint32(0)
	for _, k := range n.kids {
		e += 1 + uint32(len(utf16.Encode([]rune(k.name)))+12)/13
	}
	return e
}

// allocate hands out clusters depth-first, from *next on.
func (n *node) allocate(next *uint32) {
	for _, k := range n.kids {
		size := uint32(len(k.data))
		if k.dir {
			size = (2 + k.dirEntries()) * 32 // with "." and ".."
		}
		k.nclus = (size + sectorSize - 1) / sectorSize
		if k.nclus > 0 {
			k.cluster = *next
			*next += k.nclus
		}
		if k.dir {
			k.allocate(next)
		}
	}
}

func (n *node) chain(fat []byte) {
	for _, k := range n.kids {
		for i := uint32(0); i < k.nclus; i++ {
			v := k.cluster + i + 1
			if i == k.nclus-1 {
				v = 0xfff // end of chain
			}
			setFAT(fat, k.cluster+i, v)
		}
		if k.dir {
			k.chain(fat)
		}
	}
}

func setFAT(fat []byte, n, v uint32) {
	off := n * 3 / 2
	if n%2 == 0 {
		fat[off] = byte(v)
		fat[off+1] = fat[off+1]&0xf0 | byte(v>>8)&0x0f
	} else {
		fat[off] = fat[off]&0x0f | byte(v<<4)
		fat[off+1] = byte(v >> 4)
	}
}

// writeEntries writes the long-name entries and the 8.3 entry of each child.
func (n *node) writeEntries(d []byte) {
	off := 0
	for _, k := range n.kids {
		sum := byte(0)
		for _, c := range k.short {
			sum = (sum&1)<<7 + sum>>1 + c
		}
		u := utf16.Encode([]rune(k.name))
		parts := (len(u) + 12) / 13
		if len(u)%13 != 0 {
			u = append(u, 0) // the terminator, then 0xffff padding
			for len(u)%13 != 0 {
				u = append(u, 0xffff)
			}
		}
		for p := parts; p >= 1; p-- { // stored last part first
			e := d[off : off+32]
			e[0] = byte(p)
			if p == parts {
				e[0] |= 0x40
			}
			e[11], e[13] = 0x0f, sum
			chars := u[(p-1)*13 : p*13]
			for i, c := range chars {
				var at int
				switch {
				case i < 5:
					at = 1 + 2*i
				case i < 11:
					at = 14 + 2*(i-5)
				default:
					at = 28 + 2*(i-11)
				}
				binary.LittleEndian.PutUint16(e[at:], c)
			}
			off += 32
		}
		attr := byte(0x20) // archive
		size := uint32(len(k.data))
		if k.dir {
			attr, size = 0x10, 0
		}
		se := entry(k.short, attr, k.cluster, size)
		copy(d[off:], se[:])
		off += 32
	}
}

func entry(name [11]byte, attr byte, cluster, size uint32) [32]byte {
	var e [32]byte
	le := binary.LittleEndian
	copy(e[:11], name[:])
	e[11] = attr
	le.PutUint16(e[16:], fatDate) // created
	le.PutUint16(e[18:], fatDate) // accessed
	le.PutUint16(e[24:], fatDate) // written
	le.PutUint16(e[26:], uint16(cluster))
	le.PutUint32(e[28:], size)
	return e
}
