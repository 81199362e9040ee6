package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/vmm/block"
	bootdisk "github.com/kubevmm/kubevmm/vmm/boot/disk"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
)

// options splits "a,k=v,flag" at commas; ",," is a literal comma (as in
// QEMU), for paths that contain one.
func options(s string) (first string, opts []string) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			if i+1 < len(s) && s[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(s[i])
	}
	parts = append(parts, cur.String())
	return parts[0], parts[1:]
}

// disk is a parsed --disk: the VMM's disk config plus the bus, which only
// the QEMU backend lets differ from virtio.
type disk struct {
	machine.DiskConfig
	Bus string
	// Boot: the VM boots this disk's default entry (--disk PATH,boot).
	Boot bool
}

// nic is a parsed --net: plus the NIC model (QEMU backend: e1000 too).
type nic struct {
	machine.NICConfig
	Model string
}

// parseDisk parses --disk PATH[,ro][,format=raw|qcow2][,serial=S][,queues=N][,bus=virtio|sata][,boot]
// (a comma in PATH is written ",,").
func parseDisk(s string) (disk, error) {
	path, opts := options(s)
	if path == "" {
		return disk{}, fmt.Errorf("missing image path")
	}
	d := disk{DiskConfig: machine.DiskConfig{Path: path, Format: block.FormatRaw}, Bus: "virtio"}
	for _, o := range opts {
		k, v, hasV := strings.Cut(o, "=")
		switch {
		case k == "bus" && (v == "virtio" || v == "sata"):
			d.Bus = v
		case k == "ro" && !hasV:
			d.ReadOnly = true
		case k == "boot" && !hasV:
			d.Boot = true
		case k == "format" && hasV:
			f, err := block.ParseFormat(v)
			if err != nil {
				return d, err
			}
			d.Format = f
		case k == "serial" && hasV:
			if len(v) > 20 {
				return d, fmt.Errorf("serial %q is longer than 20 bytes", v)
			}
			d.Serial = v
		case k == "queues" && hasV:
			q, err := strconv.Atoi(v)
			if err != nil || q < 1 || q > blk.MaxQueues {
				return d, fmt.Errorf("queues %q: want 1..%d", v, blk.MaxQueues)
			}
			d.Queues = q
		default:
			return d, fmt.Errorf("unknown option %q (want ro, format=raw|qcow2, serial=S, queues=N, bus=virtio|sata, boot)", o)
		}
	}
	if d.Queues > 1 && d.Bus != "virtio" {
		return d, fmt.Errorf("queues=%d: a %s disk has one queue", d.Queues, d.Bus)
	}
	return d, nil
}

// loadBootDisk opens the boot disk read-only (the VM opens it again as
// one of its disks) and reads its default boot entry.
func loadBootDisk(spec string) (*bootdisk.Boot, error) {
	d, err := parseDisk(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	img, err := block.Open(d.Path, block.Options{Format: d.Format, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = img.Close() }() // read-only: nothing to flush
	b, err := bootdisk.Find(img, int64(img.Size()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Path, err)
	}
	return b, nil
}

// parseNIC parses --net tap=NAME,mac=MAC[,model=virtio|e1000][,queues=N].
func parseNIC(s string) (nic, error) {
	n := nic{Model: "virtio"}
	for _, o := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "model":
			if v != "virtio" && v != "e1000" {
				return n, fmt.Errorf("model %q: want virtio or e1000", v)
			}
			n.Model = v
		case "tap":
			if v == "" || len(v) > 15 {
				return n, fmt.Errorf("tap name %q: want 1..15 characters", v)
			}
			n.Tap = v
		case "mac":
			m, err := link.ParseMAC(v)
			if err != nil {
				return n, err
			}
			n.MAC = m
		case "queues":
			q, err := strconv.Atoi(v)
			if err != nil || q < 1 || q > vnet.MaxPairs {
				return n, fmt.Errorf("queues %q: want 1..%d", v, vnet.MaxPairs)
			}
			n.Queues = q
		default:
			return n, fmt.Errorf("unknown option %q (want tap=NAME,mac=MAC[,model=virtio|e1000][,queues=N])", o)
		}
	}
	if n.Tap == "" || n.MAC == nil {
		return n, fmt.Errorf("need both tap=NAME and mac=MAC")
	}
	return n, nil
}

// parseVsock parses --vsock cid=N,socket=PATH.
func parseVsock(s string) (machine.VsockConfig, error) {
	var v machine.VsockConfig
	for _, o := range strings.Split(s, ",") {
		k, val, _ := strings.Cut(o, "=")
		switch k {
		case "cid":
			cid, err := strconv.ParseUint(val, 10, 32)
			if err != nil || cid < 3 {
				return v, fmt.Errorf("cid %q: want a number of at least 3 (0-2 are reserved)", val)
			}
			v.CID = cid
		case "socket":
			if val == "" {
				return v, fmt.Errorf("empty socket path")
			}
			v.Socket = val
		default:
			return v, fmt.Errorf("unknown option %q (want cid=N,socket=PATH)", o)
		}
	}
	if v.CID == 0 || v.Socket == "" {
		return v, fmt.Errorf("need both cid=N and socket=PATH")
	}
	return v, nil
}

// devices are the parsed device flags.
type devices struct {
	disks []disk
	nics  []nic
	rng   bool
	scsi  bool
	vsock *machine.VsockConfig
}

// parseDevices parses the device flags.
func parseDevices(f *runFlags) (devices, error) {
	var d devices
	for _, s := range f.disks {
		x, err := parseDisk(s)
		if err != nil {
			return d, usagef("run: --disk %q: %v", s, err)
		}
		d.disks = append(d.disks, x)
	}
	for _, s := range f.nics {
		n, err := parseNIC(s)
		if err != nil {
			return d, usagef("run: --net %q: %v", s, err)
		}
		d.nics = append(d.nics, n)
	}
	d.rng, d.scsi = f.rng, f.scsi
	if f.vsock != "" {
		v, err := parseVsock(f.vsock)
		if err != nil {
			return d, usagef("run: --vsock %q: %v", f.vsock, err)
		}
		d.vsock = &v
	}
	return d, nil
}

// forVMM checks the devices against what the kubevmm VMM emulates and
// puts them in its configuration.
func (d devices) forVMM(c *machine.Config) error {
	for i, x := range d.disks {
		if x.Bus != "virtio" {
			return usagef("run: --disk %d: bus=%s needs --backend qemu (the kubevmm VMM has virtio disks)", i, x.Bus)
		}
		c.Disks = append(c.Disks, x.DiskConfig)
	}
	for i, n := range d.nics {
		if n.Model != "virtio" {
			return usagef("run: --net %d: model=%s needs --backend qemu (the kubevmm VMM has virtio-net)", i, n.Model)
		}
		c.NICs = append(c.NICs, n.NICConfig)
	}
	c.RNG, c.Vsock, c.SCSI = d.rng, d.vsock, d.scsi
	return nil
}
