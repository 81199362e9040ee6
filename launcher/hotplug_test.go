package launcher

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// Every VMI gets a SCSI controller for hot-plugged volumes, on both
// backends.
func TestEveryVMIHasASCSIController(t *testing.T) {
	cfg, err := BuildVMConfig(qemuVMI(), testPaths(t))
	require.NoError(t, err)
	assert.True(t, cfg.SCSI)
	qc, err := cfg.QEMUConfig(testPaths(t), filepath.Join(t.TempDir(), "serial.sock"))
	require.NoError(t, err)
	assert.True(t, qc.SCSI)
	args, err := qc.Args()
	require.NoError(t, err)
	assert.Contains(t, args, `{"driver":"virtio-scsi-pci","id":"scsi0"}`)
}

// TestQEMUHotplugVolumes: the launcher's control API hot-plugs volumes into
// a VMI that runs on QEMU, through the same requests our VMM serves.
func TestQEMUHotplugVolumes(t *testing.T) {
	needQEMU(t)
	p := testPaths(t)
	r := startRun(t, qemuVMI(), p, Watchdog{})
	r.waitInfo(t, "Running", func(i api.Info) bool { return i.State == api.StateRunning })
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	for _, p := range []string{a, b} {
		require.NoError(t, os.WriteFile(p, make([]byte, 2<<20), 0o644))
	}
	ctx := context.Background()
	va, err := r.c.AttachVolume(ctx, api.VolumeRequest{Name: "vol-a", Path: a})
	require.NoError(t, err)
	assert.Equal(t, api.Volume{Name: "vol-a", Path: a, Format: "raw", Target: 0, SizeBytes: 2 << 20}, va)
	vb, err := r.c.AttachVolume(ctx, api.VolumeRequest{Name: "vol-b", Path: b, ReadOnly: true})
	require.NoError(t, err)
	assert.Equal(t, 1, vb.Target)
	_, err = r.c.AttachVolume(ctx, api.VolumeRequest{Name: "vol-a", Path: b})
	assert.ErrorContains(t, err, "attached already")
	_, err = r.c.AttachVolume(ctx, api.VolumeRequest{Name: "vol-c", Path: filepath.Join(dir, "missing.raw")})
	assert.ErrorContains(t, err, "missing.raw")

	open := func(p string) error {
		d, err := block.Open(p, block.Options{Format: block.FormatRaw})
		if err == nil {
			err = d.Close()
		}
		return err
	}
	assert.ErrorIs(t, open(a), block.ErrLocked, "QEMU holds the volume")
	_, err = r.c.DetachVolume(ctx, "vol-a")
	require.NoError(t, err)
	assert.NoError(t, open(a), "let go once detached")
	vols, err := r.c.Volumes(ctx)
	require.NoError(t, err)
	assert.Equal(t, []api.Volume{vb}, vols)
	_, err = r.c.DetachVolume(ctx, "vol-a")
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 409, e.Status)
	va, err = r.c.AttachVolume(ctx, api.VolumeRequest{Name: "vol-a", Path: a})
	require.NoError(t, err)
	assert.Equal(t, 0, va.Target, "the freed target is used again")

	// An image handed over as an open descriptor on the hot-plug socket,
	// as virt-handler does with a claim published for another pod: QEMU
	// gets the descriptor itself (add-fd), never a path, and lets go of it
	// once detached.
	cPath := filepath.Join(dir, "c.raw")
	require.NoError(t, os.WriteFile(cPath, make([]byte, 4<<20), 0o644))
	f, err := os.OpenFile(cPath, os.O_RDWR, 0)
	require.NoError(t, err)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(p.SocketDir, vmispec.HotplugSocket), Net: "unix"})
	require.NoError(t, err)
	vc, err := api.SendVolumeFile(ctx, conn, api.VolumeRequest{Name: "vol-c"}, f)
	_ = conn.Close()
	_ = f.Close()
	require.NoError(t, err)
	assert.Equal(t, 2, vc.Target)
	assert.Equal(t, uint64(4<<20), vc.SizeBytes)
	assert.ErrorIs(t, open(cPath), block.ErrLocked, "QEMU holds the handed-over image")
	_, err = r.c.DetachVolume(ctx, "vol-c")
	require.NoError(t, err)
	assert.NoError(t, open(cPath), "let go once detached")
}

// TestQEMUAttachVolumeFile: the QEMU backend plugs in an image by its open
// descriptor with AttachVolume's rules, reports the image as the request
// names it (else by the file's name), and leaves the file to its caller.
func TestQEMUAttachVolumeFile(t *testing.T) {
	needQEMU(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), qemuHotplugTimeout)
	defer cancel()
	vm, err := qemu.Start(ctx, qemu.Config{Name: "attach-file", CPUs: 1, MemoryMiB: 64, Accel: qemu.AccelTCG, StartPaused: true, SCSI: true, RunDir: filepath.Join(dir, "run")})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = vm.Kill(context.Background()) })
	q := &qemuBackend{vm: vm}

	img := filepath.Join(dir, "a.raw")
	require.NoError(t, os.WriteFile(img, make([]byte, 2<<20), 0o644))
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()

	v, err := q.AttachVolumeFile(api.VolumeRequest{Name: "vol-a"}, f)
	require.NoError(t, err)
	assert.Equal(t, api.Volume{Name: "vol-a", Path: img, Format: "raw", Target: 0, SizeBytes: 2 << 20}, v)
	_, err = q.AttachVolumeFile(api.VolumeRequest{Name: "vol-a"}, f)
	assert.ErrorIs(t, err, api.ErrBadRequest)
	assert.ErrorContains(t, err, "attached already")
	_, err = q.AttachVolumeFile(api.VolumeRequest{Name: "vol-b", Format: "vmdk"}, f)
	assert.ErrorIs(t, err, api.ErrBadRequest)

	b := filepath.Join(dir, "b.raw")
	require.NoError(t, os.WriteFile(b, make([]byte, 1<<20), 0o644))
	fb, err := os.OpenFile(b, os.O_RDWR, 0)
	require.NoError(t, err)
	defer fb.Close()
	v, err = q.AttachVolumeFile(api.VolumeRequest{Name: "vol-b", Path: "/claims/b/disk.img", ReadOnly: true}, fb)
	require.NoError(t, err)
	assert.Equal(t, api.Volume{Name: "vol-b", Path: "/claims/b/disk.img", Format: "raw", ReadOnly: true, Target: 1, SizeBytes: 1 << 20}, v)

	for _, name := range []string{"vol-a", "vol-b"} {
		_, err = q.DetachVolume(name)
		require.NoError(t, err)
	}
	vols, err := q.Volumes()
	require.NoError(t, err)
	assert.Empty(t, vols)
	for _, f := range []*os.File{f, fb} {
		_, err = f.Stat()
		assert.NoError(t, err, "%s is still open: the caller closes it", f.Name())
	}
}
