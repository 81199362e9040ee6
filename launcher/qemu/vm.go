package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qmp"
)

// exitDrainTimeout bounds how long classifying an exit waits for the
// monitor connection to deliver QEMU's last events. The peer is dead, so
// EOF comes at once; the bound only guards against a leaked descriptor.
const exitDrainTimeout = 10 * time.Second

// VM is one running QEMU process. Its methods are safe for concurrent use.
type VM struct {
	cfg    Config
	cmd    *exec.Cmd
	tpm    *swtpm // nil without a TPM
	pid    int
	output *tailBuffer

	exited chan struct{} // process reaped
	done   chan struct{} // exit classified; exit is set
	exit   Exit

	killed atomic.Bool // Kill sent SIGKILL

	// reconnect serialises monitor reconnection; a channel so waiting for
	// it honours the caller's context.
	reconnect chan struct{}

	mu       sync.Mutex
	mon      *qmp.Client
	recorded chan struct{} // closed when mon's event recorder has drained
	reaping  bool          // wait() took the monitor; don't attach another
	shutdown *qmp.ShutdownData
}

// Start launches QEMU for cfg and connects to its monitor. Unless
// cfg.StartPaused (or cfg.Incoming) is set the guest is running when Start
// returns. A configuration QEMU refuses is an error carrying QEMU's own
// message; ctx bounds the start-up.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	args, err := cfg.Args()
	if err != nil {
		return nil, err
	}
	path, err := cfg.prepareHost()
	if err != nil {
		return nil, err
	}
	monFile, err := listenSocket(cfg.QMPPath())
	if err != nil {
		return nil, fmt.Errorf("qemu %s: monitor socket: %w", cfg.Name, err)
	}
	defer func() { _ = monFile.Close() }() // a listening socket; QEMU has its own copy once started

	out := &tailBuffer{max: 20}
	tpm, err := cfg.prepareTPM(out)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.ExtraFiles = []*os.File{monFile} // fd 3, see qmpFD
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a terminal's Ctrl-C aimed at the launcher does
	// not reach QEMU, and Kill can signal anything QEMU started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !cfg.SurviveLauncherExit {
		// A QEMU outliving its launcher (crashed, or a test binary killed
		// at its timeout) runs on with nobody managing it.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// Don't let a stray child holding QEMU's output pipe delay Wait.
	cmd.WaitDelay = 5 * time.Second
	vm := &VM{
		cfg:       cfg,
		cmd:       cmd,
		tpm:       tpm,
		output:    out,
		exited:    make(chan struct{}),
		done:      make(chan struct{}),
		reconnect: make(chan struct{}, 1),
	}
	started := make(chan error, 1)
	go func() {
		// Linux sends Pdeathsig when the *thread* that forked QEMU exits,
		// not the process. Fork from a thread locked to this goroutine,
		// which lives until QEMU is reaped, so the signal comes only when
		// the launcher itself dies.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := startWithTPM(cmd, tpm); err != nil {
			started <- err
			return
		}
		started <- nil
		vm.wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("qemu %s: starting %s: %w", cfg.Name, path, err)
	}
	vm.pid = cmd.Process.Pid

	// The listening socket existed before QEMU started, so connecting
	// needs no retries; QEMU greets once its main loop runs. Stop waiting
	// if QEMU exits first (a refused configuration).
	dctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-vm.exited:
			cancel(ErrExited)
		case <-dctx.Done():
		}
	}()
	mon, err := qmp.Dial(dctx, cfg.QMPPath())
	cancel(nil)
	if err != nil {
		// A monitor failing during start-up is QEMU exiting (it refused
		// the configuration; its socket may close before it is reaped):
		// wait for that, within ctx, to report QEMU's own words.
		select {
		case <-vm.done:
			return nil, fmt.Errorf("qemu %s: exited during start: %s", cfg.Name, vm.exit.describe())
		case <-ctx.Done():
		}
		_ = vm.forceKill()
		<-vm.done
		return nil, fmt.Errorf("qemu %s: connecting to the monitor: %w", cfg.Name, err)
	}
	if !vm.attach(mon) {
		<-vm.done
		return nil, fmt.Errorf("qemu %s: exited during start: %s", cfg.Name, vm.exit.describe())
	}
	if cfg.Incoming == "" && !cfg.StartPaused {
		if err := vm.exec(ctx, "cont", nil, nil); err != nil {
			_ = vm.forceKill()
			<-vm.done
			return nil, fmt.Errorf("qemu %s: starting the guest: %w", cfg.Name, err)
		}
	}
	return vm, nil
}

