package launcher

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/console"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/runner"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

// StateStarting is what the control API reports before the guest runs
// (waiting for the pod network, loading the kernel).
const StateStarting api.State = vmispec.StateStarting

// backend is one running guest behind the control API.
type backend interface {
	api.VM
	// Done is closed when the guest has ended.
	Done() <-chan struct{}
	// Failed says, once Done, whether the guest's end was a failure.
	Failed() bool
	// Close releases what the backend holds; the guest has ended. Its
	// error (a disk that failed to flush) is for the log.
	Close() error
}

// switchVM is what the control socket serves for the launcher's whole
// life: a placeholder until the backend exists, then the backend. The
// socket is up before the guest starts so that virt-handler can find the
// launcher (and its network namespace) while the launcher waits for it.
type switchVM struct {
	name   string
	reason string // why this backend (spec.SelectBackend)

	mu       sync.Mutex
	be       backend
	stopped  bool // Stop before the backend existed
	err      string
	incoming bool // listening for a migration stream
	agent    *agentPoller
	// rebootResets says the guest's own reboot boots it again in this VM
	// (rebootPolicy Reboot), as a reboot through the agent needs.
	rebootResets bool
}

var (
	_ api.VM           = (*switchVM)(nil)
	_ api.GuestAgentVM = (*switchVM)(nil)
)

// setAgent gives the running guest its agent's poller.
func (s *switchVM) setAgent(p *agentPoller) {
	s.mu.Lock()
	s.agent = p
	s.mu.Unlock()
}

func (s *switchVM) getAgent() *agentPoller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agent
}

// Shutdown asks the guest to shut down: guest-shutdown through its agent
// when one is connected (falling back to the button if that fails), else
// the ACPI power button.
func (s *switchVM) Shutdown() (api.ShutdownResult, error) {
	if s.viaAgent("powerdown") {
		return api.ShutdownResult{Via: api.ShutdownViaAgent}, nil
	}
	return api.ShutdownResult{Via: api.ShutdownViaACPI}, s.PowerButton()
}

// Reboot asks the guest to reboot, as KubeVirt's soft reboot does:
// guest-shutdown mode=reboot through its agent when one is connected and
// the guest's reboot boots it again here (with rebootPolicy Terminate it
// would end the VMI), else the ACPI way (SoftReboot).
func (s *switchVM) Reboot() (api.ShutdownResult, error) {
	if s.rebootResets && s.viaAgent("reboot") {
		return api.ShutdownResult{Via: api.ShutdownViaAgent}, nil
	}
	return api.ShutdownResult{Via: api.ShutdownViaACPI}, s.SoftReboot()
}

// viaAgent asks the guest's agent for guest-shutdown in mode, and says
// whether it was asked; a failure other than no agent is logged, and the
// caller takes the ACPI way instead.
func (s *switchVM) viaAgent(mode string) bool {
	a := s.getAgent()
	if a == nil {
		return false
	}
	err := a.shutdown(mode)
	if err != nil && !errors.Is(err, errAgentNotConnected) {
		a.log.Warn("guest-shutdown failed: taking the ACPI way instead", "mode", mode, "error", err)
	}
	return err == nil
}

// Freeze freezes the guest's filesystems through its agent.
func (s *switchVM) Freeze(r api.FreezeRequest) error {
	a := s.getAgent()
	if a == nil {
		return errAgentNotConnected
	}
	return a.freeze(time.Duration(r.UnfreezeTimeout) * time.Second)
}

// Unfreeze thaws them.
func (s *switchVM) Unfreeze() error {
	a := s.getAgent()
	if a == nil {
		return errAgentNotConnected
	}
	return a.unfreeze()
}

func (s *switchVM) set(b backend) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.be = b
	return true
}

// setIncoming says the launcher now waits for a migration stream.
func (s *switchVM) setIncoming() {
	s.mu.Lock()
	s.incoming = true
	s.mu.Unlock()
}

func (s *switchVM) fail(err error) {
	s.mu.Lock()
	s.err = err.Error()
	s.mu.Unlock()
}

func (s *switchVM) get() (backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.be == nil {
		return nil, fmt.Errorf("%w: the VM has not started yet", api.ErrConflict)
	}
	return s.be, nil
}

