package machine

// A Machine is three managers and what ties them together, as Cloud
// Hypervisor's Vm is its CpuManager, MemoryManager and DeviceManager:
//
//   - cpuManager (cpu_manager.go, vcpu.go): the vCPUs and their threads,
//     run/pause/resume, auto-converge throttling, the vCPUs' state and the
//     list of MSRs it holds;
//   - memoryManager (memory_manager.go): guest RAM, its KVM memory slots
//     and dirty-page logging (the bitmaps, manual protection);
//   - deviceManager (device_manager.go, virtio.go, disks.go, volumes.go):
//     the port I/O and MMIO buses, the legacy devices (COM1, i8042, RTC,
//     ACPI sleep registers, the power button), the virtio devices, their
//     disks, the SCSI hot-plug controller and the devices' state.
//
// The Machine (machine.go) keeps the configuration, the KVM system and VM
// handles with the VM-wide state (irqchip, PIT, kvmclock), boot, the
// handling of vCPU exits and how the VM ends, reset, the build phases,
// the profiler and the exit metrics; it sequences the managers for a
// snapshot, a migration, a restore and a reset.
//
// Each manager keeps its own locks with the data they guard; none holds
// one while calling another manager. Where locks nest, the order is:
//
//	Machine.exitMu -> vcpu.mu              (stop and Reset kick or re-arm vCPUs)
//	cpuManager.throttleMu -> vcpu.mu       (the throttle pauses vCPUs)
//	deviceManager.mu -> event.Loop's lock  (Pause holds the device workers)
//	a legacy device's lock -> Machine.exitMu (COM1's interrupt failing, the
//	                                        i8042 reset line, ACPI S5 end the VM)
//
// and the vCPU threads call into the Machine (exits, stop) and through it
// into the device manager's buses holding no lock of the CPU manager's.

// Pausable is a part of the VM that can be held still and let go again
// with its state intact: the CPU manager parks its vCPUs, the device
// manager holds its devices' workers.
type Pausable interface {
	Pause() error
	Resume()
}

// Snapshottable is a part of the VM whose state is a section S of State:
// Save returns it (the part held still, see Pausable), Restore loads it
// into the part as built from the same SavedConfig.
type Snapshottable[S any] interface {
	Save() (S, error)
	Restore(S) error
}

// Migratable is a part of the VM a live migration follows while the guest
// runs: guest RAM, whose dirty pages are sent again (vmm/migration's
// Source has these methods).
type Migratable interface {
	StartDirtyLog() error
	SyncDirty(bitmaps [][]uint64) error
	StopDirtyLog() error
}

// Guest RAM is no Snapshottable: its state is the RAM itself, which a
// snapshot writes to its memory file and a migration sends page by page
// (memoryManager.Guest); a restore maps it before the machine is built.

var (
	_ Pausable                    = (*cpuManager)(nil)
	_ Snapshottable[[]*VCPUState] = (*cpuManager)(nil)
	_ Migratable                  = (*memoryManager)(nil)
	_ Pausable                    = (*deviceManager)(nil)
	_ Snapshottable[DeviceState]  = (*deviceManager)(nil)
	_ Pausable                    = (*Machine)(nil) // its vCPUs
	_ Migratable                  = (*Machine)(nil) // its RAM
)