// prepareHost checks the files the VM needs, finds the QEMU binary and
// makes the run directory (with the EFI variable store) ready.
func (c Config) prepareHost() (string, error) {
	if err := c.checkFiles(); err != nil {
		return "", err
	}
	bin := c.Binary
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("qemu %s: QEMU binary (Debian: hack/deps.sh qemu): %w", c.Name, err)
	}
	if err := os.MkdirAll(c.RunDir, 0o700); err != nil {
		return "", fmt.Errorf("qemu %s: run dir: %w", c.Name, err)
	}
	if c.firmware() == FirmwareEFI {
		if err := copyIfMissing(c.ovmfVars(), c.efiVarsPath()); err != nil {
			return "", fmt.Errorf("qemu %s: EFI variable store: %w", c.Name, err)
		}
	}
	return path, nil
}

// describe is the exit with all of QEMU's last output, for start failures.
func (e Exit) describe() string {
	s := e.String()
	if len(e.Stderr) > 1 {
		s += "\nqemu output:\n  " + strings.Join(e.Stderr, "\n  ")
	}
	return s
}

// listenSocket creates a listening socket for QEMU (its monitor) or swtpm
// (the TPM's control channel) to inherit. A socket file left by a dead
// process is replaced; one a live process still serves is not.
func listenSocket(path string) (*os.File, error) {
	if _, err := os.Stat(path); err == nil {
		conn, err := net.Dial("unix", path)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("%s is served by a running process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Our copy closes after the process starts; the path must stay for
	// (re)connects.
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, err
	}
	return f, nil
}

func copyIfMissing(src, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil // the VM's NVRAM from an earlier run: keep its settings
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read-only
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy failed already; the temporary is not renamed
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// attach makes c the VM's monitor connection and records the SHUTDOWN
// events it carries (they tell a guest poweroff from a host quit). It
// returns false, closing c, when the process is already being reaped.
func (vm *VM) attach(c *qmp.Client) bool {
	sub := c.Subscribe(qmp.EventShutdown)
	recorded := make(chan struct{})
	vm.mu.Lock()
	if vm.reaping {
		vm.mu.Unlock()
		sub.Close()
		c.Close()
		return false
	}
	vm.mon, vm.recorded = c, recorded
	vm.mu.Unlock()
	go func() {
		defer close(recorded)
		for ev := range sub.C() {
			var sd qmp.ShutdownData
			if ev.DecodeData(&sd) == nil {
				vm.mu.Lock()
				vm.shutdown = &sd
				vm.mu.Unlock()
			}
		}
	}()
	return true
}

// wait reaps QEMU and works out how it ended.
func (vm *VM) wait() {
	err := vm.cmd.Wait()
	vm.tpm.stop()
	close(vm.exited)
	vm.mu.Lock()
	vm.reaping = true
	recorded := vm.recorded
	vm.mu.Unlock()
	if recorded != nil {
		// QEMU sent its SHUTDOWN event before exiting: let the reader
		// deliver everything up to EOF before deciding.
		t := time.NewTimer(exitDrainTimeout)
		select {
		case <-recorded:
		case <-t.C:
		}
		t.Stop()
	}
	vm.mu.Lock()
	sd := vm.shutdown
	mon := vm.mon
	vm.mu.Unlock()
	if mon != nil {
		mon.Close()
	}

	ex := Exit{Time: time.Now(), Stderr: vm.output.Lines(), ExitCode: -1}
	if ps := vm.cmd.ProcessState; ps != nil {
		ex.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Signal = ws.Signal()
		}
	} else if err != nil {
		ex.Stderr = append(ex.Stderr, "wait: "+err.Error())
	}
	if sd != nil {
		ex.ShutdownReason = sd.Reason
	}
	switch {
	case ex.Signal == syscall.SIGKILL && vm.killed.Load():
		ex.Reason = ExitKilled
	case sd != nil && sd.Guest:
		ex.Reason = ExitGuestShutdown
	case sd != nil:
		ex.Reason = ExitHostShutdown
	case ex.Signal != 0:
		ex.Reason = ExitCrashed
	case ex.ExitCode != 0:
		ex.Reason = ExitFailed
	default:
		ex.Reason = ExitExited
	}
	vm.exit = ex
	close(vm.done)
}

func (vm *VM) exitedError() error { return &ExitedError{Name: vm.cfg.Name, Exit: vm.exit} }

// Name is the VM's name.
func (vm *VM) Name() string { return vm.cfg.Name }

// PID is QEMU's process id (and process group id).
func (vm *VM) PID() int { return vm.pid }

// QMPPath is the monitor socket's path.
func (vm *VM) QMPPath() string { return vm.cfg.QMPPath() }

// Done is closed once QEMU has ended; Wait then returns at once.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Wait returns how the VM ended, once it has.
func (vm *VM) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-vm.done:
		return vm.exit, nil
	case <-ctx.Done():
		return Exit{}, fmt.Errorf("qemu %s: waiting for the VM to end: %w", vm.cfg.Name, context.Cause(ctx))
	}
}

