package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// findLoop is the loop device backed by file ("" when none is, or the
// file does not exist), matched by device and inode numbers.
func findLoop(file string) (string, error) {
	fi, err := os.Stat(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: no stat data", file)
	}
	// Bound loop devices have a loop/ directory in sysfs.
	bound, err := filepath.Glob("/sys/block/loop*/loop")
	if err != nil {
		return "", err
	}
	for _, b := range bound {
		dev := "/dev/" + filepath.Base(filepath.Dir(b))
		info, err := loopStatus(dev)
		if err != nil {
			continue // detached meanwhile, or not ours to read
		}
		if info.Device == st.Dev && info.Inode == st.Ino {
			return dev, nil
		}
	}
	return "", nil
}

func loopStatus(dev string) (*unix.LoopInfo64, error) {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }()
	return unix.IoctlLoopGetStatus64(fd)
}

// attachLoop binds file to a free loop device and returns the device.
func attachLoop(file string) (string, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening /dev/loop-control: %w", err)
	}
	defer func() { _ = unix.Close(ctl) }()
	bf, err := unix.Open(file, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", file, err)
	}
	defer func() { _ = unix.Close(bf) }()
	// Another process (the kubelet's losetup) may take the free device
	// between GET_FREE and CONFIGURE: the kernel answers EBUSY and the next
	// free one is asked for.
	for range 8 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(bf)} //nolint:gosec // a file descriptor is not negative
		copy(cfg.Info.File_name[:], file)
		err = unix.IoctlLoopConfigure(fd, &cfg)
		_ = unix.Close(fd)
		if errors.Is(err, unix.EBUSY) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("attaching %s to %s: %w", file, dev, err)
		}
		return dev, nil
	}
	return "", fmt.Errorf("attaching %s: every free loop device was taken first", file)
}

// releaseLoop detaches file's loop device unless a mount still shows it
// (the same volume published at another target).
func releaseLoop(file string) error {
	dev, err := findLoop(file)
	if err != nil || dev == "" {
		return err
	}
	ms, err := mounts()
	if err != nil {
		return err
	}
	name := "/" + strings.TrimPrefix(dev, "/dev/")
	for _, m := range ms {
		if m.fstype == "devtmpfs" && m.root == name {
			return nil
		}
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dev, err)
	}
	defer func() { _ = unix.Close(fd) }()
	// A device still open elsewhere is detached at its last close.
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detaching %s: %w", dev, err)
	}
	return nil
}

// resizeLoop makes file's loop device, if it has one, take the file's
// size.
func resizeLoop(file string) error {
	dev, err := findLoop(file)
	if err != nil || dev == "" {
		return err
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dev, err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("resizing %s: %w", dev, err)
	}
	return nil
}
