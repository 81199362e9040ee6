package machine

import (
	"fmt"
	"net"
	"time"

	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

func (m *Machine) savedConfig() SavedConfig {
	c := SavedConfig{
		CPUs: m.cfg.CPUs, MemoryBytes: m.cfg.MemoryBytes, Cmdline: m.Cmdline, Nested: m.Nested,
		RNG: m.cfg.RNG, Vsock: m.cfg.Vsock, SCSI: m.cfg.SCSI,
	}
	for i, d := range m.cfg.Disks {
		c.Disks = append(c.Disks, savedDisk{DiskConfig: d, Image: m.devices.diskIdentity(i)})
	}
	for _, n := range m.cfg.NICs {
		c.NICs = append(c.NICs, savedNIC{Tap: n.Tap, MAC: n.MAC.String(), Queues: n.Queues, LinkDown: n.LinkDown})
	}
	return c
}

// configFrom turns a saved configuration back into a Config; runtime
// parts (console, log) come from base.
func configFrom(sc SavedConfig, base Config) (Config, error) {
	c := base
	c.CPUs, c.MemoryBytes, c.Cmdline = sc.CPUs, sc.MemoryBytes, sc.Cmdline
	nested := sc.Nested
	c.HostProfile = &nested
	c.RNG, c.Vsock, c.SCSI = sc.RNG, sc.Vsock, sc.SCSI
	c.Disks = nil
	for _, d := range sc.Disks {
		c.Disks = append(c.Disks, d.DiskConfig)
	}
	if base.Vsock != nil && base.Vsock.Socket != "" {
		// The caller's socket path replaces the saved one; the CID
		// belongs to the guest and stays.
		if sc.Vsock == nil {
			return c, fmt.Errorf("a vsock socket was given, but the saved VM has no vsock device")
		}
		v := *sc.Vsock
		v.Socket = base.Vsock.Socket
		c.Vsock = &v
	}
	c.NICs = nil
	for _, n := range sc.NICs {
		mac, err := net.ParseMAC(n.MAC)
		if err != nil {
			return c, fmt.Errorf("saved NIC %s: %w", n.Tap, err)
		}
		c.NICs = append(c.NICs, NICConfig{Tap: n.Tap, MAC: mac, Queues: n.Queues, LinkDown: n.LinkDown})
	}
	return c, nil
}

// saveState captures the complete state (without RAM). vCPUs must be
// paused and devices held.
func (m *Machine) saveState() (*State, error) {
	s := &State{Version: StateVersion, Config: m.savedConfig()}
	var err error
	if s.VM, err = m.saveVM(); err != nil {
		return nil, err
	}
	if s.VCPUs, err = m.cpus.Save(); err != nil {
		return nil, err
	}
	if s.DeviceState, err = m.devices.Save(); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreState loads s into a machine built from the same SavedConfig
// (vCPUs created, devices attached, RAM already holding the guest's).
func (m *Machine) restoreState(s *State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("VM state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	if n := m.cfg.CPUs; len(s.VCPUs) != n {
		return fmt.Errorf("state has %d vCPUs, the VM %d", len(s.VCPUs), n)
	}
	if n := len(m.Virtio()); len(s.Virtio) != n {
		return fmt.Errorf("state has %d virtio devices, the VM %d", len(s.Virtio), n)
	}
	if s.VM == nil {
		return fmt.Errorf("state has no irqchip/PIT/clock section")
	}
	// VM-wide state first: the LAPICs restored with the vCPUs below
	// deliver into the restored IOAPIC/PIC.
	if err := m.restoreVM(s.VM); err != nil {
		return err
	}
	if err := m.cpus.Restore(s.VCPUs); err != nil {
		return err
	}
	return m.devices.Restore(s.DeviceState)
}

// SnapshotResult describes a written snapshot.
type SnapshotResult struct {
	StoredBytes int64
	Paused      time.Duration
}

// Snapshot pauses the VM, writes its state and RAM to dir, and resumes it
// unless resume is false.
func (m *Machine) Snapshot(dir string, resume bool) (SnapshotResult, error) {
	start := time.Now()
	if err := m.cpus.Pause(); err != nil {
		return SnapshotResult{}, err
	}
	var res SnapshotResult
	err := m.devices.Pause()
	// The snapshot is only as good as the disks under it: everything the
	// guest wrote before it must be on them.
	if err == nil {
		err = m.devices.flushDisks()
	}
	var s *State
	if err == nil {
		s, err = m.saveState()
	}
	if err == nil {
		res.StoredBytes, err = snapshot.Write(dir, m.memory.Guest(), s)
	}
	m.devices.Resume()
	res.Paused = time.Since(start)
	if resume {
		m.cpus.Resume()
	}
	if err != nil {
		return res, fmt.Errorf("snapshot to %s: %w", dir, err)
	}
	return res, nil
}

// saveVM captures the VM-wide state KVM keeps: the irqchip, the PIT, the
// kvmclock.
func (m *Machine) saveVM() (*VMState, error) {
	s := &VMState{}
	for _, chip := range []struct {
		id  uint32
		dst *[]byte
	}{{kvm.IRQChipPICMaster, &s.PICMaster}, {kvm.IRQChipPICSlave, &s.PICSlave}, {kvm.IRQChipIOAPIC, &s.IOAPIC}} {
		c, err := m.vm.GetIRQChip(chip.id)
		if err != nil {
			return nil, err
		}
		*chip.dst = raw(c)
	}
	pit, err := m.vm.GetPIT2()
	if err != nil {
		return nil, err
	}
	s.PIT = raw(pit)
	clk, err := m.vm.GetClock()
	if err != nil {
		return nil, err
	}
	s.Clock = clk.Clock
	return s, nil
}

// restoreVM loads s into the VM.
func (m *Machine) restoreVM(s *VMState) error {
	for _, b := range [][]byte{s.PICMaster, s.PICSlave, s.IOAPIC} {
		c, err := fromRaw[kvm.IRQChip](b, "irqchip")
		if err != nil {
			return err
		}
		if err := m.vm.SetIRQChip(c); err != nil {
			return err
		}
	}
	pit, err := fromRaw[kvm.PITState2](s.PIT, "pit")
	if err != nil {
		return err
	}
	if err := m.vm.SetPIT2(pit); err != nil {
		return err
	}
	// kvmclock continues from where the guest left it: no jump forward by
	// the time the VM spent saved or in transit.
	return m.vm.SetClock(&kvm.ClockData{Clock: s.Clock})
}