// Monitor returns the VM's QMP connection, reconnecting if it ended while
// QEMU lives on, for commands this package has no method for. Subscribe to
// its events before acting; a reconnect gives a new Client.
func (vm *VM) Monitor(ctx context.Context) (*qmp.Client, error) {
	c, err := vm.monitor(ctx)
	if err != nil {
		return nil, fmt.Errorf("qemu %s: %w", vm.cfg.Name, err)
	}
	return c, nil
}

func (vm *VM) monitor(ctx context.Context) (*qmp.Client, error) {
	vm.mu.Lock()
	c := vm.mon
	vm.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	select {
	case <-vm.done:
		return nil, vm.exitedError()
	default:
	}
	select {
	case vm.reconnect <- struct{}{}:
		defer func() { <-vm.reconnect }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting to reconnect to the monitor: %w", context.Cause(ctx))
	case <-vm.done:
		return nil, vm.exitedError()
	}
	vm.mu.Lock()
	c = vm.mon
	vm.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil // reconnected by someone else meanwhile
	}
	nc, err := qmp.Dial(ctx, vm.cfg.QMPPath())
	if err != nil {
		// A monitor that ended and refuses connections is most often QEMU
		// exiting: once it is reaped, say how it ended.
		select {
		case <-vm.done:
			return nil, vm.exitedError()
		case <-ctx.Done():
			return nil, fmt.Errorf("reconnecting to the monitor: %w", err)
		}
	}
	if !vm.attach(nc) {
		<-vm.done
		return nil, vm.exitedError()
	}
	return nc, nil
}

// exec runs one monitor command, bounded by ctx and the VM's command
// timeout. When the monitor ends under the command the error says whether
// QEMU has exited, and how.
func (vm *VM) exec(ctx context.Context, cmd string, args, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, vm.cfg.commandTimeout())
	defer cancel()
	c, err := vm.monitor(ctx)
	if err != nil {
		return fmt.Errorf("qemu %s: %s: %w", vm.cfg.Name, cmd, err)
	}
	err = c.Execute(ctx, cmd, args, reply)
	if err == nil {
		return nil
	}
	if errors.Is(err, qmp.ErrClosed) {
		// Reconnect for the next command, or learn that QEMU is gone. The
		// command is not retried: it may have taken effect.
		if _, merr := vm.monitor(ctx); merr != nil {
			return fmt.Errorf("qemu %s: %w; %w", vm.cfg.Name, err, merr)
		}
	}
	return fmt.Errorf("qemu %s: %w", vm.cfg.Name, err)
}

// Status is what the VM is doing.
type Status struct {
	// State is QEMU's run state (running, paused, prelaunch, inmigrate,
	// postmigrate, shutdown, guest-panicked, ...), or "exited".
	State   string
	Running bool
	PID     int
	Exit    *Exit // set once QEMU has ended
}

// StateExited is Status.State after QEMU ended.
const StateExited = "exited"

// Status asks QEMU for its run state. A VM whose QEMU has ended is not an
// error: the Status says how it ended.
func (vm *VM) Status(ctx context.Context) (Status, error) {
	select {
	case <-vm.done:
		ex := vm.exit
		return Status{State: StateExited, PID: vm.pid, Exit: &ex}, nil
	default:
	}
	var st qmp.StatusInfo
	err := vm.exec(ctx, "query-status", nil, &st)
	if errors.Is(err, ErrExited) {
		ex := vm.exit
		return Status{State: StateExited, PID: vm.pid, Exit: &ex}, nil
	}
	if err != nil {
		return Status{PID: vm.pid}, err
	}
	return Status{State: st.Status, Running: st.Running, PID: vm.pid}, nil
}

func (vm *VM) queryStatus(ctx context.Context) (qmp.StatusInfo, error) {
	var st qmp.StatusInfo
	err := vm.exec(ctx, "query-status", nil, &st)
	return st, err
}

// Pause stops the guest's vCPUs. QEMU's stop returns once they are
// stopped; query-status confirms it.
func (vm *VM) Pause(ctx context.Context) error {
	if err := vm.exec(ctx, "stop", nil, nil); err != nil {
		return err
	}
	st, err := vm.queryStatus(ctx)
	if err != nil {
		return err
	}
	if st.Running {
		return fmt.Errorf("qemu %s: still running after stop (state %s)", vm.cfg.Name, st.Status)
	}
	return nil
}

// ErrMigratedAway is returned by Resume on the source of a completed
// migration: the guest now runs on the target, and running it here too
// would corrupt its disks.
var ErrMigratedAway = errors.New("the VM was migrated away: it must not resume here")

