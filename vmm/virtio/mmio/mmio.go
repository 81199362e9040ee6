// Package mmio is the virtio-mmio transport, version 2 (virtio 1.2 section
// 4.2): one 4 KiB register window per device, announced to Linux on the
// kernel command line (virtio_mmio.device=4K@ADDR:GSI). Queue kicks arrive
// on KVM ioeventfds (one per queue, matched on the value written to
// QueueNotify) and interrupts leave through a KVM irqfd, so the data path
// never exits to the VMM's vCPU threads.
package mmio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Size is the register window of one device.
const Size = 0x1000

// Register offsets (spec 4.2.2).
const (
	regMagic             = 0x000
	regVersion           = 0x004
	regDeviceID          = 0x008
	regVendorID          = 0x00c
	regDeviceFeatures    = 0x010
	regDeviceFeaturesSel = 0x014
	regDriverFeatures    = 0x020
	regDriverFeaturesSel = 0x024
	regQueueSel          = 0x030
	regQueueNumMax       = 0x034
	regQueueNum          = 0x038
	regQueueReady        = 0x044
	regQueueNotify       = 0x050
	regInterruptStatus   = 0x060
	regInterruptACK      = 0x064
	regStatus            = 0x070
	regQueueDescLow      = 0x080
	regQueueDescHigh     = 0x084
	regQueueDriverLow    = 0x090
	regQueueDriverHigh   = 0x094
	regQueueDeviceLow    = 0x0a0
	regQueueDeviceHigh   = 0x0a4
	regSHMSel            = 0x0ac
	regSHMLenLow         = 0x0b0
	regSHMLenHigh        = 0x0b4
	regSHMBaseLow        = 0x0b8
	regSHMBaseHigh       = 0x0bc
	regConfigGeneration  = 0x0fc
	regConfig            = 0x100

	magicValue = 0x74726976 // "virt"
	version    = 2
	vendorID   = 0x4d564b // "KVM" little-endian, kubevmm
)

// Interrupt status bits.
const (
	IntUsedBuffer   = 1
	IntConfigChange = 2
)

// Hypervisor is what the transport needs from KVM (*kvm.VM has it).
type Hypervisor interface {
	AssignIOEventFD(kvm.IOEventFD) error
	DeassignIOEventFD(kvm.IOEventFD) error
	IRQFD(efd int, gsi uint32, resampleFD int) error
	DeassignIRQFD(efd int, gsi uint32) error
}

// Metrics count transport events.
type Metrics struct {
	Activations      atomic.Uint64
	ActivateFails    atomic.Uint64
	Resets           atomic.Uint64
	Interrupts       atomic.Uint64
	SlowNotifies     atomic.Uint64 // QueueNotify writes that exited to the VMM
	BadAccesses      atomic.Uint64 // wrong width, unknown register, write to read-only
	BadStatus        atomic.Uint64 // refused status transitions
	NeedsResetEvents atomic.Uint64
}

// Counters are the transport's metrics by snake_case name.
func (t *Transport) Counters() map[string]uint64 {
	m := &t.Metrics
	return map[string]uint64{
		"activations": m.Activations.Load(), "activate_fails": m.ActivateFails.Load(), "resets": m.Resets.Load(),
		"interrupts": m.Interrupts.Load(), "slow_notifies": m.SlowNotifies.Load(), "bad_accesses": m.BadAccesses.Load(),
		"bad_status": m.BadStatus.Load(), "needs_reset_events": m.NeedsResetEvents.Load(),
	}
}

// Transport is one virtio-mmio device window.
type Transport struct {
	dev  virtio.Device
	mem  *memory.Guest
	hv   Hypervisor
	base uint64
	gsi  uint32
	log  *slog.Logger

	irq      *event.FD
	notify   []*event.FD
	ioevents []kvm.IOEventFD
	maxSizes []uint16

	mu          sync.Mutex
	devFeatSel  uint32
	drvFeatSel  uint32
	drvFeatures uint64
	queueSel    uint32
	queues      []queue.Config
	status      uint32
	active      []*queue.Queue // the queues handed to the device at DRIVER_OK

	needsReset atomic.Bool
	intStatus  atomic.Uint32
	configGen  atomic.Uint32

	Metrics Metrics
}

