package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/console"
)

// Watchdog is how the QEMU backend keeps an eye on QEMU's monitor. A
// launcher must never hang on a QEMU that stopped answering: the control
// API reports the last state the watchdog read (it never waits on QMP),
// and a monitor that does not answer for Timeout gets QEMU killed and the
// VM reported failed, saying why.
type Watchdog struct {
	// Interval between query-status probes (default 2 s).
	Interval time.Duration
	// Timeout: how long the monitor may fail to answer (default 20 s,
	// longer than any single command's bound).
	Timeout time.Duration
}

func (w Watchdog) interval() time.Duration {
	if w.Interval <= 0 {
		return 2 * time.Second
	}
	return w.Interval
}

func (w Watchdog) timeout() time.Duration {
	if w.Timeout <= 0 {
		return 20 * time.Second
	}
	return w.Timeout
}

// qemuCommandTimeout bounds each monitor command the control API passes on
// (pause, resume, stop), below virt-handler's own bound on the request.
const qemuCommandTimeout = 4 * time.Second

// qemuStartTimeout bounds QEMU's start-up: the process, its monitor, the
// console connection and the first commands.
const qemuStartTimeout = 2 * time.Minute

// qemuStart is what startQEMU needs.
type qemuStart struct {
	qc          qemu.Config
	startPaused bool
	watchdog    Watchdog
	// startCommands are QMP commands sent before the guest is resumed
	// (tests use it to have QEMU refuse one).
	startCommands []string
}

// ResolveQEMUAccel turns the VMI's QEMUAccelAnnotation into the
// accelerator QEMU gets. "auto" is tcg on a host whose KVM emulates guest
// kernel mode (see vmispec.QEMUAccelAnnotation), where QEMU+KVM stalls for
// minutes, and kvm elsewhere.
func ResolveQEMUAccel(annotations map[string]string) (qemu.Accel, string, error) {
	a, err := vmispec.QEMUAccel(annotations)
	if err != nil {
		return "", "", err
	}
	switch a {
	case vmispec.QEMUAccelKVM:
		return qemu.AccelKVM, "requested by " + vmispec.QEMUAccelAnnotation, nil
	case vmispec.QEMUAccelTCG:
		return qemu.AccelTCG, "requested by " + vmispec.QEMUAccelAnnotation, nil
	}
	if x86.EmulatedKernelMode() {
		return qemu.AccelTCG, "this host's KVM emulates guest kernel mode (kvm_pvm): QEMU+KVM would stall", nil
	}
	return qemu.AccelKVM, "hardware virtualization", nil
}

func qemuStartConfig(cfg VMConfig, vmi *v1.VirtualMachineInstance, o Options) (qemuStart, error) {
	// QEMU serves the serial port on a socket of its own, in the run
	// directory; the launcher is its one client and puts the guest's
	// output through the same console hub as our VMM's (history for late
	// clients, the container log), on the console socket virt-handler
	// knows.
	qc, err := cfg.QEMUConfig(o.Paths, filepath.Join(o.Paths.RunDir, "serial.sock"))
	if err != nil {
		return qemuStart{}, err
	}
	accel, why, err := ResolveQEMUAccel(vmi.Annotations)
	if err != nil {
		return qemuStart{}, err
	}
	qc.Accel = accel
	qc.Binary = o.QEMUBinary
	// Paused until the console is connected, so no output is lost.
	qc.StartPaused = true
	fmt.Fprintf(o.Log, "virt-launcher: QEMU accelerator %s (%s)\n", accel, why)
	return qemuStart{qc: qc, startPaused: cfg.StartPaused, watchdog: o.QEMUWatchdog}, nil
}

// qemuBackend adapts a QEMU VM (launcher/qemu) to the control API.
type qemuBackend struct {
	vm       *qemu.VM
	con      *console.Console
	serial   net.Conn
	watchdog Watchdog

	mu    sync.Mutex
	state api.State // last state the watchdog read
	hung  string    // why the watchdog killed QEMU
	// watchDone is closed when the watchdog has seen QEMU end.
	watchDone chan struct{}

	// hot-plugged volumes by SCSI target (volumes.go)
	hpMu       sync.Mutex
	hotplugged [qemu.SCSITargets]*api.Volume
}

