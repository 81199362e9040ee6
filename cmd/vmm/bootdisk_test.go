package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

// TestBootDisk boots a qcow2 GPT disk whose ext4 partition holds /boot
// with a Boot Loader Specification entry, in both spellings: `vmm run
// --boot-disk` alone, where the disk is the guest's first virtio disk, and
// `--disk PATH,ro,boot` after another disk, where it keeps its place (vdb;
// read-only, as both VMs share the image).
// The kernel and initramfs come from the disk and the entry's options
// come first on the command line.
func TestBootDisk(t *testing.T) {
	t.Parallel()
	kernel, err := os.ReadFile(guestimage.BzImage(t))
	require.NoError(t, err)
	initrd, err := os.ReadFile(guestimage.InitrdWithRun(t, `read -r a < /sys/block/vda/size
b=none
[ -e /sys/block/vdb ] && read -r b < /sys/block/vdb/size
read -r cl < /proc/cmdline
echo "kubevmm-test: vda=$a vdb=$b cmdline=[$cl]"
`, nil))
	require.NoError(t, err)
	img := disktest.Build(t, disktest.Disk{Label: "gpt", Qcow2: true, Parts: []disktest.Part{
		disktest.BLSPart("6.1", kernel, initrd, "root=/dev/vda1 kubevmm.entry=bls"),
	}})
	scratch := writeFile(t, "scratch.raw", make([]byte, 1<<20))
	// 1 MiB + the 64 MiB partition + 1 MiB for the backup GPT, in sectors
	const bootSectors = "135168"
	for _, tc := range []struct {
		name     string
		args     []string
		vda, vdb string
	}{
		{"--boot-disk", []string{"--boot-disk", img + ",format=qcow2"}, bootSectors, "none"},
		{"--disk PATH,boot", []string{"--disk", scratch, "--disk", img + ",format=qcow2,ro,boot"}, "2048", bootSectors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := vmm(t, append([]string{"run", "--memory", "128M", "--console", "stdio"}, tc.args...)...)
			require.Equal(t, 0, r.code, "stderr: %s\nconsole:\n%s", r.stderr, r.stdout)
			assert.Regexp(t, `kubevmm-guest: cpus=1 online=0 mem_kib=\d+`, r.stdout)
			m := regexp.MustCompile(`kubevmm-test: vda=(\w+) vdb=(\w+) cmdline=\[([^\]]*)\]`).FindStringSubmatch(r.stdout)
			require.NotNil(t, m, "console:\n%s", r.stdout)
			assert.Equal(t, tc.vda, m[1], "vda's size in sectors")
			assert.Equal(t, tc.vdb, m[2], "vdb's size in sectors")
			assert.Regexp(t, `^root=/dev/vda1 kubevmm\.entry=bls console=ttyS0 `, m[3], "the entry's options, then the VMM's")
		})
	}
}

func TestBootDiskErrors(t *testing.T) {
	empty := writeFile(t, "empty.raw", make([]byte, 1<<20))
	noEntry := disktest.Build(t, disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{"etc/fstab": nil}}}})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no partition table", []string{"run", "--boot-disk", empty}, "run: --boot-disk " + empty + ": no partition table (neither GPT nor MBR)"},
		{"no boot entry", []string{"run", "--boot-disk", noEntry}, noEntry + ": no boot entry"},
		{"wrong format", []string{"run", "--boot-disk", empty + ",format=qcow2"}, empty},
		{"missing image", []string{"run", "--boot-disk", "/nonexistent/disk.qcow2,format=qcow2"}, "/nonexistent/disk.qcow2"},
		{"bad option", []string{"run", "--boot-disk", empty + ",bootable"}, `unknown option "bootable"`},
		{"with --kernel", []string{"run", "--boot-disk", empty, "--kernel", empty}, "run: --boot-disk " + empty + " takes the kernel and initrd from the disk; drop --kernel/--initrd"},
		{"--disk boot: no boot entry", []string{"run", "--disk", empty, "--disk", noEntry + ",boot"}, "run: --disk " + noEntry + ": no boot entry"},
		{"--disk boot with --kernel", []string{"run", "--disk", empty + ",boot", "--kernel", empty}, "run: --disk " + empty + ",boot takes the kernel and initrd from the disk; drop --kernel/--initrd"},
		{"--disk boot with --initrd", []string{"run", "--initrd", empty, "--disk", empty + ",boot"}, "drop --kernel/--initrd"},
		{"two --disk boot", []string{"run", "--disk", empty + ",boot", "--disk", noEntry + ",ro,boot"}, "run: two boot disks (--disk " + empty + ",boot and --disk " + noEntry + ",ro,boot): boot from one"},
		{"--boot-disk and --disk boot", []string{"run", "--boot-disk", noEntry, "--disk", empty + ",boot"}, "run: two boot disks (--boot-disk " + noEntry + " and --disk " + empty + ",boot): boot from one"},
		{"--disk boot on qemu", []string{"run", "--backend", "qemu", "--disk", noEntry + ",boot"}, "run: booting a disk (--disk " + noEntry + ",boot) is for the kubevmm backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertOneLineError(t, vmm(t, tc.args...), tc.want)
		})
	}
}
