package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

func TestParseDisk(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want machine.DiskConfig
		err  string
	}{
		{in: "/d.img", want: machine.DiskConfig{Path: "/d.img", Format: block.FormatRaw}},
		{in: "/d.qcow2,ro,format=qcow2,serial=abc", want: machine.DiskConfig{Path: "/d.qcow2", Format: block.FormatQcow2, ReadOnly: true, Serial: "abc"}},
		{in: "/a,,b.img,ro", want: machine.DiskConfig{Path: "/a,b.img", Format: block.FormatRaw, ReadOnly: true}},
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
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseNICAndVsock(t *testing.T) {
	n, err := parseNIC("tap=tap0,mac=52:54:00:00:00:01")
	require.NoError(t, err)
	assert.Equal(t, "tap0", n.Tap)
	assert.Equal(t, "52:54:00:00:00:01", n.MAC.String())
	for _, bad := range []string{"tap=tap0", "mac=52:54:00:00:00:01", "tap=tap0,mac=01:00:5e:00:00:01", "tap=averyveryverylongname,mac=52:54:00:00:00:01", "tap=t,mac=zz", "tap=t,mac=52:54:00:00:00:01,mtu=9000"} {
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
	} {
		t.Run(tc.want, func(t *testing.T) {
			assertOneLineError(t, vmm(t, append([]string{"run", "--kernel", kernel}, tc.args...)...), tc.want)
		})
	}
}
