package disk

import (
	"bytes"
	"fmt"
	"io"
)

// Bounds on what is read from a guest's filesystem.
const (
	maxConfigSize = 1 << 20   // loader entries, grub.cfg
	maxDirSize    = 16 << 20  // one directory
	maxKernelSize = 256 << 20 // a kernel image
	maxInitrdSize = 1 << 30   // all initrds of an entry together
)

// filesystem is a read-only view of one partition's filesystem. Paths are
// absolute, "/"-separated.
type filesystem interface {
	ReadFile(path string, max int64) ([]byte, error)
	ReadDir(path string) ([]string, error)
	UUID() string
	Type() string
}

// openFS recognizes the filesystem in a partition by its magic.
func openFS(r io.ReaderAt, size int64) (filesystem, error) {
	b := make([]byte, 0x10048)
	n, err := r.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read superblock: %w", err)
	}
	b = b[:n]
	at := func(off int, magic string) bool {
		return len(b) >= off+len(magic) && bytes.Equal(b[off:off+len(magic)], []byte(magic))
	}
	switch {
	case at(1080, "\x53\xef"):
		return openExt4(r, size)
	case at(0, "XFSB"):
		return nil, fmt.Errorf("xfs is not supported (ext4 and vfat are)")
	case at(0x10040, "_BHRfS_M"):
		return nil, fmt.Errorf("btrfs is not supported (ext4 and vfat are)")
	case at(510, "\x55\xaa") && (at(54, "FAT") || at(82, "FAT32")):
		return openFAT(r, size)
	}
	return nil, fmt.Errorf("unknown filesystem")
}
