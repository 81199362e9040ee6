package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// TestSCSIHotplug: disks come and go on the virtio-scsi controller of a
// running QEMU: the image is QEMU's while attached (locked, its size
// reported) and let go once detached; a target is free again after.
func TestSCSIHotplug(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	raw := filepath.Join(dir, "hot.raw")
	require.NoError(t, writeSparse(raw, 8<<20))
	qcow := filepath.Join(dir, "hot.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", qcow, "64M").CombinedOutput()
	require.NoError(t, err, "qemu-img: %s", out)
	vm := startVM(t, ctx, Config{Name: "hotplug", CPUs: 1, MemoryMiB: 64, Accel: AccelTCG, StartPaused: true, SCSI: true, RunDir: filepath.Join(dir, "run")})

	writable := func(path string, format block.Format) error {
		d, err := block.Open(path, block.Options{Format: format})
		if err != nil {
			return err
		}
		return d.Close()
	}
	size, err := vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 0, Path: raw, Serial: "hot-volume"})
	require.NoError(t, err)
	assert.Equal(t, uint64(8<<20), size)
	assert.ErrorIs(t, writable(raw, block.FormatRaw), block.ErrLocked, "QEMU holds the attached image")
	size, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 3, Path: qcow, Format: FormatQCOW2, ReadOnly: true})
	require.NoError(t, err)
	assert.Equal(t, uint64(64<<20), size)

	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 0, Path: qcow, Format: FormatQCOW2})
	require.Error(t, err, "target 0 is taken")
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 1, Path: filepath.Join(dir, "missing.raw")})
	require.ErrorContains(t, err, "missing.raw")
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: SCSITargets, Path: raw})
	require.ErrorContains(t, err, "want 0..15")

	require.NoError(t, vm.DetachSCSIDisk(ctx, 0))
	assert.NoError(t, writable(raw, block.FormatRaw), "a detached image is let go")
	require.Error(t, vm.DetachSCSIDisk(ctx, 0), "nothing at target 0 any more")
	size, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 0, Path: raw})
	require.NoError(t, err, "the target and its node names are free again")
	assert.Equal(t, uint64(8<<20), size)
	require.NoError(t, vm.DetachSCSIDisk(ctx, 0))
	require.NoError(t, vm.DetachSCSIDisk(ctx, 3))
	_, err = os.Stat(raw)
	require.NoError(t, err)
}

// hotplugGuestScript waits for the guest's first SCSI disk, reports it,
// writes a marker to its block 100 (synced) and waits for it to go.
const hotplugGuestScript = `
while [ ! -e /sys/block/sda/size ]; do sleep 1; done
read -r s < /sys/block/sda/size
echo "sda sectors=$s serial=$(tail -c +5 /sys/block/sda/device/vpd_pg80)"
printf 'qemu-scsi-marker' | dd of=/dev/sda bs=512 seek=100 conv=fsync 2>/dev/null
echo "wrote status=$?"
while [ -e /sys/block/sda ]; do sleep 1; done
echo "sda gone"
exec sleep 100000
`

// TestSCSIHotplugLinuxGuest: the test guest on QEMU sees a disk hot-plugged
// into the controller, writes it, and sees it go when it is unplugged;
// the write is on the image then.
func TestSCSIHotplugLinuxGuest(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	img := filepath.Join(t.TempDir(), "hot.raw")
	require.NoError(t, writeSparse(img, 8<<20))
	cfg := guestConfig(t, "hotplug-guest", guestimage.BzImage(t), guestimage.InitrdWithRun(t, hotplugGuestScript, nil))
	cfg.SCSI = true
	vm := startVM(t, ctx, cfg)
	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))
	i := con.waitContains(t, ctx, 0, "kubevmm-guest: cpus=1 ")

	_, err := vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 2, Path: img, Serial: "hotvol"})
	require.NoError(t, err)
	i = con.waitContains(t, ctx, i, "sda sectors=16384 serial=hotvol")
	i = con.waitContains(t, ctx, i, "wrote status=0")
	require.NoError(t, vm.DetachSCSIDisk(ctx, 2))
	con.waitContains(t, ctx, i, "sda gone")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	assert.Equal(t, "qemu-scsi-marker", string(b[100*512:100*512+16]), "the guest's write is on the image once unplugged")
}

// fdsets lists the opaque tags of the descriptors in each of QEMU's fdsets.
func fdsets(t *testing.T, ctx context.Context, vm *VM) [][]string {
	t.Helper()
	var sets []struct {
		FDs []struct {
			Opaque string `json:"opaque"`
		} `json:"fds"`
	}
	require.NoError(t, vm.exec(ctx, "query-fdsets", nil, &sets))
	var out [][]string
	for _, s := range sets {
		var tags []string
		for _, fd := range s.FDs {
			tags = append(tags, fd.Opaque)
		}
		out = append(out, tags)
	}
	return out
}

