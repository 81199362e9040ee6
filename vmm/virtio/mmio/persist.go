package mmio

import (
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// StateVersion is the version of State this code writes and reads.
const StateVersion = 1

// State is the transport's part of a snapshot: its registers and, for an
// active device, the queues' positions.
type State struct {
	Version           int
	DeviceType        virtio.DeviceType
	Base              uint64
	GSI               uint32
	DeviceFeaturesSel uint32
	DriverFeaturesSel uint32
	DriverFeatures    uint64
	QueueSel          uint32
	Queues            []queue.Config
	Status            uint32
	NeedsReset        bool
	InterruptStatus   uint32
	ConfigGeneration  uint32
	Active            []queue.State // nil unless DRIVER_OK activated the device
}

// Quiescer is implemented by devices whose worker can be held still while
// f runs (Save reads queue positions the worker moves).
type Quiescer interface {
	Quiesce(f func())
}

// Save captures the transport. The VM's vCPUs must be paused.
func (t *Transport) Save() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := State{
		Version: StateVersion, DeviceType: t.dev.Type(), Base: t.base, GSI: t.gsi,
		DeviceFeaturesSel: t.devFeatSel, DriverFeaturesSel: t.drvFeatSel,
		DriverFeatures: t.drvFeatures, QueueSel: t.queueSel,
		Queues: append([]queue.Config(nil), t.queues...), Status: t.status,
		NeedsReset: t.needsReset.Load(), InterruptStatus: t.intStatus.Load(),
		ConfigGeneration: t.configGen.Load(),
	}
	if t.active != nil {
		save := func() {
			for _, q := range t.active {
				s.Active = append(s.Active, q.Save())
			}
		}
		if qz, ok := t.dev.(Quiescer); ok {
			qz.Quiesce(save)
		} else {
			save()
		}
	}
	return s
}

// Restore loads s into a freshly created transport (same device type and
// placement) and, if the device was active, re-activates it on the saved
// queue positions. Restore the device's own state first.
func (t *Transport) Restore(s State) error {
	switch {
	case s.Version != StateVersion:
		return fmt.Errorf("virtio-mmio state version %d, want %d", s.Version, StateVersion)
	case s.DeviceType != t.dev.Type() || s.Base != t.base || s.GSI != t.gsi:
		return fmt.Errorf("virtio-mmio state for %s at %#x gsi %d restored into %s at %#x gsi %d",
			s.DeviceType, s.Base, s.GSI, t.dev.Type(), t.base, t.gsi)
	case len(s.Queues) != len(t.queues):
		return fmt.Errorf("virtio-mmio state has %d queues, device has %d", len(s.Queues), len(t.queues))
	case s.Active != nil && len(s.Active) != len(t.queues):
		return fmt.Errorf("virtio-mmio state has %d active queues, device has %d", len(s.Active), len(t.queues))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active != nil {
		return fmt.Errorf("virtio-mmio restore into an active device")
	}
	t.devFeatSel, t.drvFeatSel, t.drvFeatures, t.queueSel = s.DeviceFeaturesSel, s.DriverFeaturesSel, s.DriverFeatures, s.QueueSel
	copy(t.queues, s.Queues)
	t.status = s.Status
	t.needsReset.Store(s.NeedsReset)
	t.intStatus.Store(s.InterruptStatus)
	t.configGen.Store(s.ConfigGeneration)
	if s.Active == nil {
		return nil
	}
	qs := make([]*queue.Queue, len(s.Active))
	for i, qsState := range s.Active {
		q, err := queue.Restore(t.mem, qsState, t.maxSizes[i])
		if err != nil {
			return fmt.Errorf("virtio-mmio restore queue %d: %w", i, err)
		}
		qs[i] = q
	}
	if err := t.start(qs); err != nil {
		return err
	}
	// Chains the driver made available and announced to the saved device
	// may never have been served there: that notification went to the old
	// process. One kick per queue makes the worker look; with nothing
	// pending it finds nothing.
	for _, fd := range t.notify {
		if err := fd.Signal(); err != nil {
			return fmt.Errorf("virtio-mmio restore: %w", err)
		}
	}
	if s.InterruptStatus != 0 {
		_ = t.irq.Signal() // the guest may have missed the edge while saved
	}
	return nil
}
