package machine

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

type request int

const (
	reqNone request = iota
	reqPause
	reqStop
)

// vcpu is one vCPU and the OS thread that runs it; the CPU manager owns
// it.
type vcpu struct {
	mgr *cpuManager
	c   *kvm.VCPU
	id  int

	mu      sync.Mutex // guards the thread's run state below
	cond    *sync.Cond
	tid     int
	req     request
	paused  bool // parked in checkpoint by a pause request
	exited  bool // the thread left its loop (or never started and was stopped)
	started bool
}

// request asks the vCPU to leave KVM_RUN and act on r. immediate_exit
// covers the window before the thread enters KVM_RUN; the signal covers a
// thread already inside it (Go tolerates stray SIGURG: it is its own
// preemption signal).
func (v *vcpu) request(r request) {
	v.mu.Lock()
	if v.req != reqStop {
		v.req = r
	}
	v.c.SetImmediateExit(true)
	tid := v.tid
	v.cond.Broadcast()
	v.mu.Unlock()
	if tid != 0 {
		unix.Tgkill(unix.Getpid(), tid, unix.SIGURG)
	}
}

// resume clears a pause request.
func (v *vcpu) resume() {
	v.mu.Lock()
	if v.req == reqPause {
		v.req = reqNone
	}
	v.cond.Broadcast()
	v.mu.Unlock()
}

// checkpoint is called between KVM_RUNs. It parks while paused and reports
// whether the thread must exit. Clearing immediate_exit happens under the
// lock, so a request made after it still stops the next KVM_RUN.
func (v *vcpu) checkpoint() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.req == reqPause {
		if !v.paused {
			v.paused = true
			v.cond.Broadcast()
		}
		v.cond.Wait()
	}
	v.paused = false
	if v.req == reqStop {
		return false
	}
	v.c.SetImmediateExit(false)
	return true
}

// vcpuExits is where a vCPU thread hands what KVM_RUN returned: the
// Machine, which owns what an exit means (the buses through its device
// manager, the assists, the exit metrics, the profiler) and how the VM
// ends.
type vcpuExits interface {
	// interrupted: a signal ended KVM_RUN (a request, a kick, a
	// profiler's sample); the thread goes on.
	interrupted(v *vcpu)
	// handleExit handles one exit; done means the VM ends with e.
	handleExit(v *vcpu) (e Exit, done bool)
	// stop ends the VM with e.
	stop(e Exit)
}

