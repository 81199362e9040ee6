package machine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// scsiVM runs counterKernel with an empty SCSI controller and returns a
// volume image for it (1 MiB, raw).
func scsiVM(t *testing.T) (*Machine, chan Exit, string) {
	t.Helper()
	m, err := New(Config{CPUs: 1, MemoryBytes: 64 << 20, Kernel: counterKernel, SCSI: true})
	require.NoError(t, err)
	img := filepath.Join(t.TempDir(), "hot.raw")
	require.NoError(t, os.WriteFile(img, make([]byte, 1<<20), 0o644))
	return m, run(m), img
}

func TestVolumesNeedAController(t *testing.T) {
	m, exited, _ := countingVM(t)
	defer m.Close()
	_, err := m.AttachVolume(scsi.Volume{Name: "v", Path: "/nonexistent"})
	assert.ErrorIs(t, err, ErrNoSCSI)
	_, err = m.DetachVolume("v")
	assert.ErrorIs(t, err, ErrNoSCSI)
	stopAndWait(t, m, exited)
}

func TestAttachVolumeLocksTheImage(t *testing.T) {
	m, exited, img := scsiVM(t)
	defer m.Close()
	_, err := m.AttachVolume(scsi.Volume{Name: "v", Path: img + ".missing"})
	require.ErrorIs(t, err, scsi.ErrBadVolume)
	assert.ErrorContains(t, err, "no such file")
	at, err := m.AttachVolume(scsi.Volume{Name: "v", Path: img})
	require.NoError(t, err)
	assert.Equal(t, scsi.Attached{Volume: scsi.Volume{Name: "v", Path: img, Format: block.FormatRaw}, Target: 0, Size: 1 << 20}, at)
	assert.ErrorIs(t, openWritable(DiskConfig{Path: img}), block.ErrLocked, "the VM holds the volume")
	_, err = m.DetachVolume("v")
	require.NoError(t, err)
	assert.NoError(t, openWritable(DiskConfig{Path: img}), "a detached volume is let go")
	stopAndWait(t, m, exited)
}

func TestSnapshotCarriesVolumes(t *testing.T) {
	m, exited, img := scsiVM(t)
	defer m.Close()
	_, err := m.AttachVolume(scsi.Volume{Name: "hot", Path: img})
	require.NoError(t, err)
	waitCounter(t, m, 1000)
	dir := t.TempDir()
	_, err = m.Snapshot(dir, false)
	require.NoError(t, err)
	stopAndWait(t, m, exited)
	require.NoError(t, m.Close())

	r, err := Restore(dir, Config{})
	require.NoError(t, err)
	assert.Equal(t, []scsi.Attached{{Volume: scsi.Volume{Name: "hot", Path: img, Format: block.FormatRaw}, Target: 0, Size: 1 << 20}}, r.Volumes())
	assert.ErrorIs(t, openWritable(DiskConfig{Path: img}), block.ErrLocked, "the restored VM holds the volume")
	rexit := run(r)
	waitCounter(t, r, counter(t, r))
	stopAndWait(t, r, rexit)
	require.NoError(t, r.Close())

	require.NoError(t, os.Rename(img, img+".moved"))
	_, err = Restore(dir, Config{})
	require.ErrorIs(t, err, ErrConfig)
	assert.ErrorContains(t, err, `volume "hot": open raw image: open `+img)
}

func TestMigrationCarriesVolumes(t *testing.T) {
	m, exited, img := scsiVM(t)
	defer m.Close()
	_, err := m.AttachVolume(scsi.Volume{Name: "hot", Path: img})
	require.NoError(t, err)
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	in := &checkingTarget{Incoming: NewIncoming(Config{}), t: t, disks: []DiskConfig{{Path: img}, {Path: img}}}
	received := make(chan error, 1)
	go func() {
		_, err := migration.Receive(context.Background(), dst, in)
		received <- err
	}()
	_, err = migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.NoError(t, err)
	require.NoError(t, <-received)
	m.EndMigrated()
	assert.Equal(t, ExitMigrated, (<-exited).Reason)
	target := in.Machine
	defer target.Close()
	assert.Equal(t, "hot", target.Volumes()[0].Name)
	assert.ErrorIs(t, openWritable(DiskConfig{Path: img}), block.ErrLocked, "the target holds the volume")
}
