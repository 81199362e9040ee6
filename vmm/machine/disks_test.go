package machine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// diskVM runs counterKernel with a writable raw disk, a writable qcow2
// overlay over a raw base and a read-only raw disk.
func diskVM(t *testing.T) (*Machine, chan Exit, []DiskConfig) {
	t.Helper()
	dir := t.TempDir()
	raw, base, ro := filepath.Join(dir, "rw.raw"), filepath.Join(dir, "base.raw"), filepath.Join(dir, "ro.raw")
	for _, p := range []string{raw, base, ro} {
		require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o644))
	}
	ov := filepath.Join(dir, "overlay.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", ov)
	disks := []DiskConfig{
		{Path: raw},
		{Path: ov, Format: block.FormatQcow2},
		{Path: ro, ReadOnly: true},
	}
	m, err := New(Config{CPUs: 1, MemoryBytes: 64 << 20, Kernel: counterKernel, Disks: disks})
	require.NoError(t, err)
	return m, run(m), disks
}

// openWritable reports whether this process could open the image for
// writing now (nobody else holds it), and lets go of it again.
func openWritable(d DiskConfig) error {
	disk, err := block.Open(d.Path, block.Options{Format: d.Format})
	if err != nil {
		return err
	}
	return disk.Close()
}

// checkingTarget is an Incoming that checks, at each step, what the
// migration promises about the disks; restore, if set, replaces the
// Restore step.
type checkingTarget struct {
	*Incoming
	t       *testing.T
	disks   []DiskConfig
	restore func(state []byte) error
}

func (c *checkingTarget) Prepare(h []byte) (*memory.Guest, error) {
	mem, err := c.Incoming.Prepare(h)
	if err == nil {
		for i, d := range c.Machine.devices.disks {
			dd, ok := d.(*block.Deferred)
			if assert.True(c.t, ok, "disk %d is deferred", i) {
				assert.Nil(c.t, dd.Disk(), "disk %d is not open before the switchover", i)
			}
		}
	}
	return mem, err
}

func (c *checkingTarget) Restore(state []byte) error {
	// The source has stopped and let go of its writable images.
	for _, d := range c.disks[:2] {
		assert.NoError(c.t, openWritable(d), "the source released %s", d.Path)
	}
	if c.restore != nil {
		return c.restore(state)
	}
	return c.Incoming.Restore(state)
}

func TestMigrationHandsTheDisksOver(t *testing.T) {
	m, exited, disks := diskVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	for _, d := range disks[:2] {
		require.ErrorIs(t, openWritable(d), block.ErrLocked, "the running source holds %s", d.Path)
	}
	src, dst := migrationPipe(t)
	in := &checkingTarget{Incoming: NewIncoming(Config{}), t: t, disks: disks}
	received := make(chan error, 1)
	go func() {
		_, err := migration.Receive(context.Background(), dst, in)
		received <- err
	}()
	_, err := migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.NoError(t, err)
	require.NoError(t, <-received)
	m.EndMigrated()
	assert.Equal(t, ExitMigrated, (<-exited).Reason)

	target := in.Machine
	defer target.Close()
	for i, d := range target.devices.disks {
		assert.NotNil(t, d.(*block.Deferred).Disk(), "the target opened disk %d", i)
	}
	for _, d := range disks[:2] {
		err := openWritable(d)
		require.ErrorIs(t, err, block.ErrLocked, "the target holds %s", d.Path)
	}
	m.Close() // the source's last descriptors go; the target still holds the images
	for _, d := range disks[:2] {
		assert.ErrorIs(t, openWritable(d), block.ErrLocked)
	}
}

func TestFailedMigrationRetakesTheDisks(t *testing.T) {
	m, exited, disks := diskVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	in := &checkingTarget{Incoming: NewIncoming(Config{}), t: t, disks: disks,
		restore: func([]byte) error { return errors.New("the target gives up") }}
	go migration.Receive(context.Background(), dst, in)
	_, err := migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.ErrorContains(t, err, "the target gives up") // in Restore, after Prepare
	for _, d := range disks[:2] {
		assert.ErrorIs(t, openWritable(d), block.ErrLocked, "the source holds %s again", d.Path)
	}
	waitCounter(t, m, counter(t, m)) // the source runs its guest again
	assert.Equal(t, ExitStopped, stopAndWait(t, m, exited).Reason)
}

// A target that failed but kept an image open: the source must not write
// it, so its VM ends with an error naming the image.
func TestFailedMigrationSourceCannotRetakeADisk(t *testing.T) {
	m, exited, disks := diskVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	stolen := make(chan block.Disk, 1)
	in := &checkingTarget{Incoming: NewIncoming(Config{}), t: t, disks: disks,
		restore: func([]byte) error {
			d, err := block.Open(disks[0].Path, block.Options{})
			if err != nil {
				return err
			}
			stolen <- d
			return errors.New("the target gives up, still holding the disk")
		}}
	go migration.Receive(context.Background(), dst, in)
	_, err := migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.ErrorContains(t, err, "still holding the disk")
	defer (<-stolen).Close()
	var e Exit
	select {
	case e = <-exited:
	case <-time.After(time.Minute):
		m.Stop()
		t.Fatal("the source VM ran on with a disk another process holds")
	}
	assert.Equal(t, ExitError, e.Reason)
	require.Error(t, e.Err)
	assert.ErrorIs(t, e.Err, block.ErrLocked)
	assert.Contains(t, e.Err.Error(), disks[0].Path)
}

func TestRestoreRefusesAnotherImage(t *testing.T) {
	m, exited, disks := diskVM(t)
	waitCounter(t, m, 1000)
	dir := t.TempDir()
	_, err := m.Snapshot(dir, false)
	require.NoError(t, err)
	stopAndWait(t, m, exited)
	require.NoError(t, m.Close())

	r, err := Restore(dir, Config{})
	require.NoError(t, err, "the same images restore")
	require.NoError(t, r.Close())

	// a resized raw image
	require.NoError(t, os.Truncate(disks[0].Path, 2<<20))
	_, err = Restore(dir, Config{})
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), disks[0].Path)
	assert.Contains(t, err.Error(), "virtual size 2097152, saved 1048576")
	assert.NotContains(t, err.Error(), "\n")
	require.NoError(t, os.Truncate(disks[0].Path, 1<<20))

	// a qcow2 image replaced by another of the same size
	require.NoError(t, os.Remove(disks[1].Path))
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096", disks[1].Path, "1M")
	_, err = Restore(dir, Config{})
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), disks[1].Path)
	assert.Contains(t, err.Error(), "cluster bits 12, saved 16")
	assert.Contains(t, err.Error(), `backing file "", saved`)
}

// A multi-queue disk migrates as one: the target builds it with as many
// request queues, from the migration header.
func TestMigrationKeepsDiskQueues(t *testing.T) {
	raw := filepath.Join(t.TempDir(), "mq.raw")
	require.NoError(t, os.WriteFile(raw, make([]byte, 1<<20), 0o644))
	m, err := New(Config{CPUs: 2, MemoryBytes: 64 << 20, Kernel: counterKernel, Disks: []DiskConfig{{Path: raw, Queues: 2}}})
	require.NoError(t, err)
	defer m.Close()
	exited := run(m)
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	in := NewIncoming(Config{})
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
	assert.Equal(t, 2, target.cfg.Disks[0].Queues)
	assert.Len(t, target.Virtio()[0].Device.QueueMaxSizes(), 2, "request queues on the target")
}
