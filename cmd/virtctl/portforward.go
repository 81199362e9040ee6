package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
)

// forward is one forwarded port: local on this machine, remote in the
// guest.
type forward struct{ local, remote int }

// parseTarget reads KubeVirt's port-forward target, type/name[/namespace]
// (type vm or vmi, in any of KubeVirt's spellings), and the older forms
// it still accepts: type/name.namespace, and a bare name for a VMI.
func parseTarget(s string) (kind, name, ns string, err error) {
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 1:
		kind, name = "virtualmachineinstances", parts[0]
	case 2, 3:
		if kind = vmOrVMI[strings.ToLower(parts[0])]; kind == "" {
			return "", "", "", fmt.Errorf("target %q: unsupported resource type %q (vm or vmi)", s, parts[0])
		}
		name = parts[1]
		if len(parts) == 3 {
			if ns = parts[2]; ns == "" {
				return "", "", "", fmt.Errorf("target %q: the namespace is empty", s)
			}
		}
	default:
		return "", "", "", fmt.Errorf("target %q: want type/name[/namespace]", s)
	}
	if ns == "" {
		if n, namespace, ok := strings.Cut(name, "."); ok {
			name, ns = n, namespace
		}
	}
	if name == "" {
		return "", "", "", fmt.Errorf("target %q: the name is empty", s)
	}
	return kind, name, ns, nil
}

// parsePort reads [tcp/]LOCAL[:REMOTE]; REMOTE defaults to LOCAL.
func parsePort(s string) (forward, error) {
	spec := s
	if proto, rest, ok := strings.Cut(s, "/"); ok {
		if strings.ToLower(proto) != "tcp" {
			return forward{}, fmt.Errorf("port %q: kubevmm forwards tcp only", s)
		}
		spec = rest
	}
	l, r, hasRemote := strings.Cut(spec, ":")
	num := func(p string) (int, error) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return 0, fmt.Errorf("port %q: %q is not a port number", s, p)
		}
		return n, nil
	}
	f := forward{}
	var err error
	if f.local, err = num(l); err != nil {
		return forward{}, err
	}
	f.remote = f.local
	if hasRemote {
		if f.remote, err = num(r); err != nil {
			return forward{}, err
		}
	}
	if f.remote == 0 {
		return forward{}, fmt.Errorf("port %q: the guest's port cannot be 0", s)
	}
	return f, nil
}

func (c *cli) portForwardCommand() *cobra.Command {
	var address string
	var stdio bool
	cmd := &cobra.Command{
		Use:   "port-forward type/name[/namespace] [protocol/]localPort[:targetPort]...",
		Short: "Forward local ports to a virtual machine or virtual machine instance.",
		Long: `Forward local ports to a virtual machine's or virtual machine instance's guest, over
websocket streams through the Kubernetes API server (the portforward subresource).

The target is type/name[/namespace], type one of vm, vms, virtualmachine, virtualmachines,
vmi, vmis, virtualmachineinstance, virtualmachineinstances; the older type/name.namespace
too. A port is [tcp/]localPort[:targetPort]; kubevmm forwards TCP only.`,
		Example: `  # The local port 8080 to the VMI's port 8080:
  virtctl port-forward vmi/testvmi 8080

  # The local port 8080 to the VM's port 9090, in namespace mynamespace:
  virtctl port-forward vm/testvm/mynamespace 8080:9090`,
		RunE: c.withClient(func(ac *apiClient, _ *cobra.Command, args []string) (int, error) {
			return ac.portForward(address, stdio, args, c.stdin, c.stdout)
		}),
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "--address=127.0.0.1: the local address the ports are opened on")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "--stdio=true: forward one port over stdin and stdout (an ssh ProxyCommand)")
	return cmd
}

// portForward is `virtctl port-forward`: it listens on each local port and
// carries every connection to the guest's port over its own websocket
// (the portforward subresource), until interrupted; with stdio, one
// connection over stdin and stdout.
func (c *apiClient) portForward(address string, stdio bool, args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	if len(args) < 2 {
		return 2, errors.New("port-forward: want [type/]NAME[/NAMESPACE] and one or more [tcp/]LOCAL[:REMOTE]")
	}
	kind, name, ns, err := parseTarget(args[0])
	if err != nil {
		return 2, fmt.Errorf("port-forward: %w", err)
	}
	var fwds []forward
	for _, p := range args[1:] {
		f, err := parsePort(p)
		if err != nil {
			return 2, fmt.Errorf("port-forward: %w", err)
		}
		fwds = append(fwds, f)
	}
	c = c.inNamespace(ns)
	sub := func(f forward) string { return fmt.Sprintf("portforward/%d/tcp", f.remote) }
	if stdio {
		if len(fwds) != 1 {
			return 2, errors.New("port-forward: --stdio forwards one port")
		}
		ws, err := c.dial(kind, name, sub(fwds[0]))
		if err != nil {
			return 1, fmt.Errorf("port-forward %s: %w", name, err)
		}
		pipe(ws, stdin, stdout)
		return 0, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, f := range fwds {
		l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(f.local)))
		if err != nil {
			return 1, fmt.Errorf("port-forward: %w", err)
		}
		defer l.Close()
		fmt.Fprintf(stdout, "Forwarding from %s -> %d\n", l.Addr(), f.remote)
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return // the listener is closed: we are done
				}
				go func() {
					defer conn.Close()
					ws, err := c.dial(kind, name, sub(f))
					if err != nil {
						fmt.Fprintf(os.Stderr, "virtctl: port-forward %s: %v\n", name, err)
						return
					}
					pipe(ws, conn, conn)
				}()
			}
		}()
	}
	<-ctx.Done()
	return 0, nil
}

// pipe carries bytes between a port-forward websocket (binary messages)
// and a local stream until either side ends; the websocket is closed.
func pipe(ws *websocket.Conn, in io.Reader, out io.Writer) {
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if _, err := out.Write(data); err != nil {
				return
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
	ws.Close()
}
