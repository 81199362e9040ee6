package migration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"time"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Source is a running VM offering itself for migration.
type Source interface {
	// Memory is the guest RAM to transfer.
	Memory() *memory.Guest
	// StartDirtyLog starts tracking pages written by vCPUs and by the VMM.
	StartDirtyLog() error
	// SyncDirty ORs into bitmaps[i] (one bit per page of region i of
	// Memory().Regions()) the pages written since the previous call, and
	// re-arms tracking for them.
	SyncDirty(bitmaps [][]uint64) error
	// StopDirtyLog ends tracking.
	StopDirtyLog() error
	// Pause stops vCPUs and device I/O; Resume undoes it.
	Pause() error
	Resume()
	// Throttle keeps vCPUs stopped for the given fraction of the time
	// (0 turns throttling off): auto-converge for guests that dirty
	// memory faster than the link carries it.
	Throttle(fraction float64)
	// Header describes the VM so the target can build an empty one.
	Header() ([]byte, error)
	// State is the complete vCPU, VM and device state; called paused.
	State() ([]byte, error)
}

// Options tune a migration. Zero values pick the defaults noted.
type Options struct {
	// Bandwidth caps the stream in bytes per second (0: unlimited).
	Bandwidth int64
	// Downtime is the longest pause the stop-and-copy phase may take,
	// estimated from the measured bandwidth (default 300ms).
	Downtime time.Duration
	// AutoConverge throttles vCPUs when they dirty memory faster than it
	// is sent.
	AutoConverge bool
	// ProgressTimeout fails the migration when the remaining dirty memory
	// has not shrunk for this long (default 150s, like KubeVirt).
	ProgressTimeout time.Duration
	// CompletionTimeout bounds the whole migration (0: none).
	CompletionTimeout time.Duration
	// MaxRounds bounds pre-copy rounds before stop-and-copy is forced
	// regardless of the downtime estimate (default 30).
	MaxRounds int
	// ReadyTimeout bounds the wait for the target to load the state
	// (default 60s).
	ReadyTimeout time.Duration
	// PostCopy lets the migration switch to post-copy when pre-copy does
	// not converge (see postCopyDue): the target runs the guest at once
	// and fetches the pages still dirty on demand (postcopy.go).
	PostCopy bool
	// Progress, if set, is called after every round.
	Progress func(Stats)
}

// Stats describe a migration as it goes.
type Stats struct {
	Phase     string        `json:"phase"` // precopy, stop-and-copy, postcopy, completed, failed
	Rounds    int           `json:"rounds"`
	RAMBytes  int64         `json:"ram_bytes"`
	BytesSent int64         `json:"bytes_sent"`
	DataPages int64         `json:"data_pages"`
	ZeroPages int64         `json:"zero_pages"`
	Remaining int64         `json:"remaining_bytes"` // dirty at the last sync
	DirtyRate float64       `json:"dirty_rate_bps"`  // bytes/s dirtied during the last round
	Bandwidth float64       `json:"bandwidth_bps"`   // bytes/s achieved in the last round
	Throttle  float64       `json:"throttle"`        // fraction of time vCPUs were held
	Downtime  time.Duration `json:"downtime_ns"`     // guest paused on the source until the target was told to run
	Total     time.Duration `json:"total_ns"`
	Error     string        `json:"error,omitempty"`
	// PostCopy: the migration switched to post-copy; from then on a
	// failure loses the guest. RequestedPages were fetched by the
	// target's faults, the rest pushed in the background.
	PostCopy       bool  `json:"post_copy"`
	RequestedPages int64 `json:"requested_pages,omitempty"`
}

func (o *Options) defaults() {
	if o.Downtime <= 0 {
		o.Downtime = 300 * time.Millisecond
	}
	if o.ProgressTimeout <= 0 {
		o.ProgressTimeout = 150 * time.Second
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = 30
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 60 * time.Second
	}
}

// ErrNoProgress is returned when pre-copy stops converging.
var ErrNoProgress = errors.New("migration is not making progress")

