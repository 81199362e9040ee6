package migration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// postTarget is a memTarget that runs post-copy: real guest RAM with
// userfaultfd, touched by the test instead of vCPUs.
type postTarget struct {
	memTarget
	done      chan error
	onRestore func()
}

func (t *postTarget) Restore(s []byte) error {
	if t.onRestore != nil {
		t.onRestore()
	}
	return t.memTarget.Restore(s)
}

func (t *postTarget) PostCopyDone(err error) { t.done <- err }

// dirtyingSource fills a source's RAM and keeps rewriting hot pages at
// every sync, so pre-copy never converges.
func dirtyingSource(t *testing.T, size uint64, hot int) *memSource {
	src := newMemSource(t, size)
	for p := uint64(0); p < size/pageSize; p += 2 { // every other page has data
		require.NoError(t, src.mem.WriteAt([]byte{byte(p), byte(p >> 8), 0xaa}, p*pageSize+5))
	}
	syncs := 0
	src.onRound = func() {
		syncs++
		for p := 0; p < hot; p++ {
			src.mem.WriteAt([]byte{byte(syncs), byte(p)}, uint64(p)*pageSize*3+64)
		}
	}
	return src
}

// startPostCopy runs Send and Receive until the target has started the
// guest; the stream stays open for the pages still missing.
func startPostCopy(t *testing.T, src *memSource, tgt *postTarget, opt Options) (srcConn net.Conn, sent chan error, st *Stats, tst TargetStats) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	sent = make(chan error, 1)
	st = new(Stats)
	go func() {
		var err error
		*st, err = Send(context.Background(), a, src, opt)
		sent <- err
	}()
	tst, err := Receive(context.Background(), b, tgt)
	require.NoError(t, err)
	require.True(t, tst.PostCopy, "the migration went post-copy")
	require.True(t, tgt.started)
	return a, sent, st, tst
}

func TestPostCopyFinishesAGuestThatOutrunsPrecopy(t *testing.T) {
	postCopyFinishes(t)
}

func postCopyFinishes(t *testing.T) {
	const size = 4 << 20
	src := dirtyingSource(t, size, 200)
	tgt := &postTarget{memTarget: memTarget{size: size}, done: make(chan error, 1)}
	// Restoring devices may read guest RAM: missing pages are served
	// before the handover too.
	hot0 := make([]byte, pageSize)
	tgt.onRestore = func() { require.NoError(t, tgt.mem.ReadAt(hot0, 0)) }
	_, sent, st, tst := startPostCopy(t, src, tgt, Options{PostCopy: true, Downtime: time.Nanosecond, Bandwidth: 4 << 20})
	defer tgt.mem.Close()
	assert.Positive(t, tst.MissingPages)
	assert.Equal(t, src.mem.Regions()[0].Data[:pageSize], hot0, "a page read while the state loads has the source's last contents")

	// The guest runs on the target: it reads a hot page (missing here
	// until fetched) and gets the source's latest contents.
	hot := uint64(199*3) * pageSize
	got := make([]byte, pageSize)
	require.NoError(t, tgt.mem.ReadAt(got, hot))
	assert.Equal(t, src.mem.Regions()[0].Data[hot:hot+pageSize], got, "a page fetched on demand has the source's last contents")

	require.NoError(t, <-tgt.done, "every page arrived")
	require.NoError(t, <-sent)
	assert.Equal(t, "completed", st.Phase)
	assert.True(t, st.PostCopy)
	assert.Equal(t, 2, st.Rounds, "post-copy takes over after two rounds without convergence")
	assert.Equal(t, 0, src.resumes, "the source never resumes its guest")
	assert.False(t, src.logging)
	assert.True(t, bytes.Equal(src.mem.Regions()[0].Data, tgt.mem.Regions()[0].Data), "target RAM equals source RAM")
}

