// Command kubevmm-agent is the test guest's guest agent: a small static
// program in the initramfs (/bin/kubevmm-agent, started by /init) that
// serves the QEMU guest agent protocol subset KubeVirt uses (package
// vmm/guestagent has the commands) on vsock port guestagent.Port. It is
// a test-guest program: users' guests run qemu-ga.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubevmm-agent: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("vsock socket (is there a virtio-vsock device?): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: ga.Port}); err != nil {
		return fmt.Errorf("binding vsock port %d: %w", ga.Port, err)
	}
	if err := unix.Listen(fd, 4); err != nil {
		return fmt.Errorf("listening on vsock port %d: %w", ga.Port, err)
	}
	fmt.Printf("kubevmm-agent: listening on vsock port %d\n", ga.Port)
	a := newAgent(os.Stdout)
	for {
		nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if err != nil {
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			return fmt.Errorf("accepting on vsock port %d: %w", ga.Port, err)
		}
		go func() {
			c := os.NewFile(uintptr(nfd), "vsock")
			defer c.Close()
			// A connection ends with its host client (or a transport
			// reset after a migration); the next one is accepted anew.
			_ = a.serve(c)
		}()
	}
}