// Send migrates src over conn. On any error the source VM is left running
// as it was (resumed if it had been paused, unthrottled, dirty logging
// off) and the target is told to discard. On success the source has
// committed: its guest now runs on the target, and the caller must not
// resume it. Cancelling ctx aborts the migration the same way.
func Send(ctx context.Context, nc net.Conn, src Source, opt Options) (st Stats, err error) {
	opt.defaults()
	start := time.Now()
	if opt.CompletionTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.CompletionTimeout)
		defer cancel()
	}
	// Cancellation unblocks any read or write on the stream.
	stopWatch := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stopWatch()

	s := &sender{c: newConn(nc), src: src, opt: opt, start: start, buf: make([]byte, 0, batchBytes+maxRun*pageSize)}
	s.c.count = s.account
	for _, r := range src.Memory().Regions() {
		st.RAMBytes += int64(r.Size)
	}
	s.st = st
	defer func() {
		if !s.committed {
			err = s.abort(ctx, nc, err)
			st = s.st
		}
	}()

	regions, bitmaps, err := s.begin()
	if err != nil {
		return s.st, err
	}
	postCopy, err := s.preCopy(ctx, regions, bitmaps)
	if err != nil {
		return s.st, err
	}
	s.st.Phase = "stop-and-copy"
	if err := src.Pause(); err != nil {
		return s.st, fmt.Errorf("pause source VM: %w", err)
	}
	s.paused = true
	pausedAt := time.Now()
	if err := src.SyncDirty(bitmaps); err != nil {
		return s.st, fmt.Errorf("final dirty sync: %w", err)
	}
	if postCopy {
		return s.postCopy(nc, regions, bitmaps, pausedAt, stopWatch, &s.committed)
	}
	return s.stopAndCopy(nc, regions, bitmaps, pausedAt)
}

// abort leaves the source VM as it was before a failed migration (resumed,
// unthrottled, dirty logging off), tells the target why, and returns err
// naming a cancellation or timeout that caused it.
func (s *sender) abort(ctx context.Context, nc net.Conn, err error) error {
	s.src.Throttle(0)
	if s.paused {
		s.src.Resume()
	}
	if s.logging {
		// Failing already: err is the one to report.
		_ = s.src.StopDirtyLog()
	}
	// Cancelling cuts the stream, so err is then an I/O error: say
	// what caused it first.
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		err = fmt.Errorf("migration cancelled: %w", err)
	case ctx.Err() != nil:
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	s.st.Phase, s.st.Error, s.st.Total = "failed", err.Error(), time.Since(s.start)
	// Best effort: tell the target why, so it discards at once.
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	if s.c.send(msgError, []byte(err.Error())) == nil {
		_ = s.c.flush()
	}
	return err
}

// begin opens the stream (magic, header), starts dirty logging and marks
// every populated page for round 0.
func (s *sender) begin() ([]*memory.Region, [][]uint64, error) {
	if err := s.c.writeMagic(); err != nil {
		return nil, nil, fmt.Errorf("send stream magic: %w", err)
	}
	hdr, err := s.src.Header()
	if err != nil {
		return nil, nil, fmt.Errorf("describe VM: %w", err)
	}
	if err := s.c.send(msgHeader, hdr); err != nil {
		return nil, nil, fmt.Errorf("send header: %w", err)
	}
	mem := s.src.Memory()
	regions := mem.Regions()
	bitmaps := make([][]uint64, len(regions))
	for i, r := range regions {
		pages := r.Size / pageSize
		bitmaps[i] = make([]uint64, (pages+63)/64)
	}
	if err := s.src.StartDirtyLog(); err != nil {
		return nil, nil, fmt.Errorf("start dirty logging: %w", err)
	}
	s.logging = true
	// Round 0 sends everything; pages written from now on are caught by
	// the next sync.
	if err := s.src.SyncDirty(bitmaps); err != nil {
		return nil, nil, fmt.Errorf("sync dirty log: %w", err)
	}
	// Pages the guest never touched are holes in the memfd and zero on
	// the target already: only populated ranges are sent (or scanned,
	// which would allocate them here).
	for i, r := range regions {
		for _, rg := range mem.Populated(r) {
			setRange(bitmaps[i], rg.Off/pageSize, (rg.Off+rg.Len+pageSize-1)/pageSize)
		}
	}
	return regions, bitmaps, nil
}

// convergence is what the pre-copy loop remembers between rounds.
type convergence struct {
	best     int64 // fewest dirty bytes left after a round so far; -1 before
	bestAt   time.Time
	throttle float64
}

// preCopy sends dirty pages in rounds while the guest runs, until the
// convergence decision ends it; it reports whether to go on in post-copy.
func (s *sender) preCopy(ctx context.Context, regions []*memory.Region, bitmaps [][]uint64) (postCopy bool, err error) {
	s.st.Phase = "precopy"
	cv := convergence{best: -1, bestAt: time.Now()}
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return false, err // the deferred handler names it
		}
		dirty, err := s.round(round, regions, bitmaps)
		if err != nil {
			return false, err
		}
		done, postCopy, err := s.decide(round, dirty, &cv)
		if done || err != nil {
			return postCopy, err
		}
	}
}

