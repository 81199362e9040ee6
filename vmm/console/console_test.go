package console

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuf is a sink tests can read while the flusher writes to it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gateSink blocks every write until released, like a stalled terminal.
type gateSink struct {
	entered chan struct{}
	release chan struct{}
	syncBuf
}

func newGate() *gateSink {
	return &gateSink{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gateSink) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.syncBuf.Write(p)
}

// readUntil reads from r until want has arrived, failing after a timeout.
func readUntil(t *testing.T, conn net.Conn, want string) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(string(got), want) {
		require.NoError(t, conn.SetReadDeadline(deadline))
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		require.NoError(t, err, "reading %q, got %q", want, got)
	}
	return string(got)
}

// readAll reads until the console closes the connection.
func readAll(t *testing.T, conn net.Conn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second)) // net.Pipe refuses it once the other end closed
	b, err := io.ReadAll(conn)
	require.NoError(t, err)
	return string(b)
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond, msg)
}

func TestLateClientGetsHistoryThenLiveOutput(t *testing.T) {
	var out syncBuf
	c := New(&out)
	defer c.Close()
	c.Write([]byte("[    0.000000] Linux version 6.1\n"))
	c.Write([]byte("[    1.000000] Run /init\n"))
	eventually(t, func() bool { return strings.Contains(out.String(), "Run /init") }, "sink got the output")

	srv, cli := net.Pipe()
	defer cli.Close()
	go c.Attach(srv)
	got := readUntil(t, cli, "Run /init\n")
	assert.Equal(t, "[    0.000000] Linux version 6.1\n[    1.000000] Run /init\n", got, "history replayed once, in order")

	c.Write([]byte("~ # "))
	assert.Equal(t, "~ # ", readUntil(t, cli, "~ # "), "then live output")
	assert.Equal(t, out.String(), got+"~ # ", "the sink saw the same stream")
}

func TestAttachWhileOutputIsPending(t *testing.T) {
	// Output written while the flusher is busy (a slow sink) is both in
	// the history and still pending when a client attaches: the client
	// must get it exactly once, after what came before it.
	g := newGate()
	c := New(g)
	c.Write([]byte("one\n"))
	<-g.entered // the flusher is now stuck in the sink with "one"
	c.Write([]byte("two\n"))

	srv, cli := net.Pipe()
	defer cli.Close()
	go c.Attach(srv)
	// "three" is written once the client is attached (its replay waits
	// for the stuck flusher): it is no part of the history replayed.
	for attached := false; !attached; {
		runtime.Gosched()
		c.mu.Lock()
		attached = c.client == srv
		c.mu.Unlock()
	}
	c.Write([]byte("three\n"))
	close(g.release)
	assert.Equal(t, "one\ntwo\nthree\n", readUntil(t, cli, "three\n"))
	require.NoError(t, c.Close())
	assert.Equal(t, "one\ntwo\nthree\n", g.String())
}

func TestSecondClientReplacesFirst(t *testing.T) {
	c := New()
	defer c.Close()
	c.Write([]byte("hello\n"))

	srv1, cli1 := net.Pipe()
	defer cli1.Close()
	done1 := make(chan struct{})
	go func() { c.Attach(srv1); close(done1) }()
	readUntil(t, cli1, "hello\n")

	srv2, cli2 := net.Pipe()
	defer cli2.Close()
	go c.Attach(srv2)
	assert.Equal(t, "hello\n", readUntil(t, cli2, "hello\n"), "the new client gets the history")
	assert.Equal(t, "", readAll(t, cli1), "the first client is disconnected")
	select {
	case <-done1:
	case <-time.After(5 * time.Second):
		t.Fatal("the first client's Attach did not return")
	}

	c.Write([]byte("world\n"))
	assert.Equal(t, "world\n", readUntil(t, cli2, "world\n"))
}

