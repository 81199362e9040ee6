package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VM is a KVM virtual machine file descriptor.
type VM struct {
	fd  int
	sys *System
}

// FD is the VM's file descriptor, for callers that poll or pass it on.
func (vm *VM) FD() int { return vm.fd }

// Close releases the VM; its vCPUs must be closed first.
func (vm *VM) Close() error { return unix.Close(vm.fd) }

// SetTSSAddr places the three-page TSS region Intel VT needs for real mode.
func (vm *VM) SetTSSAddr(addr uint64) error {
	if _, err := ioctl(vm.fd, ioctlSetTSSAddr, uintptr(addr)); err != nil {
		return fmt.Errorf("KVM_SET_TSS_ADDR: %w", err)
	}
	return nil
}

// SetIdentityMapAddr places the one-page identity map Intel VT needs.
func (vm *VM) SetIdentityMapAddr(addr uint64) error {
	if _, err := ioctlPtr(vm.fd, ioctlSetIdentityMapAddr, unsafe.Pointer(&addr)); err != nil {
		return fmt.Errorf("KVM_SET_IDENTITY_MAP_ADDR: %w", err)
	}
	return nil
}

// CreateIRQChip creates the in-kernel PIC pair, IOAPIC and local APICs.
func (vm *VM) CreateIRQChip() error {
	if _, err := ioctl(vm.fd, ioctlCreateIRQChip, 0); err != nil {
		return fmt.Errorf("KVM_CREATE_IRQCHIP: %w", err)
	}
	return nil
}

// CreatePIT2 creates the in-kernel i8254 timer.
func (vm *VM) CreatePIT2(flags uint32) error {
	cfg := PITConfig{Flags: flags}
	if _, err := ioctlPtr(vm.fd, ioctlCreatePIT2, unsafe.Pointer(&cfg)); err != nil {
		return fmt.Errorf("KVM_CREATE_PIT2: %w", err)
	}
	return nil
}

