package machine

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/kubevmm/kubevmm/net/tap"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
	"github.com/kubevmm/kubevmm/vmm/virtio/rng"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
	"github.com/kubevmm/kubevmm/vmm/virtio/vsock"
)

// DiskConfig is one virtio-blk disk.
type DiskConfig struct {
	Path     string
	Format   block.Format // raw (default) or qcow2
	ReadOnly bool
	Serial   string // up to 20 bytes, the guest's /sys/block/vdX/serial
	// Queues above 1: as many virtio-blk request queues
	// (VIRTIO_BLK_F_MQ), one per vCPU typically.
	Queues int `json:",omitempty"`
}

// NICConfig is one virtio-net NIC on a tap device.
type NICConfig struct {
	Tap string // opened (created if missing) by name in the VMM's netns
	MAC net.HardwareAddr
	// Queues above 1: a multi-queue tap and as many virtio-net queue
	// pairs (VIRTIO_NET_F_MQ), one per vCPU typically.
	Queues int
	// LinkDown: the guest sees the NIC's link down (vnet.Config.LinkDown).
	LinkDown bool
}

// VirtioMMIOBase is where virtio devices sit in the 32-bit MMIO hole, one
// 4 KiB window each from here, each on an IOAPIC pin the PC platform leaves free (4 is
// COM1, 8 the RTC); the MP table describes all 24 pins.
const VirtioMMIOBase = 0xd0000000

var virtioGSIs = []uint32{5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}

// VirtioDevice is one attached virtio device.
type VirtioDevice struct {
	Name      string
	Transport *mmio.Transport
	Device    virtio.Device
	closers   []io.Closer
}

// Metrics returns the device's counters and its transport's, the latter
// prefixed "transport_".
func (d *VirtioDevice) Metrics() map[string]uint64 {
	out := d.Device.Counters()
	for k, v := range d.Transport.Counters() {
		out["transport_"+k] = v
	}
	return out
}

// setupVirtio creates the configured virtio devices (announced in the ACPI
// DSDT, or without ACPI as virtio_mmio.device= arguments on the kernel
// command line). It runs after
// the irqchip and guest RAM exist and before the kernel is loaded.
func (m *Machine) setupVirtio() error {
	for i, d := range m.cfg.Disks {
		if err := m.addDisk(i, d); err != nil {
			return err
		}
	}
	for i, n := range m.cfg.NICs {
		if err := m.addNIC(i, n); err != nil {
			return err
		}
	}
	if m.cfg.RNG {
		if err := m.addVirtio("rng0", rng.New()); err != nil {
			return err
		}
	}
	if m.cfg.SCSI {
		dev := scsi.New()
		if err := m.addVirtio("scsi0", dev, dev); err != nil {
			return err
		}
		m.scsi = dev
	}
	if v := m.cfg.Vsock; v != nil {
		dev, err := vsock.New(vsock.Config{CID: v.CID, Socket: v.Socket})
		if err != nil {
			return configErr("vsock: %v", err)
		}
		if err := m.addVirtio("vsock0", dev, dev); err != nil {
			return err
		}
	}
	return nil
}

func (m *Machine) addDisk(i int, c DiskConfig) error {
	if c.Queues > m.cfg.CPUs {
		// Linux sets up at most one request queue per CPU, and a device
		// whose queues are not all set up fails at DRIVER_OK.
		return configErr("disk %d: %d queues for %d vCPUs: at most one per vCPU", i, c.Queues, m.cfg.CPUs)
	}
	opt := block.Options{Format: c.Format, ReadOnly: c.ReadOnly}
	var disk block.Disk
	if m.cfg.deferDisks != nil {
		disk = block.NewDeferred(c.Path, opt, m.cfg.deferDisks[i])
	} else {
		var err error
		if disk, err = block.Open(c.Path, opt); err != nil {
			return configErr("disk %d: %v", i, err)
		}
	}
	dev, err := blk.New(blk.Config{Disk: disk, Serial: c.Serial, Queues: c.Queues})
	if err != nil {
		_ = disk.Close() // never attached: nothing written
		return configErr("disk %d: %v", i, err)
	}
	if err := m.addVirtio(fmt.Sprintf("blk%d", i), dev, disk); err != nil {
		return err
	}
	m.disks = append(m.disks, disk)
	return nil
}

// openDeferredDisks opens (and locks) the images of an incoming
// migration's disks, at the switchover: the source has stopped, flushed
// them and let go of their locks.
func (m *Machine) openDeferredDisks() error {
	for i, d := range m.disks {
		if dd, ok := d.(*block.Deferred); ok {
			if err := dd.Open(); err != nil {
				return fmt.Errorf("disk %d: %w", i, err)
			}
		}
	}
	return nil
}

// checkDisks refuses images that are not the ones a saved VM used.
func (m *Machine) checkDisks(saved []savedDisk) error {
	if len(saved) != len(m.disks) {
		return fmt.Errorf("the saved VM has %d disks, this one %d", len(saved), len(m.disks))
	}
	for i, d := range m.disks {
		if err := saved[i].Image.Check(block.Identify(d)); err != nil {
			return fmt.Errorf("disk %d (%s): %w", i, m.cfg.Disks[i].Path, err)
		}
	}
	return nil
}