// TestSCSIHotplugFile: an image handed to QEMU open, by descriptor rather
// than by path, is attached from an fdset that lasts as long as the disk:
// gone after a detach and after an attach that fails part-way.
func TestSCSIHotplugFile(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	raw := filepath.Join(dir, "hot.raw")
	require.NoError(t, writeSparse(raw, 8<<20))
	vm := startVM(t, ctx, Config{Name: "hotplug-file", CPUs: 1, MemoryMiB: 64, Accel: AccelTCG, StartPaused: true, SCSI: true, RunDir: filepath.Join(dir, "run")})
	// QEMU (7.2) closes removed descriptors only while the guest runs.
	require.NoError(t, vm.Resume(ctx))

	f, err := os.OpenFile(raw, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.Rename(raw, raw+".moved"), "QEMU must not need the path")
	size, err := vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 1, File: f, Serial: "by-fd"})
	require.NoError(t, err)
	assert.Equal(t, uint64(8<<20), size)
	assert.Equal(t, [][]string{{"hp1-file"}}, fdsets(t, ctx, vm))

	roPath := filepath.Join(dir, "ro.raw")
	require.NoError(t, writeSparse(roPath, 4<<20))
	ro, err := os.OpenFile(roPath, os.O_RDWR, 0)
	require.NoError(t, err)
	defer ro.Close()
	size, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 2, File: ro, ReadOnly: true})
	require.NoError(t, err, "a read-only volume from a read-write descriptor")
	assert.Equal(t, uint64(4<<20), size)
	var nodes []struct {
		NodeName string `json:"node-name"`
		RO       bool   `json:"ro"`
	}
	require.NoError(t, vm.exec(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes))
	assert.Contains(t, nodes, struct {
		NodeName string `json:"node-name"`
		RO       bool   `json:"ro"`
	}{"hp2", true}, "the guest's disk is read-only")
	roOnly, err := os.Open(roPath)
	require.NoError(t, err)
	defer roOnly.Close()
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 5, File: roOnly})
	require.ErrorContains(t, err, "a writable disk needs a descriptor open for reading and writing")

	// Failures part-way leave no fdset behind.
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 3, Path: "volume-x", File: f, Format: FormatQCOW2})
	require.Error(t, err, "a raw image is no qcow2")
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 1, File: f})
	require.Error(t, err, "target 1 is taken")
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 4, File: null})
	require.ErrorContains(t, err, "neither a regular file nor a block device")
	assert.Len(t, fdsets(t, ctx, vm), 2, "only the attached disks' fdsets")

	require.NoError(t, vm.DetachSCSIDisk(ctx, 1))
	require.NoError(t, vm.DetachSCSIDisk(ctx, 2))
	assert.Empty(t, fdsets(t, ctx, vm))
	_, err = f.WriteAt([]byte("ours"), 0)
	require.NoError(t, err, "the caller's descriptor stays open")
}

// hotplugTwiceGuestScript is hotplugGuestScript for two disks in turn.
const hotplugTwiceGuestScript = `
for round in 1 2; do
while [ ! -e /sys/block/sda/size ]; do sleep 1; done
read -r s < /sys/block/sda/size
echo "round $round: sda sectors=$s"
printf "fd-marker-$round" | dd of=/dev/sda bs=512 seek=100 conv=fsync 2>/dev/null
echo "round $round: wrote status=$?"
while [ -e /sys/block/sda ]; do sleep 1; done
echo "round $round: sda gone"
done
exec sleep 100000
`

// TestSCSIHotplugFileLinuxGuest: the guest on QEMU sees and writes a disk
// handed over by descriptor, first a regular file, then a block device (a
// loop device): one boot. Each write is on the image once unplugged, and
// no fdset is left.
func TestSCSIHotplugFileLinuxGuest(t *testing.T) {
	requireQEMU(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices here for the block device: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	img := filepath.Join(dir, "hot.raw")
	require.NoError(t, writeSparse(img, 8<<20))
	backing := filepath.Join(dir, "loop.raw")
	require.NoError(t, writeSparse(backing, 4<<20))
	loop := strings.TrimSpace(hosttools.Run(t, "losetup", "--find", "--show", backing))
	t.Cleanup(func() { hosttools.Run(t, "losetup", "-d", loop) })

	cfg := guestConfig(t, "hotplug-fd-guest", guestimage.BzImage(t), guestimage.InitrdWithRun(t, hotplugTwiceGuestScript, nil))
	cfg.SCSI = true
	vm := startVM(t, ctx, cfg)
	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))
	i := con.waitContains(t, ctx, 0, "kubevmm-guest: cpus=1 ")

	for round, tc := range []struct {
		path    string
		sectors int
	}{{img, 16384}, {loop, 8192}} {
		f, err := os.OpenFile(tc.path, os.O_RDWR, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = vm.AttachSCSIDisk(ctx, SCSIDisk{Target: 2, File: f})
		require.NoError(t, err, tc.path)
		prefix := fmt.Sprintf("round %d: ", round+1)
		i = con.waitContains(t, ctx, i, fmt.Sprintf("%ssda sectors=%d", prefix, tc.sectors))
		i = con.waitContains(t, ctx, i, prefix+"wrote status=0")
		require.NoError(t, vm.DetachSCSIDisk(ctx, 2))
		i = con.waitContains(t, ctx, i, prefix+"sda gone")
		assert.Empty(t, fdsets(t, ctx, vm), "the fdset goes with the disk")
		b := make([]byte, 11)
		_, err = f.ReadAt(b, 100*512)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("fd-marker-%d", round+1), string(b), "the guest's write is on %s", tc.path)
	}
}
