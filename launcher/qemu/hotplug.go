package qemu

import (
	"context"
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/launcher/qmp"
)

// SCSIController is the id of the virtio-scsi-pci controller Config.SCSI
// adds.
const SCSIController = "scsi0"

// SCSITargets is how many targets hot-plugged disks use (0..SCSITargets-1,
// LUN 0 each), as many as the kubevmm VMM's controller has.
const SCSITargets = 16

// maxSCSISerial is the longest serial QEMU's scsi-hd takes.
const maxSCSISerial = 36

// SCSIDisk is a disk image hot-plugged at a target of the SCSI controller.
type SCSIDisk struct {
	Target   int
	Path     string
	Format   DiskFormat // "" is raw
	ReadOnly bool
	Serial   string // cut to the 36 characters scsi-hd takes
}

// the block nodes and the device of target t: names QEMU accepts whatever
// the caller calls the volume
func hotplugIDs(t int) (file, node, dev string) {
	return fmt.Sprintf("hp%d-file", t), fmt.Sprintf("hp%d", t), fmt.Sprintf("hp%d-dev", t)
}

// AttachSCSIDisk opens d's image (blockdev-add: a file node and a format
// node) and plugs an scsi-hd on it into the controller at d.Target, LUN 0
// (device_add); the guest's driver is told to rescan. It returns the
// image's virtual size. On failure nothing stays attached.
func (vm *VM) AttachSCSIDisk(ctx context.Context, d SCSIDisk) (uint64, error) {
	if d.Target < 0 || d.Target >= SCSITargets {
		return 0, fmt.Errorf("qemu %s: SCSI target %d: want 0..%d", vm.cfg.Name, d.Target, SCSITargets-1)
	}
	if d.Path == "" {
		return 0, fmt.Errorf("qemu %s: SCSI target %d: no image path", vm.cfg.Name, d.Target)
	}
	format := d.Format
	if format == "" {
		format = FormatRaw
	}
	file, node, dev := hotplugIDs(d.Target)
	if err := vm.exec(ctx, "blockdev-add", map[string]any{"driver": "file", "filename": d.Path, "node-name": file, "read-only": d.ReadOnly}, nil); err != nil {
		return 0, err
	}
	if err := vm.exec(ctx, "blockdev-add", map[string]any{"driver": string(format), "file": file, "node-name": node, "read-only": d.ReadOnly}, nil); err != nil {
		return 0, errors.Join(err, vm.exec(ctx, "blockdev-del", map[string]any{"node-name": file}, nil))
	}
	args := map[string]any{"driver": "scsi-hd", "id": dev, "drive": node, "bus": SCSIController + ".0", "scsi-id": d.Target, "lun": 0}
	if d.Serial != "" {
		args["serial"] = d.Serial[:min(len(d.Serial), maxSCSISerial)]
	}
	if err := vm.exec(ctx, "device_add", args, nil); err != nil {
		return 0, errors.Join(err, vm.delNodes(ctx, d.Target))
	}
	var nodes []struct {
		NodeName string `json:"node-name"`
		Image    struct {
			VirtualSize uint64 `json:"virtual-size"`
		} `json:"image"`
	}
	if err := vm.exec(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
		return 0, err
	}
	for _, n := range nodes {
		if n.NodeName == node {
			return n.Image.VirtualSize, nil
		}
	}
	return 0, fmt.Errorf("qemu %s: block node %s not found after attaching it", vm.cfg.Name, node)
}

// DetachSCSIDisk unplugs the disk at target (device_del, then waits for
// QEMU's DEVICE_DELETED) and closes its image (blockdev-del), which QEMU
// flushes first.
func (vm *VM) DetachSCSIDisk(ctx context.Context, target int) error {
	_, _, dev := hotplugIDs(target)
	c, err := vm.Monitor(ctx)
	if err != nil {
		return err
	}
	// Subscribe first, then act: the event may come before device_del's reply.
	sub := c.Subscribe(qmp.EventDeviceDeleted)
	defer sub.Close()
	if err := vm.exec(ctx, "device_del", map[string]any{"id": dev}, nil); err != nil {
		return err
	}
	if _, err := sub.WaitFor(ctx, func(ev qmp.Event) bool {
		var data struct {
			Device string `json:"device"`
		}
		return ev.DecodeData(&data) == nil && data.Device == dev
	}); err != nil {
		return fmt.Errorf("qemu %s: waiting for %s to be unplugged: %w", vm.cfg.Name, dev, err)
	}
	return vm.delNodes(ctx, target)
}

// delNodes closes target's block nodes, the format node before its file.
func (vm *VM) delNodes(ctx context.Context, target int) error {
	file, node, _ := hotplugIDs(target)
	if err := vm.exec(ctx, "blockdev-del", map[string]any{"node-name": node}, nil); err != nil {
		return err
	}
	return vm.exec(ctx, "blockdev-del", map[string]any{"node-name": file}, nil)
}