// Config places a device.
type Config struct {
	Base uint64 // guest-physical base of the 4 KiB window
	GSI  uint32 // IOAPIC pin of its interrupt
	// Logger, if set, receives guest errors worth a line (NEEDS_RESET
	// causes).
	Logger *slog.Logger
}

// New creates the transport for dev and wires its eventfds into KVM.
func New(dev virtio.Device, mem *memory.Guest, hv Hypervisor, cfg Config) (t *Transport, err error) {
	if cfg.Base%Size != 0 {
		return nil, fmt.Errorf("virtio-mmio %s: base %#x not 4 KiB aligned", dev.Type(), cfg.Base)
	}
	t = &Transport{dev: dev, mem: mem, hv: hv, base: cfg.Base, gsi: cfg.GSI, log: cfg.Logger, maxSizes: dev.QueueMaxSizes()}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.queues = make([]queue.Config, len(t.maxSizes))
	defer func() {
		if err != nil {
			_ = t.Close() // err is the one to report
		}
	}()
	if t.irq, err = event.NewFD(); err != nil {
		return nil, err
	}
	if err := hv.IRQFD(t.irq.Int(), cfg.GSI, -1); err != nil {
		return nil, fmt.Errorf("virtio-mmio %s: %w", dev.Type(), err)
	}
	for i := range t.maxSizes {
		fd, err := event.NewFD()
		if err != nil {
			return nil, err
		}
		t.notify = append(t.notify, fd)
		match := uint64(i)
		ev := kvm.IOEventFD{Addr: cfg.Base + regQueueNotify, Len: 4, FD: fd.Int(), Datamatch: &match}
		if err := hv.AssignIOEventFD(ev); err != nil {
			return nil, fmt.Errorf("virtio-mmio %s queue %d: %w", dev.Type(), i, err)
		}
		t.ioevents = append(t.ioevents, ev)
	}
	return t, nil
}

// Device is the device behind the transport.
func (t *Transport) Device() virtio.Device { return t.dev }

// Base is the window's guest-physical address.
func (t *Transport) Base() uint64 { return t.base }

// GSI is the device's interrupt line.
func (t *Transport) GSI() uint32 { return t.gsi }

// Cmdline is the kernel argument that announces the device to Linux.
func (t *Transport) Cmdline() string {
	return fmt.Sprintf("virtio_mmio.device=4K@%#x:%d", t.base, t.gsi)
}

// Reset returns the transport and its device to their power-on state, as
// the driver's write of status 0 does: the VM is being reset, and the next
// kernel finds the device as the first one did.
func (t *Transport) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reset()
}

// Close resets the device (stopping its worker) and releases the eventfds.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active != nil {
		t.dev.Reset()
		t.active = nil
	}
	var errs []error
	for _, ev := range t.ioevents {
		errs = append(errs, t.hv.DeassignIOEventFD(ev))
	}
	t.ioevents = nil
	for _, fd := range t.notify {
		fd.Close()
	}
	t.notify = nil
	if t.irq != nil {
		if t.irq.Int() >= 0 {
			// The irqfd is closed next, which detaches it from KVM anyway.
			_ = t.hv.DeassignIRQFD(t.irq.Int(), t.gsi)
		}
		t.irq.Close()
		t.irq = nil
	}
	return errors.Join(errs...)
}

// --- virtio.Interrupt, called by the device's worker ---

type interrupt struct{ t *Transport }

func (i interrupt) raise(bit uint32) {
	i.t.intStatus.Or(bit)
	i.t.Metrics.Interrupts.Add(1)
	_ = i.t.irq.Signal() // fails only once closed, at teardown
}

func (i interrupt) UsedBuffer() { i.raise(IntUsedBuffer) }

func (i interrupt) ConfigChanged() {
	i.t.configGen.Add(1)
	i.raise(IntConfigChange)
}

func (i interrupt) Fail(err error) {
	i.t.Metrics.NeedsResetEvents.Add(1)
	if !i.t.needsReset.Swap(true) {
		i.t.log.Warn("virtio device needs reset", "type", i.t.dev.Type().String(), "error", err)
	}
	i.raise(IntConfigChange)
}

