// Package runner owns one running VM for its whole life and implements the
// control API (vmm/api) on it: pause/resume, snapshots, live migration in
// the background, stop. The `vmm` CLI and virt-launcher both use it.
package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/procmem"
)

// Runner runs a machine and serves the API for it.
type Runner struct {
	m       *machine.Machine
	cpus    int
	memMiB  uint64
	started time.Time

	mu        sync.Mutex
	paused    bool
	migrated  bool
	lost      error // a post-copy migration failed: the guest is gone
	exited    *machine.Exit
	stopping  bool // Stop was called: a reset in progress ends instead
	resetting bool // between a reset's exit and the guest's new boot
	resets    int
	mig       *migrationJob
	done      chan struct{}
}

type migrationJob struct {
	cancel context.CancelFunc
	active bool
	stats  migration.Stats
	ended  chan struct{} // closed when the sender no longer uses the machine
}

// New wraps a built machine; Run starts it.
func New(m *machine.Machine, cpus int, memBytes uint64) *Runner {
	return &Runner{m: m, cpus: cpus, memMiB: memBytes >> 20, done: make(chan struct{})}
}

// Machine is the VM.
func (r *Runner) Machine() *machine.Machine { return r.m }

// Run runs the VM until it ends and returns how. It returns only once a
// migration has stopped using the machine, so the caller may close it.
func (r *Runner) Run() machine.Exit {
	r.mu.Lock()
	r.started = time.Now()
	r.mu.Unlock()
	r.m.Log().Info("VM state", "state", api.StateRunning)
	e := r.m.Run()
	for again := true; again; {
		if e, again = r.reset(e); again {
			e = r.m.Run()
		}
	}
	r.mu.Lock()
	r.exited = &e
	j := r.mig
	if j != nil && j.active {
		j.cancel()
	}
	r.mu.Unlock()
	if j != nil {
		<-j.ended
	}
	close(r.done)
	attrs := []any{"state", api.StateStopped, "exit", e.Reason}
	if e.Err != nil {
		attrs = append(attrs, "error", e.Err)
	}
	r.m.Log().Info("VM state", attrs...)
	return e
}

// reset restarts the guest in place after a reset exit (the guest's own
// reboot, Reset, or a SoftReboot's poweroff) when the machine can; the VM
// ends instead if it cannot, if it is being stopped, or if a migration
// was under way (its stream already carries the old guest). again says
// whether to Run once more; otherwise e is how the VM ended.
func (r *Runner) reset(e machine.Exit) (_ machine.Exit, again bool) {
	if !r.m.WillReset(e) {
		return e, false
	}
	r.mu.Lock()
	busy := r.stopping || r.migrated || r.lost != nil || (r.mig != nil && r.mig.active)
	stopping := r.stopping && !r.migrated && r.lost == nil
	r.resetting = !busy
	r.mu.Unlock()
	if stopping {
		// Stop came as the guest rebooted: the VM ends because it was
		// stopped, whichever exit came first.
		return machine.Exit{Reason: machine.ExitStopped}, false
	}
	if busy {
		return e, false
	}
	err := r.m.Reset()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resetting = false
	switch {
	case err != nil:
		return machine.Exit{Reason: machine.ExitError, Err: err}, false
	case r.stopping:
		return machine.Exit{Reason: machine.ExitStopped}, false
	}
	r.resets++
	r.paused = false // the new boot runs whether or not the old guest was paused
	r.m.Log().Info("VM state", "state", api.StateRunning, "reset", r.resets)
	return e, true
}

// Done is closed when the VM has ended.
func (r *Runner) Done() <-chan struct{} { return r.done }

var _ api.VM = (*Runner)(nil)

// Info implements api.VM.
func (r *Runner) Info() api.Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := api.Info{CPUs: r.cpus, MemoryMiB: r.memMiB, Backend: "kubevmm", Started: r.started}
	switch {
	case r.exited != nil:
		i.State = api.StateStopped
		if r.migrated {
			i.State = api.StateMigrated
		}
		i.Exit = string(r.exited.Reason)
		if r.exited.Err != nil {
			i.Error = r.exited.Err.Error()
		}
	case r.migrated:
		i.State = api.StateMigrated
	case r.lost != nil:
		i.State, i.Exit, i.Error = api.StateStopped, string(machine.ExitError), r.lost.Error()
	case r.mig != nil && r.mig.active:
		i.State = api.StateMigrating
	case r.paused:
		i.State = api.StatePaused
	default:
		i.State = api.StateRunning
	}
	return i
}

