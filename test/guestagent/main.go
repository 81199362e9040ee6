// Command kubevmm-agent is the test guest's guest agent: a small static
// program in the initramfs (/bin/kubevmm-agent, started by /init) that
// serves the QEMU guest agent protocol subset KubeVirt uses (package
// vmm/guestagent has the commands) on vsock port guestagent.Port. It is
// a test-guest program: users' guests run qemu-ga. With -ssh ADDR it is
// the test guest's SSH server instead (ssh.go).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// run returns only when the agent cannot serve.
func main() {
	err := run()
	fmt.Fprintf(os.Stderr, "kubevmm-agent: %v\n", err)
	os.Exit(1)
}

func run() error {
	// For tests on the host: a unix socket instead of vsock, and a process
	// of theirs in init's place for guest-shutdown.
	unixPath := flag.String("unix", "", "listen on this unix socket instead of vsock (tests)")
	initPID := flag.Int("init-pid", 1, "the process guest-shutdown signals (tests)")
	sshAddr := flag.String("ssh", "", "serve SSH on this address (\":22\") instead of the agent")
	authorizedKeys := flag.String("authorized-keys", "/root/.ssh/authorized_keys", "the keys -ssh accepts for root")
	home := flag.String("home", "/root", "with -ssh: root's home, where commands run")
	meta := flag.String("cloud-init-meta", "", "with -ssh: first write the SSH keys of this cloud-init metadata file to -authorized-keys")
	flag.Parse()
	if *sshAddr != "" {
		return serveSSH(*sshAddr, *authorizedKeys, *home, *meta)
	}
	a := newAgent(os.Stdout)
	a.signalInit = func(s unix.Signal) error { return unix.Kill(*initPID, s) }
	if *unixPath != "" {
		return serveUnix(a, *unixPath)
	}
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
	// Nothing on the console until a shutdown: tests read the guest's
	// lines there, and a line at a random moment would split them.
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
			defer func() { _ = c.Close() }() // the stream is over either way
			// A connection ends with its host client (or a transport
			// reset after a migration); the next one is accepted anew.
			_ = a.serve(c)
		}()
	}
}

func serveUnix(a *agent, path string) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer func() { _ = c.Close() }() // the stream is over either way
			_ = a.serve(c)
		}()
	}
}

func serveSSH(addr, authorizedKeys, home, meta string) error {
	if meta != "" {
		if err := installCloudInitKeys(meta, authorizedKeys); err != nil {
			return fmt.Errorf("cloud-init SSH keys: %w", err)
		}
	}
	s, err := newSSHServer(authorizedKeys, "/bin/sh", home)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if strings.HasSuffix(addr, ":0") {
		// Tests ask for any port and read which; the guest's console gets
		// no line at a random moment.
		fmt.Printf("kubevmm-agent: ssh on %s\n", l.Addr())
	}
	return s.serve(l)
}