func TestPostCopyLosingTheSourceFailsBothSidesClearly(t *testing.T) {
	const size = 8 << 20
	src := dirtyingSource(t, size, 600)
	tgt := &postTarget{memTarget: memTarget{size: size}, done: make(chan error, 1)}
	// 1 MiB/s: the missing pages take seconds, the source dies first.
	a, sent, st, _ := startPostCopy(t, src, tgt, Options{PostCopy: true, Downtime: time.Nanosecond, Bandwidth: 1 << 20})
	defer tgt.mem.Close()
	a.Close() // the source's end of the stream goes away

	err := <-tgt.done
	require.ErrorIs(t, err, ErrPostCopyFailed)
	assert.Contains(t, err.Error(), "lost the migration source")
	assert.Contains(t, err.Error(), "pages still missing")

	err = <-sent
	require.ErrorIs(t, err, ErrPostCopyFailed)
	assert.Equal(t, "failed", st.Phase)
	assert.True(t, st.PostCopy)
	assert.Contains(t, st.Error, "the guest is lost")
	assert.Equal(t, 0, src.resumes, "the source must not resume a guest that ran on the target")
}

func TestPostCopyNeedsAPostCopyTarget(t *testing.T) {
	const size = 1 << 20
	src := dirtyingSource(t, size, 100)
	tgt := &memTarget{size: size}
	st, _, err, terr := migrate(t, src, tgt, Options{PostCopy: true, Downtime: time.Nanosecond})
	require.Error(t, err)
	assert.ErrorContains(t, terr, "cannot run a guest in post-copy")
	assert.NotErrorIs(t, err, ErrPostCopyFailed, "nothing ran on the target: not a lost guest")
	assert.Equal(t, "failed", st.Phase)
	assert.Equal(t, 1, src.resumes, "the source keeps its guest")
	assert.True(t, tgt.discarded)
	assert.False(t, tgt.started)
}

func TestPostCopyTargetFailingBeforeHandoverLeavesSourceRunning(t *testing.T) {
	const size = 1 << 20
	src := dirtyingSource(t, size, 100)
	tgt := &postTarget{memTarget: memTarget{size: size, failRestore: errors.New("no such device")}, done: make(chan error, 1)}
	a, b := net.Pipe()
	defer a.Close()
	sent := make(chan error, 1)
	var st Stats
	go func() {
		var err error
		st, err = Send(context.Background(), a, src, Options{PostCopy: true, Downtime: time.Nanosecond})
		sent <- err
	}()
	_, terr := Receive(context.Background(), b, tgt)
	require.ErrorContains(t, terr, "no such device")
	assert.NotErrorIs(t, terr, ErrPostCopyFailed)
	assert.True(t, tgt.discarded)
	assert.False(t, tgt.started)
	b.Close()
	err := <-sent
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrPostCopyFailed, "the target never ran the guest")
	assert.Equal(t, "failed", st.Phase)
	assert.Equal(t, 1, src.resumes, "the source keeps its guest")
}

func TestMissingPageListIsChecked(t *testing.T) {
	g, err := memory.New([]memory.Layout{{GPA: 0, Size: 16 * pageSize}, {GPA: 1 << 20, Size: 4 * pageSize}})
	require.NoError(t, err)
	defer g.Close()
	run := func(gpa uint64, n uint32) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, gpa), n)
	}
	bms, n, err := decodeRanges(g.Regions(), append(run(pageSize, 2), run(1<<20+3*pageSize, 1)...))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, [][]uint64{{0b110}, {0b1000}}, bms)
	assert.Equal(t, append(run(pageSize, 2), run(1<<20+3*pageSize, 1)...), encodeRanges(g.Regions(), bms), "encoding round-trips")

	for name, p := range map[string][]byte{
		"past a region's end": run(14*pageSize, 3),
		"in the hole":         run(1<<19, 1),
		"unaligned":           run(pageSize+1, 1),
		"empty run":           run(0, 0),
		"huge count":          run(0, ^uint32(0)),
		"truncated":           run(0, 1)[:11],
	} {
		_, _, err := decodeRanges(g.Regions(), p)
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
}
