package machine

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// StartDirtyLog starts tracking the pages vCPUs and the VMM write.
func (m *Machine) StartDirtyLog() error { return m.memory.StartDirtyLog() }

// SyncDirty ORs into bitmaps the pages written since the last call.
func (m *Machine) SyncDirty(bitmaps [][]uint64) error { return m.memory.SyncDirty(bitmaps) }

// StopDirtyLog ends dirty tracking.
func (m *Machine) StopDirtyLog() error { return m.memory.StopDirtyLog() }

// Throttle holds the vCPUs for the given fraction of every 100 ms
// (auto-converge); 0 stops throttling. It never leaves the VM paused.
func (m *Machine) Throttle(fraction float64) { m.cpus.Throttle(fraction) }

// migrationPause pauses vCPUs and holds every device still until
// migrationResume; the migration's stop-and-copy runs in between. The
// disks are flushed and their images' locks released for the target,
// which opens them when it loads the state.
func (m *Machine) migrationPause() error {
	m.cpus.Throttle(0)
	if err := m.cpus.Pause(); err != nil {
		return err
	}
	if err := m.devices.Pause(); err != nil {
		m.cpus.Resume()
		return err
	}
	if err := m.devices.releaseDisks(); err != nil {
		m.migrationResume()
		return err
	}
	return nil
}

// migrationResume runs the guest again after a failed migration, once it
// has its images' locks back. If another process holds one (the target
// did not let go), the guest must not write it: the VM ends with an error
// naming the image instead.
func (m *Machine) migrationResume() {
	if err := m.devices.retakeDisks(); err != nil {
		m.stop(Exit{Reason: ExitError, Err: fmt.Errorf("resuming after a failed migration: %w", err)})
	}
	m.devices.Resume()
	m.cpus.Resume()
}

// Header describes the VM's hardware for the target.
func (m *Machine) Header() ([]byte, error) { return json.Marshal(m.savedConfig()) }

// State is the complete VM state; the VM is paused by the migration.
func (m *Machine) State() ([]byte, error) {
	s, err := m.saveState()
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// migrationSource adapts a machine to migration.Source: Pause/Resume there
// also quiesce devices.
type migrationSource struct{ *Machine }

func (s migrationSource) Pause() error { return s.migrationPause() }
func (s migrationSource) Resume()      { s.migrationResume() }

var _ migration.Source = migrationSource{}

// AsMigrationSource is the machine as the source of a live migration.
func (m *Machine) AsMigrationSource() migration.Source { return migrationSource{m} }

// Incoming is the target side of a migration: it builds the machine the
// source describes and loads its state. After migration.Receive succeeds,
// Machine is ready to Run.
type Incoming struct {
	base    Config
	header  SavedConfig // what Prepare built; the state must describe the same VM
	Machine *Machine
	// PostCopyFailed, if set, hears that a post-copy migration lost the
	// guest after it started here (the source died with pages only it
	// had). The VM is stopped, but vCPUs and device workers waiting for a
	// missing page stay blocked in the kernel (KVM does not give a vCPU
	// back while it waits, even when kicked): only ending the process
	// frees them, so that is the caller's job.
	PostCopyFailed func(error)
}

// NewIncoming prepares to receive a VM; base supplies console, log and
// KVM path.
func NewIncoming(base Config) *Incoming { return &Incoming{base: base} }

var _ migration.PostCopyTarget = (*Incoming)(nil)

// Prepare builds an empty machine from the source's header.
func (in *Incoming) Prepare(header []byte) (*memory.Guest, error) {
	var sc SavedConfig
	if err := json.Unmarshal(header, &sc); err != nil {
		return nil, fmt.Errorf("migration header: %w", err)
	}
	if err := validateConfig(&sc); err != nil {
		return nil, fmt.Errorf("migration header: %w", err)
	}
	cfg, err := configFrom(sc, in.base)
	if err != nil {
		return nil, err
	}
	// The source still writes its disks: build them unopened.
	cfg.deferDisks = make([]uint64, len(sc.Disks))
	for i, d := range sc.Disks {
		cfg.deferDisks[i] = d.Image.Size
	}
	m, err := build(cfg, freshRAM)
	if err != nil {
		return nil, err
	}
	in.Machine, in.header = m, sc
	return m.Memory(), nil
}

// Restore loads the state sent at the end of the migration.
func (in *Incoming) Restore(state []byte) error {
	if in.Machine == nil {
		return fmt.Errorf("migrated state before the header")
	}
	var s State
	if err := json.Unmarshal(state, &s); err != nil {
		return fmt.Errorf("migrated state: %w", err)
	}
	if err := validateState(&s); err != nil {
		return fmt.Errorf("migrated state: %w", err)
	}
	if err := checkConfig(&s.Config, in.Machine); err != nil {
		return err
	}
	if !reflect.DeepEqual(s.Config, in.header) {
		return fmt.Errorf("migrated state describes another VM than the header did")
	}
	// The source has stopped, flushed its disks and let go of them.
	if err := in.Machine.devices.openDeferredDisks(); err != nil {
		return err
	}
	if err := in.Machine.devices.checkDisks(s.Config.Disks); err != nil {
		return err
	}
	return in.Machine.loadState(&s)
}

func checkConfig(sc *SavedConfig, m *Machine) error {
	if sc.CPUs != m.cfg.CPUs || sc.MemoryBytes != m.cfg.MemoryBytes {
		return fmt.Errorf("state is for %d vCPUs / %d MiB, the prepared VM has %d / %d MiB",
			sc.CPUs, sc.MemoryBytes>>20, m.cfg.CPUs, m.cfg.MemoryBytes>>20)
	}
	return nil
}

// Start is a no-op: the caller runs Machine once Receive returns.
func (in *Incoming) Start() error { return nil }

// PostCopyDone implements migration.PostCopyTarget.
func (in *Incoming) PostCopyDone(err error) {
	if err == nil {
		in.Machine.Log().Info("post-copy complete: every page has arrived")
		return
	}
	in.Machine.EndLost(err)
	if in.PostCopyFailed != nil {
		in.PostCopyFailed(err)
	}
}

// EndLost ends a VM whose guest a failed post-copy migration lost; Run
// returns ExitError with err. A source in that state must never resume.
func (m *Machine) EndLost(err error) { m.stop(Exit{Reason: ExitError, Err: err}) }

// Discard throws the half-built VM away.
func (in *Incoming) Discard() {
	if in.Machine != nil {
		// The source still owns the VM and its disks: nothing here to keep.
		_ = in.Machine.Close()
		in.Machine = nil
	}
}