func (s *switchVM) Info() api.Info {
	s.mu.Lock()
	b, stopped, err, incoming := s.be, s.stopped, s.err, s.incoming
	s.mu.Unlock()
	if b != nil {
		i := b.Info()
		i.BackendReason = s.reason
		if a := s.getAgent(); a != nil && i.State != api.StateStopped && i.State != api.StateMigrated {
			st := a.Status()
			i.GuestAgent = &st
		}
		return i
	}
	i := api.Info{State: StateStarting, Backend: s.name, BackendReason: s.reason}
	if incoming {
		i.State = api.StateIncoming
	}
	if stopped || err != "" {
		i.State, i.Exit, i.Error = api.StateStopped, string(machine.ExitStopped), err
		if err != "" {
			i.Exit = string(machine.ExitError)
		}
	}
	return i
}

func (s *switchVM) Pause() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.Pause()
}

func (s *switchVM) Resume() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.Resume()
}

// Stop before the guest started means it never will.
func (s *switchVM) Stop() error {
	s.mu.Lock()
	b := s.be
	if b == nil {
		s.stopped = true
	}
	s.mu.Unlock()
	if b != nil {
		return b.Stop()
	}
	return nil
}

func (s *switchVM) PowerButton() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.PowerButton()
}

func (s *switchVM) Reset() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.Reset()
}

func (s *switchVM) SoftReboot() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.SoftReboot()
}

func (s *switchVM) Snapshot(r api.SnapshotRequest) (api.SnapshotResult, error) {
	b, err := s.get()
	if err != nil {
		return api.SnapshotResult{}, err
	}
	return b.Snapshot(r)
}

func (s *switchVM) Migrate(r api.MigrateRequest) error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.Migrate(r)
}

func (s *switchVM) Migration() api.MigrationStatus {
	b, err := s.get()
	if err != nil {
		return api.MigrationStatus{}
	}
	return b.Migration()
}

func (s *switchVM) CancelMigration() error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.CancelMigration()
}

func (s *switchVM) Metrics() map[string]any {
	b, err := s.get()
	if err != nil {
		return map[string]any{}
	}
	return b.Metrics()
}

// kubevmmBackend is our VMM, run in this process through vmm/runner.
type kubevmmBackend struct {
	*runner.Runner
	con  *console.Console
	exit machine.Exit
	done chan struct{}
}

// startKubevmm builds the machine, serves its console on consolePath and
// starts the guest under the seccomp filter in mode sandbox.
func startKubevmm(cfg VMConfig, consolePath string, logSink *lineLog, log *slog.Logger, sandbox seccomp.Mode) (*kubevmmBackend, error) {
	con := console.New(logSink)
	mc, err := cfg.MachineConfig(con)
	if err != nil {
		con.Close()
		return nil, err
	}
	mc.Logger = log
	m, err := machine.New(mc)
	if err != nil {
		con.Close()
		return nil, fmt.Errorf("building the VM: %w", err)
	}
	b, err := runKubevmm(m, con, consolePath, sandbox)
	if err != nil {
		return nil, err
	}
	if cfg.StartPaused {
		// The vCPUs may have run a few instructions by now; the guest
		// cannot tell, and the VMM has no "created but not started" state.
		if err := b.Pause(); err != nil {
			return b, fmt.Errorf("starting paused: %w", err)
		}
	}
	return b, nil
}

// runKubevmm serves the console of a built machine and runs it, under the
// seccomp filter in mode sandbox from before the guest's first
// instruction on (the filter covers the whole launcher: the VMM runs
// in-process). On error the machine and console are closed.
func runKubevmm(m *machine.Machine, con *console.Console, consolePath string, sandbox seccomp.Mode) (*kubevmmBackend, error) {
	con.SetInput(m.Serial.Input)
	if err := con.Listen(consolePath); err != nil {
		_ = m.Close() // never ran: the console error is the one to report
		con.Close()
		return nil, err
	}
	if err := seccomp.Install(sandbox); err != nil {
		_ = m.Close() // never ran: the filter error is the one to report
		con.Close()
		return nil, err
	}
	cfg := m.Config()
	b := &kubevmmBackend{Runner: runner.New(m, cfg.CPUs, cfg.MemoryBytes), con: con, done: make(chan struct{})}
	go func() {
		b.exit = b.Run()
		close(b.done)
	}()
	return b, nil
}

// Type writes input to the guest's serial console, as a user would.
func (b *kubevmmBackend) Type(input []byte) { b.Machine().Serial.Input(input) }

func (b *kubevmmBackend) Done() <-chan struct{} { return b.done }
func (b *kubevmmBackend) Failed() bool          { return b.exit.Failed() }
func (b *kubevmmBackend) Close() error {
	b.con.Close()
	return b.Machine().Close()
}