func (r *Runner) checkRunning(what string) error {
	if r.migrated {
		return fmt.Errorf("%w: cannot %s: the guest now runs on the migration target", api.ErrConflict, what)
	}
	if r.lost != nil {
		return fmt.Errorf("%w: cannot %s: %v", api.ErrConflict, what, r.lost)
	}
	if r.exited != nil {
		return fmt.Errorf("%w: cannot %s: the VM has ended (%s)", api.ErrConflict, what, r.exited.Reason)
	}
	if r.mig != nil && r.mig.active {
		return fmt.Errorf("%w: cannot %s during a live migration", api.ErrConflict, what)
	}
	if r.resetting {
		return fmt.Errorf("%w: cannot %s while the VM resets", api.ErrConflict, what)
	}
	return nil
}

// Reset implements api.VM: a hard reset, as the reset button; the guest
// boots again in this process (a paused VM runs again).
func (r *Runner) Reset() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkReset("reset"); err != nil {
		return err
	}
	r.m.RequestReset()
	r.m.Log().Info("reset requested")
	return nil
}

// SoftReboot implements api.VM: the power button is pressed, and when the
// guest powers off it boots again instead of the VM ending.
func (r *Runner) SoftReboot() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkReset("reboot"); err != nil {
		return err
	}
	return r.m.SoftReboot()
}

func (r *Runner) checkReset(what string) error {
	if err := r.checkRunning(what); err != nil {
		return err
	}
	if !r.m.CanReset() {
		return fmt.Errorf("%w: cannot %s: this VM cannot restart in place (its configuration has no way to reload the kernel)", api.ErrConflict, what)
	}
	return nil
}

// Pause implements api.VM.
func (r *Runner) Pause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("pause"); err != nil {
		return err
	}
	if err := r.m.Pause(); err != nil {
		return err
	}
	r.setPaused(true)
	return nil
}

// setPaused records (and logs, once per change) whether the guest is
// paused. Called with r.mu held.
func (r *Runner) setPaused(p bool) {
	if p == r.paused {
		return
	}
	r.paused = p
	state := api.StateRunning
	if p {
		state = api.StatePaused
	}
	r.m.Log().Info("VM state", "state", state)
}

// Resume implements api.VM.
func (r *Runner) Resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("resume"); err != nil {
		return err
	}
	r.m.Resume()
	r.setPaused(false)
	return nil
}

// Stop implements api.VM: the VM ends (Run returns ExitStopped, or
// ExitMigrated once its guest runs on a migration target).
func (r *Runner) Stop() error {
	r.mu.Lock()
	r.stopping = true
	if j := r.mig; j != nil && j.active {
		j.cancel()
	}
	migrated, lost := r.migrated, r.lost
	r.mu.Unlock()
	switch {
	case migrated:
		r.m.EndMigrated()
	case lost != nil:
		r.m.EndLost(lost)
	default:
		r.m.Stop()
	}
	return nil
}

// PowerButton implements api.VM. A paused guest gets the press when it
// resumes.
func (r *Runner) PowerButton() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("press the power button"); err != nil {
		return err
	}
	return r.m.PowerButton()
}

// Snapshot implements api.VM.
func (r *Runner) Snapshot(req api.SnapshotRequest) (api.SnapshotResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("snapshot"); err != nil {
		return api.SnapshotResult{}, err
	}
	resume := !r.paused
	if req.Resume != nil {
		resume = *req.Resume
	}
	res, err := r.m.Snapshot(req.Dir, resume)
	if err != nil {
		return api.SnapshotResult{}, err
	}
	r.m.Log().Info("snapshot taken", "dir", req.Dir, "stored_bytes", res.StoredBytes, "paused", res.Paused, "resumed", resume)
	r.setPaused(!resume)
	return api.SnapshotResult{Dir: req.Dir, MemoryBytes: res.StoredBytes, PausedMs: float64(res.Paused.Microseconds()) / 1000}, nil
}

