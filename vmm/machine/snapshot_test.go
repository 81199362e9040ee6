package machine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

const (
	counterAddr = 0x200000
	patternAddr = 0x400000
	patternSize = 1 << 20
)

// counterKernel increments a 64-bit counter in guest RAM forever, at CPL 0.
var counterKernel = boottest.TinyELF([]byte{
	0x48, 0xff, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00, // inc qword [0x200000]
	0xeb, 0xf6, // jmp back
}, 0x100000)

// countingVM starts a machine running counterKernel with 1 MiB of random
// data it never touches; it returns the machine, a channel with its exit
// and the data's checksum.
func countingVM(t *testing.T) (*Machine, chan Exit, [32]byte) {
	t.Helper()
	m, err := New(Config{CPUs: 1, MemoryBytes: 64 << 20, Kernel: counterKernel})
	require.NoError(t, err)
	pattern := make([]byte, patternSize)
	rand.Read(pattern)
	require.NoError(t, m.Memory().WriteAt(pattern, patternAddr))
	return m, run(m), sha256.Sum256(pattern)
}

func run(m *Machine) chan Exit {
	ch := make(chan Exit, 1)
	go func() { ch <- m.Run() }()
	return ch
}

func counter(t *testing.T, m *Machine) uint64 {
	v, err := m.Memory().Uint64(counterAddr)
	require.NoError(t, err)
	return v
}

// waitCounter waits until the guest's counter passes v.
func waitCounter(t *testing.T, m *Machine, v uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c := counter(t, m)
		if c > v {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("guest counter stuck at %d, waiting for > %d", c, v)
		}
		time.Sleep(5 * time.Millisecond) // polling guest RAM the guest writes
	}
}

func patternSum(t *testing.T, m *Machine) [32]byte {
	b := make([]byte, patternSize)
	require.NoError(t, m.Memory().ReadAt(b, patternAddr))
	return sha256.Sum256(b)
}

func stopAndWait(t *testing.T, m *Machine, exited chan Exit) Exit {
	t.Helper()
	m.Stop()
	select {
	case e := <-exited:
		return e
	case <-time.After(time.Minute):
		t.Fatal("VM did not stop")
		return Exit{}
	}
}

func TestPauseStopsTheGuestAndResumeContinues(t *testing.T) {
	m, exited, _ := countingVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	require.NoError(t, m.Pause())
	assert.True(t, m.Paused())
	c := counter(t, m)
	time.Sleep(50 * time.Millisecond) // an interval in which a running guest counts thousands
	assert.Equal(t, c, counter(t, m), "no guest instruction runs while paused")
	m.Resume()
	waitCounter(t, m, c)
	stopAndWait(t, m, exited)
}

func TestSnapshotRestoreContinuesTheGuest(t *testing.T) {
	m, exited, sum := countingVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	dir := t.TempDir()
	res, err := m.Snapshot(dir, true)
	require.NoError(t, err)
	t.Logf("snapshot: %d bytes of RAM stored, paused %v", res.StoredBytes, res.Paused)
	assert.Less(t, res.StoredBytes, int64(16<<20), "untouched RAM is not stored")
	// the original keeps running after the snapshot
	man, saved, err := snapshot.Read(dir)
	require.NoError(t, err)
	atSnapshot, err := saved.Uint64(counterAddr)
	require.NoError(t, err)
	saved.Close()
	require.NotEmpty(t, man.State)
	waitCounter(t, m, atSnapshot+1000)
	stopAndWait(t, m, exited)

	r, err := Restore(dir, Config{})
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, atSnapshot, counter(t, r), "restored RAM is the snapshot's")
	assert.Equal(t, sum, patternSum(t, r), "untouched memory survives byte for byte")
	rexit := run(r)
	waitCounter(t, r, atSnapshot)
	e := stopAndWait(t, r, rexit)
	assert.Equal(t, ExitStopped, e.Reason, "the restored guest ran until stopped: %v", e)
}

func TestRestoreRefusesDamagedSnapshots(t *testing.T) {
	_, err := Restore(filepath.Join(t.TempDir(), "nothing-here"), Config{})
	require.ErrorIs(t, err, ErrConfig)
	assert.ErrorIs(t, err, snapshot.ErrInvalid)
}

