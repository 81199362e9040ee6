// Package disktest builds partitioned disk images with the real tools
// (sfdisk, mkfs.ext4 -d, qemu-img): for tests (Build), and for the
// programs that make bootable test disks (Write: hack/bootdisk, the
// bench).
package disktest

import (
	"fmt"
	"io"
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

// BLSPart is a 64 MiB ext4 root filesystem whose /boot holds one Boot
// Loader Specification entry, loader/entries/guest-VERSION.conf, booting
// /boot/vmlinuz-VERSION with /boot/initramfs-VERSION.img (none if initrd
// is nil) and options: the layout of Fedora-style distribution images.
func BLSPart(version string, kernel, initrd []byte, options string) Part {
	entry := fmt.Sprintf("title test guest\nversion %s\nlinux /boot/vmlinuz-%s\n", version, version)
	files := map[string][]byte{"boot/vmlinuz-" + version: kernel}
	if initrd != nil {
		entry += fmt.Sprintf("initrd /boot/initramfs-%s.img\n", version)
		files["boot/initramfs-"+version+".img"] = initrd
	}
	files["boot/loader/entries/guest-"+version+".conf"] = []byte(entry + "options " + options + "\n")
	return Part{MiB: 64, Files: files}
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
	p, err := Write(t.TempDir(), d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Write builds the image in dir (disk.raw, or disk.qcow2 beside it, with
// the partitions' scratch files) and returns its path.
func Write(dir string, d Disk) (string, error) {
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
			var err error
			if data, err = fsImage(dir, i, p, size); err != nil {
				return "", err
			}
		}
		images = append(images, data)
		off += size
	}
	if err := writeRaw(raw, off+align, align, d, images); err != nil { // room for the backup GPT
		return "", err
	}
	if d.Label != "" {
		if err := program(hosttools.Find("sfdisk")).run(strings.NewReader(script.String()), "--no-reread", "--no-tell-kernel", raw); err != nil {
			return "", err
		}
	}
	if !d.Qcow2 {
		return raw, nil
	}
	q := filepath.Join(dir, "disk.qcow2")
	if err := program(hosttools.Find("qemu-img")).run(nil, "convert", "-f", "raw", "-O", "qcow2", raw, q); err != nil {
		return "", err
	}
	return q, nil
}

// writeRaw writes the partitions' images at their offsets into a sparse
// file of size bytes.
func writeRaw(path string, size, align int64, d Disk, images [][]byte) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := f.Truncate(size); err != nil {
		return err
	}
	off := align
	for i, data := range images {
		if _, err := f.WriteAt(data, off); err != nil {
			return err
		}
		off += d.Parts[i].size()
	}
	return nil
}

func fsImage(dir string, i int, p Part, size int64) ([]byte, error) {
	root := filepath.Join(dir, fmt.Sprintf("root%d", i))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	for name, data := range p.Files {
		fp := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(fp, data, 0o644); err != nil {
			return nil, err
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
		if err := program(hosttools.Find("mkfs.vfat")).run(nil, append(args, img, fmt.Sprint(size>>10))...); err != nil {
			return nil, err
		}
		tops, err := os.ReadDir(root)
		if err != nil {
			return nil, err
		}
		for _, e := range tops {
			if err := program(hosttools.Find("mcopy")).run(nil, "-s", "-i", img, filepath.Join(root, e.Name()), "::/"); err != nil {
				return nil, err
			}
		}
		return os.ReadFile(img)
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
	if err := program(hosttools.Find("mkfs.ext4")).run(nil, args...); err != nil {
		return nil, err
	}
	return os.ReadFile(img)
}

// tool is a host program found (and installed if missing) by hosttools.
type tool struct {
	path string
	err  error
}

func program(path string, err error) tool { return tool{path, err} }

// run runs the program and returns its output in the error if it fails.
func (t tool) run(stdin io.Reader, args ...string) error {
	if t.err != nil {
		return t.err
	}
	cmd := exec.Command(t.path, args...)
	cmd.Stdin = stdin
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", t.path, strings.Join(args, " "), err, out)
	}
	return nil
}
