package migration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// memSource is a VM without vCPUs: real guest RAM whose writes are tracked
// by the memory package (the same tracking devices use), so the protocol
// and the source's failure handling can be exercised without KVM. The
// machine package migrates real VMs through the same code.
type memSource struct {
	mem                         *memory.Guest
	mu                          sync.Mutex
	paused, logging, throttling bool
	pauses, resumes             int
	state                       []byte
	onRound                     func()
}

func newMemSource(t testing.TB, size uint64) *memSource {
	m, err := memory.New([]memory.Layout{{GPA: 0, Size: size}})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return &memSource{mem: m, state: []byte(`{"cpu":"state"}`)}
}

func (s *memSource) Memory() *memory.Guest { return s.mem }
func (s *memSource) StartDirtyLog() error {
	s.mem.StartDirtyTracking()
	s.logging = true
	return nil
}
func (s *memSource) SyncDirty(bms [][]uint64) error {
	if s.onRound != nil {
		s.onRound()
	}
	for i, r := range s.mem.Regions() {
		r.TakeDirty(bms[i])
	}
	return nil
}
func (s *memSource) StopDirtyLog() error {
	s.mem.StopDirtyTracking()
	s.logging = false
	return nil
}
func (s *memSource) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = true
	s.pauses++
	return nil
}
func (s *memSource) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	s.resumes++
}
func (s *memSource) Throttle(f float64)      { s.throttling = f > 0 }
func (s *memSource) Header() ([]byte, error) { return []byte(`{"memory":"layout"}`), nil }
func (s *memSource) State() ([]byte, error)  { return s.state, nil }

type memTarget struct {
	size             uint64
	mem              *memory.Guest
	header, state    []byte
	started          bool
	discarded        bool
	failRestore      error
	restoreCalledNum int
}

func (t *memTarget) Prepare(h []byte) (*memory.Guest, error) {
	t.header = h
	m, err := memory.New([]memory.Layout{{GPA: 0, Size: t.size}})
	t.mem = m
	return m, err
}
func (t *memTarget) Restore(s []byte) error {
	t.restoreCalledNum++
	t.state = s
	return t.failRestore
}
func (t *memTarget) Start() error { t.started = true; return nil }
func (t *memTarget) Discard()     { t.discarded = true }

func migrate(t *testing.T, src *memSource, tgt *memTarget, opt Options) (Stats, TargetStats, error, error) {
	t.Helper()
	a, b := net.Pipe()
	var tst TargetStats
	var terr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		tst, terr = Receive(context.Background(), b, tgt)
		b.Close()
	}()
	st, err := Send(context.Background(), a, src, opt)
	a.Close()
	<-done
	return st, tst, err, terr
}

func TestMigrationCopiesMemoryIncludingPagesDirtiedDuringPrecopy(t *testing.T) {
	const size = 4 << 20
	src := newMemSource(t, size)
	for p := uint64(0); p < size/pageSize; p += 3 { // every third page has data
		require.NoError(t, src.mem.WriteAt([]byte{byte(p), byte(p >> 8), 0xaa}, p*pageSize+17))
	}
	rounds := 0
	src.onRound = func() {
		// the "guest" keeps writing while pre-copy runs
		rounds++
		if rounds < 4 {
			src.mem.WriteAt(bytes.Repeat([]byte{byte(rounds)}, 3*pageSize), 100*pageSize)
			src.mem.WriteAt(make([]byte, pageSize), 3*pageSize) // a data page becomes zero again
		}
	}
	tgt := &memTarget{size: size}
	st, tst, err, terr := migrate(t, src, tgt, Options{Downtime: time.Nanosecond, MaxRounds: 6})
	require.NoError(t, err)
	require.NoError(t, terr)
	defer tgt.mem.Close()

	srcData := src.mem.Regions()[0].Data
	tgtData := tgt.mem.Regions()[0].Data
	assert.True(t, bytes.Equal(srcData, tgtData), "target RAM equals source RAM")
	assert.Equal(t, `{"memory":"layout"}`, string(tgt.header))
	assert.Equal(t, src.state, tgt.state)
	assert.True(t, tgt.started)
	assert.False(t, tgt.discarded)
	assert.Equal(t, "completed", st.Phase)
	assert.Greater(t, st.Rounds, 1, "pages dirtied during round 0 forced more rounds")
	assert.Greater(t, st.ZeroPages, int64(0), "zero pages are sent as markers")
	assert.Less(t, st.DataPages*pageSize, int64(size), "zero pages carried no data")
	assert.Equal(t, 1, src.pauses)
	assert.Equal(t, 0, src.resumes, "a migrated source is not resumed")
	assert.False(t, src.logging)
	assert.Equal(t, st.DataPages, tst.DataPages)
}