// Migrate implements api.VM: it connects to the target (with mutual TLS if
// req.TLS is set) and migrates in the background; Migration reports progress. When it completes, the VM here
// stays paused for good (state Migrated) until Stop ends it: whoever drives
// the migration reads the final statistics first.
func (r *Runner) Migrate(req api.MigrateRequest) error {
	network, addr, err := api.ParseAddress(req.To)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("migrate"); err != nil {
		return err
	}
	if r.paused {
		return fmt.Errorf("%w: resume the VM before migrating it", api.ErrConflict)
	}
	if req.TLS != nil {
		if _, err := req.TLS.ClientConfig(addr); err != nil {
			return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
		}
	}
	conn, err := migration.Dial(context.Background(), network, addr, req.TLS, 30*time.Second)
	if err != nil {
		return fmt.Errorf("connect to migration target %s: %w", req.To, err)
	}
	r.m.Log().Info("VM state", "state", api.StateMigrating, "to", req.To, "tls", req.TLS != nil, "post_copy", req.PostCopy)
	ctx, cancel := context.WithCancel(context.Background())
	job := &migrationJob{cancel: cancel, active: true, stats: migration.Stats{Phase: "connecting"}, ended: make(chan struct{})}
	r.mig = job
	opt := migration.Options{
		Bandwidth:       req.BandwidthMBps << 20,
		Downtime:        time.Duration(req.DowntimeMs) * time.Millisecond,
		AutoConverge:    req.AutoConverge,
		ProgressTimeout: time.Duration(req.ProgressTimeout) * time.Second,
		MaxRounds:       req.MaxRounds,
		PostCopy:        req.PostCopy,
		Progress: func(s migration.Stats) {
			r.mu.Lock()
			job.stats = s
			r.mu.Unlock()
		},
	}
	if req.Timeout > 0 {
		opt.CompletionTimeout = time.Duration(req.Timeout) * time.Second
	}
	go func() {
		defer close(job.ended)
		defer conn.Close()
		st, err := migration.Send(ctx, conn, r.m.AsMigrationSource(), opt)
		r.mu.Lock()
		job.stats, job.active = st, false
		switch {
		case err == nil:
			r.migrated = true
			r.m.Log().Info("VM state", "state", api.StateMigrated, "rounds", st.Rounds, "bytes_sent", st.BytesSent,
				"downtime", st.Downtime, "total", st.Total, "post_copy", st.PostCopy)
		case errors.Is(err, migration.ErrPostCopyFailed):
			// Part of the guest's memory ran on the target: resuming
			// here would fork it. It stays paused until Stop ends it.
			r.lost = err
			r.m.Log().Error("migration failed in post-copy: the guest is lost", "error", err)
		default:
			r.m.Log().Warn("migration failed; the guest runs here", "error", err)
			r.m.Log().Info("VM state", "state", api.StateRunning)
		}
		r.mu.Unlock()
		cancel()
	}()
	return nil
}

// Migration implements api.VM.
func (r *Runner) Migration() api.MigrationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mig == nil {
		return api.MigrationStatus{}
	}
	return api.MigrationStatus{Active: r.mig.active, Stats: r.mig.stats}
}

// CancelMigration implements api.VM.
func (r *Runner) CancelMigration() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mig == nil || !r.mig.active {
		return fmt.Errorf("%w: no migration in progress", api.ErrConflict)
	}
	if r.mig.stats.Phase == "postcopy" {
		return fmt.Errorf("%w: the migration is in post-copy: the guest already runs on the target and needs the pages still here", api.ErrConflict)
	}
	r.mig.cancel()
	return nil
}

// Metrics implements api.VM: the machine's counters, and where the
// process's resident memory goes now (memory).
func (r *Runner) Metrics() map[string]any {
	s := r.m.Stats()
	if mem, err := procmem.Self(r.m.GuestRAM()); err == nil {
		s["memory"] = mem
	}
	return s
}
