package migration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Post-copy (Options.PostCopy, KubeVirt's allowPostCopy): when pre-copy
// does not converge, the source pauses and sends the device and vCPU
// state plus the list of pages still dirty, and the target runs the guest
// at once with those pages missing (userfaultfd). The target asks for a
// page the moment something touches it; meanwhile the source pushes the
// rest. Each page crosses the link once, so the migration ends however
// fast the guest writes; the price is that from the handover on, the
// guest's memory lives on both sides, and losing either side loses the
// guest.
//
// Messages, after the last pre-copy round:
//
//	source → target  postcopy  the pages still missing: runs of gpa u64 | count u32
//	source → target  state     as in pre-copy; the target answers ready, the source go
//	target → source  request   pages a fault is waiting for: gpa u64 each
//	source → target  pages     requested pages first, then the rest, each page once
//	source → target  end       every missing page has been sent
//	target → source  done      every page is in: the migration is complete
const (
	msgPostCopy    byte = 8
	msgRequest     byte = 9
	msgPostCopyEnd byte = 10
	msgDone        byte = 11
)

func init() {
	kindNames[msgPostCopy] = "postcopy"
	kindNames[msgRequest] = "request"
	kindNames[msgPostCopyEnd] = "end"
	kindNames[msgDone] = "done"
}

// ErrPostCopyFailed is wrapped by the error of a migration that broke
// after the target started the guest: neither side has all of its memory
// any more, so the guest is lost and the source must not resume it.
var ErrPostCopyFailed = errors.New("migration failed in post-copy; the guest is lost")

// PostCopyTarget is a Target that can run the guest while pages are still
// missing.
type PostCopyTarget interface {
	Target
	// PostCopyDone is called, from another goroutine, once post-copy ends
	// after Start: with nil when every page is in, or with the error that
	// lost the guest (the source is gone with pages only it had). Then
	// the guest must not run on, and vCPUs or device workers waiting for
	// a missing page stay blocked in the kernel: only ending the process
	// frees them.
	PostCopyDone(err error)
}

// postCopyDue is the rule for leaving pre-copy: two rounds without
// convergence (the first copies everything, the second shows the guest
// dirties memory faster than it is sent, so more rounds would only resend
// the same hot pages), or with auto-converge, once the throttle is at its
// limit and still does not suffice.
func postCopyDue(opt Options, round int, throttle float64) bool {
	if opt.AutoConverge {
		return throttle >= maxThrottle
	}
	return round >= 1
}

// maxThrottle is the largest share of time auto-converge holds vCPUs.
const maxThrottle = 0.99

// Page-run batches in post-copy are small, so a request never waits long
// behind background pages at a low bandwidth cap.
const (
	postCopyBatch   = 16
	postCopyIdle    = 60 * time.Second // a source silent this long is lost
	requestMaxPages = 256
)

// encodeRanges lists the pages set in bitmaps as runs gpa u64 | count u32.
func encodeRanges(regions []*memory.Region, bitmaps [][]uint64) []byte {
	var b []byte
	for i, r := range regions {
		bm := bitmaps[i]
		pages := r.Size / pageSize
		for p := uint64(0); p < pages; {
			if bm[p/64]&(1<<(p%64)) == 0 {
				p++
				continue
			}
			n := uint64(1)
			for p+n < pages && n < 1<<31 && bm[(p+n)/64]&(1<<((p+n)%64)) != 0 {
				n++
			}
			b = binary.LittleEndian.AppendUint64(b, r.GPA+p*pageSize)
			b = binary.LittleEndian.AppendUint32(b, uint32(n))
			p += n
		}
	}
	return b
}

// decodeRanges checks the runs of a postcopy message against guest RAM
// and returns them as bitmaps, one per region, and the number of pages.
func decodeRanges(regions []*memory.Region, p []byte) ([][]uint64, int, error) {
	if len(p)%12 != 0 {
		return nil, 0, fmt.Errorf("%w: postcopy message of %d bytes is not whole page runs", ErrProtocol, len(p))
	}
	bitmaps := make([][]uint64, len(regions))
	for i, r := range regions {
		bitmaps[i] = make([]uint64, (r.Size/pageSize+63)/64)
	}
	total := 0
	for ; len(p) > 0; p = p[12:] {
		gpa := binary.LittleEndian.Uint64(p)
		n := uint64(binary.LittleEndian.Uint32(p[8:]))
		i, first, ok := pageOf(regions, gpa)
		if !ok || gpa%pageSize != 0 || n == 0 || n > regions[i].Size/pageSize-first {
			return nil, 0, fmt.Errorf("%w: missing pages at %#x (%d pages) are not guest RAM", ErrProtocol, gpa, n)
		}
		for pg := first; pg < first+n; pg++ {
			if bitmaps[i][pg/64]&(1<<(pg%64)) == 0 {
				bitmaps[i][pg/64] |= 1 << (pg % 64)
				total++
			}
		}
	}
	return bitmaps, total, nil
}

// pageOf finds the region holding gpa and the page's index in it.
func pageOf(regions []*memory.Region, gpa uint64) (int, uint64, bool) {
	for i, r := range regions {
		if gpa >= r.GPA && gpa < r.End() {
			return i, (gpa - r.GPA) / pageSize, true
		}
	}
	return 0, 0, false
}

// pageMsg builds one pages message page by page, merging neighbours into
// runs.
type pageMsg struct {
	b    []byte
	hdr  int // offset of the open run's header, -1 if none
	gpa  uint64
	n    uint32
	zero bool
}

func (m *pageMsg) reset() { m.b, m.hdr = m.b[:0], -1 }

// add appends the page at gpa with contents data and reports whether it
// was a zero page.
func (m *pageMsg) add(gpa uint64, data []byte) bool {
	zero := isZero(data)
	if m.hdr >= 0 && m.n < maxRun && gpa == m.gpa+uint64(m.n)*pageSize && zero == m.zero {
		m.n++
		binary.LittleEndian.PutUint32(m.b[m.hdr+8:], m.n)
	} else {
		m.hdr, m.gpa, m.n, m.zero = len(m.b), gpa, 1, zero
		m.b = append(m.b, make([]byte, runHeader)...)
		putRun(m.b[m.hdr:], gpa, 1, zero)
	}
	if !zero {
		m.b = append(m.b, data...)
	}
	return zero
}

// postCopy hands the paused guest to the target with the pages set in
// bitmaps missing there, then serves them. The target makes the pages
// missing before it loads the state (devices read guest RAM as they are
// restored), so pages are served from the moment the state is sent.
// committed is set once the target has loaded the state: from then on the
// source never resumes.
func (s *sender) postCopy(nc net.Conn, regions []*memory.Region, bitmaps [][]uint64, pausedAt time.Time, stopWatch func() bool, committed *bool) (Stats, error) {
	s.st.PostCopy = true
	s.st.Remaining = int64(countBits(bitmaps)) * pageSize
	if err := s.c.send(msgPostCopy, encodeRanges(regions, bitmaps)); err != nil {
		return s.st, fmt.Errorf("send missing pages: %w", err)
	}
	if err := s.sendState(); err != nil {
		return s.st, err
	}
	nc.SetReadDeadline(time.Now().Add(s.opt.ReadyTimeout))
	ready := func() error {
		nc.SetReadDeadline(time.Time{})
		// The guest is the target's from here on, and part of its memory
		// is only here: cancelling now would lose it, so the migration
		// can no longer be cancelled.
		*committed = true
		stopWatch()
		s.src.Throttle(0)
		// Committed: the guest moves whatever the dirty log says.
		_ = s.src.StopDirtyLog()
		if err := s.c.send(msgGo); err != nil {
			return fmt.Errorf("send go: %w", err)
		}
		if err := s.c.flush(); err != nil {
			return fmt.Errorf("send go: %w", err)
		}
		s.st.Downtime = time.Since(pausedAt)
		s.st.Phase = "postcopy"
		if s.opt.Progress != nil {
			s.opt.Progress(s.st)
		}
		return nil
	}
	if err := s.servePostCopy(nc, regions, bitmaps, ready); err != nil {
		if !*committed {
			return s.st, fmt.Errorf("target did not load the VM: %w", err)
		}
		err = fmt.Errorf("%w: %v", ErrPostCopyFailed, err)
		s.st.Phase, s.st.Error, s.st.Total = "failed", err.Error(), time.Since(s.start)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		// Best effort: the stream may be what failed.
		if s.c.send(msgError, []byte(err.Error())) == nil {
			_ = s.c.flush()
		}
		return s.st, err
	}
	s.st.Phase, s.st.Remaining, s.st.Total = "completed", 0, time.Since(s.start)
	return s.st, nil
}

// servePostCopy sends every page set in bitmaps, requested ones first,
// calls ready when the target has loaded the state, and returns once the
// target confirms it has every page.
func (s *sender) servePostCopy(nc net.Conn, regions []*memory.Region, bitmaps [][]uint64, ready func() error) error {
	in := postCopyInbox{reqs: make(chan []uint64, 64), ready: make(chan struct{}, 1), done: make(chan error, 1), quit: make(chan struct{})}
	defer close(in.quit)
	go s.readPostCopy(in)

	ps := &pushState{s: s, regions: regions, bitmaps: bitmaps, left: countBits(bitmaps)}
	ps.msg.reset()
	isReady := false
	lastProgress := time.Now()
	for ps.left > 0 || !isReady {
		var err error
		if ps.left > 0 {
			select {
			case gpas := <-in.reqs:
				err = ps.serve(gpas)
			case <-in.ready:
				isReady = true
				err = ready()
			case err = <-in.done:
			default:
				ps.background()
			}
		} else {
			// Everything is sent; the target is still loading the state.
			select {
			case <-in.reqs: // already sent: the pages are on their way
			case <-in.ready:
				isReady = true
				err = ready()
			case err = <-in.done:
			}
		}
		if err != nil {
			return err
		}
		if err := ps.flush(in.done); err != nil {
			return err
		}
		s.st.Remaining = int64(ps.left) * pageSize
		if isReady && s.opt.Progress != nil && time.Since(lastProgress) > 200*time.Millisecond {
			s.opt.Progress(s.st)
			lastProgress = time.Now()
		}
	}
	if err := s.c.send(msgPostCopyEnd); err != nil {
		return fmt.Errorf("send end: %w", err)
	}
	if err := s.c.flush(); err != nil {
		return fmt.Errorf("send end: %w", err)
	}
	nc.SetReadDeadline(time.Now().Add(s.opt.ReadyTimeout))
	for {
		select {
		case <-in.reqs: // already sent: the pages are on their way
		case err := <-in.done:
			if err != nil {
				return fmt.Errorf("target did not confirm it has every page: %w", err)
			}
			return nil
		}
	}
}

// postCopyInbox carries what the target sends during post-copy from
// readPostCopy to servePostCopy.
type postCopyInbox struct {
	reqs  chan []uint64 // pages the target faulted on
	ready chan struct{} // the target loaded the state
	done  chan error    // the target has every page (nil), or the stream broke
	quit  chan struct{} // servePostCopy returned
}

// readPostCopy reads the target's messages until it has every page or the
// stream breaks.
func (s *sender) readPostCopy(in postCopyInbox) {
	gotReady := false
	for {
		k, p, err := s.c.recv()
		if err != nil {
			in.done <- fmt.Errorf("target: %w", err)
			return
		}
		switch {
		case k == msgReady && !gotReady:
			gotReady = true
			in.ready <- struct{}{}
		case k == msgDone && gotReady:
			in.done <- nil
			return
		case k == msgRequest && len(p)%8 == 0 && len(p) > 0:
			gpas := make([]uint64, len(p)/8)
			for i := range gpas {
				gpas[i] = binary.LittleEndian.Uint64(p[8*i:])
			}
			select {
			case in.reqs <- gpas:
			case <-in.quit:
				return
			}
		default:
			in.done <- fmt.Errorf("%w: %s message of %d bytes during post-copy", ErrProtocol, kindName(k), len(p))
			return
		}
	}
}

// pushState is the source's side of post-copy: the pages still to be sent
// and the message being filled.
type pushState struct {
	s       *sender
	regions []*memory.Region
	bitmaps [][]uint64
	msg     pageMsg
	left    int
	// background's position, in address order
	cursor     int
	cursorPage uint64
}

// take queues page pg of region i if it is still to be sent.
func (ps *pushState) take(i int, pg uint64) bool {
	bm := ps.bitmaps[i]
	if bm[pg/64]&(1<<(pg%64)) == 0 {
		return false
	}
	bm[pg/64] &^= 1 << (pg % 64)
	r := ps.regions[i]
	if ps.msg.add(r.GPA+pg*pageSize, r.Data[pg*pageSize:(pg+1)*pageSize]) {
		ps.s.st.ZeroPages++
	} else {
		ps.s.st.DataPages++
	}
	ps.left--
	return true
}

// serve queues the pages the target asked for.
func (ps *pushState) serve(gpas []uint64) error {
	for _, gpa := range gpas {
		i, pg, ok := pageOf(ps.regions, gpa)
		if !ok || gpa%pageSize != 0 {
			return fmt.Errorf("%w: target requested %#x, not a page of guest RAM", ErrProtocol, gpa)
		}
		if ps.take(i, pg) {
			ps.s.st.RequestedPages++
		}
	}
	return nil
}

// background queues the next pages in address order.
func (ps *pushState) background() {
	for n := 0; n < postCopyBatch && ps.left > 0 && ps.cursor < len(ps.regions); {
		r, bm := ps.regions[ps.cursor], ps.bitmaps[ps.cursor]
		if ps.cursorPage >= r.Size/pageSize {
			ps.cursor, ps.cursorPage = ps.cursor+1, 0
			continue
		}
		if bm[ps.cursorPage/64] == 0 {
			ps.cursorPage = (ps.cursorPage/64 + 1) * 64
			continue
		}
		if bm[ps.cursorPage/64]&(1<<(ps.cursorPage%64)) != 0 {
			ps.take(ps.cursor, ps.cursorPage)
			n++
		}
		ps.cursorPage++
	}
}

// flush sends the queued pages, if any. On a broken stream it prefers the
// reason the target gave, if it gave one (done).
func (ps *pushState) flush(done <-chan error) error {
	if len(ps.msg.b) == 0 {
		return nil
	}
	c := ps.s.c
	err := c.send(msgPages, ps.msg.b)
	if err == nil {
		err = c.flush()
	}
	if err != nil {
		select {
		case derr := <-done:
			if derr != nil {
				return derr
			}
		default:
		}
		return fmt.Errorf("send pages: %w", err)
	}
	ps.msg.reset()
	return nil
}

// receivePostCopy runs the target's side once the source has announced
// post-copy with the missing pages in payload: it makes those pages
// missing and starts serving them, loads the state (restoring devices may
// touch missing pages: they are fetched like any other), starts the guest
// after the handshake, and leaves the rest of the pages to a goroutine.
// It reports whether the guest was started.
func receivePostCopy(c *conn, nc net.Conn, t Target, mem *memory.Guest, payload []byte, st *TargetStats) (bool, error) {
	pt, ok := t.(PostCopyTarget)
	if !ok {
		return false, errors.New("this target cannot run a guest in post-copy")
	}
	missing, n, err := decodeRanges(mem.Regions(), payload)
	if err != nil {
		return false, err
	}
	uf, err := mem.Userfault(missing)
	if err != nil {
		return false, fmt.Errorf("post-copy: %w", err)
	}
	p := &pageServer{c: c, nc: nc, uf: uf, regions: mem.Regions(), missing: missing, left: n,
		states: make(chan []byte, 1), gos: make(chan struct{}, 1)}
	p.requested = make([][]uint64, len(missing))
	for i := range missing {
		p.requested[i] = make([]uint64, len(missing[i]))
	}
	go p.serveFaults()
	received := make(chan error, 1)
	go func() { received <- p.receive() }()
	// abort stops both goroutines before the caller discards the VM
	// (and its RAM) and reports the error on the stream.
	abort := func(err error) (bool, error) {
		nc.SetReadDeadline(time.Unix(1, 0))
		// errcheck wants the drop said; S1005 calls saying it unnecessary.
		_ = <-received //nolint:staticcheck // the cut stream's error; err is the cause
		uf.Close()
		p.wmu.Lock()
		p.stopped = true
		p.wmu.Unlock()
		nc.SetReadDeadline(time.Time{})
		return false, err
	}
	unexpected := func(err error) error {
		if err == nil {
			return fmt.Errorf("%w: source ended post-copy before the handover", ErrProtocol)
		}
		return err
	}
	var state []byte
	select {
	case state = <-p.states:
	case err := <-received:
		received <- err
		return abort(fmt.Errorf("post-copy state: %w", unexpected(err)))
	}
	st.Bytes += int64(len(state)) + 9
	if err := t.Restore(state); err != nil {
		return abort(fmt.Errorf("restore VM state: %w", err))
	}
	p.wmu.Lock()
	err = c.send(msgReady)
	if err == nil {
		err = c.flush()
	}
	p.wmu.Unlock()
	if err != nil {
		return abort(fmt.Errorf("send ready: %w", err))
	}
	select {
	case <-p.gos:
	case err := <-received:
		received <- err
		return abort(fmt.Errorf("source did not hand over the VM: %w", unexpected(err)))
	}
	if err := t.Start(); err != nil {
		// The source has committed: its guest can only run here.
		return abort(fmt.Errorf("%w: start migrated VM: %v", ErrPostCopyFailed, err))
	}
	st.PostCopy, st.MissingPages = true, int64(n)
	go func() {
		err := <-received
		nc.Close()
		if err != nil {
			err = p.lost(err)
		}
		pt.PostCopyDone(err)
	}()
	return true, nil
}

// pageServer is the target's half of post-copy.
type pageServer struct {
	c       *conn
	nc      net.Conn
	uf      *memory.Userfault
	regions []*memory.Region
	wmu     sync.Mutex // one writer on the stream at a time
	stopped bool       // under wmu: the migration failed before the handover
	states  chan []byte
	gos     chan struct{}

	mu        sync.Mutex
	missing   [][]uint64 // pages not installed yet
	requested [][]uint64 // pages asked for
	left      int
}

// serveFaults turns faults into requests for missing pages; a fault on a
// hole that was never missing (a page the source never sent: zero there)
// gets a zero page at once.
func (p *pageServer) serveFaults() {
	var faults []uint64
	for {
		var err error
		faults, err = p.uf.Faults(faults[:0])
		if err != nil {
			return // closed: every page is in, or the guest is lost
		}
		var req []byte
		var zero []uint64
		p.mu.Lock()
		for _, gpa := range faults {
			i, pg, ok := pageOf(p.regions, gpa)
			if !ok {
				continue
			}
			bit := uint64(1) << (pg % 64)
			switch {
			case p.missing[i][pg/64]&bit == 0:
				zero = append(zero, gpa)
			case p.requested[i][pg/64]&bit == 0 && len(req) < 8*requestMaxPages:
				p.requested[i][pg/64] |= bit
				req = binary.LittleEndian.AppendUint64(req, gpa)
			}
		}
		p.mu.Unlock()
		for _, gpa := range zero {
			// Present already (installed after the fault) is fine.
			_ = p.uf.Zero(gpa, pageSize)
		}
		if len(req) > 0 {
			// A failed write shows as a broken stream in receive.
			p.wmu.Lock()
			if !p.stopped && p.c.send(msgRequest, req) == nil {
				_ = p.c.flush()
			}
			p.wmu.Unlock()
		}
	}
}

// receive installs the pages the source sends until it says all are
// sent, and passes on the state and the go of the handover.
func (p *pageServer) receive() error {
	gotState, gotGo := false, false
	for {
		if gotGo {
			p.nc.SetReadDeadline(time.Now().Add(postCopyIdle))
		}
		k, payload, err := p.c.recv()
		if err != nil {
			return err
		}
		switch {
		case k == msgState && !gotState:
			gotState = true
			p.states <- payload
			continue
		case k == msgGo && gotState && !gotGo:
			gotGo = true
			p.gos <- struct{}{}
			continue
		}
		switch k {
		case msgPages:
			if err := p.install(payload); err != nil {
				return err
			}
		case msgPostCopyEnd:
			if !gotGo {
				return fmt.Errorf("%w: source ended post-copy before the handover", ErrProtocol)
			}
			p.mu.Lock()
			left := p.left
			p.mu.Unlock()
			if left != 0 {
				return fmt.Errorf("%w: source ended post-copy with %d pages never sent", ErrProtocol, left)
			}
			if err := p.uf.Close(); err != nil {
				return err
			}
			// Every page is here: whether the confirmation reaches the
			// source is its business, the guest no longer needs it.
			p.wmu.Lock()
			if p.c.send(msgDone) == nil {
				_ = p.c.flush()
			}
			p.wmu.Unlock()
			return nil
		default:
			return fmt.Errorf("%w: unexpected %s message during post-copy", ErrProtocol, kindName(k))
		}
	}
}

// lost is the error of a post-copy that can't finish: the guest is lost.
func (p *pageServer) lost(err error) error {
	p.mu.Lock()
	left := p.left
	p.mu.Unlock()
	src := "the migration source"
	if a := p.nc.RemoteAddr(); a != nil && a.String() != "" && a.String() != "@" {
		src += " " + a.String()
	}
	return fmt.Errorf("%w: lost %s with %d pages still missing here: %v", ErrPostCopyFailed, src, left, err)
}

// install puts the still-missing pages of one pages message into guest
// RAM, checking each run against the RAM layout first.
func (p *pageServer) install(b []byte) error {
	for len(b) > 0 {
		if len(b) < runHeader {
			return fmt.Errorf("%w: truncated page run header", ErrProtocol)
		}
		gpa := binary.LittleEndian.Uint64(b)
		n := uint64(binary.LittleEndian.Uint32(b[8:]))
		typ := b[12]
		b = b[runHeader:]
		i, first, ok := pageOf(p.regions, gpa)
		if !ok || gpa%pageSize != 0 || n == 0 || n > maxRun || n > p.regions[i].Size/pageSize-first {
			return fmt.Errorf("%w: page run at %#x of %d pages", ErrProtocol, gpa, n)
		}
		var data []byte
		switch typ {
		case runZero:
		case runData:
			if uint64(len(b)) < n*pageSize {
				return fmt.Errorf("%w: page run at %#x announces %d pages, message has %d bytes", ErrProtocol, gpa, n, len(b))
			}
			data, b = b[:n*pageSize], b[n*pageSize:]
		default:
			return fmt.Errorf("%w: page run of unknown type %d", ErrProtocol, typ)
		}
		for k := uint64(0); k < n; k++ {
			pg := first + k
			bit := uint64(1) << (pg % 64)
			p.mu.Lock()
			want := p.missing[i][pg/64]&bit != 0
			p.mu.Unlock()
			if !want {
				continue // sent twice: each page is installed once
			}
			var err error
			if data == nil {
				err = p.uf.Zero(gpa+k*pageSize, pageSize)
			} else {
				err = p.uf.Install(gpa+k*pageSize, data[k*pageSize:(k+1)*pageSize])
			}
			if err != nil {
				return err
			}
			p.mu.Lock()
			p.missing[i][pg/64] &^= bit
			p.left--
			p.mu.Unlock()
		}
	}
	return nil
}
