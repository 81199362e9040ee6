package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qmp"
)

// MigrateOptions tune an outgoing live migration.
type MigrateOptions struct {
	// BandwidthBytesPerSec caps the migration stream; 0 is QEMU's
	// default, 128 MiB/s.
	BandwidthBytesPerSec int64
	// Downtime is the longest the guest may be stopped for the final copy;
	// QEMU keeps pre-copying until the rest fits. 0 is QEMU's default,
	// 300 ms.
	Downtime time.Duration
	// AutoConverge throttles the guest's vCPUs when it dirties memory
	// faster than it can be sent.
	AutoConverge bool
}

// Migration is the state of a migration, from either end.
type Migration struct {
	// Status: none, setup, active, device, pre-switchover, cancelling,
	// cancelled, completed, failed (see QEMU's MigrationStatus).
	Status           string
	TransferredBytes int64 // RAM sent so far
	RemainingBytes   int64 // RAM still to send
	TotalBytes       int64 // guest RAM
	Passes           int64 // dirty-bitmap syncs: 1 + number of re-copy passes
	TotalTime        time.Duration
	Downtime         time.Duration // when completed: how long the guest was stopped
	ExpectedDowntime time.Duration // while active: estimate for the switchover
	SetupTime        time.Duration
	Error            string // why it failed
}

// Terminal migration states.
const (
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
)

var (
	// ErrMigrationFailed means QEMU gave up the migration (WaitMigration).
	ErrMigrationFailed = errors.New("migration failed")
	// ErrMigrationCancelled means the migration was cancelled (WaitMigration).
	ErrMigrationCancelled = errors.New("migration cancelled")
)

const (
	maxDowntime      = 2000 * time.Second // QEMU's limit for downtime-limit
	defaultBandwidth = 128 << 20          // QEMU's default max-bandwidth
	defaultDowntime  = 300 * time.Millisecond
)

