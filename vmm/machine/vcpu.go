package machine

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/assist"
	"github.com/kubevmm/kubevmm/vmm/kvm"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

type request int

const (
	reqNone request = iota
	reqPause
	reqStop
)

// vcpu is one vCPU and the OS thread that runs it.
type vcpu struct {
	m   *Machine
	c   *kvm.VCPU
	id  int
	tid int

	mu      sync.Mutex
	cond    *sync.Cond
	req     request
	paused  bool // parked in checkpoint by a pause request
	exited  bool // the thread left its loop (or never started and was stopped)
	started bool
}

// setupVCPUs creates the vCPUs with this host's CPUID policy; when
// booting, the BSP is put at the kernel's entry (a restore overwrites all
// of it with the saved state).
func (m *Machine) setupVCPUs(booting bool) error {
	supported, err := m.sys.SupportedCPUID()
	if err != nil {
		return err
	}
	policy := x86.CPUIDPolicy{NumCPUs: m.cfg.CPUs, EmulatedKernelMode: m.Nested}
	for i := 0; i < m.cfg.CPUs; i++ {
		c, err := m.vm.CreateVCPU(i)
		if err != nil {
			return err
		}
		v := &vcpu{m: m, c: c, id: i}
		v.cond = sync.NewCond(&v.mu)
		m.vcpus = append(m.vcpus, v)
		cpuid := policy.ForVCPU(supported, i)
		if err := c.SetCPUID2(cpuid); err != nil {
			return err
		}
		if i == 0 {
			m.Assist = assist.New(m.Mem, x86.XSaveLayoutOf(cpuid))
		}
		if err := x86.SetupMSRs(c); err != nil {
			return err
		}
		if err := x86.SetupFPU(c); err != nil {
			return err
		}
		if err := x86.SetupLAPIC(c); err != nil {
			return err
		}
		// Application processors wait in the in-kernel LAPIC for the
		// guest's INIT/SIPI; only the BSP starts at the kernel entry.
		if i == 0 && booting {
			if err := x86.SetupLongMode(c, m.Loaded.Entry); err != nil {
				return err
			}
		}
	}
	return nil
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

func (v *vcpu) loop() {
	defer v.m.running.Done()
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
		if v.m.entered.Load() == nil {
			now := time.Now()
			if v.m.entered.CompareAndSwap(nil, &now) {
				close(v.m.enteredCh)
			}
		}
		err := v.c.Run()
		if errors.Is(err, kvm.ErrInterrupted) {
			v.m.Metrics.ExitsIntr.Add(1)
			if p := v.m.profiler.Load(); p != nil {
				if r, err := v.c.GetRegs(); err == nil {
					p.record(r.RIP)
				}
			}
			continue
		}
		if err != nil {
			v.m.stop(Exit{Reason: ExitError, VCPU: v.id, Err: err})
			return
		}
		if e, done := v.handleExit(); done {
			v.m.stop(e)
			return
		}
	}
}

// handleExit handles one exit; done means the VM ends with e.
func (v *vcpu) handleExit() (e Exit, done bool) {
	m := v.m
	reason := v.c.ExitReason()
	switch reason {
	case kvm.ExitIO:
		m.Metrics.ExitsIO.Add(1)
		io, err := v.c.IO()
		if err != nil {
			return Exit{Reason: ExitError, VCPU: v.id, Err: err}, true
		}
		for i := 0; i < io.Count; i++ {
			d := io.Data[i*io.Size : (i+1)*io.Size]
			if io.Out {
				if !m.pio.Write(uint64(io.Port), d) {
					m.Metrics.UnknownPIO.Add(1)
				}
			} else if !m.pio.Read(uint64(io.Port), d) {
				m.Metrics.UnknownPIO.Add(1)
				for j := range d {
					d[j] = 0xff // nothing there: the bus floats high
				}
			}
		}
	case kvm.ExitMMIO:
		m.Metrics.ExitsMMIO.Add(1)
		mm := v.c.MMIO()
		if mm.IsWrite {
			if !m.mmio.Write(mm.Addr, mm.Data) {
				m.Metrics.UnknownMMIO.Add(1)
			}
		} else if !m.mmio.Read(mm.Addr, mm.Data) {
			m.Metrics.UnknownMMIO.Add(1)
			for j := range mm.Data {
				mm.Data[j] = 0xff
			}
		}
	case kvm.ExitIntr:
		m.Metrics.ExitsIntr.Add(1)
	case kvm.ExitHLT:
		// only without an in-kernel LAPIC; keep running
		m.Metrics.ExitsOther.Add(1)
	case kvm.ExitShutdown:
		return Exit{Reason: ExitTripleFault, VCPU: v.id, Err: v.describe("triple fault")}, true
	case kvm.ExitSystemEvent:
		switch v.c.SystemEvent() {
		case kvm.SystemEventShutdown:
			return Exit{Reason: ExitShutdown, VCPU: v.id}, true
		case kvm.SystemEventReset:
			return Exit{Reason: ExitReset, VCPU: v.id}, true
		default:
			return Exit{Reason: ExitPanic, VCPU: v.id}, true
		}
	case kvm.ExitInternalError:
		ie := v.c.Internal()
		if ie.Suberror == kvm.InternalErrorEmulation {
			if _, err := m.Assist.Complete(v.c, v.id, ie); err == nil {
				return Exit{}, false
			} else {
				return Exit{Reason: ExitError, VCPU: v.id, Err: err}, true
			}
		}
		return Exit{Reason: ExitError, VCPU: v.id, Err: v.describe(fmt.Sprintf("KVM internal error, suberror %d, data %#x", ie.Suberror, ie.Data))}, true
	case kvm.ExitFailEntry:
		return Exit{Reason: ExitError, VCPU: v.id, Err: v.describe(fmt.Sprintf("VM entry failed, hardware reason %#x", v.c.FailEntry()))}, true
	default:
		m.Metrics.ExitsOther.Add(1)
		return Exit{Reason: ExitError, VCPU: v.id, Err: v.describe(fmt.Sprintf("unexpected exit %v", reason))}, true
	}
	return Exit{}, false
}

// describe adds the vCPU's RIP to an error about the guest.
func (v *vcpu) describe(what string) error {
	if r, err := v.c.GetRegs(); err == nil {
		return fmt.Errorf("%s at RIP %#x", what, r.RIP)
	}
	return errors.New(what)
}
