// Command netprobe is a pod on the pod network for the e2e's
// NetworkPolicy checks (test/e2e/tenant_test.go). Without arguments it
// accepts TCP connections on :8080 (and closes them) until it is told to
// stop, something for other pods to reach; "netprobe dial ADDR..." tries a TCP connection
// to each ip:port and prints one line each: "ADDR open", or "ADDR closed"
// and why (refused: nothing listens, or a policy rejected it, as
// kube-router does; timeout: a policy dropped it).
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 3*time.Second, "how long a connection may take before it counts as closed")
	flag.Parse()
	if flag.NArg() == 0 {
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
		return
	}
	if flag.Arg(0) != "dial" {
		fmt.Fprintln(os.Stderr, "usage: netprobe [-timeout D] [dial ADDR...]")
		os.Exit(2)
	}
	for _, addr := range flag.Args()[1:] {
		fmt.Println(addr, dial(addr, *timeout))
	}
}

func dial(addr string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", addr, timeout)
	switch {
	case err == nil:
		c.Close()
		return "open"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "closed (refused)"
	case os.IsTimeout(err):
		return "closed (timeout)"
	default:
		return "closed (" + err.Error() + ")"
	}
}
