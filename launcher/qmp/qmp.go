// Package qmp is a client for the QEMU Machine Protocol: the JSON monitor a
// QEMU process serves on a unix socket. The launcher drives the QEMU fallback
// backend through it (see launcher/qemu).
//
// One Client owns one monitor connection. QEMU serves one client per monitor
// socket at a time, so a second Dial on the same path is only greeted once the
// first connection closes; reconnecting is a new Dial after Close.
//
// Commands carry an id and replies are matched by it, so a command whose
// context ended (its reply arrives late or never) cannot be confused with a
// later one. Events are fanned out to subscriptions without ever blocking the
// reader: each subscription queues what its owner has not taken yet.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is matched (errors.Is) by every error caused by the monitor
// connection having ended: QEMU exited or crashed, it closed the connection,
// it sent something that is not QMP, or Close was called.
var ErrClosed = errors.New("qmp monitor closed")

// ClosedError says which monitor ended and why. Pending and later commands on
// the Client fail with it.
type ClosedError struct {
	Monitor string // socket path (or the connection's remote address)
	Cause   error  // io.EOF when QEMU closed the socket, net errors, protocol errors
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("qmp monitor %s closed: %v", e.Monitor, e.Cause)
}

// Is makes errors.Is(err, ErrClosed) true.
func (e *ClosedError) Is(target error) bool { return target == ErrClosed }

// Unwrap gives the cause (io.EOF, a net error, ...).
func (e *ClosedError) Unwrap() error { return e.Cause }

// ErrorClass is the "class" of a QMP error reply.
type ErrorClass string

// The error classes QEMU reports (qapi/error.json). Most failures are
// GenericError; the others let a caller react to a specific condition.
const (
	GenericError    ErrorClass = "GenericError"
	CommandNotFound ErrorClass = "CommandNotFound"
	DeviceNotActive ErrorClass = "DeviceNotActive"
	DeviceNotFound  ErrorClass = "DeviceNotFound"
	KVMMissingCap   ErrorClass = "KVMMissingCap"
)

// Error is QEMU refusing a command: the monitor answered with an error reply.
// The connection stays usable.
type Error struct {
	Command string
	Class   ErrorClass
	Desc    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// IsClass reports whether err is (or wraps) a QMP error reply of the class.
func IsClass(err error, class ErrorClass) bool {
	var qe *Error
	return errors.As(err, &qe) && qe.Class == class
}

// Greeting is what QEMU says first on a new monitor connection.
type Greeting struct {
	Version      Version  `json:"version"`
	Capabilities []string `json:"capabilities"`
}

// Version is QEMU's version as in the greeting and query-version.
type Version struct {
	QEMU struct {
		Major int `json:"major"`
		Minor int `json:"minor"`
		Micro int `json:"micro"`
	} `json:"qemu"`
	Package string `json:"package"`
}

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.QEMU.Major, v.QEMU.Minor, v.QEMU.Micro)
}

// Event is one asynchronous QMP event.
type Event struct {
	Name string          // STOP, RESUME, SHUTDOWN, POWERDOWN, RESET, MIGRATION, MIGRATION_PASS, ...
	Data json.RawMessage // the event's "data" object, nil when it has none
	Time time.Time       // when QEMU emitted it (its own clock)
}

// DecodeData unmarshals the event's data into v.
func (e Event) DecodeData(v any) error {
	if len(e.Data) == 0 {
		return fmt.Errorf("qmp event %s has no data", e.Name)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("qmp event %s data: %w", e.Name, err)
	}
	return nil
}