func TestInputReachesTheGuest(t *testing.T) {
	c := New()
	defer c.Close()
	in := make(chan string, 10)
	c.SetInput(func(b []byte) { in <- string(b) })

	srv, cli := net.Pipe()
	defer cli.Close()
	go c.Attach(srv)
	_, err := cli.Write([]byte("uname -a\n"))
	require.NoError(t, err)
	select {
	case s := <-in:
		assert.Equal(t, "uname -a\n", s)
	case <-time.After(5 * time.Second):
		t.Fatal("input did not reach SetInput's function")
	}

	// input with no receiver set is dropped, not a crash
	c.SetInput(nil)
	_, err = cli.Write([]byte("x"))
	require.NoError(t, err)

	// stdin-style input
	c.SetInput(func(b []byte) { in <- string(b) })
	c.ReadInput(strings.NewReader("from stdin"))
	assert.Equal(t, "from stdin", <-in)
}

func TestWatch(t *testing.T) {
	c := New()
	defer c.Close()
	c.Write([]byte("login: "))
	early := c.Watch("login: ")
	split := c.Watch("Welcome to kubevmm")
	other := c.Watch("never printed")

	c.Write([]byte("boot... Welcome to ku"))
	select {
	case <-split:
		t.Fatal("fired before the pattern was complete")
	default:
	}
	before := time.Now()
	c.Write([]byte("bevmm\n"))
	after := time.Now()
	select {
	case at := <-split:
		assert.False(t, at.Before(before) || at.After(after), "time of the write that completed the pattern")
	case <-time.After(time.Second):
		t.Fatal("pattern split across writes not seen")
	}
	_, ok := <-split
	assert.False(t, ok, "fires once, then the channel is closed")

	c.Write([]byte("Welcome to kubevmm\n"))
	select {
	case <-early:
		t.Fatal("output written before Watch must not match")
	case <-other:
		t.Fatal("unrelated pattern fired")
	default:
	}
	c.Write([]byte("login: "))
	select {
	case <-early:
	case <-time.After(time.Second):
		t.Fatal("pattern written after Watch not seen")
	}
}

func TestWatchPatternSplitByteByByte(t *testing.T) {
	c := New()
	defer c.Close()
	w := c.Watch("abcabd")
	for _, b := range []byte("xxabcabcabd") {
		c.Write([]byte{b})
	}
	select {
	case <-w:
	default:
		t.Fatal("overlapping partial matches must not hide the pattern")
	}
}

// Write returns while the flusher is stuck writing to a client that never
// reads: the client's write deadline is an hour here, so a Write that
// waited for the client would hang (the select below only turns that hang
// into a failure; it measures nothing).
func TestWriteNeverBlocksOnAStalledClient(t *testing.T) {
	old := clientWriteTimeout
	clientWriteTimeout = time.Hour
	defer func() { clientWriteTimeout = old }()

	var out syncBuf
	c := New(&out)
	defer c.Close()
	srv, cli := net.Pipe() // unbuffered: a client that doesn't read blocks every write
	defer cli.Close()
	go c.Attach(srv)

	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		chunk := bytes.Repeat([]byte("x"), 1000)
		for i := 0; i < 2000; i++ { // 2 MB: more than the pending limit
			c.Write(chunk)
		}
		c.Write([]byte("END"))
	}()
	select {
	case <-wrote:
	case <-time.After(time.Minute):
		t.Fatal("Write blocked on a client that does not read")
	}

	// A new client replaces the stalled one (whose connection is closed,
	// which frees the flusher) and gets the recent history.
	srv2, cli2 := net.Pipe()
	defer cli2.Close()
	go c.Attach(srv2)
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, cli)
	require.NoError(t, err, "EOF, not a read timeout: the console closed it")
	got := readUntil(t, cli2, "END")
	assert.Equal(t, HistorySize, len(got), "a full history")
	eventually(t, func() bool { return strings.HasSuffix(out.String(), "END") }, "the sink gets all output")
}

