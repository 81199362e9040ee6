package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// console is a client of a guest's serial console socket (kubevmm's
// --console socket:PATH, QEMU's serial chardev) that collects the output
// and runs commands in the bench's guest script (guestScript).
type console struct {
	conn net.Conn
	mu   sync.Mutex
	out  bytes.Buffer
	err  error         // why reading stopped
	more chan struct{} // signalled on new output
	from int           // output before this offset is consumed
}

// dialConsole connects to the socket at path once it exists. The VMM
// creates it some time after starting; gone reports the VMM's early exit.
func dialConsole(ctx context.Context, path string, gone func() error) (*console, error) {
	for {
		conn, err := net.Dial("unix", path)
		if err == nil {
			c := &console{conn: conn, more: make(chan struct{}, 1)}
			go c.read()
			return c, nil
		}
		if err := gone(); err != nil {
			return nil, fmt.Errorf("console %s: VMM %w", path, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("console %s: %w", path, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond): // the socket is created by another process
		}
	}
}

func (c *console) read() {
	buf := make([]byte, 4096)
	for {
		n, err := c.conn.Read(buf)
		c.mu.Lock()
		c.out.Write(buf[:n])
		if err != nil {
			c.err = err
		}
		c.mu.Unlock()
		select {
		case c.more <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

func (c *console) close() { c.conn.Close() }

// waitFor waits for re in the output not yet consumed, consumes up to the
// end of the match and returns the submatches.
func (c *console) waitFor(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		c.mu.Lock()
		s, rerr := c.out.String()[c.from:], c.err
		if loc := re.FindStringSubmatchIndex(s); loc != nil {
			m := make([]string, len(loc)/2)
			for i := range m {
				if loc[2*i] >= 0 {
					m[i] = s[loc[2*i]:loc[2*i+1]]
				}
			}
			c.from += loc[1]
			c.mu.Unlock()
			return m, nil
		}
		c.mu.Unlock()
		if rerr != nil {
			return nil, fmt.Errorf("console closed (%v) before %q; last output: %q", rerr, re, lastLines(s, 5))
		}
		select {
		case <-c.more:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %q on the console: %w; last output: %q", re, context.Cause(ctx), lastLines(s, 5))
		}
	}
}

func (c *console) send(line string) error {
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		return fmt.Errorf("console: send %q: %w", line, err)
	}
	return nil
}

var (
	doneRE = regexp.MustCompile(`bench-done (\d+) (\d+)\r?\n`)
	lastID atomic.Int64 // command IDs, unique in the bench's run
)

// run runs one command line in the guest script's command loop and
// returns what it printed. A non-zero status is an error.
func (c *console) run(ctx context.Context, cmd string) (string, error) {
	c.mu.Lock()
	start := c.from
	c.mu.Unlock()
	id := strconv.FormatInt(lastID.Add(1), 10)
	if err := c.send(id + " " + cmd); err != nil {
		return "", err
	}
	for {
		m, err := c.waitFor(ctx, doneRE)
		if err != nil {
			return "", fmt.Errorf("guest command %q: %w", cmd, err)
		}
		if m[1] != id {
			continue // an earlier command's answer
		}
		c.mu.Lock()
		out := c.out.String()[start:c.from]
		c.mu.Unlock()
		if m[2] != "0" {
			return out, fmt.Errorf("guest command %q: exit status %s; output: %q", cmd, m[2], lastLines(out, 5))
		}
		return out, nil
	}
}

var timedRE = regexp.MustCompile(`bench-time ([0-9.]+) ([0-9.]+) (\d+)`)

// timed runs cmd through the guest's `timed` helper and returns how long
// one run took in guest time (/proc/uptime), averaged over the runs that
// fit in a second, and how many there were.
func (c *console) timed(ctx context.Context, cmd string) (time.Duration, int, error) {
	out, err := c.run(ctx, "timed "+cmd)
	if err != nil {
		return 0, 0, err
	}
	m := timedRE.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("guest command %q: no timing in %q", cmd, lastLines(out, 5))
	}
	a, _ := strconv.ParseFloat(m[1], 64)
	b, _ := strconv.ParseFloat(m[2], 64)
	n, _ := strconv.Atoi(m[3])
	return time.Duration((b - a) / float64(n) * float64(time.Second)), n, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
