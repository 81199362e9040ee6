package machine

import (
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

// addVirtio creates the configured virtio devices (announced in the ACPI
// DSDT, or without ACPI as virtio_mmio.device= arguments on the kernel
// command line: kernelArgs). It runs after the irqchip and guest RAM
// exist and before the kernel is loaded.
func (d *deviceManager) addVirtio() error {
	for i, c := range d.cfg.disks {
		if err := d.addDisk(i, c); err != nil {
			return err
		}
	}
	for i, n := range d.cfg.nics {
		if err := d.addNIC(i, n); err != nil {
			return err
		}
	}
	if d.cfg.rng {
		if err := d.attach("rng0", rng.New()); err != nil {
			return err
		}
	}
	if d.cfg.scsi {
		dev := scsi.New()
		if err := d.attach("scsi0", dev, dev); err != nil {
			return err
		}
		d.scsi = dev
	}
	if v := d.cfg.vsock; v != nil {
		dev, err := vsock.New(vsock.Config{CID: v.CID, Socket: v.Socket})
		if err != nil {
			return configErr("vsock: %v", err)
		}
		if err := d.attach("vsock0", dev, dev); err != nil {
			return err
		}
	}
	return nil
}

func (d *deviceManager) addDisk(i int, c DiskConfig) error {
	if c.Queues > d.cfg.cpus {
		// Linux sets up at most one request queue per CPU, and a device
		// whose queues are not all set up fails at DRIVER_OK.
		return configErr("disk %d: %d queues for %d vCPUs: at most one per vCPU", i, c.Queues, d.cfg.cpus)
	}
	opt := block.Options{Format: c.Format, ReadOnly: c.ReadOnly}
	var disk block.Disk
	if d.cfg.deferDisks != nil {
		disk = block.NewDeferred(c.Path, opt, d.cfg.deferDisks[i])
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
	if err := d.attach(fmt.Sprintf("blk%d", i), dev, disk); err != nil {
		return err
	}
	d.disks = append(d.disks, disk)
	return nil
}

func (d *deviceManager) addNIC(i int, c NICConfig) error {
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
	return d.attach(fmt.Sprintf("net%d", i), dev, closers...)
}

// attach places dev behind a new virtio-mmio window; closers (the
// disk, the tap) are closed with the machine, after the device stops.
func (d *deviceManager) attach(name string, dev virtio.Device, closers ...io.Closer) error {
	n := len(d.virtio)
	if n >= len(virtioGSIs) {
		for _, c := range closers {
			_ = c.Close() // never attached: nothing written
		}
		return configErr("%s: at most %d virtio devices", name, len(virtioGSIs))
	}
	base := uint64(VirtioMMIOBase + n*mmio.Size)
	t, err := mmio.New(dev, d.mem, d.vm, mmio.Config{Base: base, GSI: virtioGSIs[n], Logger: d.log.With("device", name)})
	if err != nil {
		for _, c := range closers {
			_ = c.Close() // never attached: nothing written
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	d.virtio = append(d.virtio, &VirtioDevice{Name: name, Transport: t, Device: dev, closers: closers})
	if err := d.mmio.Insert(name, base, mmio.Size, t); err != nil {
		return err
	}
	d.cmdline = append(d.cmdline, t.Cmdline())
	d.log.Info("virtio device", "name", name, "type", dev.Type().String(), "base", hex(base), "gsi", virtioGSIs[n])
	return nil
}

// resetVirtio resets every virtio device, as the guest's driver writing
// 0 to its status would; backends (disk images, taps) stay open.
func (d *deviceManager) resetVirtio() {
	for _, v := range d.virtio {
		v.Transport.Reset()
	}
}

// VsockConfig is the virtio-vsock device: the guest's context ID and the
// host unix socket that multiplexes its connections (Firecracker's
// protocol: a host client connects to Socket and sends "CONNECT <port>\n";
// a guest connecting to the host's port P reaches Socket_P).
type VsockConfig struct {
	CID    uint64
	Socket string
}
