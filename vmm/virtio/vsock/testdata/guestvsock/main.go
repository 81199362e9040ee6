// Command guestvsock is the guest side of the vsock boot test (busybox has
// no AF_VSOCK tool):
//
//	guestvsock echo PORT      accept one stream, echo it back until EOF
//	guestvsock send CID PORT  connect, send stdin, half-close, drain replies
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "guestvsock: "+format+"\n", a...)
	os.Exit(1)
}

func num(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		die("bad number %q", s)
	}
	return uint32(n)
}

type sock int

func (s sock) Read(b []byte) (int, error) {
	n, err := unix.Read(int(s), b)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	if n < 0 {
		n = 0
	}
	return n, err
}

func (s sock) Write(b []byte) (int, error) { return unix.Write(int(s), b) }

func main() {
	if len(os.Args) < 3 {
		die("usage: guestvsock echo PORT | send CID PORT")
	}
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err != nil {
		die("socket: %v", err)
	}
	switch os.Args[1] {
	case "echo":
		if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: num(os.Args[2])}); err != nil {
			die("bind: %v", err)
		}
		if err := unix.Listen(fd, 1); err != nil {
			die("listen: %v", err)
		}
		fmt.Println("KV vsock_listening=1")
		c, _, err := unix.Accept(fd)
		if err != nil {
			die("accept: %v", err)
		}
		n, err := io.Copy(sock(c), sock(c))
		if err != nil {
			die("echo: %v", err)
		}
		unix.Shutdown(c, unix.SHUT_WR)
		fmt.Printf("KV vsock_echoed=%d\n", n)
	case "send":
		if len(os.Args) < 4 {
			die("send CID PORT")
		}
		if err := unix.Connect(fd, &unix.SockaddrVM{CID: num(os.Args[2]), Port: num(os.Args[3])}); err != nil {
			die("connect: %v", err)
		}
		n, err := io.Copy(sock(fd), os.Stdin)
		if err != nil {
			die("send: %v", err)
		}
		unix.Shutdown(fd, unix.SHUT_WR)
		io.Copy(io.Discard, sock(fd))
		fmt.Printf("KV vsock_sent=%d\n", n)
	default:
		die("unknown command %q", os.Args[1])
	}
}
