package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

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
	Target int
	// Path is the image QEMU opens; with File it only names the image in
	// messages.
	Path string
	// File, when set, is the image already open (a regular file or a block
	// device): QEMU gets a copy of the descriptor in an fdset of its own and
	// opens it from there, so it needs no access to the image's path (a
	// block device it was not given). The caller keeps File and closes it.
	// QEMU opens from an fdset only with the descriptor's own access mode,
	// so the image's file node follows File's (a read-write File under a
	// ReadOnly disk: the format node and the device are read-only), and a
	// writable disk needs a read-write File.
	File     *os.File
	Format   DiskFormat // "" is raw
	ReadOnly bool
	Serial   string // cut to the 36 characters scsi-hd takes
}

func (d SCSIDisk) name() string {
	if d.Path == "" && d.File != nil {
		return d.File.Name()
	}
	return d.Path
}

// the block nodes and the device of target t: names QEMU accepts whatever
// the caller calls the volume
func hotplugIDs(t int) (file, node, dev string) {
	return fmt.Sprintf("hp%d-file", t), fmt.Sprintf("hp%d", t), fmt.Sprintf("hp%d-dev", t)
}

// AttachSCSIDisk opens d's image (blockdev-add: a file node and a format
// node) and plugs an scsi-hd on it into the controller at d.Target, LUN 0
// (device_add); the guest's driver is told to rescan. It returns the
// image's virtual size. On failure nothing stays attached, and a File's
// fdset is gone.
func (vm *VM) AttachSCSIDisk(ctx context.Context, d SCSIDisk) (size uint64, err error) {
	if d.Target < 0 || d.Target >= SCSITargets {
		return 0, fmt.Errorf("qemu %s: SCSI target %d: want 0..%d", vm.cfg.Name, d.Target, SCSITargets-1)
	}
	if d.Path == "" && d.File == nil {
		return 0, fmt.Errorf("qemu %s: SCSI target %d: no image path", vm.cfg.Name, d.Target)
	}
	format := d.Format
	if format == "" {
		format = FormatRaw
	}
	file, node, dev := hotplugIDs(d.Target)
	fileNode := map[string]any{"driver": "file", "filename": d.Path, "node-name": file, "read-only": d.ReadOnly}
	if d.File != nil {
		driver, set, writable, aerr := vm.addFdset(ctx, d)
		if aerr != nil {
			return 0, aerr
		}
		defer func() {
			if err != nil {
				// By its id: the target may hold another disk's fdset.
				err = errors.Join(err, vm.removeFdset(ctx, set))
			}
		}()
		fileNode["driver"], fileNode["filename"], fileNode["read-only"] = driver, fmt.Sprintf("/dev/fdset/%d", set), !writable
	}
	if err := vm.exec(ctx, "blockdev-add", fileNode, nil); err != nil {
		if d.File != nil { // QEMU's message names the fdset only
			err = fmt.Errorf("image %s: %w", d.name(), err)
		}
		return 0, err
	}
	if err := vm.exec(ctx, "blockdev-add", map[string]any{"driver": string(format), "file": file, "node-name": node, "read-only": d.ReadOnly}, nil); err != nil {
		return 0, errors.Join(err, vm.exec(ctx, "blockdev-del", map[string]any{"node-name": file}, nil))
	}
	// The size is known before the guest sees the disk: a failure here
	// leaves nothing plugged in.
	size, err = vm.virtualSize(ctx, node)
	if err != nil {
		return 0, errors.Join(err, vm.delNodes(ctx, d.Target))
	}
	args := map[string]any{"driver": "scsi-hd", "id": dev, "drive": node, "bus": SCSIController + ".0", "scsi-id": d.Target, "lun": 0}
	if d.Serial != "" {
		args["serial"] = d.Serial[:min(len(d.Serial), maxSCSISerial)]
	}
	if err := vm.exec(ctx, "device_add", args, nil); err != nil {
		return 0, errors.Join(err, vm.delNodes(ctx, d.Target))
	}
	return size, nil
}

