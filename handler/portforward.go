package handler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/vishvananda/netns"

	"github.com/kubevmm/kubevmm/api/vmispec"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// guestDialTimeout bounds the connection to the guest's port: a guest
// that drops SYNs must not hold virt-api's request for minutes.
const guestDialTimeout = 10 * time.Second

// portForward connects to a TCP port of the guest from inside the
// launcher pod's network namespace, where the guest is vmispec.GuestIP
// behind the masquerade tap (as KubeVirt's handler dials it), or the pod
// IP behind the in-pod bridge for a NIC bridge-bound on the pod network
// (podbridge.go), and carries
// the connection's bytes over the websocket virt-api opened.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		http.Error(w, fmt.Sprintf("port %q: want a number from 1 to 65535", r.PathValue("port")), http.StatusBadRequest)
		return
	}
	if p := r.PathValue("protocol"); p != "tcp" {
		http.Error(w, fmt.Sprintf("protocol %q: only tcp is forwarded", p), http.StatusBadRequest)
		return
	}
	vmi, l, code, err := s.launcher(r)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), launcherQueryTimeout)
	proc, err := l.process(ctx)
	cancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("the launcher of VMI %s/%s: %v", vmi.Namespace, vmi.Name, err), http.StatusServiceUnavailable)
		return
	}
	ns, err := proc.netns()
	proc.Close()
	if err != nil {
		http.Error(w, fmt.Sprintf("the launcher of VMI %s/%s: %v", vmi.Namespace, vmi.Name, err), http.StatusServiceUnavailable)
		return
	}
	guest := vmispec.GuestIP
	if ip, err := podBridgeGuestIP(ns); err != nil {
		ns.Close()
		http.Error(w, fmt.Sprintf("VMI %s/%s: %v", vmi.Namespace, vmi.Name, err), http.StatusServiceUnavailable)
		return
	} else if ip != nil {
		guest = ip.String()
	}
	conn, err := dialInNetns(ns, net.JoinHostPort(guest, strconv.Itoa(port)))
	ns.Close()
	if err != nil {
		http.Error(w, fmt.Sprintf("VMI %s/%s: %v", vmi.Namespace, vmi.Name, err), http.StatusServiceUnavailable)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		conn.Close()
		return
	}
	s.Log.Info("port forward", "vmi", vmi.Namespace+"/"+vmi.Name, "port", port)
	BridgeWebsocket(ws, conn)
}

// dialInNetns connects to addr over TCP from the network namespace ns:
// the socket is made there, and stays there.
func dialInNetns(ns netns.NsHandle, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(ns, func() error {
		d := net.Dialer{Timeout: guestDialTimeout}
		var err error
		conn, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the guest's %s: %w", addr, err)
	}
	return conn, nil
}

// vsock connects to a vsock port of the guest through the VM's vsock
// device, whose host side is a unix socket in the launcher's socket
// directory (the VMM's "CONNECT <port>"), and carries the connection's
// bytes over the websocket virt-api opened: KubeVirt's vsock subresource.
// KubeVirt's tls=true wraps the stream in TLS with the handler's
// certificate; kubevmm streams it plain only, and virt-api refuses tls=true
// before it gets here.
func (s *Server) vsock(w http.ResponseWriter, r *http.Request) {
	port, err := vmispec.VsockPort(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	vmi, l, code, err := s.launcher(r)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), guestDialTimeout)
	conn, err := l.dir.dial(ctx, vmispec.VsockSocket)
	if err == nil {
		if err = ga.VsockConnect(ctx, conn, port); err != nil {
			conn.Close()
		}
	}
	cancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("VMI %s/%s: vsock port %d: %v", vmi.Namespace, vmi.Name, port, err), http.StatusServiceUnavailable)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		conn.Close()
		return
	}
	s.Log.Info("vsock stream", "vmi", vmi.Namespace+"/"+vmi.Name, "port", port)
	BridgeWebsocket(ws, conn)
}
