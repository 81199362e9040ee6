package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
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