// round sends what bitmaps mark, syncs the dirty log into them, reports
// the round and returns how many bytes are dirty again.
func (s *sender) round(round int, regions []*memory.Region, bitmaps [][]uint64) (int64, error) {
	roundStart := time.Now()
	sentBefore := s.st.BytesSent
	if err := s.sendDirty(regions, bitmaps); err != nil {
		return 0, err
	}
	if err := s.c.flush(); err != nil {
		return 0, fmt.Errorf("send pages: %w", err)
	}
	elapsed := time.Since(roundStart)
	s.st.Rounds = round + 1
	if elapsed > 0 {
		s.st.Bandwidth = float64(s.st.BytesSent-sentBefore) / elapsed.Seconds()
	}
	if err := s.src.SyncDirty(bitmaps); err != nil {
		return 0, fmt.Errorf("sync dirty log: %w", err)
	}
	dirty := int64(countBits(bitmaps)) * pageSize
	s.st.Remaining = dirty
	if elapsed > 0 {
		s.st.DirtyRate = float64(dirty) / elapsed.Seconds()
	}
	if s.opt.Progress != nil {
		s.opt.Progress(s.st)
	}
	rb, _ := json.Marshal(s.st)
	if err := s.c.send(msgRound, rb); err != nil {
		return 0, fmt.Errorf("send round: %w", err)
	}
	return dirty, nil
}

// decide is the convergence decision after a round that left dirty bytes:
// done (stop-and-copy, or post-copy when postCopy), or another round,
// with the guest throttled when auto-converge calls for it. It fails when
// pre-copy stopped making progress.
func (s *sender) decide(round int, dirty int64, cv *convergence) (done, postCopy bool, err error) {
	opt := s.opt
	// Converged when what is left fits the downtime at the measured rate.
	rate := s.st.Bandwidth
	if opt.Bandwidth > 0 && (rate == 0 || rate > float64(opt.Bandwidth)) {
		rate = float64(opt.Bandwidth)
	}
	if rate > 0 && float64(dirty)/rate <= opt.Downtime.Seconds() || dirty == 0 {
		return true, false, nil
	}
	if opt.PostCopy && (round+1 >= opt.MaxRounds || postCopyDue(opt, round, cv.throttle)) {
		return true, true, nil
	}
	if round+1 >= opt.MaxRounds {
		return true, false, nil
	}
	if cv.best < 0 || dirty < cv.best {
		cv.best, cv.bestAt = dirty, time.Now()
	} else if time.Since(cv.bestAt) > opt.ProgressTimeout {
		return false, false, fmt.Errorf("%w: %d MiB still dirty after %v without improvement", ErrNoProgress, dirty>>20, opt.ProgressTimeout)
	}
	// Auto-converge: the guest dirties memory faster than half the
	// link's rate; hold its vCPUs a growing share of the time.
	if opt.AutoConverge && round >= 1 && s.st.DirtyRate > rate/2 {
		cv.throttle = min(maxThrottle, max(0.2, cv.throttle+0.1))
		s.src.Throttle(cv.throttle)
		s.st.Throttle = cv.throttle
	}
	return false, false, nil
}

// stopAndCopy sends the last dirty pages and the device state of the
// paused guest, waits for the target to load it and hands the guest over.
func (s *sender) stopAndCopy(nc net.Conn, regions []*memory.Region, bitmaps [][]uint64, pausedAt time.Time) (Stats, error) {
	if err := s.sendDirty(regions, bitmaps); err != nil {
		return s.st, err
	}
	if err := s.sendState(); err != nil {
		return s.st, err
	}
	nc.SetReadDeadline(time.Now().Add(s.opt.ReadyTimeout))
	if _, err := s.c.expect(msgReady); err != nil {
		return s.st, fmt.Errorf("target did not load the VM: %w", err)
	}
	nc.SetReadDeadline(time.Time{})
	// From here on the guest belongs to the target: even if this message
	// is lost, the source must not run it again.
	s.committed = true
	goErr := s.c.send(msgGo)
	if goErr == nil {
		goErr = s.c.flush()
	}
	s.src.Throttle(0)
	// The guest is the target's now: a dirty log left on costs nothing here.
	_ = s.src.StopDirtyLog()
	s.st.Downtime = time.Since(pausedAt)
	s.st.Total = time.Since(s.start)
	s.st.Phase = "completed"
	if goErr != nil {
		s.st.Error = fmt.Sprintf("sending go to the target: %v (the guest may be stopped on both sides)", goErr)
	}
	return s.st, nil
}

