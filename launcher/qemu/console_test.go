package qemu

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// console reads a VM's serial socket line by line, so tests can wait for
// what the guest prints (conditions with deadlines, no sleeps).
type console struct {
	conn   net.Conn
	mu     sync.Mutex
	lines  []string
	err    error         // why reading stopped
	change chan struct{} // closed and replaced whenever lines or err change
}

// attachConsole connects to vm's serial socket and returns once QEMU has
// accepted the connection: QEMU drops serial output while no client is
// accepted (wait=off), so a guest resumed before that could print unseen.
func attachConsole(t *testing.T, ctx context.Context, vm *VM) *console {
	t.Helper()
	conn, err := net.Dial("unix", vm.cfg.SerialSocket)
	require.NoError(t, err, "serial socket")
	c := &console{conn: conn, change: make(chan struct{})}
	t.Cleanup(func() { conn.Close() })
	go c.read()

	// QEMU has no event for it; its chardev's name loses the
	// "disconnected:" prefix once accepted. Poll that, within ctx.
	mon, err := vm.Monitor(ctx)
	require.NoError(t, err)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var chardevs []struct {
			Label    string `json:"label"`
			Filename string `json:"filename"`
		}
		require.NoError(t, mon.Execute(ctx, "query-chardev", nil, &chardevs))
		for _, cd := range chardevs {
			if cd.Label == "serial0" && !strings.HasPrefix(cd.Filename, "disconnected:") {
				return c
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("QEMU did not accept the console connection: %v", context.Cause(ctx))
		}
	}
}

func (c *console) read() {
	sc := bufio.NewScanner(c.conn)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		c.mu.Lock()
		c.lines = append(c.lines, line)
		close(c.change)
		c.change = make(chan struct{})
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.err = sc.Err()
	if c.err == nil {
		c.err = fmt.Errorf("console closed (EOF)")
	}
	close(c.change)
	c.change = make(chan struct{})
	c.mu.Unlock()
}

// waitFor returns the index and text of the first line at or after from
// for which match is true.
func (c *console) waitFor(t testing.TB, ctx context.Context, from int, what string, match func(string) bool) (int, string) {
	t.Helper()
	for {
		c.mu.Lock()
		for i := from; i < len(c.lines); i++ {
			if match(c.lines[i]) {
				line := c.lines[i]
				c.mu.Unlock()
				return i, line
			}
		}
		from = max(from, len(c.lines))
		err, change := c.err, c.change
		c.mu.Unlock()
		if err != nil {
			t.Fatalf("waiting for %s on the console: %v\n%s", what, err, c.dump())
		}
		select {
		case <-change:
		case <-ctx.Done():
			t.Fatalf("waiting for %s on the console: %v\n%s", what, context.Cause(ctx), c.dump())
		}
	}
}

func (c *console) waitContains(t testing.TB, ctx context.Context, from int, s string) int {
	t.Helper()
	i, _ := c.waitFor(t, ctx, from, fmt.Sprintf("%q", s), func(l string) bool { return strings.Contains(l, s) })
	return i
}

// The counter script's lines, whole: the guest boots with "quiet" so no
// kernel message can interleave with them.
var countLine = regexp.MustCompile(`^count (\d+)$`)

func parseCount(line string) (int, bool) {
	m := countLine.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// waitCount waits for a count line with a value of at least n and returns
// its index and value.
func (c *console) waitCount(t testing.TB, ctx context.Context, from, n int) (int, int) {
	t.Helper()
	i, line := c.waitFor(t, ctx, from, fmt.Sprintf("count >= %d", n), func(l string) bool {
		v, ok := parseCount(l)
		return ok && v >= n
	})
	v, _ := parseCount(line)
	return i, v
}

// counts returns the counter values printed so far, in order.
func (c *console) counts() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, l := range c.lines {
		if v, ok := parseCount(l); ok {
			out = append(out, v)
		}
	}
	return out
}

func (c *console) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.lines
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return "console (last lines):\n  " + strings.Join(lines, "\n  ")
}
