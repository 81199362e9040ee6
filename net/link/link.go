// Package link sets up the host side of VM networking with netlink: network
// namespaces, moving links between them, addresses, and Linux bridges for
// tap devices.
package link

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Netns is a named network namespace.
type Netns struct {
	Name   string
	handle netns.NsHandle
}

// NewNetns creates the named namespace (like `ip netns add`) without
// moving the caller into it.
func NewNetns(name string) (*Netns, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name) // switches this thread into it
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		// this thread is stuck in the new namespace: let it die with
		// the goroutine instead of returning it to the scheduler
		runtime.LockOSThread()
		h.Close()
		return nil, fmt.Errorf("return from netns %s: %w", name, err)
	}
	return &Netns{Name: name, handle: h}, nil
}

// Delete removes the namespace (its links go back or away with it).
func (n *Netns) Delete() error {
	n.handle.Close()
	if err := netns.DeleteNamed(n.Name); err != nil {
		return fmt.Errorf("delete netns %s: %w", n.Name, err)
	}
	return nil
}

// Do runs f on a thread inside the namespace. Sockets f opens stay in
// the namespace after it returns.
func (n *Netns) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("leave netns %s: %w", n.Name, err)) // thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return ferr
}

// Handle is a netlink handle that works inside the namespace.
func (n *Netns) Handle() (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %s: %w", n.Name, err)
	}
	return h, nil
}

// MoveTo moves the link name from the caller's namespace into n.
func MoveTo(name string, n *Netns) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkSetNsFd(l, int(n.handle)); err != nil {
		return fmt.Errorf("move %s to netns %s: %w", name, n.Name, err)
	}
	return nil
}

// Up gives link name the address cidr (e.g. "10.0.0.1/24", empty for
// none) and sets it up, using netlink handle h (nil: the caller's
// namespace).
func Up(h *netlink.Handle, name, cidr string) error {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(); err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		defer h.Close()
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if cidr != "" {
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			return fmt.Errorf("address %q: %w", cidr, err)
		}
		if err := h.AddrAdd(l, a); err != nil {
			return fmt.Errorf("add %s to %s: %w", cidr, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// EnsureBridge creates the Linux bridge name if missing and sets it up.
func EnsureBridge(h *netlink.Handle, name string) error {
	if _, err := h.LinkByName(name); err == nil {
		return Up(h, name, "")
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("create bridge %s: %w", name, err)
	}
	return Up(h, name, "")
}

// Attach enslaves link name to bridge br and sets it up.
func Attach(h *netlink.Handle, name, br string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	b, err := h.LinkByName(br)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", br, err)
	}
	if err := h.LinkSetMaster(l, b); err != nil {
		return fmt.Errorf("attach %s to %s: %w", name, br, err)
	}
	return h.LinkSetUp(l)
}

// ParseMAC parses a unicast MAC address.
func ParseMAC(s string) (net.HardwareAddr, error) {
	m, err := net.ParseMAC(s)
	if err != nil {
		return nil, err
	}
	if len(m) != 6 {
		return nil, fmt.Errorf("MAC %q: want 6 bytes", s)
	}
	if m[0]&1 != 0 {
		return nil, fmt.Errorf("MAC %s is a multicast address", s)
	}
	return m, nil
}
