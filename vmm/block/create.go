package block

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// An overlay CreateQcow2Overlay writes: qcow2 version 3, 64 KiB clusters,
// 16-bit refcounts (what OpenQcow2 writes to), laid out as
//
//	cluster 0    header, backing format extension, backing file name
//	cluster 1    refcount table (one entry: the block below)
//	cluster 2    refcount block (counts clusters 0..2+L1 clusters)
//	cluster 3..  L1 table, all zero: every read goes to the backing file
//
// One refcount block counts 32768 clusters (2 GiB of file); OpenQcow2
// grows the tables as the guest writes.
const (
	overlayClusterBits = 16
	overlayHeaderLen   = 104
)

// CreateQcow2Overlay writes a new, empty qcow2 image at path whose
// backing file is backing (an absolute path, opened read-only whenever
// the overlay is opened) of format backingFormat, with the backing
// file's size. It never replaces an existing file (os.ErrExist): the
// image is written under a scratch name and linked into place once
// complete, so a crash leaves no half-written overlay at path.
func CreateQcow2Overlay(path, backing string, backingFormat Format) error {
	if !filepath.IsAbs(backing) {
		return fmt.Errorf("qcow2 overlay %s: backing file %q is not an absolute path", path, backing)
	}
	if len(backing) > qcowMaxBacking {
		return fmt.Errorf("qcow2 overlay %s: backing file name of %d bytes (at most %d)", path, len(backing), qcowMaxBacking)
	}
	b, err := Open(backing, Options{Format: backingFormat, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("qcow2 overlay %s: %w", path, err)
	}
	size := b.Size()
	if err := b.Close(); err != nil {
		return fmt.Errorf("qcow2 overlay %s: closing the backing file: %w", path, err)
	}
	img, err := overlayImage(size, backing, backingFormat)
	if err != nil {
		return fmt.Errorf("qcow2 overlay %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("qcow2 overlay %s: %w", path, err)
	}
	_, err = tmp.WriteAt(img, 0)
	if err == nil {
		err = osFile{tmp}.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	// A hard link, unlike a rename, fails if path exists.
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if rerr := os.Remove(tmp.Name()); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("qcow2 overlay %s: %w", path, err)
	}
	return nil
}

// overlayImage is the whole image file of an empty overlay of size bytes.
func overlayImage(size uint64, backing string, backingFormat Format) ([]byte, error) {
	const cs = uint64(1) << overlayClusterBits
	perL1 := cs * (cs / 8) // bytes one L1 entry maps
	l1Size := (size + perL1 - 1) / perL1
	if size > 1<<62 || l1Size*8 > qcowMaxL1Bytes {
		return nil, fmt.Errorf("a virtual size of %d bytes is too large", size)
	}
	l1Clusters := max(1, (l1Size*8+cs-1)/cs)
	clusters := 3 + l1Clusters
	img := make([]byte, clusters*cs)
	be := binary.BigEndian
	be.PutUint32(img[0:], qcowMagic)
	be.PutUint32(img[4:], 3)
	be.PutUint32(img[20:], overlayClusterBits)
	be.PutUint64(img[24:], size)
	be.PutUint32(img[36:], uint32(l1Size))    //nolint:gosec // bounded by qcowMaxL1Bytes above
	be.PutUint64(img[40:], 3*cs)              // L1 table
	be.PutUint64(img[48:], cs)                // refcount table
	be.PutUint32(img[56:], 1)                 // refcount table clusters
	be.PutUint32(img[96:], 4)                 // refcount order: 16 bits
	be.PutUint32(img[100:], overlayHeaderLen) // header length
	// Extensions: the backing format, then the end marker; the backing
	// file name follows them.
	off := uint64(overlayHeaderLen)
	be.PutUint32(img[off:], extBackingFormat)
	be.PutUint32(img[off+4:], uint32(len(backingFormat))) //nolint:gosec // a format name is short
	copy(img[off+8:], backingFormat)
	off += 8 + (uint64(len(backingFormat))+7)&^7
	off += 8 // extEnd: type and length zero
	be.PutUint64(img[8:], off)
	be.PutUint32(img[16:], uint32(len(backing))) //nolint:gosec // at most qcowMaxBacking
	copy(img[off:], backing)
	// Refcount table entry 0: the refcount block; it counts every cluster
	// of the file once.
	be.PutUint64(img[cs:], 2*cs)
	for i := range clusters {
		be.PutUint16(img[2*cs+2*i:], 1)
	}
	return img, nil
}
