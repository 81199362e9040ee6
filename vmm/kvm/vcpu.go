package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

func keepAlive(x any) { runtime.KeepAlive(x) }

// VCPU is one virtual CPU: its fd and its mapped kvm_run page. All methods
// except SetImmediateExit must be called from the thread that runs it.
type VCPU struct {
	fd  int
	ID  int
	run []byte
}

// Close unmaps kvm_run and closes the vCPU.
func (c *VCPU) Close() error {
	if c.run != nil {
		unix.Munmap(c.run)
		c.run = nil
	}
	return unix.Close(c.fd)
}

// ErrInterrupted is returned by Run when a signal (or immediate_exit)
// interrupted KVM_RUN before or during guest execution.
var ErrInterrupted = errors.New("KVM_RUN interrupted")

// Run enters the guest until the next exit that needs userspace.
func (c *VCPU) Run() error {
	_, err := ioctl(c.fd, ioctlRun, 0)
	if err != nil {
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			return ErrInterrupted
		}
		return fmt.Errorf("KVM_RUN vCPU %d: %w", c.ID, err)
	}
	return nil
}

// SetImmediateExit sets kvm_run.immediate_exit: while set, KVM_RUN returns
// EINTR at once. Safe from any thread; combined with a signal to the vCPU
// thread it kicks a running vCPU out without a race.
func (c *VCPU) SetImmediateExit(on bool) {
	var v uint32
	p := (*uint32)(unsafe.Pointer(&c.run[0])) // bytes 0..3: request_interrupt_window, immediate_exit, padding
	for {
		old := atomic.LoadUint32(p)
		if on {
			v = old | 1<<(8*runImmediateExit)
		} else {
			v = old &^ (1 << (8 * runImmediateExit))
		}
		if atomic.CompareAndSwapUint32(p, old, v) {
			return
		}
	}
}

// ExitReason is the reason of the last exit.
func (c *VCPU) ExitReason() ExitReason {
	return ExitReason(binary.LittleEndian.Uint32(c.run[runExitReason:]))
}

// IOExit is the KVM_EXIT_IO payload. Data aliases kvm_run: Size*Count bytes
// the guest wrote (Out) or that userspace must fill (In).
type IOExit struct {
	Out   bool
	Size  int
	Port  uint16
	Count int
	Data  []byte
}

// IO decodes a KVM_EXIT_IO. The kernel-provided offset and length are
// bounds-checked against the kvm_run mapping.
func (c *VCPU) IO() (IOExit, error) {
	u := c.run[runExitUnion:]
	e := IOExit{
		Out:   u[0] == ExitIOOut,
		Size:  int(u[1]),
		Port:  binary.LittleEndian.Uint16(u[2:]),
		Count: int(binary.LittleEndian.Uint32(u[4:])),
	}
	off := binary.LittleEndian.Uint64(u[8:])
	n := uint64(e.Size) * uint64(e.Count)
	if off > uint64(len(c.run)) || n > uint64(len(c.run))-off {
		return e, fmt.Errorf("KVM_EXIT_IO data [%d+%d] outside kvm_run", off, n)
	}
	e.Data = c.run[off : off+n]
	return e, nil
}

// MMIOExit is the KVM_EXIT_MMIO payload; Data aliases kvm_run.
type MMIOExit struct {
	Addr    uint64
	Data    []byte
	IsWrite bool
}

// MMIO decodes a KVM_EXIT_MMIO.
func (c *VCPU) MMIO() MMIOExit {
	u := c.run[runExitUnion:]
	n := binary.LittleEndian.Uint32(u[16:])
	if n > 8 {
		n = 8
	}
	return MMIOExit{Addr: binary.LittleEndian.Uint64(u[0:]), Data: u[8 : 8+n], IsWrite: u[20] != 0}
}

// InternalError is the KVM_EXIT_INTERNAL_ERROR payload.
type InternalError struct {
	Suberror uint32
	Data     []uint64
}

// Internal decodes a KVM_EXIT_INTERNAL_ERROR.
func (c *VCPU) Internal() InternalError {
	u := c.run[runExitUnion:]
	e := InternalError{Suberror: binary.LittleEndian.Uint32(u[0:])}
	n := binary.LittleEndian.Uint32(u[4:])
	if n > 16 {
		n = 16
	}
	for i := uint32(0); i < n; i++ {
		e.Data = append(e.Data, binary.LittleEndian.Uint64(u[8+8*i:]))
	}
	return e
}

// SystemEvent decodes a KVM_EXIT_SYSTEM_EVENT: its type (SystemEvent*).
func (c *VCPU) SystemEvent() uint32 {
	return binary.LittleEndian.Uint32(c.run[runExitUnion:])
}

