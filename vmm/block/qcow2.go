package block

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// qcow2 (docs/interop/qcow2.txt in QEMU): a header, a two-level table
// (L1 -> L2 -> data cluster) mapping guest clusters to host clusters, and
// reference counts for every host cluster. This reader handles versions 2
// and 3, any cluster size QEMU allows, zero clusters, zlib-compressed
// clusters (read only) and backing files; it refuses encryption, other
// compression types, external data files and extended L2 entries with
// an error that says so. Opened writable, it allocates
// clusters at the end of the file and keeps refcounts, L2 and L1 entries
// consistent, so `qemu-img check` is clean.
//
// Crash consistency: a VMM killed at any point must leave an image that
// `qemu-img check` accepts (leaked clusters are allowed: a leak is a
// refcount higher than the references, harmless and repaired by
// `qemu-img check -r leaks`) and that holds every write before the last
// Flush. Writes to the file reach the disk in any order unless a sync
// (fdatasync) separates them, so metadata is ordered by syncs:
//
//  1. A cluster's refcount is durable before any L2 or L1 entry, or the
//     refcount table, refers to the cluster; refcounts drop only after
//     the reference is gone durably. On disk a refcount is therefore
//     never below the references: at worst a cluster leaks.
//  2. A new cluster's contents (guest data, including what it copied
//     from the backing file, or a zeroed L2 table) are durable before
//     the L2 or L1 entry that makes them visible: a crash never exposes
//     stale bytes or garbage tables. Entries themselves need no sync
//     until Flush: an entry that didn't reach the disk is a write the
//     guest never flushed.
//  3. A new refcount block, counting itself, is durable before the
//     refcount table entry that points at it.
//  4. A new refcount table (with its blocks) is durable before the
//     header points at it, and the header before the old table is freed.
//
// One WriteAt syncs once, however many clusters it allocates: their
// entries are written together after it. Rewrites of allocated clusters
// go straight to the file. Flush is an fdatasync of the whole file, so
// it makes every write and entry durable.

var (
	// ErrQcow2Corrupt is wrapped by every error about a malformed image.
	ErrQcow2Corrupt = errors.New("qcow2 image is corrupt")
	// ErrQcow2Unsupported is wrapped by errors about valid features this
	// implementation does not handle.
	ErrQcow2Unsupported = errors.New("qcow2 feature not supported")
)

const (
	qcowMagic = 0x514649fb // "QFI\xfb"

	qcowOffsetMask  = 0x00fffffffffffe00 // bits 9-55 of L1/L2 entries
	qcowCopied      = 1 << 63            // refcount is exactly one
	qcowCompressed  = 1 << 62
	qcowZero        = 1 // v3: cluster reads as zeros
	qcowMaxL1Bytes  = 32 << 20
	qcowMaxRefTable = 8 << 20
	qcowMaxBacking  = 1023
	qcowMaxDepth    = 8
	qcowL2Cache     = 64

	incompatDirty    = 1 << 0
	incompatCorrupt  = 1 << 1
	incompatExtData  = 1 << 2
	incompatCompress = 1 << 3
	incompatExtL2    = 1 << 4

	extEnd           = 0x00000000
	extBackingFormat = 0xe2792aca
	extFeatureNames  = 0x6803f857
	extBitmaps       = 0x23852875
	extEncryption    = 0x0537be77
	extDataFile      = 0x44415441
)

// Qcow2Header is the parsed image header.
type Qcow2Header struct {
	Version               uint32
	BackingFileOffset     uint64
	BackingFileSize       uint32
	ClusterBits           uint32
	Size                  uint64
	CryptMethod           uint32
	L1Size                uint32
	L1TableOffset         uint64
	RefcountTableOffset   uint64
	RefcountTableClusters uint32
	NbSnapshots           uint32
	SnapshotsOffset       uint64
	IncompatibleFeatures  uint64
	CompatibleFeatures    uint64
	AutoclearFeatures     uint64
	RefcountOrder         uint32
	HeaderLength          uint32

	BackingFile   string
	BackingFormat string
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrQcow2Corrupt, fmt.Sprintf(format, a...))
}

