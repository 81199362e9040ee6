package disk_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/boot/disk"
	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

const rootUUID = "6c3a4b0e-1f2d-4c5b-9a8e-7d6c5b4a3921"

func find(t *testing.T, d disktest.Disk) (*disk.Boot, error) {
	t.Helper()
	path := disktest.Build(t, d)
	f := block.FormatRaw
	if d.Qcow2 {
		f = block.FormatQcow2
	}
	img, err := block.Open(path, block.Options{Format: f, ReadOnly: true})
	require.NoError(t, err)
	defer img.Close()
	return disk.Find(img, int64(img.Size()))
}

// big is a file larger than one extent of small blocks would hold, with
// content that shows any misplaced block.
func big(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/4096) ^ seed ^ byte(i)
	}
	return b
}

const debianGrub = `
if [ -s $prefix/grubenv ]; then
  load_env
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="%s"
fi
function load_video {
  if [ x$feature_all_video_module = xy ]; then
    insmod all_video
  fi
}
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux $menuentry_id_option 'gnulinux-simple-x' {
	load_video
	insmod ext2
	search --no-floppy --fs-uuid --set=root x
	echo	'Loading Linux 6.1.0-13-amd64 ...'
	linux	/boot/vmlinuz-6.1.0-13-amd64 root=UUID=x ro quiet $vt_handoff
	echo	'Loading initial ramdisk ...'
	initrd	/boot/initrd.img-6.1.0-13-amd64
}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-x' {
	menuentry 'Debian GNU/Linux, with Linux 6.1.0-12-amd64' --class debian $menuentry_id_option 'gnulinux-6.1.0-12-amd64-advanced-x' {
		linux	($root)/boot/vmlinuz-6.1.0-12-amd64 root=UUID=x ro single
		initrd	/boot/intel-ucode.img /boot/initrd.img-6.1.0-12-amd64
	}
}
`

