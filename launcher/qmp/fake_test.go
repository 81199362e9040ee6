package qmp

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeMonitor is a scripted QMP server on a real unix socket, for the error
// paths real QEMU can't be made to show on demand (a monitor that never
// answers, error classes only KVM produces, protocol garbage). The test
// goroutine drives it step by step, so nothing depends on timing.
type fakeMonitor struct {
	t    *testing.T
	path string
	ln   net.Listener
}

func newFakeMonitor(t *testing.T) *fakeMonitor {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return &fakeMonitor{t: t, path: path, ln: ln}
}

// fakeConn is one accepted connection.
type fakeConn struct {
	t    *testing.T
	conn net.Conn
	dec  *json.Decoder
}

func (f *fakeMonitor) accept() *fakeConn {
	f.t.Helper()
	conn, err := f.ln.Accept()
	require.NoError(f.t, err)
	f.t.Cleanup(func() { conn.Close() })
	return &fakeConn{t: f.t, conn: conn, dec: json.NewDecoder(bufio.NewReader(conn))}
}

const fakeGreeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "fake"}, "capabilities": ["oob"]}}`

// handshake sends the greeting and answers qmp_capabilities.
func (c *fakeConn) handshake() {
	c.t.Helper()
	c.sendRaw(fakeGreeting)
	cmd := c.recv()
	require.Equal(c.t, "qmp_capabilities", cmd.Execute)
	c.reply(cmd.ID, map[string]any{})
}

type fakeCmd struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func (c *fakeConn) recv() fakeCmd {
	c.t.Helper()
	var cmd fakeCmd
	require.NoError(c.t, c.dec.Decode(&cmd))
	return cmd
}

func (c *fakeConn) sendRaw(line string) {
	c.t.Helper()
	_, err := c.conn.Write([]byte(line + "\r\n"))
	require.NoError(c.t, err)
}

func (c *fakeConn) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	require.NoError(c.t, err)
	c.sendRaw(string(b))
}

func (c *fakeConn) reply(id json.RawMessage, ret any) {
	c.t.Helper()
	c.send(map[string]any{"return": ret, "id": id})
}

func (c *fakeConn) replyError(id json.RawMessage, class, desc string) {
	c.t.Helper()
	c.send(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": id})
}

func (c *fakeConn) event(name string, secs, usecs int64, data any) {
	c.t.Helper()
	m := map[string]any{"event": name, "timestamp": map[string]int64{"seconds": secs, "microseconds": usecs}}
	if data != nil {
		m["data"] = data
	}
	c.send(m)
}
