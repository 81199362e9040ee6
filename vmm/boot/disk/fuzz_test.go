package disk

import (
	"bytes"
	"os"
	"path"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

// seeds are small disks built by the real tools: GPT and MBR, a BLS
// entry, a grub.cfg, a vmlinuz.
func seeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, d := range []disktest.Disk{
		{Label: "gpt", Compact: true, Parts: []disktest.Part{{KiB: 128, Files: map[string][]byte{
			"boot/loader/entries/a-1.conf": []byte("version 1\nlinux /boot/vmlinuz-1\ninitrd /boot/initrd.img-1\noptions root=/dev/vda1\n"),
			"boot/loader/loader.conf":      []byte("default a-*\n"),
			"boot/vmlinuz-1":               bytes.Repeat([]byte("kernel"), 3000),
			"boot/initrd.img-1":            []byte("initrd"),
		}}}},
		{Label: "dos", Compact: true, Parts: []disktest.Part{{KiB: 128, Files: map[string][]byte{
			"grub/grub.cfg":  []byte("set default=\"0\"\nmenuentry 'x' --id y {\n linux ($root)/vmlinuz-2 ro\n initrd /boot/i\n}\n"),
			"vmlinuz-2":      []byte("kernel"),
			"boot/vmlinuz-3": []byte("kernel"),
		}}}},
	} {
		b, err := os.ReadFile(disktest.Build(f, d))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzFind feeds whole disks (partition table and filesystems are guest
// data) to Find: it may fail, never panic, and its work is bounded by the
// limits on what it reads.
func FuzzFind(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Find(bytes.NewReader(data), int64(len(data)))
		if err == nil && len(b.Kernel) == 0 && b.Source == "" {
			t.Fatal("success without a kernel or a source")
		}
	})
}

// FuzzExt4 mutates a filesystem image alone, so that the mutations hit
// the superblock, group descriptors, inodes, extents and directories.
func FuzzExt4(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s[34*512 : 34*512+128<<10])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, err := openFS(bytes.NewReader(data), int64(len(data)))
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
