package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ServerPort and ClientPort are DHCP's UDP ports.
const (
	ServerPort = 67
	ClientPort = 68
)

// Listen opens the server's UDP socket on port 67 of the interface
// ifname only (SO_BINDTODEVICE), able to broadcast. The socket belongs to
// the network namespace of the calling thread, where it stays: call it
// from inside the namespace of ifname.
func Listen(ifname string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.BindToDevice(int(fd), ifname); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
		})
		return errors.Join(err, serr)
	}}
	c, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", ServerPort))
	if err != nil {
		return nil, fmt.Errorf("dhcp: listening on %s: %w", ifname, err)
	}
	return c, nil
}

// Serve answers the client mac on conn with lease l until conn is closed
// (then it returns nil). Replies are broadcast: the client has no
// address yet, and the socket is bound to the one interface. A request
// that does not parse is dropped.
func Serve(conn net.PacketConn, mac net.HardwareAddr, l *Lease) error {
	buf := make([]byte, 1500)
	to := &net.UDPAddr{IP: net.IPv4bcast, Port: ClientPort}
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dhcp: reading: %w", err)
		}
		m, err := Parse(buf[:n])
		if err != nil {
			continue
		}
		if r := Reply(m, mac, l); r != nil {
			// A reply that cannot be sent now is lost as on a wire:
			// the client retransmits.
			if _, err := conn.WriteTo(r, to); errors.Is(err, net.ErrClosed) {
				return nil
			}
		}
	}
}