// SetUserMemoryRegion adds, changes or (with size 0) removes a memory slot.
func (vm *VM) SetUserMemoryRegion(r UserspaceMemoryRegion) error {
	if _, err := ioctlPtr(vm.fd, ioctlSetUserMemoryRegion, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION slot %d [%#x+%#x]: %w", r.Slot, r.GuestPhysAddr, r.MemorySize, err)
	}
	return nil
}

// IRQLine sets the level of an interrupt line on the in-kernel irqchip
// (GSI numbering: 0-15 PIC/IOAPIC, 16-23 IOAPIC).
func (vm *VM) IRQLine(irq uint32, level bool) error {
	l := irqLevel{IRQ: irq}
	if level {
		l.Level = 1
	}
	if _, err := ioctlPtr(vm.fd, ioctlIRQLine, unsafe.Pointer(&l)); err != nil {
		return fmt.Errorf("KVM_IRQ_LINE %d: %w", irq, err)
	}
	return nil
}

// GetIRQChip reads the state of one in-kernel interrupt controller.
func (vm *VM) GetIRQChip(chipID uint32) (*IRQChip, error) {
	c := &IRQChip{ChipID: chipID}
	if _, err := ioctlPtr(vm.fd, ioctlGetIRQChip, unsafe.Pointer(c)); err != nil {
		return nil, fmt.Errorf("KVM_GET_IRQCHIP %d: %w", chipID, err)
	}
	return c, nil
}

// SetIRQChip restores the state of one in-kernel interrupt controller.
func (vm *VM) SetIRQChip(c *IRQChip) error {
	if _, err := ioctlPtr(vm.fd, ioctlSetIRQChip, unsafe.Pointer(c)); err != nil {
		return fmt.Errorf("KVM_SET_IRQCHIP %d: %w", c.ChipID, err)
	}
	return nil
}

// GetPIT2 reads the in-kernel PIT state.
func (vm *VM) GetPIT2() (*PITState2, error) {
	s := &PITState2{}
	if _, err := ioctlPtr(vm.fd, ioctlGetPIT2, unsafe.Pointer(s)); err != nil {
		return nil, fmt.Errorf("KVM_GET_PIT2: %w", err)
	}
	return s, nil
}

// SetPIT2 restores the in-kernel PIT state.
func (vm *VM) SetPIT2(s *PITState2) error {
	if _, err := ioctlPtr(vm.fd, ioctlSetPIT2, unsafe.Pointer(s)); err != nil {
		return fmt.Errorf("KVM_SET_PIT2: %w", err)
	}
	return nil
}

// GetClock reads the kvmclock base.
func (vm *VM) GetClock() (*ClockData, error) {
	c := &ClockData{}
	if _, err := ioctlPtr(vm.fd, ioctlGetClock, unsafe.Pointer(c)); err != nil {
		return nil, fmt.Errorf("KVM_GET_CLOCK: %w", err)
	}
	return c, nil
}

// SetClock sets the kvmclock base.
func (vm *VM) SetClock(c *ClockData) error {
	if _, err := ioctlPtr(vm.fd, ioctlSetClock, unsafe.Pointer(c)); err != nil {
		return fmt.Errorf("KVM_SET_CLOCK: %w", err)
	}
	return nil
}

// IRQFD makes a write to eventfd efd raise GSI gsi. With a resample fd the
// line is level-triggered and resampled on EOI.
func (vm *VM) IRQFD(efd int, gsi uint32, resampleFD int) error {
	f := irqfd{FD: uint32(efd), GSI: gsi}
	if resampleFD >= 0 {
		f.Flags = IRQFDFlagResample
		f.ResampleFD = uint32(resampleFD)
	}
	if _, err := ioctlPtr(vm.fd, ioctlIRQFD, unsafe.Pointer(&f)); err != nil {
		return fmt.Errorf("KVM_IRQFD gsi %d: %w", gsi, err)
	}
	return nil
}

// DeassignIRQFD removes an IRQFD binding.
func (vm *VM) DeassignIRQFD(efd int, gsi uint32) error {
	f := irqfd{FD: uint32(efd), GSI: gsi, Flags: IRQFDFlagDeassign}
	if _, err := ioctlPtr(vm.fd, ioctlIRQFD, unsafe.Pointer(&f)); err != nil {
		return fmt.Errorf("KVM_IRQFD deassign gsi %d: %w", gsi, err)
	}
	return nil
}

// IOEventFD describes an ioeventfd registration: a guest write of Len bytes
// to Addr (port I/O if PIO) signals FD instead of exiting to userspace.
type IOEventFD struct {
	Addr      uint64
	Len       uint32
	FD        int
	PIO       bool
	Datamatch *uint64
}

func (e IOEventFD) raw(deassign bool) ioeventfd {
	r := ioeventfd{Addr: e.Addr, Len: e.Len, FD: int32(e.FD)}
	if e.PIO {
		r.Flags |= IOEventFDFlagPIO
	}
	if e.Datamatch != nil {
		r.Flags |= IOEventFDFlagDatamatch
		r.Datamatch = *e.Datamatch
	}
	if deassign {
		r.Flags |= IOEventFDFlagDeassign
	}
	return r
}

// AssignIOEventFD registers e.
func (vm *VM) AssignIOEventFD(e IOEventFD) error {
	r := e.raw(false)
	if _, err := ioctlPtr(vm.fd, ioctlIOEventFD, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IOEVENTFD %#x/%d: %w", e.Addr, e.Len, err)
	}
	return nil
}

// DeassignIOEventFD removes a registration made by AssignIOEventFD.
func (vm *VM) DeassignIOEventFD(e IOEventFD) error {
	r := e.raw(true)
	if _, err := ioctlPtr(vm.fd, ioctlIOEventFD, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IOEVENTFD deassign %#x/%d: %w", e.Addr, e.Len, err)
	}
	return nil
}

// SetGSIRouting replaces the whole GSI routing table.
func (vm *VM) SetGSIRouting(entries []IRQRoutingEntry) error {
	p, _, es := withEntries[irqRoutingHeader, IRQRoutingEntry](irqRoutingHeader{Nr: uint32(len(entries))}, len(entries))
	copy(es, entries)
	if _, err := ioctlPtr(vm.fd, ioctlSetGSIRouting, p); err != nil {
		return fmt.Errorf("KVM_SET_GSI_ROUTING (%d entries): %w", len(entries), err)
	}
	return nil
}

// SignalMSI injects one MSI.
func (vm *VM) SignalMSI(m MSI) error {
	if _, err := ioctlPtr(vm.fd, ioctlSignalMSI, unsafe.Pointer(&m)); err != nil {
		return fmt.Errorf("KVM_SIGNAL_MSI: %w", err)
	}
	return nil
}

// EnableCap enables a VM capability.
func (vm *VM) EnableCap(c Cap, args ...uint64) error {
	e := enableCap{Cap: uint32(c)}
	copy(e.Args[:], args)
	if _, err := ioctlPtr(vm.fd, ioctlEnableCap, unsafe.Pointer(&e)); err != nil {
		return fmt.Errorf("KVM_ENABLE_CAP(%d): %w", c, err)
	}
	return nil
}

// CheckExtension asks the VM (rather than the system) about a capability;
// some answers, like the number of memory slots, are per VM.
func (vm *VM) CheckExtension(c Cap) (int, error) {
	r, err := ioctl(vm.fd, ioctlCheckExtension, uintptr(c))
	if err != nil {
		return 0, fmt.Errorf("KVM_CHECK_EXTENSION(%d): %w", c, err)
	}
	return int(r), nil
}

// GetDirtyLog fills bitmap (one bit per page of the slot) with the pages
// written since the last call. Without manual protection it also
// write-protects them again.
func (vm *VM) GetDirtyLog(slot uint32, bitmap []uint64) error {
	if len(bitmap) == 0 {
		return nil
	}
	d := dirtyLog{Slot: slot, Bitmap: uint64(uintptr(unsafe.Pointer(&bitmap[0])))}
	_, err := ioctlPtr(vm.fd, ioctlGetDirtyLog, unsafe.Pointer(&d))
	keepAlive(bitmap)
	if err != nil {
		return fmt.Errorf("KVM_GET_DIRTY_LOG slot %d: %w", slot, err)
	}
	return nil
}

// ClearDirtyLog re-protects the pages set in bitmap, covering pages
// [first, first+num) of the slot (manual-protect mode). first must be a
// multiple of 64.
func (vm *VM) ClearDirtyLog(slot uint32, first uint64, num uint32, bitmap []uint64) error {
	if len(bitmap) == 0 {
		return nil
	}
	d := clearDirtyLog{Slot: slot, FirstPage: first, NumPages: num, Bitmap: uint64(uintptr(unsafe.Pointer(&bitmap[0])))}
	_, err := ioctlPtr(vm.fd, ioctlClearDirtyLog, unsafe.Pointer(&d))
	keepAlive(bitmap)
	if err != nil {
		return fmt.Errorf("KVM_CLEAR_DIRTY_LOG slot %d: %w", slot, err)
	}
	return nil
}

// CreateVCPU creates vCPU id and maps its kvm_run page.
func (vm *VM) CreateVCPU(id int) (*VCPU, error) {
	fd, err := ioctl(vm.fd, ioctlCreateVCPU, uintptr(id))
	if err != nil {
		return nil, fmt.Errorf("KVM_CREATE_VCPU %d: %w", id, err)
	}
	run, err := unix.Mmap(int(fd), 0, vm.sys.mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(int(fd))
		return nil, fmt.Errorf("mmap kvm_run of vCPU %d: %w", id, err)
	}
	return &VCPU{fd: int(fd), ID: id, run: run}, nil
}
