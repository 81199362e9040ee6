package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/assist"
	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

// Restore rebuilds the VM saved in dir, in this process, ready to Run from
// where it was. RAM is mapped privately from the snapshot and read lazily.
// base supplies what isn't part of a VM's state: console, log, KVM path.
func Restore(dir string, base Config) (*Machine, error) {
	man, mem, err := snapshot.Read(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	read := time.Now()
	var s State
	if err := json.Unmarshal(man.State, &s); err != nil {
		mem.Close()
		return nil, fmt.Errorf("%w: snapshot state: %v", ErrConfig, err)
	}
	decoded := time.Now()
	m, err := fromState(&s, base, mem)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", dir, err)
	}
	m.phases = append([]Phase{{"snapshot read", read}, {"state decoded", decoded}}, m.phases...)
	return m, nil
}

// fromState builds a machine for s's configuration around mem and loads s.
func fromState(s *State, base Config, mem *memory.Guest) (*Machine, error) {
	if err := validateState(s); err != nil {
		mem.Close()
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	cfg, err := configFrom(s.Config, base)
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	m, err := build(cfg, mem)
	if err != nil {
		mem.Close() // idempotent: build may have closed it already
		return nil, err
	}
	if err := m.devices.checkDisks(s.Config.Disks); err != nil {
		_ = m.Close() // never ran: the refusal is the error to report
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	m.mark("disks checked")
	if err := m.loadState(s); err != nil {
		_ = m.Close()                          // never ran: the restore error is the one to report
		if errors.Is(err, scsi.ErrBadVolume) { // a volume's image is missing or another
			err = fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil, err
	}
	m.mark("state loaded")
	return m, nil
}

func (m *Machine) loadState(s *State) error {
	if err := m.restoreState(s); err != nil {
		return err
	}
	// The assists follow the XSAVE layout the guest was given.
	if len(s.VCPUs) > 0 {
		m.Assist = assist.New(m.memory.Guest(), x86.XSaveLayoutOf(s.VCPUs[0].CPUID))
	}
	return nil
}
