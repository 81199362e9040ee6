package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// hotplugScript answers console commands about the guest's first SCSI
// disk, sda: wait for it and report its size and serial, write a marker to
// block 100 (synced), read block 100 back, wait for it to go.
const hotplugScript = `
echo "scsi hosts $(ls /sys/class/scsi_host | wc -w)"
while read -r line; do
  case "$line" in
    wait-add)
      while [ ! -e /sys/block/sda/size ]; do sleep 1; done
      read -r s < /sys/block/sda/size
      # VPD page 0x80 as the guest read it: a 4-byte header, then the serial
      echo "sda sectors=$s serial=$(tail -c +5 /sys/block/sda/device/vpd_pg80)" ;;
    write)
      printf 'kubevmm-scsi-marker' | dd of=/dev/sda bs=512 seek=100 conv=fsync 2>/dev/null
      echo "wrote status=$?" ;;
    read*)
      echo "$line: marker=$(dd if=/dev/sda bs=512 skip=100 count=1 2>/dev/null | tr -d '\000')." ;;
    wait-gone)
      while [ -e /sys/block/sda ]; do sleep 1; done
      echo "sda gone" ;;
    quit) reboot -f ;;
  esac
done
`

// TestHotplugLinuxGuest boots the test guest with an empty SCSI controller
// and hot-plugs a volume into it through the control API (`vmm volume`):
// the guest's Linux sees a new disk of the volume's size, writes a marker,
// sees it go when it is unplugged (the image then holds the marker),
// and after a re-plug reads the marker back. A snapshot taken with the
// volume attached restores in another process with it.
func TestHotplugLinuxGuest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	img := sock("hot.raw")
	require.NoError(t, os.WriteFile(img, make([]byte, 8<<20), 0o644))
	initrd := guestimage.InitrdWithRun(t, hotplugScript, nil)
	a := startVMM(t, "run", "--kernel", guestimage.Kernel(t), "--initrd", initrd, "--memory", "128M", "--scsi",
		"--console", "socket:"+sock("a.con"), "--api", sock("a.api"))
	c := attach(t, sock("a.con"), a)
	// Every pattern ends at a line's end: the console delivers a line in
	// pieces, and a match must not take the first piece for the whole.
	m, pos := c.waitFor(regexp.MustCompile(`scsi hosts (\d+)\r?\n`), 0)
	require.Equal(t, "1", m[1], "the guest's virtio-scsi driver found the controller")

	volume := func(args ...string) string {
		t.Helper()
		r := vmm(t, append([]string{"volume"}, args...)...)
		require.Equal(t, 0, r.code, "vmm volume %v: %s", args, r.stderr)
		return r.stdout
	}
	add := func(api string) {
		t.Helper()
		out := volume("add", "--api", api, "--name", "hotvol", "--path", img)
		assert.Equal(t, "volume hotvol attached: SCSI target 0, LUN 0, 8388608 bytes\n", out)
	}
	add(sock("a.api"))
	c.send("wait-add")
	m, pos = c.waitFor(regexp.MustCompile(`sda sectors=(\d+) serial=(\S*)\r?\n`), pos)
	assert.Equal(t, []string{"16384", "hotvol"}, m[1:], "the guest sees a disk of the volume's size and serial")
	c.send("write")
	m, pos = c.waitFor(regexp.MustCompile(`wrote status=(\d+)\r?\n`), pos)
	require.Equal(t, "0", m[1])

	volume("remove", "--api", sock("a.api"), "--name", "hotvol")
	c.send("wait-gone")
	_, pos = c.waitFor(regexp.MustCompile(`sda gone`), pos)
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	assert.Equal(t, "kubevmm-scsi-marker", string(b[100*512:100*512+19]), "the guest's write is on the image once unplugged")

	add(sock("a.api"))
	c.send("wait-add")
	_, pos = c.waitFor(regexp.MustCompile(`sda sectors=16384 `), pos)
	c.send("read replugged")
	m, _ = c.waitFor(regexp.MustCompile(`read replugged: marker=(.*)\.`), pos)
	assert.Equal(t, "kubevmm-scsi-marker", m[1], "re-plugged, the data is there")

	// A snapshot with the volume attached; the first VMM ends.
	snap := sock("snap")
	r := vmm(t, "snapshot", "--api", sock("a.api"), "--dir", snap, "--stop")
	require.Equal(t, 0, r.code, "snapshot: %s", r.stderr)
	require.Equal(t, 0, a.wait(time.Minute), "stderr: %s", a.stderr.String())

	b2 := startVMM(t, "restore", "--snapshot", snap, "--console", "socket:"+sock("b.con"), "--api", sock("b.api"))
	cb := attach(t, sock("b.con"), b2)
	var vols []api.Volume
	require.NoError(t, json.Unmarshal([]byte(volume("list", "--api", sock("b.api"))), &vols))
	assert.Equal(t, []api.Volume{{Name: "hotvol", Path: img, Format: "raw", Target: 0, SizeBytes: 8 << 20}}, vols)
	cb.send("read restored")
	m, _ = cb.waitFor(regexp.MustCompile(`read restored: marker=(.*)\.`), 0)
	assert.Equal(t, "kubevmm-scsi-marker", m[1], "the restored guest reads the volume")
	cb.send("quit")
	assert.Equal(t, 0, b2.wait(3*time.Minute), "stderr: %s", b2.stderr.String())
}