type sender struct {
	c     *conn
	src   Source
	opt   Options
	st    Stats
	start time.Time
	buf   []byte // page data of the batch being sent, copied out of guest RAM
	// What a failed migration must undo (see abort); committed once the
	// guest belongs to the target, when there is nothing to undo.
	paused, logging, committed bool
	// rate limiting
	windowStart time.Time
	windowBytes int64
}

// account counts bytes written and sleeps as needed to keep the stream
// under the bandwidth cap.
func (s *sender) account(n int) {
	s.st.BytesSent += int64(n)
	if s.opt.Bandwidth <= 0 {
		return
	}
	now := time.Now()
	if s.windowStart.IsZero() || now.Sub(s.windowStart) > time.Second {
		s.windowStart, s.windowBytes = now, 0
	}
	s.windowBytes += int64(n)
	due := s.windowStart.Add(time.Duration(float64(s.windowBytes) / float64(s.opt.Bandwidth) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

// maxRun pages go in one run; runs are batched up to batchBytes a message.
const (
	maxRun     = 256
	batchBytes = 4 << 20
)

// sendDirty sends every page set in bitmaps and clears the bits.
func (s *sender) sendDirty(regions []*memory.Region, bitmaps [][]uint64) error {
	var batch [][]byte
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.c.send(msgPages, batch...)
		batch, size, s.buf = batch[:0], 0, s.buf[:0]
		if err != nil {
			return fmt.Errorf("send pages: %w", err)
		}
		return nil
	}
	for i, r := range regions {
		bm := bitmaps[i]
		pages := r.Size / pageSize
		for p := uint64(0); p < pages; {
			if bm[p/64]&(1<<(p%64)) == 0 {
				if bm[p/64] == 0 {
					p = (p/64 + 1) * 64 // skip a clean word
				} else {
					p++
				}
				continue
			}
			zero := isZero(r.Data[p*pageSize : (p+1)*pageSize])
			n := uint64(0)
			for p+n < pages && n < maxRun && bm[(p+n)/64]&(1<<((p+n)%64)) != 0 &&
				isZero(r.Data[(p+n)*pageSize:(p+n+1)*pageSize]) == zero {
				bm[(p+n)/64] &^= 1 << ((p + n) % 64)
				n++
			}
			hdr := make([]byte, runHeader)
			putRun(hdr, r.GPA+p*pageSize, uint32(n), zero)
			batch = append(batch, hdr)
			size += runHeader
			if zero {
				s.st.ZeroPages += int64(n)
			} else {
				// Copy out of live guest RAM first: the guest may write
				// the page while it is being checksummed and sent, and the
				// receiver must see the bytes the checksum covers. A write
				// after the copy shows up in the next dirty sync.
				off := len(s.buf)
				s.buf = append(s.buf, r.Data[p*pageSize:(p+n)*pageSize]...)
				batch = append(batch, s.buf[off:])
				size += int(n) * pageSize
				s.st.DataPages += int64(n)
			}
			p += n
			if size >= batchBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

func putRun(b []byte, gpa uint64, n uint32, zero bool) {
	binary.LittleEndian.PutUint64(b[0:], gpa)
	binary.LittleEndian.PutUint32(b[8:], n)
	if zero {
		b[12] = runZero
	} else {
		b[12] = runData
	}
}

// setRange sets the bits of pages [from, to).
func setRange(bm []uint64, from, to uint64) {
	for p := from; p < to; p++ {
		bm[p/64] |= 1 << (p % 64)
	}
}

func countBits(bms [][]uint64) int {
	n := 0
	for _, bm := range bms {
		for _, w := range bm {
			n += bits.OnesCount64(w)
		}
	}
	return n
}

// isZero reports whether a page is all zero bytes, 8 bytes at a time.
func isZero(b []byte) bool {
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	for _, w := range words {
		if w != 0 {
			return false
		}
	}
	return true
}

// sendState saves the paused VM's state and sends it, flushed: the last
// message before the target loads the VM, in pre-copy and post-copy alike.
func (s *sender) sendState() error {
	state, err := s.src.State()
	if err != nil {
		return fmt.Errorf("save VM state: %w", err)
	}
	if err := s.c.send(msgState, state); err != nil {
		return fmt.Errorf("send state: %w", err)
	}
	if err := s.c.flush(); err != nil {
		return fmt.Errorf("send state: %w", err)
	}
	return nil
}