func TestStalledClientIsDetached(t *testing.T) {
	old := clientWriteTimeout
	clientWriteTimeout = 200 * time.Millisecond
	defer func() { clientWriteTimeout = old }()

	var out syncBuf
	c := New(&out)
	defer c.Close()
	srv, cli := net.Pipe() // unbuffered: a client that doesn't read blocks every write
	defer cli.Close()
	go c.Attach(srv)

	chunk := bytes.Repeat([]byte("x"), 1000)
	for i := 0; i < 2000; i++ { // 2 MB: more than the pending limit
		c.Write(chunk)
	}
	c.Write([]byte("END"))

	// the stalled client is cut off (wait for it without reading: a read
	// would make it a client that reads), and its connection is closed
	eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.client == nil
	}, "stalled client detached")
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, cli)
	require.NoError(t, err, "EOF, not a read timeout: the console closed it")
	eventually(t, func() bool { return strings.HasSuffix(out.String(), "END") }, "the sink still gets output")

	// and a new client attaches normally
	srv2, cli2 := net.Pipe()
	defer cli2.Close()
	go c.Attach(srv2)
	got := readUntil(t, cli2, "END")
	assert.Equal(t, HistorySize, len(got), "a full history")
}

func TestSlowSinkDropsOldestPendingOutput(t *testing.T) {
	g := newGate()
	c := New(g)
	c.Write([]byte("a"))
	<-g.entered
	// The sink is held until g.release: a Write that waited for it would
	// hang here (go test's -timeout reports it), so no clock is needed.
	c.Write(bytes.Repeat([]byte("b"), maxPending))
	c.Write(bytes.Repeat([]byte("c"), 100))
	assert.Equal(t, uint64(100), c.Dropped(), "oldest pending bytes dropped")
	close(g.release)
	require.NoError(t, c.Close())
	s := g.String()
	assert.Equal(t, 1+maxPending, len(s))
	assert.True(t, strings.HasSuffix(s, strings.Repeat("c", 100)), "newest output kept")
}

func TestHistoryIsBounded(t *testing.T) {
	c := New()
	defer c.Close()
	var all []byte
	for i := 0; i < 300; i++ {
		line := bytes.Repeat([]byte{byte('a' + i%26)}, 999)
		line = append(line, '\n')
		all = append(all, line...)
		c.Write(line)
	}
	h := c.History()
	assert.Equal(t, HistorySize, len(h))
	assert.Equal(t, all[len(all)-HistorySize:], h, "the most recent output")
}

func TestCloseFlushes(t *testing.T) {
	var out syncBuf
	c := New(&out, nil)
	srv, cli := net.Pipe()
	go c.Attach(srv)
	c.Write([]byte("hi\n"))
	readUntil(t, cli, "hi\n") // attached
	got := make(chan string, 1)
	go func() { got <- readAll(t, cli) }()
	for i := 0; i < 100; i++ {
		c.Write([]byte("last words\n"))
	}
	require.NoError(t, c.Close())
	want := strings.Repeat("last words\n", 100)
	assert.Equal(t, "hi\n"+want, out.String(), "pending output reached the sink before Close returned")
	assert.Equal(t, want, <-got, "and the client, which is then disconnected")
	require.NoError(t, c.Close(), "Close twice is fine")

	srv2, cli2 := net.Pipe()
	defer cli2.Close()
	c.Attach(srv2) // returns at once after Close
	assert.Equal(t, "", readAll(t, cli2))
}

func TestListenUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.sock")
	// a stale socket from a previous run is replaced
	stale, err := net.Listen("unix", path)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	c := New()
	require.NoError(t, c.Listen(path))
	in := make(chan string, 1)
	c.SetInput(func(b []byte) { in <- string(b) })
	c.Write([]byte("Welcome\n"))

	conn, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer conn.Close()
	assert.Equal(t, "Welcome\n", readUntil(t, conn, "Welcome\n"))
	_, err = conn.Write([]byte("root\n"))
	require.NoError(t, err)
	assert.Equal(t, "root\n", <-in)

	require.NoError(t, c.Close())
	_, err = os.Stat(path)
	assert.True(t, errors.Is(err, os.ErrNotExist), "socket removed on Close")
	assert.Equal(t, "", readAll(t, conn), "client disconnected on Close")
}

func TestListenRefusesANonSocketPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(path, []byte("keep me"), 0o600))
	c := New()
	defer c.Close()
	require.Error(t, c.Listen(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b), "a regular file is never removed")
}
