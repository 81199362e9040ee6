package machine

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/devices/i8042"
	"github.com/kubevmm/kubevmm/vmm/devices/rtc"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
)

// The VM's state as snapshots store it and migrations send it (a
// snapshot's state.json, a migration's header and state): a format, which
// testdata/compat holds an example of, written before the managers split
// (compat_test.go).

// StateVersion is the version of State; each device's own state carries
// its own version too, checked by the device. Version 2: each saved disk
// records its image's identity.
const StateVersion = 2

// SavedConfig is the part of Config that describes the VM's hardware: what
// a snapshot or a migration target needs to rebuild the same machine.
type SavedConfig struct {
	CPUs        int          `json:"cpus"`
	MemoryBytes uint64       `json:"memory_bytes"`
	Cmdline     string       `json:"cmdline"` // as the guest booted with it
	Nested      bool         `json:"nested_profile"`
	Disks       []savedDisk  `json:"disks,omitempty"`
	NICs        []savedNIC   `json:"nics,omitempty"`
	RNG         bool         `json:"rng,omitempty"`
	Vsock       *VsockConfig `json:"vsock,omitempty"`
	// SCSI: the hot-plug controller; its volumes are in its device state.
	SCSI bool `json:"scsi,omitempty"`
}

// savedDisk is a disk and what the guest saw of its image: a migration
// target builds the device from the size before it may open the image,
// and a restore or a target refuses an image that doesn't match.
type savedDisk struct {
	DiskConfig
	Image block.Identity `json:"image"`
}

type savedNIC struct {
	Tap    string `json:"tap"`
	MAC    string `json:"mac"`
	Queues int    `json:"queues,omitempty"`
	// LinkDown is kept so that a migrated or restored guest keeps
	// seeing the link as it was.
	LinkDown bool `json:"linkDown,omitempty"`
}

// State is a VM's complete state apart from guest RAM: the machine's
// (its configuration, the VM-wide KVM state), the CPU manager's (VCPUs)
// and the device manager's (DeviceState, whose keys are State's own: the
// JSON is the same as before the managers had a part each).
type State struct {
	Version int          `json:"version"`
	Config  SavedConfig  `json:"config"`
	VM      *VMState     `json:"vm"`
	VCPUs   []*VCPUState `json:"vcpus"`
	DeviceState
}

// DeviceState is the devices' part of State: the legacy devices' and each
// virtio device's.
type DeviceState struct {
	Serial serial.State  `json:"serial"`
	I8042  i8042.State   `json:"i8042"`
	RTC    rtc.State     `json:"rtc"`
	Virtio []VirtioState `json:"virtio,omitempty"`
}

// VirtioState is one virtio device: its transport and its own state.
type VirtioState struct {
	Name      string          `json:"name"`
	Transport mmio.State      `json:"transport"`
	Device    json.RawMessage `json:"device"`
}

// VCPUState is everything KVM keeps for one vCPU. Binary KVM structs are
// kept as their exact kernel ABI bytes (see vmm/kvm), so a state written by
// one VMM build restores in another as long as the kernel ABI is the same.
type VCPUState struct {
	ID        int              `json:"id"`
	Regs      []byte           `json:"regs"`
	Sregs     []byte           `json:"sregs"`
	XSave     []byte           `json:"xsave"`
	XCRs      []byte           `json:"xcrs"`
	LAPIC     []byte           `json:"lapic"`
	Events    []byte           `json:"events"`
	MPState   uint32           `json:"mp_state"`
	DebugRegs []byte           `json:"debug_regs"`
	MSRs      []kvm.MSREntry   `json:"msrs"`
	CPUID     []kvm.CPUIDEntry `json:"cpuid"`
	TSCKHz    uint32           `json:"tsc_khz,omitempty"`
}

// VMState is the in-kernel irqchip, PIT and kvmclock.
type VMState struct {
	PICMaster []byte `json:"pic_master"`
	PICSlave  []byte `json:"pic_slave"`
	IOAPIC    []byte `json:"ioapic"`
	PIT       []byte `json:"pit"`
	Clock     uint64 `json:"clock_ns"`
}

func raw[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

func fromRaw[T any](b []byte, name string) (*T, error) {
	var v T
	if len(b) != int(unsafe.Sizeof(v)) {
		return nil, fmt.Errorf("%s state is %d bytes, this kernel ABI needs %d", name, len(b), unsafe.Sizeof(v))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), len(b)), b)
	return &v, nil
}
