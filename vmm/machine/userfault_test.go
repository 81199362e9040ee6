package machine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// TestVCPUWaitsForMissingPage runs guest code that loads from a page of
// guest RAM the VMM made missing (userfaultfd, as on a post-copy migration
// target): the vCPU must wait inside KVM until the page is installed and
// then see its contents, not zeros.
func TestVCPUWaitsForMissingPage(t *testing.T) {
	const missing, out = 0x300000, 0x200000
	code := cat(
		[]byte{0x48, 0x8b, 0x04, 0x25, 0x08, 0x00, 0x30, 0x00}, // mov rax, [missing+8]
		[]byte{0x48, 0x89, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00}, // mov [out], rax
		[]byte{0xb0, 0xfe, 0xe6, 0x64},                         // mov al, 0xfe; out 0x64, al: reset, ends the VM
		[]byte{0xf4, 0xeb, 0xfd},                               // hlt; jmp back
	)
	m, err := New(Config{CPUs: 1, MemoryBytes: 32 << 20, Kernel: boottest.TinyELF(code, 0x100000)})
	require.NoError(t, err)
	defer m.Close()
	regions := m.Memory().Regions()
	bitmaps := make([][]uint64, len(regions))
	for i, r := range regions {
		bitmaps[i] = make([]uint64, (r.Size/memory.PageSize+63)/64)
	}
	require.Equal(t, uint64(0), regions[0].GPA)
	// Every hole in registered RAM faults, not only the pages made
	// missing: the page written to must be there already.
	require.NoError(t, m.Memory().PutUint64(out, 0))
	page := uint64(missing / memory.PageSize)
	bitmaps[0][page/64] |= 1 << (page % 64)
	uf, err := m.Memory().Userfault(bitmaps)
	require.NoError(t, err)

	exited := make(chan Exit, 1)
	go func() { exited <- m.Run() }()
	faults, err := uf.Faults(nil)
	require.NoError(t, err)
	require.Equal(t, []uint64{missing}, faults, "the vCPU's load faults on the missing page")
	data := make([]byte, memory.PageSize)
	copy(data[8:], []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11})
	require.NoError(t, uf.Install(missing, data))
	exit := <-exited
	require.Equal(t, ExitReset, exit.Reason, "the guest ran on after the page arrived: %v", exit)
	require.NoError(t, uf.Close())
	v, err := m.Memory().Uint64(out)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x1122334455667788), v, "the vCPU read the installed page")
}

// TestPostCopyMigrationRunsTheGuestBeforeItsMemoryArrives migrates a
// guest that keeps writing its counter, so pre-copy never converges: the
// target starts it with that page missing (its vCPU waits for the page,
// asked for or pushed, whichever comes first), the counter goes on from
// where the source stopped, and the rest of RAM arrives intact.
// writesAfterFirstRound makes sure the guest's counter moves after the
// first round's dirty-log sync, so that the second round finds its page
// dirty and the migration goes on in post-copy. Without it, on a loaded
// host whose scheduler gave the vCPU no time during the short second
// round, nothing was dirty and the migration rightly ended in pre-copy.
func writesAfterFirstRound(m *Machine) func(migration.Stats) {
	return func(st migration.Stats) {
		if st.Rounds != 1 {
			return
		}
		start, _ := m.Memory().Uint64(counterAddr)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			if c, err := m.Memory().Uint64(counterAddr); err != nil || c != start {
				return
			}
			time.Sleep(time.Millisecond) // polling guest RAM the guest writes
		}
	}
}

func TestPostCopyMigrationRunsTheGuestBeforeItsMemoryArrives(t *testing.T) {
	m, exited, sum := countingVM(t)
	defer m.Close()
	waitCounter(t, m, 1000)
	src, dst := migrationPipe(t)
	in := NewIncoming(Config{})
	received := make(chan migration.TargetStats, 1)
	go func() {
		st, err := migration.Receive(context.Background(), dst, in)
		assert.NoError(t, err)
		received <- st
	}()
	sent := make(chan migration.Stats, 1)
	go func() {
		st, err := migration.Send(context.Background(), src, m.AsMigrationSource(),
			migration.Options{PostCopy: true, Downtime: time.Nanosecond, Bandwidth: 1 << 20,
				Progress: writesAfterFirstRound(m)})
		assert.NoError(t, err)
		sent <- st
	}()
	tst := <-received
	require.True(t, tst.PostCopy)
	require.Positive(t, tst.MissingPages, "the counter's page at least is still missing")
	target := in.Machine
	require.NotNil(t, target)
	defer target.Close()
	texit := run(target)
	final := counter(t, m) // the source is paused for good
	waitCounter(t, target, final)

	st := <-sent
	assert.Equal(t, "completed", st.Phase)
	assert.True(t, st.PostCopy)
	t.Logf("post-copy: %d rounds, %d pages missing at the handover, %d fetched on demand, downtime %v, total %v",
		st.Rounds, tst.MissingPages, st.RequestedPages, st.Downtime, st.Total)
	m.EndMigrated()
	assert.Equal(t, ExitMigrated, (<-exited).Reason)
	assert.Equal(t, sum, patternSum(t, target), "the untouched data arrived intact")
	stopAndWait(t, target, texit)
}