func TestTargetFailureLeavesSourceRunning(t *testing.T) {
	src := newMemSource(t, 1<<20)
	tgt := &memTarget{size: 1 << 20, failRestore: errors.New("device state version 9 unknown")}
	st, _, err, terr := migrate(t, src, tgt, Options{})
	require.Error(t, err)
	require.Error(t, terr)
	assert.Contains(t, err.Error(), "device state version 9 unknown", "the source learns why")
	assert.Equal(t, "failed", st.Phase)
	assert.Equal(t, src.pauses, src.resumes, "the source runs again")
	assert.False(t, src.paused)
	assert.False(t, src.logging)
	assert.False(t, src.throttling)
	assert.True(t, tgt.discarded)
	assert.False(t, tgt.started)
	tgt.mem.Close()
}

// recordStream captures a complete, valid migration stream.
func recordStream(t testing.TB) []byte {
	t.Helper()
	src := newMemSource(t, 256<<10)
	require.NoError(t, src.mem.WriteAt([]byte("hello"), 5*pageSize))
	a, b := net.Pipe()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		// play a target that accepts everything
		c := newConn(b)
		r := io.TeeReader(b, &buf)
		c.r.Reset(r)
		if c.readMagic() != nil {
			return
		}
		for {
			k, _, err := c.recv()
			if err != nil {
				return
			}
			if k == msgState {
				c.send(msgReady)
				c.flush()
			}
		}
	}()
	_, err := Send(context.Background(), a, src, Options{})
	require.NoError(t, err)
	a.Close()
	<-done
	return buf.Bytes()
}

// feed plays a recorded stream to Receive (answers from the target are
// drained and ignored).
func feed(t testing.TB, stream []byte) (*memTarget, error) {
	t.Helper()
	a, b := net.Pipe()
	tgt := &memTarget{size: 256 << 10}
	go func() {
		go io.Copy(io.Discard, a)
		a.Write(stream)
		a.Close()
	}()
	_, err := Receive(context.Background(), b, tgt)
	b.Close()
	if tgt.mem != nil {
		tgt.mem.Close()
	}
	return tgt, err
}

func TestCorruptOrTruncatedStreamIsRefused(t *testing.T) {
	stream := recordStream(t)
	require.Greater(t, len(stream), 100)
	flip := func(off int) []byte {
		s := append([]byte(nil), stream...)
		s[off] ^= 0x40
		return s
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   error
	}{
		{"bad magic", flip(2), ErrProtocol},
		{"flipped header byte", flip(len(Magic) + 12), ErrProtocol},
		{"flipped page data", flip(len(stream) / 2), ErrProtocol},
		{"truncated in the middle", stream[:len(stream)/2], io.ErrUnexpectedEOF},
		{"truncated after magic", stream[:len(Magic)], io.EOF},
		{"empty", nil, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt, err := feed(t, tc.stream)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.False(t, tgt.started, "a broken stream never starts the VM")
			if tgt.mem != nil {
				assert.True(t, tgt.discarded)
			}
		})
	}
}

func TestPageRunsOutsideRAMAreRejected(t *testing.T) {
	m, err := memory.New([]memory.Layout{{GPA: 0, Size: 16 * pageSize}})
	require.NoError(t, err)
	defer m.Close()
	written := map[*memory.Region][]uint64{m.Regions()[0]: make([]uint64, 1)}
	run := func(gpa uint64, n uint32, typ byte, data int) []byte {
		b := make([]byte, runHeader+data)
		putRun(b, gpa, n, typ == runZero)
		b[12] = typ
		return b
	}
	for name, p := range map[string][]byte{
		"past the end":     run(15*pageSize, 2, runZero, 0),
		"unaligned":        run(100, 1, runZero, 0),
		"no pages":         run(0, 0, runZero, 0),
		"data missing":     run(0, 2, runData, pageSize),
		"unknown run type": run(0, 1, 9, 0),
		"short header":     {1, 2, 3},
		"huge count":       run(0, 1<<31, runZero, 0),
	} {
		t.Run(name, func(t *testing.T) {
			var st TargetStats
			assert.ErrorIs(t, applyPages(m, written, p, &st), ErrProtocol)
		})
	}
}

func TestCancelResumesSource(t *testing.T) {
	src := newMemSource(t, 8<<20)
	ctx, cancel := context.WithCancel(context.Background())
	a, b := net.Pipe()
	defer b.Close()
	// the target never reads: Send blocks in its first write until cancelled
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	st, err := Send(ctx, a, src, Options{})
	require.ErrorContains(t, err, "migration cancelled")
	assert.Equal(t, "failed", st.Phase)
	assert.Equal(t, src.pauses, src.resumes)
	assert.False(t, src.logging)
}

func TestReadPayloadGrowsWithTheData(t *testing.T) {
	data := make([]byte, 5<<20+123)
	for i := range data {
		data[i] = byte(i % 251)
	}
	got, err := readPayload(bytes.NewReader(data), len(data))
	require.NoError(t, err)
	assert.Equal(t, data, got)
	// A claim the stream does not back costs an error, not the claim.
	_, err = readPayload(bytes.NewReader(data[:10]), 64<<20)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