func (v *vcpu) loop() {
	mgr := v.mgr
	defer mgr.running.Done()
	defer func() {
		v.mu.Lock()
		v.exited = true
		v.cond.Broadcast()
		v.mu.Unlock()
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	v.mu.Lock()
	v.tid = unix.Gettid()
	v.started = true
	v.mu.Unlock()
	for v.checkpoint() {
		mgr.enteredGuest()
		err := v.c.Run()
		if errors.Is(err, kvm.ErrInterrupted) {
			mgr.exits.interrupted(v)
			continue
		}
		if err != nil {
			mgr.exits.stop(Exit{Reason: ExitError, VCPU: v.id, Err: err})
			return
		}
		if e, done := mgr.exits.handleExit(v); done {
			mgr.exits.stop(e)
			return
		}
	}
}

// describe adds the vCPU's RIP to an error about the guest.
func (v *vcpu) describe(what string) error {
	if r, err := v.c.GetRegs(); err == nil {
		return fmt.Errorf("%s at RIP %#x", what, r.RIP)
	}
	return errors.New(what)
}

// save captures the vCPU. Its thread must be parked.
func (v *vcpu) save() (*VCPUState, error) {
	c := v.c
	s := &VCPUState{ID: v.id}
	// MP state first: reading it flushes pending APIC events into state
	// the later reads see.
	mp, err := c.GetMPState()
	if err != nil {
		return nil, err
	}
	s.MPState = mp.State
	regs, err := c.GetRegs()
	if err != nil {
		return nil, err
	}
	s.Regs = raw(regs)
	sregs, err := c.GetSregs()
	if err != nil {
		return nil, err
	}
	s.Sregs = raw(sregs)
	xs, err := c.GetXSave()
	if err != nil {
		return nil, err
	}
	s.XSave = raw(xs)
	xcrs, err := c.GetXCRs()
	if err != nil {
		return nil, err
	}
	s.XCRs = raw(xcrs)
	dr, err := c.GetDebugRegs()
	if err != nil {
		return nil, err
	}
	s.DebugRegs = raw(dr)
	lapic, err := c.GetLAPIC()
	if err != nil {
		return nil, err
	}
	s.LAPIC = raw(lapic)
	if khz, err := c.GetTSCKHz(); err == nil {
		s.TSCKHz = khz
	}
	list, err := v.mgr.savedMSRs(c)
	if err != nil {
		return nil, err
	}
	msrs := make([]kvm.MSREntry, len(list))
	for i, idx := range list {
		msrs[i].Index = idx
	}
	n, err := c.GetMSRs(msrs)
	if err != nil {
		return nil, err
	}
	if n != len(msrs) {
		return nil, fmt.Errorf("vCPU %d: read %d of %d MSRs (MSR %#x refused)", v.id, n, len(msrs), msrs[n].Index)
	}
	s.MSRs = msrs
	ev, err := c.GetVCPUEvents()
	if err != nil {
		return nil, err
	}
	s.Events = raw(ev)
	if s.CPUID, err = c.GetCPUID2(); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreVCPU loads a saved state into a fresh vCPU, in the order KVM
// needs: CPUID before anything that depends on features, MSRs after the
// LAPIC (TSC deadline), events last (they reference the restored state).
func restoreVCPU(c *kvm.VCPU, s *VCPUState) error {
	if err := c.SetCPUID2(s.CPUID); err != nil {
		return err
	}
	if s.TSCKHz != 0 {
		if cur, err := c.GetTSCKHz(); err == nil && cur != s.TSCKHz {
			if err := c.SetTSCKHz(s.TSCKHz); err != nil {
				return fmt.Errorf("vCPU %d: TSC runs at %d kHz here, the guest expects %d kHz: %w", s.ID, cur, s.TSCKHz, err)
			}
		}
	}
	if err := c.SetMPState(kvm.MPState{State: s.MPState}); err != nil {
		return err
	}
	regs, err := fromRaw[kvm.Regs](s.Regs, "regs")
	if err != nil {
		return err
	}
	if err := c.SetRegs(regs); err != nil {
		return err
	}
	sregs, err := fromRaw[kvm.Sregs](s.Sregs, "sregs")
	if err != nil {
		return err
	}
	if err := c.SetSregs(sregs); err != nil {
		return err
	}
	xs, err := fromRaw[kvm.XSave](s.XSave, "xsave")
	if err != nil {
		return err
	}
	if err := c.SetXSave(xs); err != nil {
		return err
	}
	xcrs, err := fromRaw[kvm.XCRs](s.XCRs, "xcrs")
	if err != nil {
		return err
	}
	if err := c.SetXCRs(xcrs); err != nil {
		return err
	}
	dr, err := fromRaw[kvm.DebugRegs](s.DebugRegs, "debugregs")
	if err != nil {
		return err
	}
	if err := c.SetDebugRegs(dr); err != nil {
		return err
	}
	lapic, err := fromRaw[kvm.LAPICState](s.LAPIC, "lapic")
	if err != nil {
		return err
	}
	if err := c.SetLAPIC(lapic); err != nil {
		return err
	}
	n, err := c.SetMSRs(s.MSRs)
	if err != nil {
		return err
	}
	if n != len(s.MSRs) {
		return fmt.Errorf("vCPU %d: KVM refused MSR %#x", s.ID, s.MSRs[n].Index)
	}
	ev, err := fromRaw[kvm.VCPUEvents](s.Events, "vcpu events")
	if err != nil {
		return err
	}
	ev.Flags = kvm.VCPUEventValidNMIPending | kvm.VCPUEventValidSIPIVector | kvm.VCPUEventValidShadow
	return c.SetVCPUEvents(ev)
}
