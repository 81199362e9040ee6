package migration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Target is a VMM process receiving a VM.
type Target interface {
	// Prepare builds an empty VM from the source's header and returns its
	// RAM, into which pages are written as they arrive.
	Prepare(header []byte) (*memory.Guest, error)
	// Restore loads the complete state; the VM must not run yet.
	Restore(state []byte) error
	// Start runs the VM (after the source committed).
	Start() error
	// Discard throws away whatever Prepare/Restore built.
	Discard()
}

// TargetStats describe what a target received.
type TargetStats struct {
	Rounds    int   `json:"rounds"`
	DataPages int64 `json:"data_pages"`
	ZeroPages int64 `json:"zero_pages"`
	Bytes     int64 `json:"bytes"`
	// PostCopy: the guest was started with MissingPages still to come;
	// the PostCopyTarget hears when they are all in (or lost).
	PostCopy     bool  `json:"post_copy,omitempty"`
	MissingPages int64 `json:"missing_pages,omitempty"`
}

// Receive takes a VM from nc into t. On any error (a broken or corrupt
// stream, the source giving up, a state that doesn't load) it discards the
// VM and returns the error; the source keeps running its guest. The VM is
// started only after the source has committed.
func Receive(ctx context.Context, nc net.Conn, t Target) (st TargetStats, err error) {
	stopWatch := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stopWatch()
	c := newConn(nc)
	prepared, started := false, false
	defer func() {
		if started {
			return
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		}
		if prepared {
			t.Discard()
		}
		if _, remote := err.(*RemoteError); !remote {
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			// Best effort: the stream may be what failed.
			if c.send(msgError, []byte(err.Error())) == nil {
				_ = c.flush()
			}
		}
	}()

	if err := c.readMagic(); err != nil {
		return st, err
	}
	hdr, err := c.expect(msgHeader)
	if err != nil {
		return st, fmt.Errorf("migration header: %w", err)
	}
	mem, err := t.Prepare(hdr)
	if err != nil {
		return st, fmt.Errorf("prepare target VM: %w", err)
	}
	prepared = true
	// Fresh guest RAM is zero: a zero page only needs clearing if data was
	// written there in an earlier round.
	written := map[*memory.Region][]uint64{}
	for _, r := range mem.Regions() {
		written[r] = make([]uint64, (r.Size/pageSize+63)/64)
	}
	for {
		kind, payload, err := c.recv()
		if err != nil {
			return st, fmt.Errorf("receiving VM: %w", err)
		}
		st.Bytes += int64(len(payload)) + 9
		switch kind {
		case msgPages:
			if err := applyPages(mem, written, payload, &st); err != nil {
				return st, err
			}
		case msgRound:
			var rs Stats
			if err := json.Unmarshal(payload, &rs); err != nil {
				return st, fmt.Errorf("%w: round message: %v", ErrProtocol, err)
			}
			st.Rounds = rs.Rounds
		case msgPostCopy:
			started, err = receivePostCopy(c, nc, t, mem, payload, &st)
			return st, err
		case msgState:
			if err := t.Restore(payload); err != nil {
				return st, fmt.Errorf("restore VM state: %w", err)
			}
			if err := c.send(msgReady); err != nil {
				return st, fmt.Errorf("send ready: %w", err)
			}
			if err := c.flush(); err != nil {
				return st, fmt.Errorf("send ready: %w", err)
			}
			if _, err := c.expect(msgGo); err != nil {
				return st, fmt.Errorf("source did not hand over the VM: %w", err)
			}
			if err := t.Start(); err != nil {
				return st, fmt.Errorf("start migrated VM: %w", err)
			}
			started = true
			return st, nil
		default:
			return st, fmt.Errorf("%w: unexpected %s message", ErrProtocol, kindName(kind))
		}
	}
}

// applyPages writes the page runs of one message into guest RAM, checking
// each against the RAM layout first.
func applyPages(mem *memory.Guest, written map[*memory.Region][]uint64, p []byte, st *TargetStats) error {
	for len(p) > 0 {
		if len(p) < runHeader {
			return fmt.Errorf("%w: truncated page run header", ErrProtocol)
		}
		gpa := binary.LittleEndian.Uint64(p)
		n := uint64(binary.LittleEndian.Uint32(p[8:]))
		typ := p[12]
		p = p[runHeader:]
		if gpa%pageSize != 0 || n == 0 || n > maxRun {
			return fmt.Errorf("%w: page run at %#x of %d pages", ErrProtocol, gpa, n)
		}
		dst, err := mem.Slice(gpa, n*pageSize)
		if err != nil {
			return fmt.Errorf("%w: page run outside guest RAM: %v", ErrProtocol, err)
		}
		var r *memory.Region
		for _, x := range mem.Regions() {
			if gpa >= x.GPA && gpa < x.End() {
				r = x
			}
		}
		bm := written[r]
		first := (gpa - r.GPA) / pageSize
		switch typ {
		case runZero:
			for i := uint64(0); i < n; i++ {
				pg := first + i
				if bm[pg/64]&(1<<(pg%64)) != 0 {
					clear(dst[i*pageSize : (i+1)*pageSize])
					bm[pg/64] &^= 1 << (pg % 64)
				}
			}
			st.ZeroPages += int64(n)
		case runData:
			if uint64(len(p)) < n*pageSize {
				return fmt.Errorf("%w: page run at %#x announces %d pages, message has %d bytes", ErrProtocol, gpa, n, len(p))
			}
			copy(dst, p[:n*pageSize])
			p = p[n*pageSize:]
			for i := uint64(0); i < n; i++ {
				pg := first + i
				bm[pg/64] |= 1 << (pg % 64)
			}
			st.DataPages += int64(n)
		default:
			return fmt.Errorf("%w: page run of unknown type %d", ErrProtocol, typ)
		}
	}
	return nil
}