func migrationPipe(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "mig.sock"))
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	src, err := net.Dial("unix", l.Addr().String())
	require.NoError(t, err)
	dst := <-accepted
	require.NotNil(t, dst)
	t.Cleanup(func() { src.Close(); dst.Close() })
	return src, dst
}

func TestLiveMigrationContinuesTheGuestOnTheTarget(t *testing.T) {
	m, exited, sum := countingVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	in := NewIncoming(Config{})
	received := make(chan error, 1)
	go func() {
		_, err := migration.Receive(context.Background(), dst, in)
		received <- err
	}()
	st, err := migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.NoError(t, err)
	require.NoError(t, <-received)
	t.Logf("migration: %d rounds, %d data + %d zero pages, %d bytes, downtime %v, total %v",
		st.Rounds, st.DataPages, st.ZeroPages, st.BytesSent, st.Downtime, st.Total)
	m.EndMigrated()
	assert.Equal(t, ExitMigrated, (<-exited).Reason)
	final := counter(t, m)

	target := in.Machine
	require.NotNil(t, target)
	defer target.Close()
	assert.Equal(t, final, counter(t, target), "the target starts where the source stopped")
	assert.Equal(t, sum, patternSum(t, target))
	texit := run(target)
	waitCounter(t, target, final)
	stopAndWait(t, target, texit)
}

func TestSourceKeepsRunningWhenTheTargetDies(t *testing.T) {
	m, exited, _ := countingVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	go func() {
		// a target that reads the first bytes and dies
		b := make([]byte, 4096)
		dst.Read(b)
		dst.Close()
	}()
	_, err := migration.Send(context.Background(), src, m.AsMigrationSource(), migration.Options{})
	require.Error(t, err)
	assert.False(t, m.Paused(), "the source runs its guest again")
	c := counter(t, m)
	waitCounter(t, m, c)
	e := stopAndWait(t, m, exited)
	assert.Equal(t, ExitStopped, e.Reason)
}

func TestConfigFromVsockSocketOverride(t *testing.T) {
	saved := SavedConfig{CPUs: 1, MemoryBytes: 64 << 20, Vsock: &VsockConfig{CID: 7, Socket: "/old.sock"}}

	c, err := configFrom(saved, Config{})
	require.NoError(t, err)
	assert.Equal(t, VsockConfig{CID: 7, Socket: "/old.sock"}, *c.Vsock, "without an override the saved socket")

	c, err = configFrom(saved, Config{Vsock: &VsockConfig{Socket: "/new.sock"}})
	require.NoError(t, err)
	assert.Equal(t, VsockConfig{CID: 7, Socket: "/new.sock"}, *c.Vsock, "the guest's CID stays, the socket is the caller's")
	assert.Equal(t, "/old.sock", saved.Vsock.Socket, "the saved config is not modified")

	saved.Vsock = nil
	_, err = configFrom(saved, Config{Vsock: &VsockConfig{Socket: "/new.sock"}})
	assert.ErrorContains(t, err, "no vsock device")
}

// A disk's queue count travels in the saved configuration (a migration
// target builds its devices from it) and comes back; a state saved before
// multi-queue has none, and its disks have one queue. A count the VMM
// can't serve is refused before any machine is built.
func TestSavedDiskQueues(t *testing.T) {
	saved := SavedConfig{CPUs: 2, MemoryBytes: 64 << 20, Disks: []savedDisk{{DiskConfig: DiskConfig{Path: "/d.img", Queues: 2}}}}
	b, err := json.Marshal(saved)
	require.NoError(t, err)
	var back SavedConfig
	require.NoError(t, json.Unmarshal(b, &back))
	c, err := configFrom(back, Config{})
	require.NoError(t, err)
	assert.Equal(t, 2, c.Disks[0].Queues)

	var old SavedConfig
	require.NoError(t, json.Unmarshal([]byte(`{"cpus":1,"memory_bytes":67108864,"disks":[{"Path":"/d.img","image":{}}]}`), &old))
	c, err = configFrom(old, Config{})
	require.NoError(t, err)
	assert.Equal(t, 0, c.Disks[0].Queues)

	back.Disks[0].Queues = 65
	assert.ErrorContains(t, validateConfig(&back), "disk 0 has 65 queues")
}
