package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cleanups undo what the bench created (processes, taps, the network
// namespace), newest first. They run at the end of main, and from the
// signal handler if the bench is interrupted; each runs once.
type cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(f func()) {
	var once sync.Once
	c.mu.Lock()
	c.fns = append(c.fns, func() { once.Do(f) })
	c.mu.Unlock()
}

func (c *cleanups) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// proc is a VMM process the bench started.
type proc struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{} // closed once the process is reaped
	err    error         // its exit status, once done
}

// startProc starts cmd (whose stdout the caller may have set) and registers
// its cleanup. It forks from a thread locked for the child's lifetime, so
// the child's parent-death signal fires only when the bench itself dies
// (Linux sends it when the forking *thread* exits): no VMM outlives a
// bench that is killed.
func startProc(cl *cleanups, cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = &p.stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	cl.add(p.kill)
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill ends the process (if it still runs) and reaps it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill() // fails only if it exited already; Wait below reaps it
	<-p.done
}

// wait waits up to d for the process to exit on its own.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%w; stderr: %s", p.err, p.stderr.tail())
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("still running after %v", d)
	}
}

// exited reports why the process ended, or nil while it runs.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("exited (%v); stderr: %s", p.err, p.stderr.tail())
	default:
		return nil
	}
}

// lockedBuffer collects a process's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the last lines, on one line, for error messages.
func (l *lockedBuffer) tail() string {
	lines := strings.Split(strings.TrimSpace(l.String()), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "; ")
}

// procStatus reads KiB fields (VmRSS, RssAnon, ...) of /proc/PID/status.
func procStatus(pid int) map[string]uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	out := map[string]uint64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	return out
}

// vmmCPU is the CPU time a kubevmm process spent outside the guest: all
// its threads' user time minus guest time, plus the system time of every
// thread but the busiest one, which for a 1-vCPU guest is the vCPU thread
// whose system time is KVM_RUN (on hosts that emulate guest kernel mode,
// the guest kernel's own execution).
func vmmCPU(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var user, sys, maxSys uint64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		// fields after the parenthesised command: state is field 3
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 41 {
			continue
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64) // utime, field 14
		st, _ := strconv.ParseUint(f[12], 10, 64) // stime, field 15
		gt, _ := strconv.ParseUint(f[40], 10, 64) // guest_time, field 43
		user += ut - min(gt, ut)
		sys += st
		maxSys = max(maxSys, st)
	}
	const tick = 10 * time.Millisecond // USER_HZ 100
	return time.Duration(user+sys-maxSys) * tick
}
