// Package unixsock listens on unix sockets the way a VMM's sockets (API,
// console, vsock, migration) need: a socket file left by a process that
// died is replaced, but one that a running process still serves is not
// taken from it, and nothing that isn't a socket is ever removed.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// Listen listens on path, first removing a stale socket file there.
func Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another process serves this socket", path)
		}
		// Only "nobody listens" proves it stale; e.g. EACCES does not.
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("listen on %s: probing the existing socket: %w", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("listen on %s: removing the stale socket: %w", path, err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}
