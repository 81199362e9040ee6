package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// MaxReply bounds one reply line: the guest writes it, and a client
// must not buffer whatever a broken or hostile guest sends.
const MaxReply = 1 << 20

// DialVsock connects to port of the guest behind a vsock device's host
// socket (Firecracker's protocol: "CONNECT <port>\n", answered "OK ...").
func DialVsock(ctx context.Context, socket string, port uint32) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("vsock socket: %w", err)
	}
	if err := VsockConnect(ctx, conn, port); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// VsockConnect asks the vsock device's host socket behind conn (just
// connected) for the guest's port; what conn carries afterwards is that
// connection's stream.
func VsockConnect(ctx context.Context, conn net.Conn, port uint32) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl) // a unix conn takes deadlines
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %d\n", port); err != nil {
		return fmt.Errorf("vsock CONNECT %d: %w", port, err)
	}
	// Byte by byte: what follows the line is the guest's.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		if _, err := conn.Read(b); err != nil {
			return fmt.Errorf("vsock CONNECT %d: no answer (nothing listens on the guest's port?): %w", port, err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	if !strings.HasPrefix(string(line), "OK ") {
		return fmt.Errorf("vsock CONNECT %d: answered %q", port, line)
	}
	_ = conn.SetDeadline(time.Time{})
	return nil
}

// Client speaks to one agent over conn, one command at a time.
type Client struct {
	mu     sync.Mutex
	conn   net.Conn
	r      *bufio.Reader
	nextID int64
	synced bool
}

// NewClient is a client on conn; it owns conn.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, r: bufio.NewReader(conn), nextID: time.Now().UnixNano() & 0x7fffffff}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Execute runs cmd with args (nil: none) and decodes its return value
// into out (nil: ignored). The first command of a connection is preceded
// by guest-sync-delimited, which discards whatever a previous client left
// in the channel, as qemu-ga's protocol asks.
func (c *Client) Execute(ctx context.Context, cmd string, args, out any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline(ctx)
	if !c.synced {
		if err := c.sync(); err != nil {
			return err
		}
		c.synced = true
	}
	if err := c.send(cmd, args, false); err != nil {
		return err
	}
	resp, err := c.read()
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return decode(cmd, resp, out)
}

// Send runs a command that has no reply on success (guest-shutdown): it
// returns once the request is written. An error reply, if the agent
// sends one, is not waited for.
func (c *Client) Send(ctx context.Context, cmd string, args any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline(ctx)
	if !c.synced {
		if err := c.sync(); err != nil {
			return err
		}
		c.synced = true
	}
	return c.send(cmd, args, false)
}

func (c *Client) deadline(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	_ = c.conn.SetDeadline(dl) // a unix conn takes deadlines
}

func (c *Client) sync() error {
	c.nextID++
	id := c.nextID
	if err := c.send(CmdSyncDelimited, SyncArgs{ID: id}, true); err != nil {
		return err
	}
	// Stale data up to the delimiter is dropped; then replies up to ours.
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			return fmt.Errorf("%s: %w", CmdSyncDelimited, err)
		}
		if b == Delimiter {
			break
		}
	}
	for {
		resp, err := c.read()
		if err != nil {
			return fmt.Errorf("%s: %w", CmdSyncDelimited, err)
		}
		var got int64
		if decode(CmdSyncDelimited, resp, &got) == nil && got == id {
			return nil
		}
	}
}

func (c *Client) send(cmd string, args any, delimit bool) error {
	req := Request{Execute: cmd}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("%s: arguments: %w", cmd, err)
		}
		req.Arguments = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if delimit {
		b = append([]byte{Delimiter}, b...)
	}
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return nil
}

var errTooLong = errors.New("reply longer than 1 MiB")

// read reads one reply line.
func (c *Client) read() (Response, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxReply {
			return Response{}, errTooLong
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return Response{}, err
		}
	}
	line = bytes.TrimSpace(bytes.TrimLeft(line, "\xff"))
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("reply %.80q: %w", line, err)
	}
	return resp, nil
}

func decode(cmd string, resp Response, out any) error {
	if resp.Error != nil {
		return fmt.Errorf("%s: %w", cmd, resp.Error)
	}
	if resp.Return == nil {
		return fmt.Errorf("%s: a reply with neither return nor error", cmd)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Return, out); err != nil {
		return fmt.Errorf("%s: reply: %w", cmd, err)
	}
	return nil
}