// namedDisk is an open image and what errors call it.
type namedDisk struct {
	name string
	disk block.Disk
}

// allDisks are the virtio disks' images and the hot-plugged volumes'.
func (m *Machine) allDisks() []namedDisk {
	var out []namedDisk
	for i, d := range m.disks {
		out = append(out, namedDisk{fmt.Sprintf("disk %d (%s)", i, m.cfg.Disks[i].Path), d})
	}
	if m.scsi != nil {
		disks := m.scsi.Disks()
		for _, v := range m.scsi.Volumes() {
			out = append(out, namedDisk{fmt.Sprintf("volume %q (%s)", v.Name, v.Path), disks[v.Name]})
		}
	}
	return out
}

// flushDisks makes every write the guest's disks completed durable.
func (m *Machine) flushDisks() error {
	for _, d := range m.allDisks() {
		if d.disk.ReadOnly() {
			continue
		}
		if err := d.disk.Flush(); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return nil
}

// releaseDisks flushes the disks and lets go of the writable images'
// locks, so a migration target can open them. Devices must be held.
func (m *Machine) releaseDisks() error {
	if err := m.flushDisks(); err != nil {
		return err
	}
	for _, d := range m.allDisks() {
		l, ok := d.disk.(block.Locker)
		if !ok || d.disk.ReadOnly() { // shared locks don't stand in the target's way
			continue
		}
		if err := l.Unlock(); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		m.released = append(m.released, l)
	}
	return nil
}

// retakeDisks locks the images releaseDisks let go of again.
func (m *Machine) retakeDisks() error {
	for len(m.released) > 0 {
		if err := m.released[0].Lock(); err != nil {
			return err
		}
		m.released = m.released[1:]
	}
	return nil
}

func (m *Machine) addNIC(i int, c NICConfig) error {
	var taps []*tap.Tap
	var err error
	if c.Queues > 1 {
		taps, err = tap.OpenQueues(c.Tap, c.Queues)
	} else {
		var t *tap.Tap
		t, err = tap.Open(c.Tap)
		taps = []*tap.Tap{t}
	}
	if err != nil {
		return configErr("nic %d: %v", i, err)
	}
	cfg := vnet.Config{Tap: taps[0], MAC: c.MAC, LinkDown: c.LinkDown}
	closers := []io.Closer{taps[0]}
	for _, t := range taps[1:] {
		cfg.Queues = append(cfg.Queues, t)
		closers = append(closers, t)
	}
	dev, err := vnet.New(cfg)
	if err != nil {
		for _, t := range taps {
			t.Close()
		}
		return configErr("nic %d: %v", i, err)
	}
	return m.addVirtio(fmt.Sprintf("net%d", i), dev, closers...)
}

// addVirtio places dev behind a new virtio-mmio window; closers (the
// disk, the tap) are closed with the machine, after the device stops.
func (m *Machine) addVirtio(name string, dev virtio.Device, closers ...io.Closer) error {
	n := len(m.virtio)
	if n >= len(virtioGSIs) {
		for _, c := range closers {
			_ = c.Close() // never attached: nothing written
		}
		return configErr("%s: at most %d virtio devices", name, len(virtioGSIs))
	}
	base := uint64(VirtioMMIOBase + n*mmio.Size)
	t, err := mmio.New(dev, m.Mem, m.vm, mmio.Config{Base: base, GSI: virtioGSIs[n], Logger: m.Log().With("device", name)})
	if err != nil {
		for _, c := range closers {
			_ = c.Close() // never attached: nothing written
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	m.virtio = append(m.virtio, &VirtioDevice{Name: name, Transport: t, Device: dev, closers: closers})
	if err := m.mmio.Insert(name, base, mmio.Size, t); err != nil {
		return err
	}
	if m.cfg.NoACPI {
		m.Cmdline += " " + t.Cmdline()
	}
	m.Log().Info("virtio device", "name", name, "type", dev.Type().String(), "base", hex(base), "gsi", virtioGSIs[n])
	return nil
}

// Virtio lists the attached virtio devices.
func (m *Machine) Virtio() []*VirtioDevice { return m.virtio }

// closeVirtio stops every device (before guest RAM goes away) and closes
// their disks and taps.
func (m *Machine) closeVirtio() error {
	var errs []error
	for _, d := range m.virtio {
		m.mmio.Remove(d.Transport.Base())
		errs = append(errs, d.Transport.Close())
		for _, c := range d.closers {
			errs = append(errs, c.Close())
		}
	}
	m.virtio, m.disks, m.released, m.scsi = nil, nil, nil, nil
	return errors.Join(errs...)
}

func (m *Machine) virtioStats() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, d := range m.virtio {
		out[d.Name] = d.Metrics()
	}
	return out
}

// VsockConfig is the virtio-vsock device: the guest's context ID and the
// host unix socket that multiplexes its connections (Firecracker's
// protocol: a host client connects to Socket and sends "CONNECT <port>\n";
// a guest connecting to the host's port P reaches Socket_P).
type VsockConfig struct {
	CID    uint64
	Socket string
}