// --- bus.Device ---

// Read handles a guest read in the window.
func (t *Transport) Read(off uint64, data []byte) {
	if off >= regConfig {
		t.mu.Lock()
		t.dev.ReadConfig(off-regConfig, data)
		t.mu.Unlock()
		return
	}
	if len(data) != 4 || off%4 != 0 {
		t.Metrics.BadAccesses.Add(1)
		clear(data)
		return
	}
	binary.LittleEndian.PutUint32(data, t.readReg(off))
}

func (t *Transport) readReg(off uint64) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch off {
	case regMagic:
		return magicValue
	case regVersion:
		return version
	case regDeviceID:
		return uint32(t.dev.Type())
	case regVendorID:
		return vendorID
	case regDeviceFeatures:
		f := t.dev.Features()
		switch t.devFeatSel {
		case 0:
			return uint32(f)
		case 1:
			return uint32(f >> 32)
		}
		return 0
	case regQueueNumMax:
		if q := t.selected(); q >= 0 {
			return uint32(t.maxSizes[q])
		}
		return 0
	case regQueueReady:
		if q := t.selected(); q >= 0 && t.queues[q].Ready {
			return 1
		}
		return 0
	case regInterruptStatus:
		return t.intStatus.Load()
	case regStatus:
		s := t.status
		if t.needsReset.Load() {
			s |= virtio.StatusDeviceNeedsReset
		}
		return s
	case regSHMLenLow, regSHMLenHigh, regSHMBaseLow, regSHMBaseHigh:
		return 0xffffffff // no shared memory regions
	case regConfigGeneration:
		return t.configGen.Load()
	}
	t.Metrics.BadAccesses.Add(1)
	return 0
}

func (t *Transport) selected() int {
	if t.queueSel < uint32(len(t.queues)) {
		return int(t.queueSel)
	}
	return -1
}

