// Package virtio is the contract between a virtio transport and the
// devices behind it (virtio 1.2, "modern" only): device types, feature and
// status bits, and the Device and Interrupt interfaces.
//
// The pieces:
//
//   - virtio/queue: the one split-ring virtqueue every device uses. All of
//     its inputs come from the guest and are bounds-checked against guest
//     RAM; walks are bounded, so a hostile ring fails a request (or, if the
//     ring itself is garbage, marks the device DEVICE_NEEDS_RESET).
//   - virtio/mmio: the virtio-mmio v2 transport. Kicks arrive on KVM
//     ioeventfds (one per queue, datamatch = queue index), interrupts leave
//     through a KVM irqfd; the register file and status machine are here.
//   - virtio/event: eventfds and the epoll loop that is each device's one
//     worker goroutine.
//   - virtio/blk, virtio/net, virtio/rng, virtio/vsock, virtio/scsi: the devices, each
//     with device.go (registers, queues, worker), metrics.go (Counters)
//     and persist.go (a versioned State with Save/Restore, and
//     SaveState/RestoreState over it): the machine saves, restores and
//     reports every device through the Device interface alone.
//
// vmm/machine places the devices (virtio.go there): 4 KiB windows from
// 0xd0000000 in the 32-bit MMIO hole, IOAPIC pins 5-7 and 9-15, announced
// on the kernel command line as virtio_mmio.device=4K@ADDR:GSI.
package virtio

import (
	"encoding/json"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// DeviceType is the virtio device ID (spec 5).
type DeviceType uint32

// Device types kubevmm implements.
const (
	TypeNet     DeviceType = 1
	TypeBlock   DeviceType = 2
	TypeConsole DeviceType = 3
	TypeRNG     DeviceType = 4
	TypeSCSI    DeviceType = 8
	TypeVsock   DeviceType = 19
)

func (t DeviceType) String() string {
	switch t {
	case TypeNet:
		return "net"
	case TypeBlock:
		return "block"
	case TypeConsole:
		return "console"
	case TypeRNG:
		return "rng"
	case TypeSCSI:
		return "scsi"
	case TypeVsock:
		return "vsock"
	}
	return "unknown"
}

// Transport-level feature bits (spec 6). Device-specific bits are below 24
// and defined by each device.
const (
	FRingIndirectDesc = 1 << 28
	FRingEventIdx     = 1 << 29
	FVersion1         = 1 << 32
	FAccessPlatform   = 1 << 33
	FRingPacked       = 1 << 34
)

// Device status bits (spec 2.1).
const (
	StatusAcknowledge      = 1
	StatusDriver           = 2
	StatusDriverOK         = 4
	StatusFeaturesOK       = 8
	StatusDeviceNeedsReset = 64
	StatusFailed           = 128
)

// Interrupt is how an activated device tells its driver something. The
// methods are safe to call from any goroutine and never block.
type Interrupt interface {
	// UsedBuffer raises the "used buffer" interrupt: some queue's used
	// ring has new entries the driver should look at.
	UsedBuffer()
	// ConfigChanged bumps the config generation and raises the
	// configuration change interrupt.
	ConfigChanged()
	// Fail sets DEVICE_NEEDS_RESET (spec 2.1.2): the device met a guest
	// error it cannot recover from and stops until the driver resets it.
	Fail(err error)
}

// Activation is what a device gets when the driver sets DRIVER_OK.
type Activation struct {
	Mem      *memory.Guest
	Features uint64         // negotiated (driver-accepted) features
	Queues   []*queue.Queue // one per QueueMaxSizes entry; validated and ready
	// Notify has one eventfd per queue, signalled when the driver kicks
	// that queue (KVM ioeventfd on QueueNotify, datamatch = queue index).
	Notify    []*event.FD
	Interrupt Interrupt
}

// Device is a virtio device behind a transport. The transport serialises
// calls to these methods; an activated device does its queue work on its
// own worker goroutine.
type Device interface {
	Type() DeviceType
	// Features are the feature bits the device offers, including
	// FVersion1 and the ring features it supports.
	Features() uint64
	// QueueMaxSizes is the maximum size of each of the device's queues.
	QueueMaxSizes() []uint16
	// ReadConfig fills data from the device configuration space at off;
	// bytes past the end of the space read as zero.
	ReadConfig(off uint64, data []byte)
	// WriteConfig is a driver write to configuration space (most devices
	// ignore it).
	WriteConfig(off uint64, data []byte)
	// Activate starts the device's worker.
	Activate(a Activation) error
	// Reset stops the worker (waiting for it) and returns the device to
	// its state before activation.
	Reset()
	// SaveState is the device's part of a snapshot or a migration: its
	// versioned State (persist.go) as JSON. The machine calls it with the
	// device's worker held still.
	SaveState() (json.RawMessage, error)
	// RestoreState loads a saved state into a device built from the same
	// configuration, before the transport re-activates it; a state of
	// another version or configuration is refused.
	RestoreState(json.RawMessage) error
	// Counters are the device's metrics by snake_case name, readable at
	// any time.
	Counters() map[string]uint64
}

// RestoreJSON decodes a saved device state and hands it to restore: the
// common implementation of RestoreState over a device's typed Restore.
func RestoreJSON[T any](b json.RawMessage, restore func(T) error) error {
	var s T
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("device state: %w", err)
	}
	return restore(s)
}

// ReadConfigBytes copies the part of cfg at off into data and zeroes the
// rest: the common implementation of ReadConfig over a byte image of the
// configuration space.
func ReadConfigBytes(cfg []byte, off uint64, data []byte) {
	clear(data)
	if off >= uint64(len(cfg)) {
		return
	}
	copy(data, cfg[off:])
}