func startQEMU(ctx context.Context, s qemuStart, consolePath string, logSink *lineLog, logf func(string, ...any)) (*qemuBackend, error) {
	ctx, cancel := context.WithTimeout(ctx, qemuStartTimeout)
	defer cancel()
	vm, err := qemu.Start(ctx, s.qc)
	if err != nil {
		return nil, err
	}
	q := &qemuBackend{vm: vm, watchdog: s.watchdog, state: api.StatePaused, watchDone: make(chan struct{})}
	fail := func(err error) (*qemuBackend, error) {
		kctx, kcancel := context.WithTimeout(context.Background(), qemuCommandTimeout)
		defer kcancel()
		_, _ = vm.Kill(kctx)
		q.closeConsole()
		return nil, err
	}
	q.con = console.New(logSink)
	if q.serial, err = connectSerial(ctx, vm, s.qc.SerialSocket); err != nil {
		return fail(err)
	}
	q.con.SetInput(func(b []byte) {
		q.serial.SetWriteDeadline(time.Now().Add(qemuCommandTimeout))
		_, _ = q.serial.Write(b) // keystrokes QEMU no longer reads have nowhere to go
	})
	go func() {
		// Guest output, until QEMU closes the socket.
		buf := make([]byte, 32<<10)
		for {
			n, err := q.serial.Read(buf)
			if n > 0 {
				_, _ = q.con.Write(buf[:n]) // the console never fails the guest
			}
			if err != nil {
				return
			}
		}
	}()
	if err := q.con.Listen(consolePath); err != nil {
		return fail(err)
	}
	mon, err := vm.Monitor(ctx)
	if err != nil {
		return fail(err)
	}
	for _, c := range s.startCommands {
		if err := mon.Execute(ctx, c, nil, nil); err != nil {
			return fail(fmt.Errorf("qemu %s: starting the guest: %w", vm.Name(), err))
		}
	}
	if !s.startPaused {
		if err := vm.Resume(ctx); err != nil {
			return fail(fmt.Errorf("starting the guest: %w", err))
		}
		q.state = api.StateRunning
	}
	go q.watch(logf)
	return q, nil
}

// connectSerial attaches to QEMU's serial socket and returns once QEMU has
// accepted the connection: before that (wait=off) QEMU drops the guest's
// output. QEMU has no event for it; its chardev's filename loses the
// "disconnected:" prefix once a client is accepted.
func connectSerial(ctx context.Context, vm *qemu.VM, path string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qemu %s: serial console: %w", vm.Name(), err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		mon, err := vm.Monitor(ctx)
		if err != nil {
			conn.Close()
			return nil, err
		}
		var chardevs []struct {
			Label    string `json:"label"`
			Filename string `json:"filename"`
		}
		if err := mon.Execute(ctx, "query-chardev", nil, &chardevs); err != nil {
			conn.Close()
			return nil, fmt.Errorf("qemu %s: serial console: %w", vm.Name(), err)
		}
		for _, cd := range chardevs {
			if cd.Label == "serial0" && !strings.HasPrefix(cd.Filename, "disconnected:") {
				return conn, nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("qemu %s: QEMU did not accept the serial console connection: %w", vm.Name(), context.Cause(ctx))
		}
	}
}

// watch probes the monitor until QEMU ends, keeping the state the control
// API reports, and kills a QEMU whose monitor stopped answering.
func (q *qemuBackend) watch(logf func(string, ...any)) {
	defer close(q.watchDone)
	t := time.NewTicker(q.watchdog.interval())
	defer t.Stop()
	var failingSince time.Time
	for {
		select {
		case <-q.vm.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.watchdog.timeout())
		st, err := q.vm.Status(ctx)
		cancel()
		switch {
		case err == nil && st.Exit != nil:
			return
		case err == nil:
			failingSince = time.Time{}
			q.mu.Lock()
			q.state = stateOf(st.State)
			q.mu.Unlock()
			continue
		case failingSince.IsZero():
			failingSince = time.Now()
		}
		// A monitor that fails for longer than the bound (a deadline
		// hits at once; a closed monitor that will not reconnect
		// takes a few probes) belongs to a QEMU that no longer works.
		if !errors.Is(err, context.DeadlineExceeded) && time.Since(failingSince) < q.watchdog.timeout() {
			continue
		}
		why := fmt.Sprintf("QEMU's monitor did not answer for %v (%v): QEMU was killed", q.watchdog.timeout(), err)
		logf("%s", why)
		q.mu.Lock()
		q.hung = why
		q.mu.Unlock()
		kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := q.vm.Kill(kctx); err != nil {
			logf("killing QEMU: %v", err)
		}
		kcancel()
		return
	}
}

func stateOf(qemuState string) api.State {
	switch qemuState {
	case "running":
		return api.StateRunning
	case "inmigrate":
		return api.StateIncoming
	case "postmigrate":
		return api.StateMigrated
	case "finish-migrate":
		return api.StateMigrating
	default:
		// paused, prelaunch, suspended, debug, io-error, ...: vCPUs stopped
		return api.StatePaused
	}
}

