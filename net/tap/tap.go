// Package tap opens Linux tap devices for virtio-net: non-blocking, with
// the 12-byte virtio-net header (IFF_VNET_HDR) in front of every frame, so
// checksum and segmentation offloads pass between guest and host as
// metadata instead of being done in the guest.
package tap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// VnetHdrSize is the virtio-net header the tap exchanges with every frame
// (struct virtio_net_hdr_v1, including num_buffers).
const VnetHdrSize = 12

// Offload flags for SetOffload (TUN_F_*): what the tap may hand the VMM
// without doing it first.
const (
	OffloadCsum   = unix.TUN_F_CSUM
	OffloadTSO4   = unix.TUN_F_TSO4
	OffloadTSO6   = unix.TUN_F_TSO6
	OffloadTSOECN = unix.TUN_F_TSO_ECN
)

// Tap is an open tap queue.
type Tap struct {
	fd    int
	name  string
	multi bool // one of the queues of a multi-queue tap
}

// Open attaches to the tap device name, creating it if it doesn't exist
// (a device created here disappears when the last user closes it).
func Open(name string) (*Tap, error) {
	return open(name, false)
}

// OpenQueues attaches n queues to the multi-queue tap device name,
// creating it if it doesn't exist: the kernel spreads the frames it sends
// across the queues by flow, and each queue is read and written on its own.
// A tap created without multi-queue can't be opened this way.
func OpenQueues(name string, n int) ([]*Tap, error) {
	if n < 1 {
		return nil, fmt.Errorf("tap %s: %d queues", name, n)
	}
	var ts []*Tap
	for i := 0; i < n; i++ {
		t, err := open(name, true)
		if err != nil {
			for _, t := range ts {
				t.Close()
			}
			return nil, fmt.Errorf("queue %d: %w", i, err)
		}
		ts = append(ts, t)
	}
	return ts, nil
}

func open(name string, multi bool) (*Tap, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap name %q: must be 1..%d bytes", name, unix.IFNAMSIZ-1)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	t := &Tap{fd: fd, name: name, multi: multi}
	if err := t.setup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return t, nil
}

func (t *Tap) setup() error {
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return fmt.Errorf("tap %s: %w", t.name, err)
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if t.multi {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(t.fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("TUNSETIFF %s: %w", t.name, err)
	}
	t.name = ifr.Name()
	if err := unix.IoctlSetPointerInt(t.fd, unix.TUNSETVNETHDRSZ, VnetHdrSize); err != nil {
		return fmt.Errorf("TUNSETVNETHDRSZ %s: %w", t.name, err)
	}
	// virtio 1.x headers are little-endian whatever the host is.
	if err := unix.IoctlSetPointerInt(t.fd, unix.TUNSETVNETLE, 1); err != nil {
		return fmt.Errorf("TUNSETVNETLE %s: %w", t.name, err)
	}
	return t.SetOffload(0)
}

// Name is the interface name.
func (t *Tap) Name() string { return t.name }

// Fd is the non-blocking descriptor: read gets one frame with its header,
// write sends one.
func (t *Tap) Fd() int { return t.fd }

// SetOffload says which offloads the reader (the guest) accepts: frames
// the host sends may then carry partial checksums (OffloadCsum) or be TSO
// super-frames.
func (t *Tap) SetOffload(flags int) error {
	if err := unix.IoctlSetInt(t.fd, unix.TUNSETOFFLOAD, flags); err != nil {
		return fmt.Errorf("TUNSETOFFLOAD %s %#x: %w", t.name, flags, err)
	}
	return nil
}

// SetQueueEnabled attaches (true) or detaches a queue of a multi-queue
// tap: the kernel sends frames only to attached queues, so a queue the
// guest does not use yet must not be attached.
func (t *Tap) SetQueueEnabled(on bool) error {
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return fmt.Errorf("tap %s: %w", t.name, err)
	}
	flag := uint16(unix.IFF_DETACH_QUEUE)
	if on {
		flag = unix.IFF_ATTACH_QUEUE
	}
	ifr.SetUint16(flag)
	if err := unix.IoctlIfreq(t.fd, unix.TUNSETQUEUE, ifr); err != nil {
		return fmt.Errorf("TUNSETQUEUE %s %#x: %w", t.name, flag, err)
	}
	return nil
}

// Close detaches from the tap.
func (t *Tap) Close() error {
	if t.fd < 0 {
		return nil
	}
	err := unix.Close(t.fd)
	t.fd = -1
	return err
}
