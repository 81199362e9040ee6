package machine

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/devices/i8042"
	"github.com/kubevmm/kubevmm/vmm/devices/rtc"
	"github.com/kubevmm/kubevmm/vmm/devices/serial"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
)

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

// State is a VM's complete state apart from guest RAM.
type State struct {
	Version int           `json:"version"`
	Config  SavedConfig   `json:"config"`
	VM      *VMState      `json:"vm"`
	VCPUs   []*VCPUState  `json:"vcpus"`
	Serial  serial.State  `json:"serial"`
	I8042   i8042.State   `json:"i8042"`
	RTC     rtc.State     `json:"rtc"`
	Virtio  []VirtioState `json:"virtio,omitempty"`
}

// VirtioState is one virtio device: its transport and its own state.
type VirtioState struct {
	Name      string          `json:"name"`
	Transport mmio.State      `json:"transport"`
	Device    json.RawMessage `json:"device"`
}

func (m *Machine) savedConfig() SavedConfig {
	c := SavedConfig{
		CPUs: m.cfg.CPUs, MemoryBytes: m.cfg.MemoryBytes, Cmdline: m.Cmdline, Nested: m.Nested,
		RNG: m.cfg.RNG, Vsock: m.cfg.Vsock, SCSI: m.cfg.SCSI,
	}
	for i, d := range m.cfg.Disks {
		c.Disks = append(c.Disks, savedDisk{DiskConfig: d, Image: block.Identify(m.disks[i])})
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

// holdDevices keeps every virtio device's worker idle until the returned
// release is called, so no device touches guest RAM or its queues while a
// snapshot or the end of a migration saves them. vCPUs must be paused
// (no guest MMIO can activate or reset a device meanwhile).
func (m *Machine) holdDevices() (release func()) {
	var held []*event.Loop
	for _, d := range m.virtio {
		if w, ok := d.Device.(interface{ Loop() *event.Loop }); ok {
			if l := w.Loop(); l != nil {
				l.Hold()
				held = append(held, l)
			}
		}
	}
	return func() {
		for _, l := range held {
			l.Release()
		}
	}
}

// SaveState captures the complete state (without RAM). vCPUs must be
// paused and devices quiesced.
func (m *Machine) saveState() (*State, error) {
	s := &State{Version: StateVersion, Config: m.savedConfig()}
	var err error
	if s.VM, err = m.saveVM(); err != nil {
		return nil, err
	}
	for _, v := range m.vcpus {
		vs, err := m.saveVCPU(v)
		if err != nil {
			return nil, err
		}
		s.VCPUs = append(s.VCPUs, vs)
	}
	s.Serial, s.I8042, s.RTC = m.Serial.Save(), m.kbd.Save(), m.clock.Save()
	for _, d := range m.virtio {
		b, err := d.Device.SaveState()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
		s.Virtio = append(s.Virtio, VirtioState{Name: d.Name, Transport: d.Transport.Save(), Device: b})
	}
	return s, nil
}

// restoreState loads s into a machine built from the same SavedConfig
// (vCPUs created, devices attached, RAM already holding the guest's).
func (m *Machine) restoreState(s *State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("VM state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	if len(s.VCPUs) != len(m.vcpus) {
		return fmt.Errorf("state has %d vCPUs, the VM %d", len(s.VCPUs), len(m.vcpus))
	}
	if len(s.Virtio) != len(m.virtio) {
		return fmt.Errorf("state has %d virtio devices, the VM %d", len(s.Virtio), len(m.virtio))
	}
	if s.VM == nil {
		return fmt.Errorf("state has no irqchip/PIT/clock section")
	}
	// VM-wide state first: the LAPICs restored with the vCPUs below
	// deliver into the restored IOAPIC/PIC.
	if err := m.restoreVM(s.VM); err != nil {
		return err
	}
	// vCPUs in parallel: each one's ioctls are on its own fd, independent
	// of the others', so a VM with many reaches its first entry sooner.
	errs := make([]error, len(s.VCPUs))
	var wg sync.WaitGroup
	for i, vs := range s.VCPUs {
		wg.Go(func() { errs[i] = restoreVCPU(m.vcpus[i].c, vs) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	if err := m.Serial.Restore(s.Serial); err != nil {
		return err
	}
	if err := m.kbd.Restore(s.I8042); err != nil {
		return err
	}
	if err := m.clock.Restore(s.RTC); err != nil {
		return err
	}
	for i, vs := range s.Virtio {
		d := m.virtio[i]
		if vs.Name != d.Name {
			return fmt.Errorf("virtio device %d is %s in the state, %s in the VM", i, vs.Name, d.Name)
		}
		if err := d.Device.RestoreState(vs.Device); err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
		if err := d.Transport.Restore(vs.Transport); err != nil {
			return fmt.Errorf("%s: %w", d.Name, err)
		}
	}
	return nil
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
	if err := m.Pause(); err != nil {
		return SnapshotResult{}, err
	}
	var res SnapshotResult
	release := m.holdDevices()
	// The snapshot is only as good as the disks under it: everything the
	// guest wrote before it must be on them.
	err := m.flushDisks()
	var s *State
	if err == nil {
		s, err = m.saveState()
	}
	if err == nil {
		res.StoredBytes, err = snapshot.Write(dir, m.Mem, s)
	}
	release()
	res.Paused = time.Since(start)
	if resume {
		m.Resume()
	}
	if err != nil {
		return res, fmt.Errorf("snapshot to %s: %w", dir, err)
	}
	return res, nil
}
