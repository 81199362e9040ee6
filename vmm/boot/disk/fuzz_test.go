package disk

import (
	"bytes"
	"os"
	"path"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

// Fuzz inputs are disk (or filesystem) images with their trailing zeros
// cut: the fuzzer minimizes every new input it finds, which takes as long
// as the input is, and the images are mostly zeros. padded gives them
// their size back.
const (
	fuzzFSSize   = 128 << 10
	fuzzDiskSize = 34*512 + fuzzFSSize + 33*512
)

func padded(data []byte, size int) *bytes.Reader {
	if len(data) < size {
		data = append(data, make([]byte, size-len(data))...)
	}
	return bytes.NewReader(data)
}

// seeds are small disks built by the real tools: GPT and MBR, ext4 and
// vfat, a BLS entry, a grub.cfg, a vmlinuz; the backup GPT is left out
// (Find does not read it) and trailing zeros are cut.
func seeds(f *testing.F) (disks, filesystems [][]byte) {
	for _, d := range []disktest.Disk{
		{Label: "gpt", Compact: true, Parts: []disktest.Part{{KiB: 128, Files: map[string][]byte{
			"boot/loader/entries/a-1.conf": []byte("version 1\nlinux /boot/vmlinuz-1\ninitrd /boot/initrd.img-1\noptions root=/dev/vda1\n"),
			"boot/loader/loader.conf":      []byte("default a-*\n"),
			"boot/vmlinuz-1":               bytes.Repeat([]byte("kernel"), 400),
			"boot/initrd.img-1":            []byte("initrd"),
		}}}},
		{Label: "dos", Compact: true, Parts: []disktest.Part{{KiB: 128, Files: map[string][]byte{
			"grub/grub.cfg":  []byte("set default=\"0\"\nmenuentry 'x' --id y {\n linux ($root)/vmlinuz-2 ro\n initrd /boot/i\n}\n"),
			"vmlinuz-2":      []byte("kernel"),
			"boot/vmlinuz-3": []byte("kernel"),
		}}}},
		{Label: "gpt", Compact: true, Parts: []disktest.Part{{VFAT: true, KiB: 128, Files: map[string][]byte{
			"loader/entries/long-name-entry.conf": []byte("linux /vmlinuz\n"),
			"vmlinuz":                             []byte("kernel"),
		}}}},
	} {
		b, err := os.ReadFile(disktest.Build(f, d))
		if err != nil {
			f.Fatal(err)
		}
		fs := b[34*512 : 34*512+fuzzFSSize]
		disks = append(disks, bytes.TrimRight(b[:34*512+fuzzFSSize], "\x00"))
		filesystems = append(filesystems, bytes.TrimRight(fs, "\x00"))
	}
	return disks, filesystems
}

// FuzzFind feeds whole disks (partition table and filesystems are guest
// data) to Find: it may fail, never panic, and its work is bounded by the
// limits on what it reads.
func FuzzFind(f *testing.F) {
	disks, _ := seeds(f)
	for _, s := range disks {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := padded(data, fuzzDiskSize)
		b, err := Find(r, r.Size())
		if err == nil && len(b.Kernel) == 0 && b.Source == "" {
			t.Fatal("success without a kernel or a source")
		}
	})
}

// FuzzFS mutates a filesystem image alone (ext4 or vfat), so that the
// mutations hit the superblock, group descriptors, inodes, extents, FAT
// and directories: every file and directory is read.
func FuzzFS(f *testing.F) {
	_, fss := seeds(f)
	for _, s := range fss {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := padded(data, fuzzFSSize)
		fs, err := openFS(r, r.Size())
		if err != nil {
			return
		}
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			names, err := fs.ReadDir(dir)
			if err != nil || depth > 4 {
				return
			}
			for _, n := range names {
				p := path.Join(dir, n)
				_, _ = fs.ReadFile(p, 1<<20)
				walk(p, depth+1)
			}
		}
		walk("/", 0)
	})
}