// FailEntry decodes KVM_EXIT_FAIL_ENTRY: the hardware failure reason.
func (c *VCPU) FailEntry() uint64 {
	return binary.LittleEndian.Uint64(c.run[runExitUnion:])
}

func (c *VCPU) get(req uintptr, name string, p unsafe.Pointer) error {
	if _, err := ioctlPtr(c.fd, req, p); err != nil {
		return fmt.Errorf("%s vCPU %d: %w", name, c.ID, err)
	}
	return nil
}

// GetRegs reads the general-purpose registers.
func (c *VCPU) GetRegs() (*Regs, error) {
	r := &Regs{}
	return r, c.get(ioctlGetRegs, "KVM_GET_REGS", unsafe.Pointer(r))
}

// SetRegs writes the general-purpose registers.
func (c *VCPU) SetRegs(r *Regs) error { return c.get(ioctlSetRegs, "KVM_SET_REGS", unsafe.Pointer(r)) }

// GetSregs reads segment, control and descriptor-table registers.
func (c *VCPU) GetSregs() (*Sregs, error) {
	s := &Sregs{}
	return s, c.get(ioctlGetSregs, "KVM_GET_SREGS", unsafe.Pointer(s))
}

// SetSregs writes segment, control and descriptor-table registers.
func (c *VCPU) SetSregs(s *Sregs) error {
	return c.get(ioctlSetSregs, "KVM_SET_SREGS", unsafe.Pointer(s))
}

// GetFPU reads the x87/SSE state.
func (c *VCPU) GetFPU() (*FPU, error) {
	f := &FPU{}
	return f, c.get(ioctlGetFPU, "KVM_GET_FPU", unsafe.Pointer(f))
}

// SetFPU writes the x87/SSE state.
func (c *VCPU) SetFPU(f *FPU) error { return c.get(ioctlSetFPU, "KVM_SET_FPU", unsafe.Pointer(f)) }

// GetLAPIC reads the local APIC register page.
func (c *VCPU) GetLAPIC() (*LAPICState, error) {
	l := &LAPICState{}
	return l, c.get(ioctlGetLAPIC, "KVM_GET_LAPIC", unsafe.Pointer(l))
}

// SetLAPIC writes the local APIC register page.
func (c *VCPU) SetLAPIC(l *LAPICState) error {
	return c.get(ioctlSetLAPIC, "KVM_SET_LAPIC", unsafe.Pointer(l))
}

// GetVCPUEvents reads pending exceptions, interrupts, NMIs and SIPI state.
func (c *VCPU) GetVCPUEvents() (*VCPUEvents, error) {
	e := &VCPUEvents{}
	return e, c.get(ioctlGetVCPUEvents, "KVM_GET_VCPU_EVENTS", unsafe.Pointer(e))
}

// SetVCPUEvents writes pending exceptions, interrupts, NMIs and SIPI state.
func (c *VCPU) SetVCPUEvents(e *VCPUEvents) error {
	return c.get(ioctlSetVCPUEvents, "KVM_SET_VCPU_EVENTS", unsafe.Pointer(e))
}

// GetMPState reads the multiprocessing state (runnable, halted, waiting for SIPI...).
func (c *VCPU) GetMPState() (MPState, error) {
	var s MPState
	return s, c.get(ioctlGetMPState, "KVM_GET_MP_STATE", unsafe.Pointer(&s))
}

// SetMPState writes the multiprocessing state.
func (c *VCPU) SetMPState(s MPState) error {
	return c.get(ioctlSetMPState, "KVM_SET_MP_STATE", unsafe.Pointer(&s))
}

// GetDebugRegs reads DR0-3, DR6, DR7.
func (c *VCPU) GetDebugRegs() (*DebugRegs, error) {
	d := &DebugRegs{}
	return d, c.get(ioctlGetDebugRegs, "KVM_GET_DEBUGREGS", unsafe.Pointer(d))
}

// SetDebugRegs writes DR0-3, DR6, DR7.
func (c *VCPU) SetDebugRegs(d *DebugRegs) error {
	return c.get(ioctlSetDebugRegs, "KVM_SET_DEBUGREGS", unsafe.Pointer(d))
}

// GetXSave reads the XSAVE area (standard format).
func (c *VCPU) GetXSave() (*XSave, error) {
	x := &XSave{}
	return x, c.get(ioctlGetXSave, "KVM_GET_XSAVE", unsafe.Pointer(x))
}

// SetXSave writes the XSAVE area.
func (c *VCPU) SetXSave(x *XSave) error {
	return c.get(ioctlSetXSave, "KVM_SET_XSAVE", unsafe.Pointer(x))
}

// GetXCRs reads the extended control registers (XCR0).
func (c *VCPU) GetXCRs() (*XCRs, error) {
	x := &XCRs{}
	return x, c.get(ioctlGetXCRs, "KVM_GET_XCRS", unsafe.Pointer(x))
}

