package machine

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/procmem"
)

// memoryManager owns guest RAM: its mapping (vmm/memory), the KVM memory
// slots it is registered in, and dirty-page logging for live migration
// (KVM's log with manual protection, and the memory package's tracking
// of the VMM's own writes). Snapshots and migrations read RAM through
// Guest; its regions are the ones they store or send.
type memoryManager struct {
	vm            *kvm.VM
	guest         *memory.Guest
	manualProtect bool // KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 enabled

	dirtyMu   sync.Mutex // guards dirtyBufs and the slots' flags
	dirtyBufs [][]uint64 // KVM_GET_DIRTY_LOG's bitmaps, one per region, while logging
}

// freshRAM asks build for new, empty RAM without loading a kernel (an
// incoming migration fills it).
var freshRAM = &memory.Guest{}

// setup gives the VM its RAM: from if given (a snapshot's mapping), else
// new, empty RAM for size bytes, and registers it with KVM.
func (mm *memoryManager) setup(size uint64, from *memory.Guest) error {
	layout, err := x86.RAMLayout(size)
	if err != nil {
		return configErr("%v", err)
	}
	if from != nil && from != freshRAM {
		if err := sameLayout(from, layout); err != nil {
			return err
		}
		mm.guest = from
	} else if mm.guest, err = memory.New(layout); err != nil {
		return err
	}
	return mm.setSlotFlags(0)
}

func sameLayout(mem *memory.Guest, layout []memory.Layout) error {
	rs := mem.Regions()
	if len(rs) != len(layout) {
		return fmt.Errorf("saved RAM has %d regions, the VM needs %d", len(rs), len(layout))
	}
	for i, r := range rs {
		if r.GPA != layout[i].GPA || r.Size != layout[i].Size {
			return fmt.Errorf("saved RAM region %d is [%#x+%#x], the VM needs [%#x+%#x]", i, r.GPA, r.Size, layout[i].GPA, layout[i].Size)
		}
	}
	return nil
}

// enableManualProtect turns on KVM's manual dirty-log protection where
// the host has it: reading the dirty log then doesn't write-protect every
// page at once; migration re-protects just the pages it sends.
func (mm *memoryManager) enableManualProtect() {
	if n, _ := mm.vm.CheckExtension(kvm.CapManualDirtyLogProtect2); n != 0 {
		if err := mm.vm.EnableCap(kvm.CapManualDirtyLogProtect2, kvm.DirtyLogManualProtectEnable); err == nil {
			mm.manualProtect = true
		}
	}
}

// Guest is the guest's RAM (nil once closed).
func (mm *memoryManager) Guest() *memory.Guest { return mm.guest }

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// setSlotFlags (re-)registers every memory slot with flags.
func (mm *memoryManager) setSlotFlags(flags uint32) error {
	for _, r := range mm.guest.Regions() {
		err := mm.vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{
			Slot: r.Slot, Flags: flags, GuestPhysAddr: r.GPA, MemorySize: r.Size,
			UserspaceAddr: uint64(uintptrOf(r.Data)),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// StartDirtyLog turns on KVM's dirty log for every slot and the memory
// package's tracking of VMM writes.
func (mm *memoryManager) StartDirtyLog() error {
	mm.dirtyMu.Lock()
	defer mm.dirtyMu.Unlock()
	mm.guest.StartDirtyTracking()
	if err := mm.setSlotFlags(kvm.MemLogDirtyPages); err != nil {
		mm.guest.StopDirtyTracking()
		return err
	}
	mm.dirtyBufs = make([][]uint64, len(mm.guest.Regions()))
	for i, r := range mm.guest.Regions() {
		mm.dirtyBufs[i] = make([]uint64, (r.Size/memory.PageSize+63)/64)
	}
	return nil
}

// SyncDirty collects the pages written since the last call. With manual
// protection KVM keeps the pages writable until KVM_CLEAR_DIRTY_LOG, which
// is issued here for exactly the pages reported, so a write racing with
// the sync is never lost: it lands in the next one.
func (mm *memoryManager) SyncDirty(bitmaps [][]uint64) error {
	mm.dirtyMu.Lock()
	defer mm.dirtyMu.Unlock()
	for i, r := range mm.guest.Regions() {
		buf := mm.dirtyBufs[i]
		clear(buf)
		if err := mm.vm.GetDirtyLog(r.Slot, buf); err != nil {
			return err
		}
		if mm.manualProtect {
			if err := mm.vm.ClearDirtyLog(r.Slot, 0, uint32(r.Size/memory.PageSize), buf); err != nil {
				return err
			}
		}
		for w := range buf {
			bitmaps[i][w] |= buf[w]
		}
		r.TakeDirty(bitmaps[i])
	}
	return nil
}

// StopDirtyLog ends dirty tracking.
func (mm *memoryManager) StopDirtyLog() error {
	mm.dirtyMu.Lock()
	defer mm.dirtyMu.Unlock()
	mm.guest.StopDirtyTracking()
	mm.dirtyBufs = nil
	return mm.setSlotFlags(0)
}

// clear empties RAM for a reset: the host gets the pages back.
func (mm *memoryManager) clear() error { return mm.guest.Clear() }

// ranges is where guest RAM is mapped in this process (for procmem.Self).
func (mm *memoryManager) ranges() []procmem.Range {
	if mm.guest == nil {
		return nil
	}
	var out []procmem.Range
	for _, r := range mm.guest.Regions() {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(r.Data)))
		out = append(out, procmem.Range{Start: p, End: p + uintptr(len(r.Data))})
	}
	return out
}

// close unmaps guest RAM; nothing may touch it any more.
func (mm *memoryManager) close() {
	if mm.guest != nil {
		mm.guest.Close()
		mm.guest = nil
	}
}