// message is any object QEMU sends; which fields are set says which kind.
type message struct {
	Greeting  *Greeting       `json:"QMP"`
	Return    json.RawMessage `json:"return"`
	Error     *errorBody      `json:"error"`
	ID        json.RawMessage `json:"id"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

type errorBody struct {
	Class ErrorClass `json:"class"`
	Desc  string     `json:"desc"`
}

type command struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        string `json:"id"`
}

type response struct {
	ret json.RawMessage
	err *errorBody
}

// Client is one QMP monitor connection. Its methods are safe for concurrent
// use.
type Client struct {
	conn     net.Conn
	name     string
	greeting Greeting

	// sendSlot serialises writes; a channel rather than a mutex so a caller
	// stuck behind a write to a hung monitor can still honour its context.
	sendSlot chan struct{}

	mu      sync.Mutex
	nextID  uint64
	pending map[string]chan response
	subs    map[*Subscription]struct{}
	err     error // set once, when the connection ends
	done    chan struct{}
}

// Dial connects to the monitor socket at path, reads QEMU's greeting and
// leaves capability negotiation mode. ctx bounds the whole handshake: a QEMU
// that accepts but never greets (hung, or busy with another client) gives
// ctx's error, not a hang.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connect to monitor %s: %w", path, err)
	}
	c, err := NewClient(ctx, conn, path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewClient runs the QMP handshake on an established connection (for
// example one half of a socketpair) and returns the Client owning it. name
// identifies the monitor in errors. On failure the connection is closed.
func NewClient(ctx context.Context, conn net.Conn, name string) (*Client, error) {
	c := &Client{
		conn:     conn,
		name:     name,
		sendSlot: make(chan struct{}, 1),
		pending:  make(map[string]chan response),
		subs:     make(map[*Subscription]struct{}),
		done:     make(chan struct{}),
	}
	dec := json.NewDecoder(bufio.NewReader(conn))

	// The greeting is read here, synchronously, with the connection's
	// deadline following ctx; the reader goroutine starts only after it.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	var first message
	err := dec.Decode(&first)
	if !stop() || ctx.Err() != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: monitor %s: waiting for the greeting: %w", name, context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: monitor %s: reading the greeting: %w", name, err)
	}
	if first.Greeting == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: monitor %s: first message is not a QMP greeting", name)
	}
	c.greeting = *first.Greeting

	go c.read(dec)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp: monitor %s: capability negotiation: %w", name, err)
	}
	return c, nil
}

// Greeting returns what QEMU announced on connect (its version).
func (c *Client) Greeting() Greeting { return c.greeting }

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up, then a *ClosedError.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection. Pending commands fail with a *ClosedError and
// subscriptions are closed once drained. Closing twice is harmless.
func (c *Client) Close() error {
	c.shutdown(errors.New("closed by client"))
	return nil
}

// Execute runs a QMP command and waits for its reply. args (if not nil) is
// marshalled as the command's "arguments"; the reply's "return" value is
// unmarshalled into reply (if not nil). A QMP error reply is a *Error; a
// monitor that ended is a *ClosedError; ctx ending first gives ctx's error,
// and the eventual reply, if any, is discarded.
func (c *Client) Execute(ctx context.Context, cmd string, args any, reply any) error {
	return c.execute(ctx, cmd, args, reply, nil)
}

// ExecuteWithFile is Execute for a command that takes a descriptor (add-fd,
// getfd): f is passed along with the command line (SCM_RIGHTS on the same
// write, as QMP requires), which needs a unix socket connection. QEMU gets
// its own copy; f stays the caller's to close.
func (c *Client) ExecuteWithFile(ctx context.Context, cmd string, args, reply any, f *os.File) error {
	if _, ok := c.conn.(*net.UnixConn); !ok {
		return fmt.Errorf("qmp %s: monitor %s: passing a file needs a unix socket connection, not %T", cmd, c.name, c.conn)
	}
	if f == nil {
		return fmt.Errorf("qmp %s: no file to pass", cmd)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("qmp %s: file %s: %w", cmd, f.Name(), err)
	}
	var rights []byte
	if err := rc.Control(func(fd uintptr) { rights = unix.UnixRights(int(fd)) }); err != nil {
		return fmt.Errorf("qmp %s: file %s: %w", cmd, f.Name(), err)
	}
	err = c.execute(ctx, cmd, args, reply, rights)
	// The descriptor must stay open until the kernel has taken it.
	runtime.KeepAlive(f)
	return err
}

// execute runs cmd, its line carrying rights (SCM_RIGHTS) when not nil.
func (c *Client) execute(ctx context.Context, cmd string, args, reply any, rights []byte) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	c.nextID++
	id := strconv.FormatUint(c.nextID, 10)
	ch := make(chan response, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()

	line, err := json.Marshal(command{Execute: cmd, Arguments: args, ID: id})
	if err != nil {
		return fmt.Errorf("qmp %s: encoding arguments: %w", cmd, err)
	}
	if err := c.send(ctx, append(line, '\n'), rights); err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}

	select {
	case r := <-ch:
		if r.err != nil {
			return &Error{Command: cmd, Class: r.err.Class, Desc: r.err.Desc}
		}
		if reply != nil {
			if err := json.Unmarshal(r.ret, reply); err != nil {
				return fmt.Errorf("qmp %s: decoding reply %s: %w", cmd, truncate(r.ret), err)
			}
		}
		return nil
	case <-c.done:
		// A reply may have raced with the end of the connection.
		select {
		case r := <-ch:
			if r.err != nil {
				return &Error{Command: cmd, Class: r.err.Class, Desc: r.err.Desc}
			}
			if reply != nil {
				if err := json.Unmarshal(r.ret, reply); err != nil {
					return fmt.Errorf("qmp %s: decoding reply %s: %w", cmd, truncate(r.ret), err)
				}
			}
			return nil
		default:
		}
		return fmt.Errorf("qmp %s: %w", cmd, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: no reply from monitor %s: %w", cmd, c.name, context.Cause(ctx))
	}
}

// send writes one command line, with rights attached when not nil. A write that fails or times out part-way leaves the stream in an
// unknown state, so the connection is ended.
func (c *Client) send(ctx context.Context, line, rights []byte) error {
	if ctx.Err() != nil {
		return fmt.Errorf("not sent to monitor %s: %w", c.name, context.Cause(ctx))
	}
	select {
	case c.sendSlot <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting to write to monitor %s: %w", c.name, context.Cause(ctx))
	case <-c.done:
		return c.Err()
	}
	defer func() { <-c.sendSlot }()

	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.conn.SetWriteDeadline(time.Unix(1, 0)) // interrupts the write
		close(fired)
	})
	n, err := c.write(line, rights)
	if !stop() {
		// ctx ended during the write: clear the deadline for later writes
		// once the func that set it is done.
		<-fired
		_ = c.conn.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		if ctx.Err() != nil {
			if n > 0 {
				// The monitor did not take the whole command in time (its
				// socket buffer is full); the partial line poisons the
				// stream.
				c.shutdown(fmt.Errorf("write abandoned part-way: %w", context.Cause(ctx)))
			}
			return fmt.Errorf("writing to monitor %s: %w", c.name, context.Cause(ctx))
		}
		c.shutdown(fmt.Errorf("write: %w", err))
		return c.Err()
	}
	return nil
}

// write writes line; the rights, if any, go with its first bytes.
func (c *Client) write(line, rights []byte) (int, error) {
	if rights == nil {
		return c.conn.Write(line)
	}
	n, _, err := c.conn.(*net.UnixConn).WriteMsgUnix(line, rights, nil)
	if err == nil && n < len(line) {
		// A stream socket may take part of the line; the rights went with
		// that part, the rest is plain data.
		var m int
		m, err = c.conn.Write(line[n:])
		n += m
	}
	return n, err
}

// read is the single reader of the connection: it routes replies to their
// commands and events to subscriptions until the connection ends.
func (c *Client) read(dec *json.Decoder) {
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			c.shutdown(err)
			return
		}
		switch {
		case m.Event != "":
			ev := Event{Name: m.Event, Data: m.Data}
			if m.Timestamp != nil && m.Timestamp.Seconds >= 0 {
				ev.Time = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
			}
			c.publish(ev)
		case m.Return != nil || m.Error != nil:
			var id string
			if err := json.Unmarshal(m.ID, &id); err != nil {
				// We only send string ids; anything else is not our reply.
				c.shutdown(fmt.Errorf("protocol error: reply with unexpected id %s", truncate(m.ID)))
				return
			}
			c.mu.Lock()
			ch := c.pending[id]
			c.mu.Unlock()
			if ch != nil { // nil: its caller gave up (context ended)
				ch <- response{ret: m.Return, err: m.Error}
			}
		default:
			c.shutdown(errors.New("protocol error: message is neither a reply nor an event"))
			return
		}
	}
}

func (c *Client) shutdown(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = &ClosedError{Monitor: c.name, Cause: cause}
	subs := c.subs
	c.subs = nil
	close(c.done)
	c.mu.Unlock()
	c.conn.Close()
	for s := range subs {
		s.finish()
	}
}

func truncate(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