func TestFindEntry(t *testing.T) {
	k13, i13 := big(1, 300_000), big(2, 70_000)
	k12, i12 := big(3, 200_000), big(4, 50_000)
	ucode := []byte("microcode")
	for _, tc := range []struct {
		name                string
		disk                disktest.Disk
		kernel, initrd      []byte
		cmdline, sourcePart string
	}{
		{
			name: "BLS on the root filesystem: highest version",
			disk: disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{
				"boot/loader/entries/a-6.1.0-9.conf":  []byte("title old\nversion 6.1.0-9\nlinux /boot/vmlinuz-6.1.0-12\noptions root=/dev/vda1 old\n"),
				"boot/loader/entries/b-6.1.0-13.conf": []byte("title new\nversion 6.1.0-13\nlinux /boot/vmlinuz-6.1.0-13\ninitrd /boot/initrd.img-6.1.0-13\noptions root=/dev/vda1\noptions quiet\n"),
				"boot/loader/entries/c-6.1.0-10.conf": []byte("title mid\nversion 6.1.0-10\nlinux /boot/vmlinuz-6.1.0-12\n"),
				"boot/vmlinuz-6.1.0-13":               k13, "boot/initrd.img-6.1.0-13": i13,
				"boot/vmlinuz-6.1.0-12": k12,
			}}}},
			kernel: k13, initrd: i13, cmdline: "root=/dev/vda1 quiet", sourcePart: "partition 1 (ext4) /boot/loader/entries/b-6.1.0-13.conf",
		},
		{
			name: "BLS on a separate /boot (MBR), loader.conf default, qcow2",
			disk: disktest.Disk{Label: "dos", Qcow2: true, Parts: []disktest.Part{
				{Files: map[string][]byte{
					"loader/loader.conf":             []byte("timeout 3\ndefault a-*\n"),
					"loader/entries/a-6.1.0-12.conf": []byte("version 6.1.0-12\nlinux /vmlinuz-6.1.0-12\ninitrd /initrd.img-6.1.0-12\noptions root=/dev/vda2 ro\n"),
					"loader/entries/b-6.1.0-13.conf": []byte("version 6.1.0-13\nlinux /vmlinuz-6.1.0-13\n"),
					"vmlinuz-6.1.0-12":               k12,
					"initrd.img-6.1.0-12":            i12,
				}},
				{Files: map[string][]byte{"etc/hostname": []byte("guest\n")}},
			}},
			kernel: k12, initrd: i12, cmdline: "root=/dev/vda2 ro", sourcePart: "partition 1 (ext4) /loader/entries/a-6.1.0-12.conf",
		},
		{
			name: "grub.cfg only: default 0",
			disk: disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{
				"boot/grub/grub.cfg":          []byte(strings.ReplaceAll(debianGrub, "%s", "0")),
				"boot/vmlinuz-6.1.0-13-amd64": k13, "boot/initrd.img-6.1.0-13-amd64": i13,
			}}}},
			kernel: k13, initrd: i13, cmdline: "root=UUID=x ro quiet", sourcePart: `partition 1 (ext4) /boot/grub/grub.cfg menuentry "Debian GNU/Linux"`,
		},
		{
			name: "grub.cfg on a separate /boot: default into a submenu, $root-less paths under /boot, two initrds",
			disk: disktest.Disk{Label: "gpt", Parts: []disktest.Part{
				{Files: map[string][]byte{"etc/fstab": []byte("")}},
				{Files: map[string][]byte{
					"grub/grub.cfg":             []byte(strings.ReplaceAll(debianGrub, "%s", "gnulinux-advanced-x>Debian GNU/Linux, with Linux 6.1.0-12-amd64")),
					"vmlinuz-6.1.0-12-amd64":    k12,
					"intel-ucode.img":           ucode,
					"initrd.img-6.1.0-12-amd64": i12,
				}},
			}},
			kernel: k12, initrd: append(append([]byte(nil), ucode...), i12...), cmdline: "root=UUID=x ro single",
			sourcePart: `partition 2 (ext4) /grub/grub.cfg menuentry "Debian GNU/Linux, with Linux 6.1.0-12-amd64"`,
		},
		{
			name: "newest /boot/vmlinuz-* with its initrd, root by UUID",
			disk: disktest.Disk{Label: "gpt", Parts: []disktest.Part{{UUID: rootUUID, Files: map[string][]byte{
				"boot/vmlinuz-6.1.0-9-amd64":  k12,
				"boot/vmlinuz-6.1.0-13-amd64": k13, "boot/initrd.img-6.1.0-13-amd64": i13,
				"boot/vmlinuz-6.1.0-10-amd64": k12,
			}}}},
			kernel: k13, initrd: i13, cmdline: "root=UUID=" + rootUUID + " ro", sourcePart: "partition 1 (ext4) /boot/vmlinuz-6.1.0-13-amd64",
		},
		{
			name: "vmlinuz on a separate /boot: root is the filesystem with /etc",
			disk: disktest.Disk{Label: "dos", Parts: []disktest.Part{
				{Files: map[string][]byte{"vmlinuz-6.1.0-13-amd64": k13, "initramfs-6.1.0-13-amd64.img": i13}},
				{UUID: rootUUID, Files: map[string][]byte{"etc/fstab": []byte("")}},
			}},
			kernel: k13, initrd: i13, cmdline: "root=UUID=" + rootUUID + " ro", sourcePart: "partition 1 (ext4) /vmlinuz-6.1.0-13-amd64",
		},
		{
			name: "vfat ESP (FAT32) with BLS entries as systemd-boot reads them, root on ext4",
			disk: disktest.Disk{Label: "gpt", Parts: []disktest.Part{
				{VFAT: true, FAT: 32, MiB: 40, Files: map[string][]byte{
					"loader/loader.conf":                        []byte("default debian-6.1.0-12-amd64.conf\n"),
					"loader/entries/debian-6.1.0-12-amd64.conf": []byte("title Debian\nversion 6.1.0-12\nlinux /EFI/debian/vmlinuz-6.1.0-12-amd64\ninitrd /EFI/debian/initrd.img-6.1.0-12-amd64\noptions root=/dev/vda2 rw\n"),
					"loader/entries/debian-6.1.0-13-amd64.conf": []byte("title Debian\nversion 6.1.0-13\nlinux /EFI/debian/vmlinuz-6.1.0-13-amd64\n"),
					"EFI/debian/vmlinuz-6.1.0-12-amd64":         k12,
					"EFI/debian/initrd.img-6.1.0-12-amd64":      i12,
				}},
				{Files: map[string][]byte{"etc/fstab": nil}},
			}},
			kernel: k12, initrd: i12, cmdline: "root=/dev/vda2 rw", sourcePart: "partition 1 (vfat) /loader/entries/debian-6.1.0-12-amd64.conf",
		},
		{
			name: "vfat /boot (FAT16, MBR) with only vmlinuz-*: root is the ext4 beside it",
			disk: disktest.Disk{Label: "dos", Parts: []disktest.Part{
				{VFAT: true, Files: map[string][]byte{"vmlinuz-6.1.0-13-amd64": k13, "initrd.img-6.1.0-13-amd64": i13, "vmlinuz-6.1.0-9-amd64": k12}},
				{UUID: rootUUID, Files: map[string][]byte{"etc/fstab": nil}},
			}},
			kernel: k13, initrd: i13, cmdline: "root=UUID=" + rootUUID + " ro", sourcePart: "partition 1 (vfat) /vmlinuz-6.1.0-13-amd64",
		},
		{
			name: "vfat /boot (FAT12) with grub.cfg, 8.3 names match case-insensitively",
			disk: disktest.Disk{Label: "dos", Parts: []disktest.Part{
				{VFAT: true, MiB: 2, Files: map[string][]byte{"grub/grub.cfg": []byte("menuentry 'x' {\n linux /boot/kernel.bin root=/dev/vda1\n initrd /boot/initrd\n}\n"), "KERNEL.BIN": k13, "initrd": i13}},
			}},
			kernel: k13, initrd: i13, cmdline: "root=/dev/vda1", sourcePart: `partition 1 (vfat) /grub/grub.cfg menuentry "x"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := find(t, tc.disk)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(tc.kernel, b.Kernel), "kernel: %d bytes, want %d", len(b.Kernel), len(tc.kernel))
			assert.True(t, bytes.Equal(tc.initrd, b.Initrd), "initrd: %d bytes, want %d", len(b.Initrd), len(tc.initrd))
			assert.Equal(t, tc.cmdline, b.Cmdline)
			assert.Equal(t, tc.sourcePart, b.Source)
		})
	}
}

func TestFindErrors(t *testing.T) {
	xfs := append([]byte("XFSB"), make([]byte, 4096)...)
	btrfs := make([]byte, 0x20000)
	copy(btrfs[0x10040:], "_BHRfS_M")
	for _, tc := range []struct {
		name string
		disk disktest.Disk
		want string
	}{
		{"no partition table", disktest.Disk{Parts: []disktest.Part{{Files: map[string][]byte{"boot/vmlinuz-1": []byte("k")}}}}, "no partition table"},
		{"no boot entry", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{"etc/fstab": nil}}}},
			"no boot entry (no loader/entries/*.conf, grub.cfg or vmlinuz-*) on partition 1 (ext4)"},
		{"xfs", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Raw: xfs}}}, "no readable filesystem: partition 1: xfs is not supported"},
		{"btrfs", disktest.Disk{Label: "dos", Parts: []disktest.Part{{Raw: btrfs}}}, "no readable filesystem: partition 1: btrfs is not supported"},
		{"unknown filesystem", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Raw: []byte("hello")}}}, "partition 1: unknown filesystem"},
		{"unsupported ext4 feature", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Options: "inline_data"}}}, "ext4: feature inline_data is not supported"},
		{"kernel file missing", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{
			"boot/loader/entries/x.conf": []byte("linux /vmlinuz-gone\noptions quiet\n")}}}},
			"partition 1 (ext4) /boot/loader/entries/x.conf: kernel /vmlinuz-gone unreadable: no such file or directory"},
		{"initrd file missing", disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{
			"boot/grub/grub.cfg": []byte("menuentry 'x' {\n linux /boot/vmlinuz\n initrd /boot/initrd.gone\n}\n"),
			"boot/vmlinuz":       []byte("kernel")}}}},
			"initrd /boot/initrd.gone unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := find(t, tc.disk)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The reader handles what Debian's mkfs.ext4 makes by default
// (metadata_csum, extents, 64bit, flex_bg, huge files) and the ext2/3
// layout (block maps), with small and large blocks.
func TestExt4Variants(t *testing.T) {
	data := big(7, 5<<20+123)
	for _, opts := range []string{"", "^extent,^64bit,^flex_bg,^metadata_csum", "^has_journal"} {
		t.Run(opts, func(t *testing.T) {
			files := map[string][]byte{"boot/vmlinuz-1": data}
			for i := 0; i < 300; i++ { // a directory over one block
				files["boot/many-entries-to-fill-blocks-"+strings.Repeat("x", i%40)+string(rune('a'+i%26))+string(rune('a'+i/26))] = nil
			}
			b, err := find(t, disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Options: opts, UUID: rootUUID, Files: files}}})
			require.NoError(t, err)
			assert.True(t, bytes.Equal(data, b.Kernel))
		})
	}
}
