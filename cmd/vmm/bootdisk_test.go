package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// TestBootDisk boots a qcow2 GPT disk whose ext4 partition holds /boot
// with a Boot Loader Specification entry, in both spellings: `vmm run
// --boot-disk` alone, where the disk is the guest's first virtio disk, and
// `--disk PATH,boot` after another disk, where it keeps its place (vdb).
// Both open it read-only: the two VMs share the image.
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
		{"--boot-disk", []string{"--boot-disk", img + ",format=qcow2,ro"}, bootSectors, "none"},
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

// TestBootDiskDistroKernel boots Debian's cloud kernel (its .deb from apt,
// hack/distro-kernel.sh) from a raw GPT disk with nothing but
// /boot/vmlinuz-VERSION on an ext4 root, the newest-vmlinuz fallback:
// `vmm run --boot-disk` finds it and boots the bzImage through its own
// decompressor until the kernel's banner, then stops the VM. The disk has
// no initramfs or root filesystem to get further; on hosts that emulate
// guest kernel mode this kernel would take many minutes to reach
// userspace anyway.
func TestBootDiskDistroKernel(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../hack/distro-kernel.sh")
	require.NoError(t, err)
	cmd := exec.Command(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 75 {
		t.Skipf("Debian's cloud kernel cannot be obtained here: %s", strings.TrimSpace(stderr.String()))
	}
	require.NoError(t, err, "hack/distro-kernel.sh: %s", stderr.String())
	dir := strings.TrimSpace(string(out))
	kernels, err := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	require.NoError(t, err)
	require.Len(t, kernels, 1, "in %s", dir)
	kernel, err := os.ReadFile(kernels[0])
	require.NoError(t, err)
	img := disktest.Build(t, disktest.Disk{Label: "gpt", Parts: []disktest.Part{{MiB: 64, Files: map[string][]byte{
		"boot/" + filepath.Base(kernels[0]): kernel,
	}}}})

	// earlyprintk: the banner comes at the start of start_kernel, not
	// when the serial driver registers its console much later.
	run := vmmCommand("run", "--boot-disk", img, "--memory", "256M", "--console", "stdio",
		"--cmdline", machine.DefaultCmdline+" earlyprintk=ttyS0")
	stdout, err := run.StdoutPipe()
	require.NoError(t, err)
	var vmmErr bytes.Buffer
	run.Stderr = &vmmErr
	t0 := time.Now()
	require.NoError(t, run.Start())
	defer run.Process.Kill()
	console := &bytes.Buffer{}
	r := bufio.NewReader(stdout)
	require.NoError(t, readUntil(r, console, "Command line: "), "stderr: %s\nconsole:\n%s", vmmErr.String(), console.String())
	if _, line, _ := strings.Cut(console.String(), "Command line: "); !strings.Contains(line, "\n") {
		rest, err := r.ReadString('\n')
		require.NoError(t, err, "the rest of the command line")
		console.WriteString(rest)
	}
	t.Logf("the distribution kernel's first lines after %v:\n%s", time.Since(t0).Round(time.Second), console.String())
	assert.Regexp(t, `Linux version \S+-cloud-amd64 \(debian-kernel@lists\.debian\.org\)`, console.String())
	assert.Regexp(t, `Command line: root=UUID=[0-9a-f-]{36} ro console=ttyS0 `, console.String(), "the fallback's options, then the VMM's")
	go func() { _, _ = io.Copy(io.Discard, r) }()
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), "SIGTERM stops the VM and vmm exits 0; stderr: %s", vmmErr.String())
}