// SetXCRs writes the extended control registers.
func (c *VCPU) SetXCRs(x *XCRs) error {
	return c.get(ioctlSetXCRs, "KVM_SET_XCRS", unsafe.Pointer(x))
}

// NMI injects a non-maskable interrupt.
func (c *VCPU) NMI() error {
	if _, err := ioctl(c.fd, ioctlNMI, 0); err != nil {
		return fmt.Errorf("KVM_NMI vCPU %d: %w", c.ID, err)
	}
	return nil
}

// KVMClockCtrl tells the guest's kvmclock that the vCPU was paused, so its
// soft-lockup watchdog does not fire after a long pause or a migration.
func (c *VCPU) KVMClockCtrl() error {
	if _, err := ioctl(c.fd, ioctlKVMClockCtrl, 0); err != nil {
		return fmt.Errorf("KVM_KVMCLOCK_CTRL vCPU %d: %w", c.ID, err)
	}
	return nil
}

// GetTSCKHz reads the vCPU's TSC frequency.
func (c *VCPU) GetTSCKHz() (uint32, error) {
	r, err := ioctl(c.fd, ioctlGetTSCKHz, 0)
	if err != nil {
		return 0, fmt.Errorf("KVM_GET_TSC_KHZ vCPU %d: %w", c.ID, err)
	}
	return uint32(r), nil
}

// SetTSCKHz sets the vCPU's TSC frequency (TSC scaling must be available).
func (c *VCPU) SetTSCKHz(khz uint32) error {
	if _, err := ioctl(c.fd, ioctlSetTSCKHz, uintptr(khz)); err != nil {
		return fmt.Errorf("KVM_SET_TSC_KHZ vCPU %d: %w", c.ID, err)
	}
	return nil
}

// Translate asks KVM to translate a guest linear address.
func (c *VCPU) Translate(linear uint64) (*Translation, error) {
	t := &Translation{LinearAddress: linear}
	return t, c.get(ioctlTranslate, "KVM_TRANSLATE", unsafe.Pointer(t))
}

// SetCPUID2 sets the CPUID leaves the guest sees.
func (c *VCPU) SetCPUID2(entries []CPUIDEntry) error {
	p, _, es := withEntries[cpuid2Header, CPUIDEntry](cpuid2Header{NEnt: uint32(len(entries))}, len(entries))
	copy(es, entries)
	return c.get(ioctlSetCPUID2, "KVM_SET_CPUID2", p)
}

// GetCPUID2 reads the CPUID leaves set for this vCPU.
func (c *VCPU) GetCPUID2() ([]CPUIDEntry, error) {
	const n = 256
	p, h, es := withEntries[cpuid2Header, CPUIDEntry](cpuid2Header{NEnt: n}, n)
	if err := c.get(ioctlGetCPUID2, "KVM_GET_CPUID2", p); err != nil {
		return nil, err
	}
	return append([]CPUIDEntry(nil), es[:h.NEnt]...), nil
}

// GetMSRs reads the MSRs named by entries[i].Index into entries[i].Data.
// KVM stops at the first MSR it can't read: the count read is returned.
func (c *VCPU) GetMSRs(entries []MSREntry) (int, error) {
	p, _, es := withEntries[msrsHeader, MSREntry](msrsHeader{NMSRs: uint32(len(entries))}, len(entries))
	copy(es, entries)
	n, err := ioctlPtr(c.fd, ioctlGetMSRs, p)
	if err != nil {
		return 0, fmt.Errorf("KVM_GET_MSRS vCPU %d: %w", c.ID, err)
	}
	copy(entries, es)
	return int(n), nil
}

// SetMSRs writes MSRs; the count written is returned (KVM stops at the
// first it refuses).
func (c *VCPU) SetMSRs(entries []MSREntry) (int, error) {
	p, _, es := withEntries[msrsHeader, MSREntry](msrsHeader{NMSRs: uint32(len(entries))}, len(entries))
	copy(es, entries)
	n, err := ioctlPtr(c.fd, ioctlSetMSRs, p)
	if err != nil {
		return 0, fmt.Errorf("KVM_SET_MSRS vCPU %d: %w", c.ID, err)
	}
	return int(n), nil
}

// GetMSR reads one MSR.
func (c *VCPU) GetMSR(index uint32) (uint64, error) {
	e := []MSREntry{{Index: index}}
	n, err := c.GetMSRs(e)
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("KVM_GET_MSRS vCPU %d: MSR %#x not readable", c.ID, index)
	}
	return e[0].Data, nil
}

// SetMSR writes one MSR.
func (c *VCPU) SetMSR(index uint32, v uint64) error {
	n, err := c.SetMSRs([]MSREntry{{Index: index, Data: v}})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("KVM_SET_MSRS vCPU %d: MSR %#x refused", c.ID, index)
	}
	return nil
}