func (q *qemuBackend) closeConsole() {
	if q.serial != nil {
		q.serial.Close()
	}
	if q.con != nil {
		q.con.Close()
	}
}

func (q *qemuBackend) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), qemuCommandTimeout)
}

// Info never talks to QEMU: it reports what the watchdog last read, or
// how QEMU ended.
func (q *qemuBackend) Info() api.Info {
	i := api.Info{Backend: string(vmispec.BackendQEMU)}
	select {
	case <-q.vm.Done():
		e, _ := q.vm.Wait(context.Background())
		q.mu.Lock()
		hung := q.hung
		q.mu.Unlock()
		i.State, i.Exit = api.StateStopped, string(e.Reason)
		switch {
		case hung != "":
			i.Error = hung
		case q.failed(e):
			// Named, so the VMI's failure event says which process ended.
			i.Error = "QEMU " + e.String()
		}
		return i
	default:
	}
	q.mu.Lock()
	i.State = q.state
	q.mu.Unlock()
	return i
}

func (q *qemuBackend) failed(e qemu.Exit) bool {
	switch e.Reason {
	case qemu.ExitGuestShutdown, qemu.ExitHostShutdown, qemu.ExitKilled:
		return e.ShutdownReason == "guest-panic"
	}
	return true
}

func (q *qemuBackend) setState(s api.State) {
	q.mu.Lock()
	q.state = s
	q.mu.Unlock()
}

func (q *qemuBackend) Pause() error {
	ctx, cancel := q.ctx()
	defer cancel()
	if err := q.vm.Pause(ctx); err != nil {
		return err
	}
	q.setState(api.StatePaused)
	return nil
}

func (q *qemuBackend) Resume() error {
	ctx, cancel := q.ctx()
	defer cancel()
	if err := q.vm.Resume(ctx); err != nil {
		return err
	}
	q.setState(api.StateRunning)
	return nil
}

// Stop ends QEMU at once (virt-handler and the launcher have given the
// guest its grace period before they get here).
func (q *qemuBackend) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := q.vm.Kill(ctx)
	if errors.Is(err, qemu.ErrExited) {
		return nil
	}
	return err
}

// PowerButton presses the guest's ACPI power button (QEMU's
// system_powerdown).
func (q *qemuBackend) PowerButton() error {
	ctx, cancel := q.ctx()
	defer cancel()
	return q.vm.PowerDown(ctx)
}

// Reset is QEMU's system_reset: the guest boots again in the same QEMU.
// It needs a VMI whose rebootPolicy is Reboot (QEMU without -no-reboot).
func (q *qemuBackend) Reset() error {
	ctx, cancel := q.ctx()
	defer cancel()
	err := q.vm.Reset(ctx)
	if errors.Is(err, qemu.ErrNoReboot) {
		return fmt.Errorf("%w: %v: on the QEMU backend a reset needs spec.domain.rebootPolicy Reboot", api.ErrConflict, err)
	}
	return err
}

// SoftReboot needs QEMU kept alive across the guest's poweroff (its
// -no-shutdown) and a reset on the SHUTDOWN event; the QEMU backend does
// not do that yet.
func (q *qemuBackend) SoftReboot() error {
	return fmt.Errorf("%w: a soft reboot is not supported by the QEMU backend; use reset", api.ErrConflict)
}

var errQEMUUnsupported = fmt.Errorf("%w: not supported by the launcher's QEMU backend yet", api.ErrBadRequest)

func (q *qemuBackend) Snapshot(api.SnapshotRequest) (api.SnapshotResult, error) {
	return api.SnapshotResult{}, errQEMUUnsupported
}
func (q *qemuBackend) Migrate(api.MigrateRequest) error { return errQEMUUnsupported }
func (q *qemuBackend) Migration() api.MigrationStatus   { return api.MigrationStatus{} }
func (q *qemuBackend) CancelMigration() error           { return errQEMUUnsupported }
func (q *qemuBackend) Metrics() map[string]any {
	return map[string]any{"backend": "qemu", "pid": q.vm.PID()}
}
func (q *qemuBackend) Done() <-chan struct{} { return q.vm.Done() }
func (q *qemuBackend) Failed() bool {
	e, err := q.vm.Wait(context.Background())
	q.mu.Lock()
	hung := q.hung
	q.mu.Unlock()
	return err != nil || hung != "" || q.failed(e)
}

// Close waits for the watchdog (QEMU has ended) and releases the console.
func (q *qemuBackend) Close() error {
	<-q.watchDone
	q.closeConsole()
	return nil
}
