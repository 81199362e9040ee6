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
// with a Boot Loader Specification entry, as `vmm run --boot-disk` alone:
// the kernel and initramfs come from the disk, the entry's options come
// first on the command line, and the disk is the guest's first virtio
// disk.
func TestBootDisk(t *testing.T) {
	t.Parallel()
	kernel, err := os.ReadFile(guestimage.BzImage(t))
	require.NoError(t, err)
	initrd, err := os.ReadFile(guestimage.InitrdWithRun(t, `read -r size < /sys/block/vda/size
read -r cl < /proc/cmdline
echo "kubevmm-test: vda=$size cmdline=[$cl]"
`, nil))
	require.NoError(t, err)
	img := disktest.Build(t, disktest.Disk{Label: "gpt", Qcow2: true, Parts: []disktest.Part{{MiB: 64, Files: map[string][]byte{
		"boot/loader/entries/guest-6.1.conf": []byte("title test guest\nversion 6.1\nlinux /boot/bzImage-6.1\ninitrd /boot/initramfs-6.1.cpio\noptions root=/dev/vda1 kubevmm.entry=bls\n"),
		"boot/bzImage-6.1":                   kernel,
		"boot/initramfs-6.1.cpio":            initrd,
	}}}})

	r := vmm(t, "run", "--boot-disk", img+",format=qcow2", "--memory", "128M", "--console", "stdio")
	require.Equal(t, 0, r.code, "stderr: %s\nconsole:\n%s", r.stderr, r.stdout)
	assert.Regexp(t, `kubevmm-guest: cpus=1 online=0 mem_kib=\d+`, r.stdout)
	m := regexp.MustCompile(`kubevmm-test: vda=(\d+) cmdline=\[([^\]]*)\]`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, "console:\n%s", r.stdout)
	// 1 MiB + the 64 MiB partition + 1 MiB for the backup GPT, in sectors
	assert.Equal(t, "135168", m[1], "the boot disk is /dev/vda")
	assert.Regexp(t, `^root=/dev/vda1 kubevmm\.entry=bls console=ttyS0 `, m[2], "the entry's options, then the VMM's")
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
		{"bad option", []string{"run", "--boot-disk", empty + ",boot"}, `unknown option "boot"`},
		{"with --kernel", []string{"run", "--boot-disk", empty, "--kernel", empty}, "drop --kernel/--initrd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertOneLineError(t, vmm(t, tc.args...), tc.want)
		})
	}
}
