package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// A small read-only ext2/3/4 reader: superblock, group descriptors,
// inodes, extent trees and block maps, linear directories (an htree
// directory reads as a linear one: its index blocks look like empty
// entries). Every size and block number comes from the guest, so each is
// checked against the filesystem before use, and every walk is bounded.

const (
	ext4Magic     = 0xef53
	ext4RootInode = 2

	extentsFlag    = 0x80000
	inlineDataFlag = 0x10000000

	extentMagic    = 0xf30a
	maxExtentDepth = 5
	maxSymlinks    = 8
)

// incompatible features the reader handles; any other is refused by name.
// needs_recovery (0x4) is accepted: a disk whose guest died has it, and
// the boot files are rarely what the journal still holds; what is read
// is then the state before the journal's last transactions.
const ext4Known = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x2000 | 0x4000 | 0x20000

var ext4IncompatNames = map[uint32]string{
	0x1: "compression", 0x8: "journal_dev", 0x10: "meta_bg", 0x1000: "dirdata",
	0x8000: "inline_data", 0x10000: "encrypt",
}

type ext4 struct {
	r          io.ReaderAt
	size       int64 // bytes of the partition
	bs         int64 // block size
	blocks     uint64
	ipg        uint32 // inodes per group
	inodes     uint32
	inodeSize  int64
	descSize   int64
	firstGroup int64 // byte offset of the group descriptor table
	groups     uint64
	uuid       string
	dirs       map[uint32]map[string]uint32 // directory listings read so far
}

func openExt4(r io.ReaderAt, size int64) (*ext4, error) {
	le := binary.LittleEndian
	sb := make([]byte, 1024)
	if _, err := r.ReadAt(sb, 1024); err != nil {
		return nil, fmt.Errorf("ext4: read superblock: %w", err)
	}
	if le.Uint16(sb[56:]) != ext4Magic {
		return nil, fmt.Errorf("ext4: bad superblock magic")
	}
	incompat := le.Uint32(sb[96:])
	if un := incompat &^ ext4Known; un != 0 {
		for bit := uint32(1); bit != 0; bit <<= 1 {
			if un&bit != 0 {
				name := ext4IncompatNames[bit]
				if name == "" {
					name = fmt.Sprintf("incompat bit %#x", bit)
				}
				return nil, fmt.Errorf("ext4: feature %s is not supported", name)
			}
		}
	}
	logBS := le.Uint32(sb[24:])
	if logBS > 6 { // 1 KiB << 6 = 64 KiB, ext4's maximum
		return nil, fmt.Errorf("ext4: block size 1 KiB << %d out of range", logBS)
	}
	fs := &ext4{r: r, size: size, bs: 1024 << logBS, dirs: map[uint32]map[string]uint32{}}
	fs.inodes, fs.ipg = le.Uint32(sb[0:]), le.Uint32(sb[40:])
	fs.blocks = uint64(le.Uint32(sb[4:]))
	if incompat&0x80 != 0 {
		fs.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
	}
	fs.inodeSize = 128
	if le.Uint32(sb[76:]) >= 1 {
		fs.inodeSize = int64(le.Uint16(sb[88:]))
	}
	if fs.inodeSize < 128 || fs.inodeSize > fs.bs || fs.inodeSize&(fs.inodeSize-1) != 0 {
		return nil, fmt.Errorf("ext4: inode size %d out of range", fs.inodeSize)
	}
	fs.descSize = 32
	if incompat&0x80 != 0 {
		fs.descSize = int64(le.Uint16(sb[254:]))
		if fs.descSize < 64 || fs.descSize > 1024 || fs.descSize&(fs.descSize-1) != 0 {
			return nil, fmt.Errorf("ext4: group descriptor size %d out of range", fs.descSize)
		}
	}
	bpg := uint64(le.Uint32(sb[32:]))
	first := uint64(le.Uint32(sb[20:]))
	if fs.ipg == 0 || bpg == 0 || fs.blocks <= first || fs.blocks > uint64(size)/uint64(fs.bs) {
		return nil, fmt.Errorf("ext4: geometry out of range (%d blocks of %d bytes, %d per group, on %d bytes)", fs.blocks, fs.bs, bpg, size)
	}
	fs.groups = (fs.blocks - first + bpg - 1) / bpg
	fs.firstGroup = int64(first+1) * fs.bs
	fs.uuid = uuidString(sb[104:120])
	return fs, nil
}

