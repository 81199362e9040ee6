package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

func TestParseDisk(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want machine.DiskConfig
		bus  string
		boot bool
		err  string
	}{
		{in: "/d.img", want: machine.DiskConfig{Path: "/d.img", Format: block.FormatRaw}, bus: "virtio"},
		{in: "/d.qcow2,ro,format=qcow2,serial=abc", want: machine.DiskConfig{Path: "/d.qcow2", Format: block.FormatQcow2, ReadOnly: true, Serial: "abc"}, bus: "virtio"},
		{in: "/a,,b.img,ro", want: machine.DiskConfig{Path: "/a,b.img", Format: block.FormatRaw, ReadOnly: true}, bus: "virtio"},
		{in: "/w.img,bus=sata", want: machine.DiskConfig{Path: "/w.img", Format: block.FormatRaw}, bus: "sata"},
		{in: "/b.qcow2,format=qcow2,boot", want: machine.DiskConfig{Path: "/b.qcow2", Format: block.FormatQcow2}, bus: "virtio", boot: true},
		{in: "/q.img,queues=2", want: machine.DiskConfig{Path: "/q.img", Format: block.FormatRaw, Queues: 2}, bus: "virtio"},
		{in: "/q.img,queues=0", err: "want 1..64"},
		{in: "/q.img,queues=65", err: "want 1..64"},
		{in: "/q.img,queues=2,bus=sata", err: "a sata disk has one queue"},
		{in: "/b.img,boot=yes", err: "unknown option"},
		{in: "/w.img,bus=scsi", err: "unknown option"},
		{in: "", err: "missing image path"},
		{in: "/d.img,format=vmdk", err: "unknown image format"},
		{in: "/d.img,serial=123456789012345678901", err: "longer than 20"},
		{in: "/d.img,rw", err: "unknown option"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseDisk(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.DiskConfig)
			assert.Equal(t, tc.bus, got.Bus)
			assert.Equal(t, tc.boot, got.Boot)
		})
	}
}

func TestParseNICAndVsock(t *testing.T) {
	n, err := parseNIC("tap=tap0,mac=52:54:00:00:00:01")
	require.NoError(t, err)
	assert.Equal(t, "tap0", n.Tap)
	assert.Equal(t, "52:54:00:00:00:01", n.MAC.String())
	assert.Equal(t, "virtio", n.Model)
	n, err = parseNIC("tap=tap0,mac=52:54:00:00:00:01,model=e1000")
	require.NoError(t, err)
	assert.Equal(t, "e1000", n.Model)
	n, err = parseNIC("tap=tap0,mac=52:54:00:00:00:01,queues=4")
	require.NoError(t, err)
	assert.Equal(t, 4, n.Queues)
	for _, bad := range []string{"tap=tap0", "mac=52:54:00:00:00:01", "tap=tap0,mac=01:00:5e:00:00:01", "tap=averyveryverylongname,mac=52:54:00:00:00:01", "tap=t,mac=zz", "tap=t,mac=52:54:00:00:00:01,mtu=9000", "tap=t,mac=52:54:00:00:00:01,model=rtl8139",
		"tap=t,mac=52:54:00:00:00:01,queues=0", "tap=t,mac=52:54:00:00:00:01,queues=65", "tap=t,mac=52:54:00:00:00:01,queues=two"} {
		_, err := parseNIC(bad)
		assert.Error(t, err, bad)
	}
	v, err := parseVsock("cid=3,socket=/run/v.sock")
	require.NoError(t, err)
	assert.Equal(t, machine.VsockConfig{CID: 3, Socket: "/run/v.sock"}, v)
	for _, bad := range []string{"cid=2,socket=/x", "cid=x,socket=/x", "cid=5", "socket=/x", "cid=5,socket=/x,port=1"} {
		_, err := parseVsock(bad)
		assert.Error(t, err, bad)
	}
}

// Bad device flags and unusable devices are one-line errors, status 2.
func TestRunDeviceFlagErrors(t *testing.T) {
	kernel := writeFile(t, "k", []byte("not a kernel"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--disk", "x.img,bogus"}, `--disk "x.img,bogus": unknown option "bogus"`},
		{[]string{"--net", "tap=t"}, "need both tap=NAME and mac=MAC"},
		{[]string{"--vsock", "cid=1,socket=/x"}, "--vsock"},
		{[]string{"--disk", "/nonexistent/disk.img"}, "disk 0: open raw image"},
		{[]string{"--disk", kernel + ",format=qcow2"}, "no qcow2 magic"},
		{[]string{"--disk", kernel + ",bus=sata"}, "bus=sata needs --backend qemu"},
		{[]string{"--net", "tap=t0,mac=52:54:00:00:00:01,model=e1000"}, "model=e1000 needs --backend qemu"},
		{[]string{"--backend", "xen"}, `--backend "xen"`},
		{[]string{"--backend", "qemu", "--rng"}, "kubevmm backend only"},
		{[]string{"--backend", "qemu", "--scsi"}, "kubevmm backend only"},
		{[]string{"--backend", "qemu", "--accel", "hvf"}, `--accel "hvf"`},
		{[]string{"--vsock-socket", "/x"}, "--vsock-socket is for --incoming"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			assertOneLineError(t, vmm(t, append([]string{"run", "--kernel", kernel}, tc.args...)...), tc.want)
		})
	}
}

// TestQEMUBackend boots the test guest standalone through the QEMU
// fallback (TCG: the host's KVM can't run QEMU's guests at a useful speed
// here, see README), with a SATA disk the kubevmm VMM would refuse. The
// console is relayed through vmm's own console hub, and the guest's
// reboot ends vmm with status 0.
func TestQEMUBackend(t *testing.T) {
	t.Parallel()
	img := writeFile(t, "sata.img", make([]byte, 1<<20))
	cmd := vmmCommand("run", "--backend", "qemu", "--accel", "tcg",
		"--kernel", guestimage.BzImage(t), "--initrd", guestimage.Initramfs(t),
		"--cmdline", "console=ttyS0 reboot=k panic=-1", "--memory", "128M",
		"--disk", img+",bus=sata", "--console", "stdio")
	r := runCmd(t, cmd)
	require.Equal(t, 0, r.code, "stderr: %s\nstdout: %s", r.stderr, r.stdout)
	assert.Regexp(t, `kubevmm-guest: cpus=1 online=0 mem_kib=\d+`, r.stdout)
	assert.Contains(t, r.stdout, "kubevmm-guest: powering off")
}