func unsupported(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrQcow2Unsupported, fmt.Sprintf(format, a...))
}

// ParseQcow2Header parses and validates the header in b, the image's
// first cluster (or all of a shorter file), for an image of fileSize
// bytes. Every offset it accepts lies inside the file.
func ParseQcow2Header(b []byte, fileSize int64) (*Qcow2Header, error) {
	h, err := decodeQcow2Header(b)
	if err != nil {
		return nil, err
	}
	if err := h.check(fileSize); err != nil {
		return nil, err
	}
	if err := h.parseExtensions(b); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeQcow2Header reads the header's fields (version 2 or 3) from b.
func decodeQcow2Header(b []byte) (*Qcow2Header, error) {
	be := binary.BigEndian
	if len(b) < 4 || be.Uint32(b[0:]) != qcowMagic {
		return nil, corrupt("not a qcow2 image (no qcow2 magic)")
	}
	if len(b) < 72 {
		return nil, corrupt("file of %d bytes is too short for a header", len(b))
	}
	h := &Qcow2Header{
		Version:               be.Uint32(b[4:]),
		BackingFileOffset:     be.Uint64(b[8:]),
		BackingFileSize:       be.Uint32(b[16:]),
		ClusterBits:           be.Uint32(b[20:]),
		Size:                  be.Uint64(b[24:]),
		CryptMethod:           be.Uint32(b[32:]),
		L1Size:                be.Uint32(b[36:]),
		L1TableOffset:         be.Uint64(b[40:]),
		RefcountTableOffset:   be.Uint64(b[48:]),
		RefcountTableClusters: be.Uint32(b[56:]),
		NbSnapshots:           be.Uint32(b[60:]),
		SnapshotsOffset:       be.Uint64(b[64:]),
		RefcountOrder:         4,
		HeaderLength:          72,
	}
	switch h.Version {
	case 2:
	case 3:
		if len(b) < 104 {
			return nil, corrupt("version 3 header truncated")
		}
		h.IncompatibleFeatures = be.Uint64(b[72:])
		h.CompatibleFeatures = be.Uint64(b[80:])
		h.AutoclearFeatures = be.Uint64(b[88:])
		h.RefcountOrder = be.Uint32(b[96:])
		h.HeaderLength = be.Uint32(b[100:])
	default:
		return nil, unsupported("version %d (want 2 or 3)", h.Version)
	}
	return h, nil
}

// check validates the header's fields: what this package supports, and
// that the L1 and refcount tables lie inside a file of fileSize bytes.
func (h *Qcow2Header) check(fileSize int64) error {
	if h.ClusterBits < 9 || h.ClusterBits > 21 {
		return corrupt("cluster_bits %d outside 9..21", h.ClusterBits)
	}
	cs := uint64(1) << h.ClusterBits
	if h.Version == 3 && (h.HeaderLength < 104 || uint64(h.HeaderLength) > cs || h.HeaderLength%8 != 0) {
		return corrupt("header_length %d", h.HeaderLength)
	}
	if h.CryptMethod != 0 {
		return unsupported("encrypted image (crypt_method %d)", h.CryptMethod)
	}
	if f := h.IncompatibleFeatures; f != 0 {
		switch {
		case f&incompatCorrupt != 0:
			return corrupt("image is marked corrupt (run qemu-img check -r all)")
		case f&incompatExtData != 0:
			return unsupported("external data file")
		case f&incompatCompress != 0:
			return unsupported("non-zlib compression type")
		case f&incompatExtL2 != 0:
			return unsupported("extended L2 entries (subclusters)")
		case f&^incompatDirty != 0:
			return unsupported("unknown incompatible features %#x", f&^incompatDirty)
		}
	}
	if h.RefcountOrder > 6 {
		return corrupt("refcount_order %d", h.RefcountOrder)
	}
	// The L1 table must cover the virtual size and lie inside the file.
	perL1 := cs * (cs / 8) // bytes mapped by one L1 entry
	need := (h.Size + perL1 - 1) / perL1
	if h.Size > 1<<62 || need > uint64(h.L1Size) {
		return corrupt("L1 table of %d entries can't map %d bytes", h.L1Size, h.Size)
	}
	if uint64(h.L1Size)*8 > qcowMaxL1Bytes {
		return unsupported("L1 table of %d entries is too large", h.L1Size)
	}
	if err := inFile("L1 table", h.L1TableOffset, uint64(h.L1Size)*8, cs, fileSize); err != nil {
		return err
	}
	rt := uint64(h.RefcountTableClusters) * cs
	if rt > qcowMaxRefTable {
		return unsupported("refcount table of %d clusters is too large", h.RefcountTableClusters)
	}
	return inFile("refcount table", h.RefcountTableOffset, rt, cs, fileSize)
}

// parseExtensions reads the backing file name and the header extensions
// from the first cluster, b.
func (h *Qcow2Header) parseExtensions(b []byte) error {
	be := binary.BigEndian
	cs := uint64(1) << h.ClusterBits
	// Header extensions and the backing file name live in the first cluster.
	limit := min(cs, uint64(len(b)))
	if h.BackingFileOffset != 0 {
		end := h.BackingFileOffset + uint64(h.BackingFileSize)
		if h.BackingFileSize == 0 || h.BackingFileSize > qcowMaxBacking || h.BackingFileOffset > limit || end > limit {
			return corrupt("backing file name at %#x+%d outside the first cluster", h.BackingFileOffset, h.BackingFileSize)
		}
		h.BackingFile = string(b[h.BackingFileOffset:end])
		// No path holds a NUL: such a name is damage, not a file to look for.
		if strings.IndexByte(h.BackingFile, 0) >= 0 {
			return corrupt("backing file name %q holds a NUL byte", h.BackingFile)
		}
		limit = min(limit, h.BackingFileOffset)
	}
	for off := uint64(h.HeaderLength); ; {
		if off+8 > limit {
			break // v2 images may end the extension area without an end marker
		}
		typ, n := be.Uint32(b[off:]), uint64(be.Uint32(b[off+4:]))
		if typ == extEnd {
			break
		}
		data := off + 8
		if n > limit-data {
			return corrupt("header extension %#x of %d bytes overruns the header", typ, n)
		}
		switch typ {
		case extBackingFormat:
			h.BackingFormat = string(b[data : data+n])
		case extDataFile:
			return unsupported("external data file")
		case extEncryption:
			return unsupported("encryption")
		}
		off = data + (n+7)&^7
	}
	return nil
}

// inFile checks that a cluster-aligned table [off, off+n) is in the file.
func inFile(what string, off, n, cs uint64, fileSize int64) error {
	if off%cs != 0 {
		return corrupt("%s at %#x is not cluster aligned", what, off)
	}
	if off == 0 && n > 0 {
		return corrupt("%s overlaps the header", what)
	}
	if off > uint64(fileSize) || n > uint64(fileSize)-off {
		return corrupt("%s at %#x+%d is past the end of the %d-byte file", what, off, n, fileSize)
	}
	return nil
}

// imageFile is what a qcow2 image is stored in: a file, or memory in tests.
type imageFile interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

// Qcow2 is an open qcow2 image.
type Qcow2 struct {
	mu      sync.Mutex
	f       imageFile
	name    string
	ro      bool
	h       *Qcow2Header
	cs      uint64 // cluster size
	l2n     uint64 // entries per L2 table
	rbe     uint64 // refcount entries per refcount block
	l1      []uint64
	l2      map[uint64][]uint64 // L2 tables by host offset
	ref     []uint64            // refcount table (writable images only)
	end     uint64              // next host offset to allocate
	growing bool                // the refcount table is being moved
	backing Disk
}

// OpenQcow2 opens a qcow2 image, and its backing chain read-only.
func OpenQcow2(path string, readOnly bool) (*Qcow2, error) {
	return openQcow2(path, readOnly, 0)
}

func openQcow2(path string, readOnly bool, depth int) (*Qcow2, error) {
	if depth > qcowMaxDepth {
		return nil, unsupported("backing chain deeper than %d at %s", qcowMaxDepth, path)
	}
	f, err := openLocked(path, readOnly)
	if err != nil {
		return nil, fmt.Errorf("open qcow2 image: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // nothing written yet
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	q, err := newQcow2(osFile{f}, path, st.Size(), readOnly, func(name, format string) (Disk, error) {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		switch format {
		case "", "raw":
			return OpenRaw(name, true)
		case "qcow2":
			return openQcow2(name, true, depth+1)
		}
		return nil, unsupported("backing file format %q", format)
	})
	if err != nil {
		_ = f.Close() // refused while opening: nothing written
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}

type backingOpener func(name, format string) (Disk, error)

func newQcow2(f imageFile, name string, fileSize int64, readOnly bool, openBacking backingOpener) (*Qcow2, error) {
	first := make([]byte, min(fileSize, 1<<21))
	if _, err := f.ReadAt(first, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read qcow2 header: %w", err)
	}
	h, err := ParseQcow2Header(first, fileSize)
	if err != nil {
		return nil, err
	}
	q := &Qcow2{f: f, name: name, ro: readOnly, h: h, l2: map[uint64][]uint64{}}
	q.cs = 1 << h.ClusterBits
	q.l2n = q.cs / 8
	q.end = (uint64(fileSize) + q.cs - 1) &^ (q.cs - 1)
	if !readOnly {
		switch {
		case h.IncompatibleFeatures&incompatDirty != 0:
			return nil, unsupported("writing an image with the dirty bit set (run qemu-img check -r all)")
		case h.NbSnapshots != 0:
			return nil, unsupported("writing an image with %d internal snapshots", h.NbSnapshots)
		case h.RefcountOrder != 4:
			return nil, unsupported("writing an image with %d-bit refcounts (only 16)", 1<<h.RefcountOrder)
		}
		q.rbe = q.cs / 2
	}
	if q.l1, err = q.readTable(h.L1TableOffset, uint64(h.L1Size)); err != nil {
		return nil, fmt.Errorf("read L1 table: %w", err)
	}
	if !readOnly {
		if q.ref, err = q.readTable(h.RefcountTableOffset, uint64(h.RefcountTableClusters)*q.cs/8); err != nil {
			return nil, fmt.Errorf("read refcount table: %w", err)
		}
		if h.Version == 3 && h.AutoclearFeatures != 0 {
			// Autoclear features (bitmaps, ...) are invalid once software
			// that doesn't know them has written the image.
			var zero [8]byte
			if _, err := f.WriteAt(zero[:], 88); err != nil {
				return nil, fmt.Errorf("clear autoclear features: %w", err)
			}
			// durable before any write the features' data would miss
			if err := f.Sync(); err != nil {
				return nil, fmt.Errorf("clear autoclear features: %w", err)
			}
			h.AutoclearFeatures = 0
		}
	}
	if h.BackingFile != "" {
		if q.backing, err = openBacking(h.BackingFile, h.BackingFormat); err != nil {
			return nil, fmt.Errorf("backing file %q: %w", h.BackingFile, err)
		}
	}
	return q, nil
}

func (q *Qcow2) readTable(off, n uint64) ([]uint64, error) {
	b := make([]byte, n*8)
	if _, err := q.f.ReadAt(b, int64(off)); err != nil {
		return nil, corrupt("table at %#x+%d: %v", off, len(b), err)
	}
	t := make([]uint64, n)
	for i := range t {
		t[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return t, nil
}

// Header returns the parsed header.
func (q *Qcow2) Header() Qcow2Header { return *q.h }

// Size is the virtual disk size.
func (q *Qcow2) Size() uint64 { return q.h.Size }

// ReadOnly reports whether writes are refused.
func (q *Qcow2) ReadOnly() bool { return q.ro }

// Close closes the image and its backing chain.
func (q *Qcow2) Close() error {
	var errs []error
	if q.backing != nil {
		errs = append(errs, q.backing.Close())
	}
	errs = append(errs, q.f.Close())
	return errors.Join(errs...)
}

// Unlock lets go of the image's lock (its backing chain keeps its shared
// locks); the image stays open.
func (q *Qcow2) Unlock() error {
	if f, ok := q.f.(osFile); ok {
		return unlockFile(f.File)
	}
	return nil
}

// Lock takes the image's lock again after Unlock.
func (q *Qcow2) Lock() error {
	if f, ok := q.f.(osFile); ok {
		return lockFile(f.File, !q.ro)
	}
	return nil
}

// Flush makes data and metadata durable.
func (q *Qcow2) Flush() error {
	if q.ro {
		return nil
	}
	if err := q.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", q.name, err)
	}
	return nil
}

type clusterKind int

const (
	clusterUnallocated clusterKind = iota // read from backing file, or zeros
	clusterZero                           // zeros (host holds a preallocated cluster if off != 0)
	clusterData
	clusterCompressed // host is the compressed bytes' offset, clen their length
)

type mapping struct {
	kind   clusterKind
	host   uint64 // host offset of the data cluster
	l2     []uint64
	l2Off  uint64
	l2Idx  uint64
	copied bool
	clen   uint64
}

func (q *Qcow2) loadL2(off uint64) ([]uint64, error) {
	if t, ok := q.l2[off]; ok {
		return t, nil
	}
	t, err := q.readTable(off, q.l2n)
	if err != nil {
		return nil, err
	}
	if len(q.l2) >= qcowL2Cache {
		for k := range q.l2 { // evict one, any one
			delete(q.l2, k)
			break
		}
	}
	q.l2[off] = t
	return t, nil
}

// lookup maps guest cluster vc.
func (q *Qcow2) lookup(vc uint64) (mapping, error) {
	l1i := vc / q.l2n
	if l1i >= uint64(len(q.l1)) {
		return mapping{}, corrupt("cluster %d beyond the L1 table", vc)
	}
	l1e := q.l1[l1i]
	l2Off := l1e & qcowOffsetMask
	if l2Off == 0 {
		return mapping{kind: clusterUnallocated}, nil
	}
	if l2Off%q.cs != 0 {
		return mapping{}, corrupt("L1 entry %d: L2 table at %#x is not cluster aligned", l1i, l2Off)
	}
	l2, err := q.loadL2(l2Off)
	if err != nil {
		return mapping{}, err
	}
	i := vc % q.l2n
	e := l2[i]
	m := mapping{l2: l2, l2Off: l2Off, l2Idx: i, copied: e&qcowCopied != 0 && l1e&qcowCopied != 0}
	if e&qcowCompressed != 0 {
		return q.compressedMapping(vc, e, m)
	}
	m.host = e & qcowOffsetMask
	switch {
	case e&qcowZero != 0:
		m.kind = clusterZero
	case m.host == 0:
		m.kind = clusterUnallocated
	default:
		m.kind = clusterData
	}
	if m.host%q.cs != 0 {
		return mapping{}, corrupt("L2 entry for guest cluster %d: host offset %#x is not cluster aligned", vc, m.host)
	}
	return m, nil
}

// ReadAt reads guest bytes; past the virtual size it returns io.EOF.
func (q *Qcow2) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("qcow2 read at negative offset %d", off)
	}
	var eof error
	if uint64(off) >= q.h.Size {
		return 0, io.EOF
	}
	if rest := q.h.Size - uint64(off); uint64(len(p)) > rest {
		p, eof = p[:rest], io.EOF
	}
	// A writable image's mapping changes under writes: its reads hold the
	// lock throughout. A read-only one's never does: the lock guards
	// only the L2 cache, and reads (of a file read in place over the
	// network, say) go on side by side.
	if !q.ro {
		q.mu.Lock()
		defer q.mu.Unlock()
	}
	done := 0
	for done < len(p) {
		pos := uint64(off) + uint64(done)
		in := pos % q.cs
		seg := p[done:min(len(p), done+int(q.cs-in))]
		if q.ro {
			q.mu.Lock()
		}
		m, err := q.lookup(pos / q.cs)
		if err == nil && m.kind == clusterData {
			// One read for a run of clusters that follow each other in
			// the file too (what qemu-img writes): a converter's large
			// reads cost one syscall, not one per cluster.
			seg = p[done : done+q.contiguous(pos+uint64(len(seg)), m.host+in+uint64(len(seg)), len(p)-done-len(seg))+len(seg)]
		}
		if q.ro {
			q.mu.Unlock()
		}
		if err != nil {
			return done, err
		}
		if err := q.readCluster(m, pos, in, seg); err != nil {
			return done, err
		}
		done += len(seg)
	}
	return done, eof
}

// readCluster fills seg with guest bytes at pos, in bytes into a cluster
// mapped by m.
func (q *Qcow2) readCluster(m mapping, pos, in uint64, seg []byte) error {
	switch m.kind {
	case clusterData:
		if _, err := q.f.ReadAt(seg, int64(m.host+in)); err != nil {
			return corrupt("data cluster at %#x: %v", m.host, err)
		}
	case clusterZero:
		clear(seg)
	case clusterCompressed:
		return q.readCompressed(m, in, seg)
	default:
		clear(seg)
		if q.backing != nil && pos < q.backing.Size() {
			n := min(uint64(len(seg)), q.backing.Size()-pos)
			if _, err := q.backing.ReadAt(seg[:n], int64(pos)); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("backing file: %w", err)
			}
		}
	}
	return nil
}

// WriteAt writes guest bytes, allocating clusters as needed.
func (q *Qcow2) WriteAt(p []byte, off int64) (int, error) {
	if q.ro {
		return 0, ErrReadOnly
	}
	if off < 0 || uint64(off) > q.h.Size || uint64(len(p)) > q.h.Size-uint64(off) {
		return 0, fmt.Errorf("qcow2 write [%d+%d] outside the %d-byte disk", off, len(p), q.h.Size)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// The L2 and L1 entries of the clusters this write allocates wait
	// until their data is written, and then one sync covers all of them.
	var entries []entryWrite
	done := 0
	var err error
	for done < len(p) {
		pos := uint64(off) + uint64(done)
		in := pos % q.cs
		seg := p[done:min(len(p), done+int(q.cs-in))]
		if err = q.writeCluster(pos, in, seg, &entries); err != nil {
			break
		}
		done += len(seg)
	}
	if werr := q.writeEntries(entries); werr != nil {
		return 0, werr
	}
	return done, err
}

// entryWrite is an L2 or L1 entry to write at off once what it points at
// is durable. The in-memory tables have it already, so later clusters of
// the same write find the new L2 tables.
type entryWrite struct{ off, entry uint64 }

// writeEntries writes entries after a sync: rules 1 and 2, for the
// refcounts, new L2 tables and data clusters they point at.
func (q *Qcow2) writeEntries(entries []entryWrite) error {
	if len(entries) == 0 {
		return nil
	}
	if err := q.sync(); err != nil {
		return err
	}
	var b [8]byte
	for _, e := range entries {
		binary.BigEndian.PutUint64(b[:], e.entry)
		if _, err := q.f.WriteAt(b[:], int64(e.off)); err != nil {
			return fmt.Errorf("write L1/L2 entry at %#x: %w", e.off, err)
		}
	}
	return nil
}

func (q *Qcow2) writeCluster(pos, in uint64, seg []byte, entries *[]entryWrite) error {
	vc := pos / q.cs
	m, err := q.lookup(vc)
	if err != nil {
		return err
	}
	if m.kind == clusterCompressed {
		return unsupported("write to a compressed cluster at guest offset %#x", vc*q.cs)
	}
	if m.kind == clusterData {
		if !m.copied {
			return unsupported("write to a shared cluster (refcount > 1)")
		}
		if err := q.checkNotMetadata(m.host); err != nil {
			return err
		}
		if _, err := q.f.WriteAt(seg, int64(m.host+in)); err != nil {
			return fmt.Errorf("write data cluster at %#x: %w", m.host, err)
		}
		return nil
	}
	// Build the whole new cluster: old contents (backing data or zeros)
	// around the bytes being written.
	buf := make([]byte, q.cs)
	if uint64(len(seg)) != q.cs {
		if err := q.readCluster(m, pos-in, 0, buf); err != nil {
			return err
		}
	}
	copy(buf[in:], seg)
	newL2 := m.l2 == nil
	if newL2 {
		if m, err = q.allocL2(vc); err != nil {
			return err
		}
	}
	host := m.host // a preallocated zero cluster keeps its place
	if host != 0 && !m.copied {
		return unsupported("write to a shared zero cluster (refcount > 1)")
	}
	if host == 0 {
		if host, err = q.allocCluster(); err != nil {
			return err
		}
	} else if err := q.checkNotMetadata(host); err != nil {
		return err
	}
	if _, err := q.f.WriteAt(buf, int64(host)); err != nil {
		return fmt.Errorf("write new data cluster at %#x: %w", host, err)
	}
	entry := host | qcowCopied
	m.l2[m.l2Idx] = entry
	*entries = append(*entries, entryWrite{m.l2Off + 8*m.l2Idx, entry})
	if newL2 { // after the table's first entry: never a table without it
		l1i, l1e := vc/q.l2n, m.l2Off|qcowCopied
		q.l1[l1i] = l1e
		*entries = append(*entries, entryWrite{q.h.L1TableOffset + 8*l1i, l1e})
	}
	return nil
}

// sync is a write barrier for the ordering rules above.
func (q *Qcow2) sync() error {
	if err := q.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", q.name, err)
	}
	return nil
}

// checkNotMetadata refuses to write guest data over the header or the L1
// and refcount tables (an L2 entry pointing there is corruption).
func (q *Qcow2) checkNotMetadata(host uint64) error {
	overlaps := func(off, n uint64) bool { return host < off+n && off < host+q.cs }
	if host < q.cs || overlaps(q.h.L1TableOffset, uint64(q.h.L1Size)*8) ||
		overlaps(q.h.RefcountTableOffset, uint64(q.h.RefcountTableClusters)*q.cs) {
		return corrupt("data cluster at %#x overlaps image metadata", host)
	}
	return nil
}

// allocL2 makes a new, empty L2 table for guest cluster vc's L1 entry;
// the caller sets the L1 entry, written once the table is durable.
func (q *Qcow2) allocL2(vc uint64) (mapping, error) {
	if q.l1[vc/q.l2n] != 0 {
		return mapping{}, unsupported("L1 entry %d is shared (refcount > 1)", vc/q.l2n)
	}
	off, err := q.allocCluster()
	if err != nil {
		return mapping{}, err
	}
	if _, err := q.f.WriteAt(make([]byte, q.cs), int64(off)); err != nil {
		return mapping{}, fmt.Errorf("write new L2 table: %w", err)
	}
	l2 := make([]uint64, q.l2n)
	q.l2[off] = l2
	return mapping{kind: clusterUnallocated, l2: l2, l2Off: off, l2Idx: vc % q.l2n, copied: true}, nil
}

// allocCluster reserves the next host cluster at the end of the file with
// refcount 1 (written before anything points at the cluster).
func (q *Qcow2) allocCluster() (uint64, error) {
	off := q.end
	q.end += q.cs
	if err := q.setRefcount(off, 1); err != nil {
		return 0, err
	}
	return off, nil
}

func (q *Qcow2) setRefcount(host uint64, v uint16) error {
	c := host / q.cs
	ti, bi := c/q.rbe, c%q.rbe
	if ti >= uint64(len(q.ref)) {
		if q.growing {
			return corrupt("refcount table growth does not converge at host cluster %d", c)
		}
		if err := q.growRefTable(ti); err != nil {
			return err
		}
	}
	block := q.ref[ti] & qcowOffsetMask
	if block == 0 {
		// A new refcount block, placed at the end; it counts itself if
		// it lands in the range it covers, else the next block does.
		block = q.end
		q.end += q.cs
		if _, err := q.f.WriteAt(make([]byte, q.cs), int64(block)); err != nil {
			return fmt.Errorf("write new refcount block: %w", err)
		}
		q.ref[ti] = block
		if err := q.setRefcount(block, 1); err != nil {
			return err
		}
		if !q.growing { // a growing table is written whole at the end
			// Rule 3: the block, counting itself, is durable before
			// the table points at it.
			if err := q.sync(); err != nil {
				return err
			}
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], block)
			if _, err := q.f.WriteAt(b[:], int64(q.h.RefcountTableOffset+8*ti)); err != nil {
				return fmt.Errorf("write refcount table entry: %w", err)
			}
		}
	} else if block%q.cs != 0 {
		return corrupt("refcount table entry %d: block at %#x is not cluster aligned", ti, block)
	}
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	if _, err := q.f.WriteAt(b[:], int64(block+2*bi)); err != nil {
		return fmt.Errorf("write refcount: %w", err)
	}
	return nil
}

