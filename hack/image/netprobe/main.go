// Command netprobe is a pod on the pod network for the e2e's
// NetworkPolicy checks (test/e2e/netpol_test.go): the tests dial from its
// network namespace, as any pod there would, and to it: it accepts TCP
// connections on :8080, and closes them, until it is told to stop.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	l, err := net.Listen("tcp", ":8080")
	if err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