// Write handles a guest write in the window.
func (t *Transport) Write(off uint64, data []byte) {
	if off >= regConfig {
		t.mu.Lock()
		t.dev.WriteConfig(off-regConfig, data)
		t.mu.Unlock()
		return
	}
	if len(data) != 4 || off%4 != 0 {
		t.Metrics.BadAccesses.Add(1)
		return
	}
	v := binary.LittleEndian.Uint32(data)
	if off == regQueueNotify {
		// Only reached when no ioeventfd matched (or none is registered).
		t.Metrics.SlowNotifies.Add(1)
		if v < uint32(len(t.notify)) {
			_ = t.notify[v].Signal() // fails only once closed, at teardown
		}
		return
	}
	if off == regInterruptACK {
		t.intStatus.And(^v)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch off {
	case regDeviceFeaturesSel:
		t.devFeatSel = v
	case regDriverFeaturesSel:
		t.drvFeatSel = v
	case regDriverFeatures:
		if t.status&(virtio.StatusDriver|virtio.StatusFeaturesOK) != virtio.StatusDriver {
			t.Metrics.BadAccesses.Add(1)
			return
		}
		switch t.drvFeatSel {
		case 0:
			t.drvFeatures = t.drvFeatures&^0xffffffff | uint64(v)
		case 1:
			t.drvFeatures = t.drvFeatures&0xffffffff | uint64(v)<<32
		}
	case regQueueSel:
		t.queueSel = v
	case regQueueNum, regQueueReady, regQueueDescLow, regQueueDescHigh,
		regQueueDriverLow, regQueueDriverHigh, regQueueDeviceLow, regQueueDeviceHigh:
		t.writeQueueReg(off, v)
	case regStatus:
		t.setStatus(v)
	case regSHMSel:
	default:
		t.Metrics.BadAccesses.Add(1)
	}
}

// writeQueueReg programs the selected queue: allowed between FEATURES_OK
// and DRIVER_OK, and (except for QueueReady itself) while it is not ready.
func (t *Transport) writeQueueReg(off uint64, v uint32) {
	q := t.selected()
	if q < 0 || t.status&(virtio.StatusFeaturesOK|virtio.StatusDriverOK|virtio.StatusFailed) != virtio.StatusFeaturesOK {
		t.Metrics.BadAccesses.Add(1)
		return
	}
	c := &t.queues[q]
	if c.Ready && off != regQueueReady {
		t.Metrics.BadAccesses.Add(1)
		return
	}
	lo := func(a *uint64) { *a = *a&^0xffffffff | uint64(v) }
	hi := func(a *uint64) { *a = *a&0xffffffff | uint64(v)<<32 }
	switch off {
	case regQueueNum:
		c.Size = uint16(v)
		if v > 0xffff {
			c.Size = 0 // refused at activation
		}
	case regQueueReady:
		c.Ready = v == 1
	case regQueueDescLow:
		lo(&c.DescTable)
	case regQueueDescHigh:
		hi(&c.DescTable)
	case regQueueDriverLow:
		lo(&c.AvailRing)
	case regQueueDriverHigh:
		hi(&c.AvailRing)
	case regQueueDeviceLow:
		lo(&c.UsedRing)
	case regQueueDeviceHigh:
		hi(&c.UsedRing)
	}
}

// setStatus runs the device status state machine (spec 3.1.1): 0 resets;
// otherwise bits are added one step at a time, in order.
func (t *Transport) setStatus(v uint32) {
	const (
		ack    = virtio.StatusAcknowledge
		drv    = ack | virtio.StatusDriver
		featOK = drv | virtio.StatusFeaturesOK
		drvOK  = featOK | virtio.StatusDriverOK
	)
	if v == 0 {
		t.reset()
		return
	}
	if v&virtio.StatusFailed != 0 {
		t.status |= virtio.StatusFailed // the driver gave up; wait for its reset
		return
	}
	old := t.status
	switch {
	case v == old:
	case old == 0 && v == ack, old == ack && v == drv:
		t.status = v
	case old == drv && v == featOK:
		if err := t.checkFeatures(); err != nil {
			t.log.Warn("virtio device refuses the driver's features", "type", t.dev.Type().String(), "error", err)
			t.Metrics.BadStatus.Add(1)
			return // FEATURES_OK stays clear: the driver sees the refusal
		}
		t.status = v
	case old == featOK && v == drvOK:
		t.status = v
		if err := t.activate(); err != nil {
			t.Metrics.ActivateFails.Add(1)
			interrupt{t}.Fail(err)
		}
	default:
		t.Metrics.BadStatus.Add(1)
	}
}

func (t *Transport) checkFeatures() error {
	offered := t.dev.Features()
	if extra := t.drvFeatures &^ offered; extra != 0 {
		return fmt.Errorf("driver accepted features %#x the device did not offer", extra)
	}
	if t.drvFeatures&virtio.FVersion1 == 0 {
		return errors.New("driver did not accept VIRTIO_F_VERSION_1 (legacy drivers are not supported)")
	}
	return nil
}

func (t *Transport) activate() error {
	opt := queue.Options{
		EventIdx: t.drvFeatures&virtio.FRingEventIdx != 0,
		Indirect: t.drvFeatures&virtio.FRingIndirectDesc != 0,
	}
	qs := make([]*queue.Queue, len(t.queues))
	for i, c := range t.queues {
		if !c.Ready {
			return fmt.Errorf("queue %d not ready at DRIVER_OK", i)
		}
		q, err := queue.New(t.mem, c, t.maxSizes[i], opt)
		if err != nil {
			return fmt.Errorf("queue %d: %w", i, err)
		}
		qs[i] = q
	}
	return t.start(qs)
}

func (t *Transport) start(qs []*queue.Queue) error {
	err := t.dev.Activate(virtio.Activation{
		Mem: t.mem, Features: t.drvFeatures, Queues: qs, Notify: t.notify, Interrupt: interrupt{t},
	})
	if err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	t.active = qs
	t.Metrics.Activations.Add(1)
	return nil
}

func (t *Transport) reset() {
	if t.active != nil {
		t.dev.Reset()
		t.active = nil
	}
	t.Metrics.Resets.Add(1)
	t.devFeatSel, t.drvFeatSel, t.drvFeatures, t.queueSel, t.status = 0, 0, 0, 0, 0
	clear(t.queues)
	for _, fd := range t.notify {
		fd.Drain()
	}
	t.needsReset.Store(false)
	t.intStatus.Store(0)
}
