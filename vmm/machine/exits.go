package machine

import (
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// The Machine's side of the vCPU threads (vcpuExits): what an exit means.

var _ vcpuExits = (*Machine)(nil)

// interrupted counts a KVM_RUN a signal ended and, while profiling, takes
// the vCPU's RIP as a sample.
func (m *Machine) interrupted(v *vcpu) {
	m.Metrics.ExitsIntr.Add(1)
	if p := m.profiler.Load(); p != nil {
		if r, err := v.c.GetRegs(); err == nil {
			p.record(r.RIP)
		}
	}
}

// handleExit handles one exit; done means the VM ends with e.
func (m *Machine) handleExit(v *vcpu) (e Exit, done bool) {
	reason := v.c.ExitReason()
	switch reason {
	case kvm.ExitIO:
		m.Metrics.ExitsIO.Add(1)
		pio := m.devices.ioBus()
		io, err := v.c.IO()
		if err != nil {
			return Exit{Reason: ExitError, VCPU: v.id, Err: err}, true
		}
		for i := 0; i < io.Count; i++ {
			d := io.Data[i*io.Size : (i+1)*io.Size]
			if io.Out {
				if !pio.Write(uint64(io.Port), d) {
					m.Metrics.UnknownPIO.Add(1)
				}
			} else if !pio.Read(uint64(io.Port), d) {
				m.Metrics.UnknownPIO.Add(1)
				for j := range d {
					d[j] = 0xff // nothing there: the bus floats high
				}
			}
		}
	case kvm.ExitMMIO:
		m.Metrics.ExitsMMIO.Add(1)
		mmio := m.devices.mmioBus()
		mm := v.c.MMIO()
		if mm.IsWrite {
			if !mmio.Write(mm.Addr, mm.Data) {
				m.Metrics.UnknownMMIO.Add(1)
			}
		} else if !mmio.Read(mm.Addr, mm.Data) {
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