// Resume runs a paused guest (also one started with StartPaused).
func (vm *VM) Resume(ctx context.Context) error {
	st, err := vm.queryStatus(ctx)
	if err != nil {
		return err
	}
	switch st.Status {
	case "running":
		return nil
	case "inmigrate":
		return fmt.Errorf("qemu %s: cannot resume while an incoming migration is pending", vm.cfg.Name)
	case "postmigrate":
		var mi qmp.MigrationInfo
		if err := vm.exec(ctx, "query-migrate", nil, &mi); err != nil {
			return err
		}
		if mi.Status == "completed" {
			return fmt.Errorf("qemu %s: %w", vm.cfg.Name, ErrMigratedAway)
		}
	}
	if err := vm.exec(ctx, "cont", nil, nil); err != nil {
		return err
	}
	if st, err = vm.queryStatus(ctx); err != nil {
		return err
	}
	if !st.Running {
		return fmt.Errorf("qemu %s: not running after cont (state %s)", vm.cfg.Name, st.Status)
	}
	return nil
}

// Shutdown asks the guest to power off (ACPI power button) and gives it
// grace to do so. A guest that ignores the button (no ACPI, or paused) is
// then ended by QEMU's quit, and if the monitor does not answer that within
// the command timeout, by SIGKILL. Exit.Reason says which step ended it. If
// ctx ends first the VM is left as it is and ctx's error returned.
func (vm *VM) Shutdown(ctx context.Context, grace time.Duration) (Exit, error) {
	select {
	case <-vm.done:
		return vm.exit, nil
	default:
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	// A hung monitor makes this wait out the grace period, which is the
	// bound we want; its error changes nothing that follows.
	_ = vm.exec(gctx, "system_powerdown", nil, nil)
	select {
	case <-vm.done:
		cancel()
		return vm.exit, nil
	case <-gctx.Done():
	}
	cancel()
	if ctx.Err() != nil {
		return Exit{}, fmt.Errorf("qemu %s: shutdown: waiting for the guest to power off: %w", vm.cfg.Name, context.Cause(ctx))
	}

	qctx, qcancel := context.WithTimeout(ctx, vm.cfg.commandTimeout())
	_ = vm.exec(qctx, "quit", nil, nil) // the reply may be lost as QEMU exits
	select {
	case <-vm.done:
		qcancel()
		return vm.exit, nil
	case <-qctx.Done():
	}
	qcancel()
	if ctx.Err() != nil {
		return Exit{}, fmt.Errorf("qemu %s: shutdown: waiting for QEMU to quit: %w", vm.cfg.Name, context.Cause(ctx))
	}
	return vm.Kill(ctx)
}

// PowerDown presses the guest's ACPI power button (system_powerdown) and
// returns: the guest powers off in its own time, if it handles the button.
func (vm *VM) PowerDown(ctx context.Context) error {
	return vm.exec(ctx, "system_powerdown", nil, nil)
}

// ErrNoReboot is returned for a reset of a VM started with NoReboot: -no-reboot
// turns every reset into QEMU's exit, and lifting it (set-action) around
// system_reset is not enough: the firmware resets the machine once more
// as it starts again (SeaBIOS on a warm start), which would end QEMU.
var ErrNoReboot = errors.New("QEMU runs with -no-reboot (a guest reboot ends the VM), so it cannot be reset")

// Reset is a hard reset (system_reset): QEMU keeps running and the guest
// boots again. It needs a VM started without NoReboot (ErrNoReboot).
func (vm *VM) Reset(ctx context.Context) error {
	if vm.cfg.NoReboot {
		return ErrNoReboot
	}
	return vm.exec(ctx, "system_reset", nil, nil)
}

// Kill ends QEMU with SIGKILL and returns how it ended (ExitKilled, unless
// it had ended already).
func (vm *VM) Kill(ctx context.Context) (Exit, error) {
	select {
	case <-vm.done:
		return vm.exit, nil
	default:
	}
	if err := vm.forceKill(); err != nil {
		return Exit{}, fmt.Errorf("qemu %s: kill: %w", vm.cfg.Name, err)
	}
	select {
	case <-vm.done:
		return vm.exit, nil
	case <-ctx.Done():
		return Exit{}, fmt.Errorf("qemu %s: kill: waiting for QEMU to be reaped: %w", vm.cfg.Name, context.Cause(ctx))
	}
}

func (vm *VM) forceKill() error {
	vm.killed.Store(true)
	// os.Process.Signal is safe against pid reuse (pidfd); the group kill
	// reaches anything QEMU started, and is skipped once QEMU is reaped.
	if err := vm.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-vm.exited:
	default:
		_ = syscall.Kill(-vm.pid, syscall.SIGKILL)
	}
	return nil
}