func uuidString(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// read reads n bytes at block blk + off, checking it lies inside the fs.
func (fs *ext4) read(blk uint64, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off >= fs.bs {
		return nil, fmt.Errorf("ext4: block %d offset %d out of range", blk, off)
	}
	b := make([]byte, off+n)
	if _, err := fs.readInto(b, blk); err != nil {
		return nil, err
	}
	return b[off:], nil
}

// readInto fills b from block blk on, checking the range lies inside the fs.
func (fs *ext4) readInto(b []byte, blk uint64) (int, error) {
	if blk >= fs.blocks || int64(len(b)) > int64(fs.blocks-blk)*fs.bs {
		return 0, fmt.Errorf("ext4: blocks %d+%d bytes out of range", blk, len(b))
	}
	n, err := fs.r.ReadAt(b, int64(blk)*fs.bs)
	if err != nil {
		return n, fmt.Errorf("ext4: read block %d: %w", blk, err)
	}
	return n, nil
}

type inode struct {
	mode  uint16
	size  uint64
	flags uint32
	block []byte // i_block: 60 bytes
}

func (in *inode) isDir() bool     { return in.mode&0xf000 == 0x4000 }
func (in *inode) isSymlink() bool { return in.mode&0xf000 == 0xa000 }
func (in *inode) isReg() bool     { return in.mode&0xf000 == 0x8000 }

func (fs *ext4) inode(ino uint32) (*inode, error) {
	if ino == 0 || ino > fs.inodes {
		return nil, fmt.Errorf("ext4: inode %d out of range", ino)
	}
	le := binary.LittleEndian
	g, idx := uint64(ino-1)/uint64(fs.ipg), int64(ino-1)%int64(fs.ipg)
	if g >= fs.groups {
		return nil, fmt.Errorf("ext4: inode %d: group %d out of range", ino, g)
	}
	off := fs.firstGroup + int64(g)*fs.descSize
	d := make([]byte, fs.descSize)
	if off+fs.descSize > fs.size {
		return nil, fmt.Errorf("ext4: group descriptor %d out of range", g)
	}
	if _, err := fs.r.ReadAt(d, off); err != nil {
		return nil, fmt.Errorf("ext4: read group descriptor %d: %w", g, err)
	}
	table := uint64(le.Uint32(d[8:]))
	if fs.descSize >= 64 {
		table |= uint64(le.Uint32(d[0x28:])) << 32
	}
	pos := idx * fs.inodeSize
	b, err := fs.read(table+uint64(pos/fs.bs), pos%fs.bs, 128)
	if err != nil {
		return nil, fmt.Errorf("ext4: inode %d: %w", ino, err)
	}
	in := &inode{mode: le.Uint16(b[0:]), flags: le.Uint32(b[32:]), block: b[40:100]}
	in.size = uint64(le.Uint32(b[4:])) | uint64(le.Uint32(b[108:]))<<32
	return in, nil
}

// extent is a run of blocks of a file.
type extent struct {
	logical, physical, n uint64
	zero                 bool // unwritten: reads as zeros
}

// extents lists the runs of a file's blocks below nblocks.
func (fs *ext4) extents(in *inode, nblocks uint64) ([]extent, error) {
	if in.flags&inlineDataFlag != 0 {
		return nil, fmt.Errorf("ext4: inline data is not supported")
	}
	var out []extent
	if in.flags&extentsFlag != 0 {
		// A real tree has fewer nodes than the file has blocks (each
		// leaf holds at least one extent), plus the path down to them.
		w := extentWalk{nblocks: nblocks, budget: int(min(2*nblocks, 8192)) + maxExtentDepth + 1}
		err := fs.walkExtents(in.block, maxExtentDepth, &w, &out)
		return out, err
	}
	err := fs.blockMap(in.block, nblocks, &out)
	return out, err
}

// extentWalk bounds the work a hostile tree can cause: a number of nodes,
// and leaves in strictly increasing logical order (so no block is read
// twice).
type extentWalk struct {
	nblocks, next uint64
	budget        int
}

func (fs *ext4) walkExtents(node []byte, depthLeft int, w *extentWalk, out *[]extent) error {
	le := binary.LittleEndian
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("ext4: extent tree too large")
	}
	if len(node) < 12 || le.Uint16(node) != extentMagic {
		return fmt.Errorf("ext4: bad extent header")
	}
	n, depth := int(le.Uint16(node[2:])), int(le.Uint16(node[6:]))
	if 12+12*n > len(node) || depth > depthLeft {
		return fmt.Errorf("ext4: extent node out of range (%d entries, depth %d)", n, depth)
	}
	for i := 0; i < n; i++ {
		e := node[12+12*i:]
		lblk := uint64(le.Uint32(e))
		if lblk >= w.nblocks {
			break
		}
		if depth == 0 {
			l := uint64(le.Uint16(e[4:]))
			x := extent{logical: lblk, physical: uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:])), n: l}
			if l > 32768 {
				x.n, x.zero = l-32768, true
			}
			if lblk < w.next {
				return fmt.Errorf("ext4: overlapping extents at block %d", lblk)
			}
			w.next = lblk + x.n
			*out = append(*out, x)
			continue
		}
		child := uint64(le.Uint32(e[4:])) | uint64(le.Uint16(e[8:]))<<32
		b, err := fs.read(child, 0, fs.bs)
		if err != nil {
			return err
		}
		if err := fs.walkExtents(b, depth-1, w, out); err != nil {
			return err
		}
	}
	return nil
}

