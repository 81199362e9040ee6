package disk

import (
	"bytes"
	"os"
	"path"
	"testing"

	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

// Fuzz inputs are disk (or filesystem) images with their runs of zeros
// packed: the fuzzer minimizes every input that finds new code, which
// takes as long as the input is, and the images are mostly zeros. In the
// packed form a 0 byte is followed by the run's length minus one; expand
// unpacks any input into an image of a fixed size.
const (
	fuzzFSSize   = 128 << 10
	fuzzDiskSize = 34*512 + fuzzFSSize + 33*512
)

func expand(data []byte, size int) *bytes.Reader {
	out := make([]byte, 0, size+256)
	for i := 0; i < len(data) && len(out) < size; i++ {
		if data[i] == 0 && i+1 < len(data) {
			i++
			out = append(out, make([]byte, int(data[i])+1)...)
			continue
		}
		out = append(out, data[i])
	}
	if len(out) > size {
		out = out[:size]
	}
	return bytes.NewReader(append(out, make([]byte, size-len(out))...))
}

func pack(img []byte) []byte {
	var out []byte
	for i := 0; i < len(img); {
		if img[i] != 0 {
			out = append(out, img[i])
			i++
			continue
		}
		n := 1
		for n < 256 && i+n < len(img) && img[i+n] == 0 {
			n++
		}
		out = append(out, 0, byte(n-1))
		i += n
	}
	return out
}

func packed(f *testing.F, img []byte, size int) []byte {
	p := pack(img)
	got := make([]byte, size)
	if _, err := expand(p, size).Read(got); err != nil || !bytes.Equal(got[:len(img)], img) {
		f.Fatal("pack/expand do not round-trip")
	}
	return p
}

// seeds are small disks built by the real tools: GPT and MBR, ext4 and
// vfat, a BLS entry, a grub.cfg, a vmlinuz; the backup GPT is left out
// (Find does not read it).
func seeds(f *testing.F) (disks, filesystems [][]byte) {
	for _, d := range []disktest.Disk{
		{Label: "gpt", Compact: true, Parts: []disktest.Part{{KiB: 128, Files: map[string][]byte{
			"boot/loader/entries/a-1.conf": []byte("version 1\nlinux /boot/vmlinuz-1\ninitrd /boot/initrd.img-1\noptions root=/dev/vda1\n"),
			"boot/loader/loader.conf":      []byte("default a-*\n"),
			"boot/vmlinuz-1":               []byte("kernel"),
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
		disks = append(disks, packed(f, b[:34*512+fuzzFSSize], fuzzDiskSize))
		filesystems = append(filesystems, packed(f, b[34*512:34*512+fuzzFSSize], fuzzFSSize))
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
		r := expand(data, fuzzDiskSize)
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
		r := expand(data, fuzzFSSize)
		fs, err := openFS(r, r.Size())
		if err != nil {
			return
		}
		// Directories may link to themselves: at most this many visits.
		budget := 256
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			names, err := fs.ReadDir(dir)
			if err != nil || depth > 4 {
				return
			}
			for _, n := range names {
				if budget--; budget < 0 {
					return
				}
				p := path.Join(dir, n)
				_, _ = fs.ReadFile(p, 1<<20)
				walk(p, depth+1)
			}
		}
		walk("/", 0)
	})
}
