// Package disktest builds partitioned disk images for tests with the real
// tools (sfdisk, mkfs.ext4 -d, qemu-img).
package disktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// Part is one partition: an ext4 (or vfat) filesystem holding Files
// (path -> content), or, if Raw is set, those bytes at its start.
type Part struct {
	VFAT  bool // mkfs.vfat (FAT12/16/32 by size, as mkfs.vfat picks) and mcopy
	FAT   int  // with VFAT: force a FAT size (mkfs.vfat -F)
	Files map[string][]byte
	Raw   []byte
	MiB   int // size; default 32
	// KiB, if set, is the size instead of MiB; under 1 MiB the
	// filesystem gets 1 KiB blocks, 32 inodes and no journal: a small
	// fuzz seed.
	KiB     int
	Options string // mkfs.ext4 -O
	UUID    string // ext4 filesystem UUID (mkfs.ext4 -U), vfat volume ID (8 hex digits, mkfs.vfat -i)
}

// Disk says what to build.
type Disk struct {
	Label string // "gpt" or "dos"; "" writes no partition table
	Parts []Part
	Qcow2 bool
	// Compact puts the partitions right after the GPT (LBA 34), without
	// alignment: a small fuzz seed.
	Compact bool
}

func (p Part) size() int64 {
	switch {
	case p.KiB > 0:
		return int64(p.KiB) << 10
	case p.MiB > 0:
		return int64(p.MiB) << 20
	}
	return 32 << 20
}

// Build writes the image in t.TempDir() and returns its path.
func Build(t testing.TB, d Disk) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	align := int64(1 << 20)
	if d.Compact {
		align = 34 * 512
	}
	off := align
	var script strings.Builder
	fmt.Fprintf(&script, "label: %s\n", d.Label)
	var images [][]byte
	for i, p := range d.Parts {
		size := p.size()
		fmt.Fprintf(&script, "start=%d, size=%d, type=%s\n", off/512, size/512, map[string]string{"gpt": "L", "dos": map[bool]string{false: "83", true: "c"}[p.VFAT]}[d.Label])
		data := p.Raw
		if data == nil {
			data = fsImage(t, dir, i, p, size)
		}
		images = append(images, data)
		off += size
	}
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	if err := f.Truncate(off + align); err != nil { // room for the backup GPT
		t.Fatal(err)
	}
	if d.Label != "" {
		cmd := exec.Command(hosttools.Require(t, "sfdisk"), "--no-reread", "--no-tell-kernel", raw)
		cmd.Stdin = strings.NewReader(script.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sfdisk: %v\n%s", err, out)
		}
	}
	off = align
	for i, data := range images {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
		off += d.Parts[i].size()
	}
	if !d.Qcow2 {
		return raw
	}
	q := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, q)
	return q
}

func fsImage(t testing.TB, dir string, i int, p Part, size int64) []byte {
	t.Helper()
	root := filepath.Join(dir, fmt.Sprintf("root%d", i))
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range p.Files {
		fp := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fp, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, fmt.Sprintf("fs%d.img", i))
	if p.VFAT {
		args := []string{"-C"}
		if p.FAT != 0 {
			args = append(args, "-F", fmt.Sprint(p.FAT))
		}
		if p.UUID != "" {
			args = append(args, "-i", p.UUID)
		}
		hosttools.Run(t, "mkfs.vfat", append(args, img, fmt.Sprint(size>>10))...)
		tops, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tops {
			hosttools.Run(t, "mcopy", "-s", "-i", img, filepath.Join(root, e.Name()), "::/")
		}
		return readFile(t, img)
	}
	args := []string{"-q", "-F", "-d", root}
	if size < 1<<20 {
		args = append(args, "-b", "1024", "-N", "32", "-O", "^has_journal,^resize_inode")
	}
	if p.Options != "" {
		args = append(args, "-O", p.Options)
	}
	if p.UUID != "" {
		args = append(args, "-U", p.UUID)
	}
	args = append(args, img, fmt.Sprintf("%dk", size>>10))
	hosttools.Run(t, "mkfs.ext4", args...)
	return readFile(t, img)
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