// virtualSize is the size of the image behind block node node.
func (vm *VM) virtualSize(ctx context.Context, node string) (uint64, error) {
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
	return 0, fmt.Errorf("qemu %s: block node %s not found after adding it", vm.cfg.Name, node)
}

// addFdset hands d.File to QEMU in a new fdset, tagged (opaque) with the
// target's file node name so that removeFdsets finds it again. It returns
// the file node's driver for the kind of file, the fdset's id, and whether
// the descriptor is open for writing.
func (vm *VM) addFdset(ctx context.Context, d SCSIDisk) (driver string, set int64, writable bool, err error) {
	fail := func(err error) (string, int64, bool, error) {
		return "", 0, false, fmt.Errorf("qemu %s: image %s: %w", vm.cfg.Name, d.name(), err)
	}
	st, err := d.File.Stat()
	if err != nil {
		return fail(err)
	}
	switch m := st.Mode(); {
	case m.IsRegular():
		driver = "file"
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		driver = "host_device"
	default:
		return fail(fmt.Errorf("%v is neither a regular file nor a block device", m.Type()))
	}
	rc, err := d.File.SyscallConn()
	if err != nil {
		return fail(err)
	}
	var flags int
	if cerr := rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); cerr != nil {
		return fail(cerr)
	}
	if err != nil {
		return fail(fmt.Errorf("access mode: %w", err))
	}
	writable = flags&unix.O_ACCMODE == unix.O_RDWR
	if !writable && !d.ReadOnly {
		return fail(errors.New("a writable disk needs a descriptor open for reading and writing"))
	}

	file, _, _ := hotplugIDs(d.Target)
	ctx, cancel := context.WithTimeout(ctx, vm.cfg.commandTimeout())
	defer cancel()
	c, err := vm.Monitor(ctx)
	if err != nil {
		return "", 0, false, err
	}
	var added struct {
		FdsetID int64 `json:"fdset-id"`
	}
	if err := c.ExecuteWithFile(ctx, "add-fd", map[string]any{"opaque": file}, &added, d.File); err != nil {
		return fail(err)
	}
	return driver, added.FdsetID, writable, nil
}

// removeFdsets removes the fdsets handed over for target's image. QEMU
// closes its descriptors once no block node uses them (and, QEMU 7.2,
// only while the guest runs: a paused one keeps them until the next
// removal or monitor disconnect).
func (vm *VM) removeFdsets(ctx context.Context, target int) error {
	file, _, _ := hotplugIDs(target)
	type fdInfo struct {
		Opaque string `json:"opaque"`
	}
	var sets []struct {
		FdsetID int64    `json:"fdset-id"`
		FDs     []fdInfo `json:"fds"`
	}
	if err := vm.exec(ctx, "query-fdsets", nil, &sets); err != nil {
		return err
	}
	var errs []error
	for _, s := range sets {
		if slices.ContainsFunc(s.FDs, func(fd fdInfo) bool { return fd.Opaque == file }) {
			errs = append(errs, vm.removeFdset(ctx, s.FdsetID))
		}
	}
	return errors.Join(errs...)
}

// removeFdset removes fdset set (all its descriptors).
func (vm *VM) removeFdset(ctx context.Context, set int64) error {
	return vm.exec(ctx, "remove-fd", map[string]any{"fdset-id": set}, nil)
}

// DetachSCSIDisk unplugs the disk at target (device_del, then waits for
// QEMU's DEVICE_DELETED) and closes its image (blockdev-del), which QEMU
// flushes first; an image handed over as a File has its fdset removed.
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
	if err := vm.delNodes(ctx, target); err != nil {
		return err
	}
	return vm.removeFdsets(ctx, target)
}

// delNodes closes target's block nodes, the format node before its file.
func (vm *VM) delNodes(ctx context.Context, target int) error {
	file, node, _ := hotplugIDs(target)
	if err := vm.exec(ctx, "blockdev-del", map[string]any{"node-name": node}, nil); err != nil {
		return err
	}
	return vm.exec(ctx, "blockdev-del", map[string]any{"node-name": file}, nil)
}