// growRefTable moves the refcount table to a larger one at the end of the
// file that covers table index need (QEMU does the same): the new table's
// own clusters and any new refcount blocks are counted first, the table is
// written whole, the header switched to it, and the old table freed.
func (q *Qcow2) growRefTable(need uint64) error {
	entriesPerCluster := q.cs / 8
	oldOff, oldN := q.h.RefcountTableOffset, uint64(q.h.RefcountTableClusters)
	newN := max(2*oldN, (need+1+entriesPerCluster-1)/entriesPerCluster+1)
	if newN*q.cs > qcowMaxRefTable {
		return unsupported("refcount table of %d clusters is too large", newN)
	}
	newOff := q.end
	q.end += newN * q.cs
	q.ref = append(q.ref, make([]uint64, newN*entriesPerCluster-uint64(len(q.ref)))...)
	q.growing = true
	for i := uint64(0); i < newN; i++ {
		if err := q.setRefcount(newOff+i*q.cs, 1); err != nil {
			q.growing = false
			return err
		}
	}
	q.growing = false
	table := make([]byte, newN*q.cs)
	for i, e := range q.ref {
		binary.BigEndian.PutUint64(table[8*i:], e)
	}
	if _, err := q.f.WriteAt(table, int64(newOff)); err != nil {
		return fmt.Errorf("write new refcount table: %w", err)
	}
	// Rule 4: the new table, its blocks and counts are durable before
	// the header points at it, and the header before the old table's
	// clusters are freed.
	if err := q.sync(); err != nil {
		return err
	}
	var hdr [12]byte
	binary.BigEndian.PutUint64(hdr[0:], newOff)
	binary.BigEndian.PutUint32(hdr[8:], uint32(newN))
	if _, err := q.f.WriteAt(hdr[:], 48); err != nil {
		return fmt.Errorf("switch to the new refcount table: %w", err)
	}
	q.h.RefcountTableOffset, q.h.RefcountTableClusters = newOff, uint32(newN)
	if err := q.sync(); err != nil {
		return err
	}
	for i := uint64(0); i < oldN; i++ {
		if err := q.setRefcount(oldOff+i*q.cs, 0); err != nil {
			return err
		}
	}
	return nil
}
