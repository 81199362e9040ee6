package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ExitReason is how a VM's QEMU process ended.
type ExitReason string

const (
	// ExitGuestShutdown means the guest powered off, or reset with NoReboot.
	ExitGuestShutdown ExitReason = "guest-shutdown"
	// ExitHostShutdown means QEMU was told to quit (QMP quit, which Shutdown uses
	// when the guest ignores the power button; SIGTERM/SIGINT/SIGHUP).
	ExitHostShutdown ExitReason = "host-shutdown"
	// ExitKilled means this package killed it (Kill, or Shutdown's last resort).
	ExitKilled ExitReason = "killed"
	// ExitCrashed means it died of a signal nobody here sent.
	ExitCrashed ExitReason = "crashed"
	// ExitFailed means it exited non-zero without a shutdown: a configuration
	// QEMU refused, a failed incoming migration, a fatal device error.
	ExitFailed ExitReason = "failed"
	// ExitExited means status 0 came without a SHUTDOWN event; not expected.
	ExitExited ExitReason = "exited"
)

// Exit says how the VM ended.
type Exit struct {
	Reason ExitReason
	// ShutdownReason is QEMU's reason from its SHUTDOWN event, when it sent
	// one: guest-shutdown, guest-reset, guest-panic, host-qmp-quit,
	// host-signal, ...
	ShutdownReason string
	ExitCode       int            // -1 when a signal ended it
	Signal         syscall.Signal // 0 unless a signal ended it
	Stderr         []string       // QEMU's last lines of output
	Time           time.Time      // when the process was reaped
}

func (e Exit) String() string {
	var s string
	switch e.Reason {
	case ExitGuestShutdown:
		s = fmt.Sprintf("guest shut down (%s)", e.ShutdownReason)
	case ExitHostShutdown:
		s = fmt.Sprintf("shut down by the host (%s)", e.ShutdownReason)
	case ExitKilled:
		s = "killed"
	case ExitCrashed:
		s = fmt.Sprintf("crashed: killed by signal %v", e.Signal)
	case ExitFailed:
		s = fmt.Sprintf("failed: exit status %d", e.ExitCode)
	default:
		s = fmt.Sprintf("exited with status %d without reporting a shutdown", e.ExitCode)
	}
	if n := len(e.Stderr); n > 0 && e.Reason != ExitGuestShutdown && e.Reason != ExitHostShutdown {
		s += ": " + e.Stderr[n-1]
	}
	return s
}

// ErrExited is matched (errors.Is) by errors of operations on a VM whose
// QEMU process has ended; errors.As with *ExitedError gives the Exit.
var ErrExited = errors.New("qemu exited")

// ExitedError is an operation failing because QEMU is gone.
type ExitedError struct {
	Name string
	Exit Exit
}

func (e *ExitedError) Error() string { return fmt.Sprintf("qemu vm %s has ended: %s", e.Name, e.Exit) }

// Is makes errors.Is(err, ErrExited) true.
func (e *ExitedError) Is(target error) bool { return target == ErrExited }

// tailBuffer keeps the last lines QEMU wrote to stdout/stderr.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

const maxPartialLine = 4096

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if room := maxPartialLine - len(b.partial); room > 0 {
				b.partial = append(b.partial, p[:min(room, len(p))]...)
			}
			break
		}
		line := b.partial
		line = append(line, p[:i]...)
		b.partial = nil
		b.lines = append(b.lines, strings.TrimRight(string(line), "\r"))
		if len(b.lines) > b.max {
			b.lines = b.lines[len(b.lines)-b.max:]
		}
		p = p[i+1:]
	}
	return n, nil
}

// Lines returns the kept lines, the unterminated last one included.
func (b *tailBuffer) Lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]string(nil), b.lines...)
	if len(b.partial) > 0 {
		out = append(out, string(b.partial))
	}
	return out
}