// blockMap reads an ext2/3 style block map: 12 direct blocks, then single,
// double and triple indirect blocks.
func (fs *ext4) blockMap(iblock []byte, nblocks uint64, out *[]extent) error {
	le := binary.LittleEndian
	var next uint64 // logical block
	add := func(p uint64) {
		if p != 0 {
			*out = append(*out, extent{logical: next, physical: p, n: 1})
		}
		next++
	}
	var walk func(blk uint64, level int) error
	walk = func(blk uint64, level int) error {
		per := uint64(fs.bs / 4)
		span := uint64(1)
		for i := 0; i < level; i++ {
			span *= per
		}
		if blk == 0 {
			next += span * per
			return nil
		}
		b, err := fs.read(blk, 0, fs.bs)
		if err != nil {
			return err
		}
		for i := uint64(0); i < per && next < nblocks; i++ {
			p := uint64(le.Uint32(b[4*i:]))
			if level == 0 {
				add(p)
			} else if err := walk(p, level-1); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < 12 && next < nblocks; i++ {
		add(uint64(le.Uint32(iblock[4*i:])))
	}
	for level := 0; level < 3 && next < nblocks; level++ {
		if err := walk(uint64(le.Uint32(iblock[48+4*level:])), level); err != nil {
			return err
		}
	}
	return nil
}

// contents reads a file's bytes, refusing files over max.
func (fs *ext4) contents(in *inode, max int64) ([]byte, error) {
	if in.size > uint64(max) {
		return nil, fmt.Errorf("file of %d bytes is over the limit of %d", in.size, max)
	}
	// Files with holes could be larger, but no boot file has them: this
	// keeps a lying size from costing more memory than the disk holds.
	if in.size > fs.blocks*uint64(fs.bs) {
		return nil, fmt.Errorf("ext4: file of %d bytes is larger than the filesystem", in.size)
	}
	nblocks := (in.size + uint64(fs.bs) - 1) / uint64(fs.bs)
	exts, err := fs.extents(in, nblocks)
	if err != nil {
		return nil, err
	}
	data := make([]byte, in.size)
	for _, x := range exts {
		if x.zero {
			continue
		}
		// x.logical < nblocks: the walk stops at the first extent beyond.
		off := int64(x.logical) * fs.bs
		n := min(int64(min(x.n, nblocks-x.logical))*fs.bs, int64(in.size)-off)
		if _, err := fs.readInto(data[off:off+n], x.physical); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// dirents lists directory ino (callers check it is one): name -> inode. Listings are kept: a path
// lookup reads every directory on its way, and the boot entry search
// looks up many paths in the same few directories.
func (fs *ext4) dirents(ino uint32, in *inode) (map[string]uint32, error) {
	if m, ok := fs.dirs[ino]; ok {
		return m, nil
	}
	b, err := fs.contents(in, maxDirSize)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	m := map[string]uint32{}
	for off := 0; off+8 <= len(b); {
		ino, rec, nl := le.Uint32(b[off:]), int(le.Uint16(b[off+4:])), int(b[off+6])
		if rec < 8 || off+rec > len(b) || 8+nl > rec {
			return nil, fmt.Errorf("ext4: corrupt directory entry at offset %d", off)
		}
		if ino != 0 && nl > 0 {
			m[string(b[off+8:off+8+nl])] = ino
		}
		off += rec
	}
	fs.dirs[ino] = m
	return m, nil
}

// lookup resolves an absolute path to an inode, following symlinks.
func (fs *ext4) lookup(p string) (uint32, *inode, error) {
	hops := 0
	return fs.walk(ext4RootInode, "/", p, &hops)
}

func (fs *ext4) walk(dir uint32, dirPath, p string, hops *int) (uint32, *inode, error) {
	cur, err := fs.inode(dir)
	if err != nil {
		return 0, nil, err
	}
	parts := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	if parts[0] == "" {
		return dir, cur, nil
	}
	curPath := dirPath
	for i, name := range parts {
		if !cur.isDir() {
			return 0, nil, errNotFound
		}
		ents, err := fs.dirents(dir, cur)
		if err != nil {
			return 0, nil, err
		}
		ino, ok := ents[name]
		if !ok {
			return 0, nil, errNotFound
		}
		next, err := fs.inode(ino)
		if err != nil {
			return 0, nil, err
		}
		if next.isSymlink() {
			if *hops++; *hops > maxSymlinks {
				return 0, nil, fmt.Errorf("too many symbolic links")
			}
			var target []byte
			if next.size < 60 && next.flags&extentsFlag == 0 {
				target = next.block[:next.size]
			} else if target, err = fs.contents(next, 4096); err != nil {
				return 0, nil, err
			}
			t := string(target)
			if !strings.HasPrefix(t, "/") {
				t = path.Join(curPath, t)
			}
			rest := strings.Join(parts[i+1:], "/")
			return fs.walk(ext4RootInode, "/", path.Join(t, rest), hops)
		}
		dir, cur, curPath = ino, next, path.Join(curPath, name)
	}
	return dir, cur, nil
}

func (fs *ext4) ReadFile(p string, max int64) ([]byte, error) {
	_, in, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	if !in.isReg() {
		return nil, fmt.Errorf("not a regular file")
	}
	return fs.contents(in, max)
}

func (fs *ext4) ReadDir(p string) ([]string, error) {
	ino, in, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	if !in.isDir() { // for the search, a file where a directory is expected is a missing directory
		return nil, errNotFound
	}
	ents, err := fs.dirents(ino, in)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for n := range ents {
		if n != "." && n != ".." {
			names = append(names, n)
		}
	}
	return names, nil
}

func (fs *ext4) UUID() string { return fs.uuid }
func (fs *ext4) Type() string { return "ext4" }

var errNotFound = errors.New("no such file or directory")