// Migrate starts a live migration of the running VM to the target
// listening at uri (tcp:HOST:PORT or unix:PATH). It returns once QEMU has
// started it; WaitMigration follows it to the end, MigrationStatus reports
// progress, CancelMigration stops it. The source pauses for the final copy
// and stays paused ("postmigrate") after completion; shut it down then.
func (vm *VM) Migrate(ctx context.Context, uri string, opts MigrateOptions) error {
	if err := checkMigrationURI(uri); err != nil {
		return fmt.Errorf("qemu %s: migrate: %w", vm.cfg.Name, err)
	}
	if opts.BandwidthBytesPerSec < 0 {
		return fmt.Errorf("qemu %s: migrate: bandwidth %d: must not be negative", vm.cfg.Name, opts.BandwidthBytesPerSec)
	}
	if opts.Downtime < 0 || opts.Downtime > maxDowntime || (opts.Downtime > 0 && opts.Downtime < time.Millisecond) {
		return fmt.Errorf("qemu %s: migrate: downtime %v: must be 1ms..%v", vm.cfg.Name, opts.Downtime, maxDowntime)
	}
	// MIGRATION events let WaitMigration wait without polling.
	if err := vm.setMigrationCaps(ctx, map[string]bool{"events": true, "auto-converge": opts.AutoConverge}); err != nil {
		return err
	}
	// QEMU keeps parameters from one migration to the next: set both, so
	// a cap from an earlier (cancelled) attempt does not linger.
	bw, downtime := opts.BandwidthBytesPerSec, opts.Downtime
	if bw == 0 {
		bw = defaultBandwidth
	}
	if downtime == 0 {
		downtime = defaultDowntime
	}
	params := map[string]any{"max-bandwidth": bw, "downtime-limit": downtime.Milliseconds()}
	if err := vm.exec(ctx, "migrate-set-parameters", params, nil); err != nil {
		return err
	}
	return vm.exec(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

func (vm *VM) setMigrationCaps(ctx context.Context, caps map[string]bool) error {
	var list []map[string]any
	for name, on := range caps {
		list = append(list, map[string]any{"capability": name, "state": on})
	}
	return vm.exec(ctx, "migrate-set-capabilities", map[string]any{"capabilities": list}, nil)
}

// MigrateIncoming makes a VM started with Incoming "defer" listen for the
// migration stream at uri, and returns the address it listens on: with
// tcp:HOST:0 the kernel picks a free port, and the returned
// tcp:HOST:PORT names it (no port guessing, no race).
func (vm *VM) MigrateIncoming(ctx context.Context, uri string) (string, error) {
	if vm.cfg.Incoming != "defer" {
		return "", fmt.Errorf("qemu %s: migrate-incoming needs a VM started with Incoming \"defer\"", vm.cfg.Name)
	}
	if err := checkMigrationURI(uri); err != nil {
		return "", fmt.Errorf("qemu %s: migrate-incoming: %w", vm.cfg.Name, err)
	}
	if err := vm.setMigrationCaps(ctx, map[string]bool{"events": true}); err != nil {
		return "", err
	}
	if err := vm.exec(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil); err != nil {
		return "", err
	}
	var mi qmp.MigrationInfo
	if err := vm.exec(ctx, "query-migrate", nil, &mi); err != nil {
		return "", err
	}
	for _, a := range mi.SocketAddress {
		switch a.Type {
		case "inet":
			return "tcp:" + net.JoinHostPort(a.Host, a.Port), nil
		case "unix":
			return "unix:" + a.Path, nil
		}
	}
	return uri, nil
}

// MigrationStatus reports the VM's current or last migration (query-migrate).
func (vm *VM) MigrationStatus(ctx context.Context) (Migration, error) {
	var mi qmp.MigrationInfo
	if err := vm.exec(ctx, "query-migrate", nil, &mi); err != nil {
		return Migration{}, err
	}
	m := Migration{
		Status:           mi.Status,
		TotalTime:        mi.TotalTime(),
		Downtime:         mi.Downtime(),
		ExpectedDowntime: time.Duration(mi.ExpectedDowntime) * time.Millisecond,
		SetupTime:        time.Duration(mi.SetupTimeMs) * time.Millisecond,
		Error:            mi.ErrorDesc,
	}
	if m.Status == "" {
		m.Status = "none"
	}
	if mi.RAM != nil {
		m.TransferredBytes = mi.RAM.Transferred
		m.RemainingBytes = mi.RAM.Remaining
		m.TotalBytes = mi.RAM.Total
		m.Passes = mi.RAM.DirtySyncCount
	}
	return m, nil
}

// CancelMigration stops an outgoing migration; the source keeps running.
// WaitMigration then reports ErrMigrationCancelled.
func (vm *VM) CancelMigration(ctx context.Context) error {
	return vm.exec(ctx, "migrate_cancel", nil, nil)
}

func terminal(status string) bool {
	return status == MigrationCompleted || status == MigrationFailed || status == MigrationCancelled
}

// WaitMigration waits, on either end, for the migration to complete, fail
// or be cancelled, and returns its final statistics. The error is nil only
// for a completed migration. ctx bounds the wait (a migration has no
// intrinsic time limit); a target whose QEMU exits because the stream broke
// gives an error matching ErrExited.
func (vm *VM) WaitMigration(ctx context.Context) (Migration, error) {
	c, err := vm.monitor(ctx)
	if err != nil {
		return Migration{}, fmt.Errorf("qemu %s: waiting for migration: %w", vm.cfg.Name, err)
	}
	// Subscribe first, then look: a transition between the two is seen.
	sub := c.Subscribe(qmp.EventMigration)
	defer sub.Close()
	m, err := vm.MigrationStatus(ctx)
	if err != nil {
		return m, err
	}
	if !terminal(m.Status) {
		_, err := sub.WaitFor(ctx, func(ev qmp.Event) bool {
			var md qmp.MigrationData
			return ev.DecodeData(&md) == nil && terminal(md.Status)
		})
		if errors.Is(err, qmp.ErrClosed) {
			// QEMU left; a target does when the stream breaks.
			if _, merr := vm.monitor(ctx); merr != nil {
				err = fmt.Errorf("%w; %w", err, merr)
			}
		}
		if err != nil {
			return m, fmt.Errorf("qemu %s: waiting for migration (last status %s): %w", vm.cfg.Name, m.Status, err)
		}
		if m, err = vm.MigrationStatus(ctx); err != nil {
			return m, err
		}
	}
	if m.Status == MigrationCompleted {
		if err := vm.waitFinalStats(ctx); err != nil {
			return m, err
		}
		if m, err = vm.MigrationStatus(ctx); err != nil {
			return m, err
		}
	}
	switch m.Status {
	case MigrationFailed:
		return m, fmt.Errorf("qemu %s: %w: %s", vm.cfg.Name, ErrMigrationFailed, m.Error)
	case MigrationCancelled:
		return m, fmt.Errorf("qemu %s: %w", vm.cfg.Name, ErrMigrationCancelled)
	}
	return m, nil
}

// statsPoll is how often waitFinalStats looks. QEMU gives no event for
// the moment it waits for, so this is a poll bounded by the caller's ctx.
const statsPoll = 10 * time.Millisecond

// waitFinalStats waits until the source's total time and downtime are
// computed. QEMU 7.2 announces "completed" before its migration thread
// computes them (they read 0 until then); it does so together with moving
// the source from finish-migrate to postmigrate, under the big QEMU lock,
// so the run state leaving finish-migrate means the numbers are final. On
// a target, or with a QEMU that computes them first, this returns at once.
func (vm *VM) waitFinalStats(ctx context.Context) error {
	t := time.NewTicker(statsPoll)
	defer t.Stop()
	for {
		st, err := vm.queryStatus(ctx)
		if err != nil {
			return err
		}
		if st.Status != "finish-migrate" {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("qemu %s: waiting for the final migration statistics: %w", vm.cfg.Name, context.Cause(ctx))
		}
	}
}
