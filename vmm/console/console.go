// Package console connects the guest's serial console to the outside world:
// the VMM's own stdio, or a unix socket that clients attach to and detach
// from while the VM runs (what virtctl console reaches through the
// launcher). It keeps the most recent output so a client that attaches late
// still sees what the guest printed, and never lets a slow reader stall a
// vCPU.
package console

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/vmm/unixsock"
)

const (
	// HistorySize is how much recent output a newly attached client gets.
	HistorySize = 64 << 10
	// maxPending bounds output queued for slow sinks; past it, the oldest
	// queued output is dropped (and counted) rather than blocking the guest.
	maxPending = 1 << 20
)

// clientWriteTimeout is how long a socket client may take to accept
// output before it is detached (a variable so tests need not wait).
var clientWriteTimeout = 5 * time.Second

// Console is the output/input hub of one guest console.
type Console struct {
	mu      sync.Mutex
	history []byte
	pending []byte
	dropped uint64
	kick    chan struct{}
	done    chan struct{}
	closed  bool
	sinks   []io.Writer // always-on outputs (stdout, log file)
	client  net.Conn
	// replay is the history a newly attached client still has to get;
	// the flusher sends it before any live output, so the two can't
	// interleave. replaySkip is how much of pending the replay already
	// holds (output written before the attach but not yet flushed).
	replay     []byte
	replaySkip int
	input      func([]byte)
	watchers   []*watcher
	listener   net.Listener
	wg         sync.WaitGroup
}

type watcher struct {
	pattern []byte
	tail    []byte
	ch      chan time.Time
}

// New creates a console. Guest output is written to every sink (may be
// none) and to the attached socket client, if any.
func New(sinks ...io.Writer) *Console {
	c := &Console{kick: make(chan struct{}, 1), done: make(chan struct{})}
	for _, s := range sinks {
		if s != nil {
			c.sinks = append(c.sinks, s)
		}
	}
	c.wg.Add(1)
	go c.flusher()
	return c
}

// SetInput sets where bytes typed by the user go (the UART's receiver).
func (c *Console) SetInput(f func([]byte)) {
	c.mu.Lock()
	c.input = f
	c.mu.Unlock()
}

// Write takes guest output. It never blocks on sinks.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.history = append(c.history, p...)
	if len(c.history) > 2*HistorySize {
		c.history = append(c.history[:0], c.history[len(c.history)-HistorySize:]...)
	}
	c.pending = append(c.pending, p...)
	if over := len(c.pending) - maxPending; over > 0 {
		c.dropped += uint64(over)
		c.pending = append(c.pending[:0], c.pending[over:]...)
		c.replaySkip = max(0, c.replaySkip-over)
	}
	now := time.Time{}
	for _, w := range c.watchers {
		if w.ch == nil {
			continue
		}
		w.tail = append(w.tail, p...)
		if bytes.Contains(w.tail, w.pattern) {
			if now.IsZero() {
				now = time.Now()
			}
			w.ch <- now
			close(w.ch)
			w.ch = nil
			continue
		}
		if keep := len(w.pattern) - 1; len(w.tail) > keep {
			w.tail = append(w.tail[:0], w.tail[len(w.tail)-keep:]...)
		}
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Watch returns a channel that receives the time pattern first appears in
// output written after the call.
func (c *Console) Watch(pattern string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.watchers = append(c.watchers, &watcher{pattern: []byte(pattern), ch: ch})
	c.mu.Unlock()
	return ch
}

// History returns the recent output (up to HistorySize bytes, more while
// it hasn't been trimmed).
func (c *Console) History() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.history
	if len(h) > HistorySize {
		h = h[len(h)-HistorySize:]
	}
	return append([]byte(nil), h...)
}

// Dropped is the number of output bytes dropped because sinks were slow.
func (c *Console) Dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

func (c *Console) flusher() {
	defer c.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.done:
			c.flush()
			return
		}
		c.flush()
	}
}

func (c *Console) flush() {
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	sinks := c.sinks
	client := c.client
	var out []byte
	if client != nil {
		out = p[min(c.replaySkip, len(p)):]
		if c.replay != nil {
			out = append(c.replay, out...)
		}
	}
	c.replay, c.replaySkip = nil, 0
	c.mu.Unlock()
	if len(p) > 0 {
		for _, s := range sinks {
			// A sink that fails (a client gone) is removed by its
			// owner; the others still get the output.
			_, _ = s.Write(p)
		}
	}
	if client != nil && len(out) > 0 {
		client.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
		if _, err := client.Write(out); err != nil {
			// a client that stops reading is detached, not waited for
			c.detach(client)
		}
	}
}

func (c *Console) detach(conn net.Conn) {
	c.mu.Lock()
	if c.client == conn {
		c.client = nil
		c.replay, c.replaySkip = nil, 0
	}
	c.mu.Unlock()
	conn.Close()
}

// Attach makes conn the console client: it first receives the recent
// history, then live output, and what it sends is typed into the guest. A
// previous client is detached. Attach returns when conn is closed or the
// console shuts down.
func (c *Console) Attach(conn net.Conn) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.Close()
		return
	}
	old := c.client
	c.client = conn
	hist := c.history
	if len(hist) > HistorySize {
		hist = hist[len(hist)-HistorySize:]
	}
	// The flusher replays the history: writing it here would race with
	// the flusher's live output (out of order, or pending output twice).
	c.replay = append([]byte(nil), hist...)
	c.replaySkip = len(c.pending)
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	c.forward(conn)
	c.detach(conn)
}

// Listen serves the console on a unix socket at path (replacing a stale
// socket file) until Close.
func (c *Console) Listen(path string) error {
	l, err := unixsock.Listen(path)
	if err != nil {
		return fmt.Errorf("console socket: %w", err)
	}
	c.mu.Lock()
	c.listener = l
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors and the like: let them free up
				// rather than spin.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			go c.Attach(conn)
		}
	}()
	return nil
}

// ReadInput forwards r (e.g. stdin) to the guest until EOF.
func (c *Console) ReadInput(r io.Reader) {
	c.forward(r)
}

// forward passes what r yields to the guest's input (whoever that is at
// the time: a restore may install it later) until r fails.
func (c *Console) forward(r io.Reader) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.mu.Lock()
			in := c.input
			c.mu.Unlock()
			if in != nil {
				in(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// Close flushes pending output, stops the socket and detaches the client.
func (c *Console) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	l := c.listener
	client := c.client
	c.mu.Unlock()
	close(c.done)
	if l != nil {
		l.Close()
		os.Remove(l.Addr().String())
	}
	c.wg.Wait()
	if client != nil {
		client.Close()
	}
	return nil
}
