package launcher

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/net/dhcp"
)

// The guest of a NIC that takes its address from the pod (KubeVirt's
// masquerade binding, and bridge on the pod network) gets it by DHCP
// from the launcher, as KubeVirt's guest does from its launcher: the
// guest's packets are parsed here, in the unprivileged process that
// already runs the guest, never in virt-handler. One server per such
// NIC, a UDP socket on port 67 bound to the NIC's device in the pod
// (SO_BINDTODEVICE): the tap for masquerade, whose address is the
// guest's gateway, the in-pod bridge for bridge (vmispec.PodBridgeFakeIP).
// Binding port 67 takes no capability: the launcher pod lowers
// net.ipv4.ip_unprivileged_port_start to it in its own network namespace
// (vmispec.LauncherSysctls, in virt-controller's pod template).

// dhcpLease says which lease the launcher serves a NIC's guest.
type dhcpLease int

const (
	noLease         dhcpLease = iota
	masqueradeLease           // spec.MasqueradeLease, on the tap
	podBridgeLease            // the pod's network, from spec.PodBridgeRecord, on the in-pod bridge
)

// serveDHCP starts the DHCP servers of nics, once their devices exist
// (waitForTaps), for the guest named hostname; stop closes them. The DNS
// settings are the pod's (p.ResolvConf, as the kubelet wrote it).
func serveDHCP(p Paths, nics []NICConfig, hostname string, log *slog.Logger) (stop func(), err error) {
	var conns []net.PacketConn
	stop = func() {
		for _, c := range conns {
			_ = c.Close() // Serve returns; a UDP socket's close fails only when closed already
		}
	}
	resolv, err := os.ReadFile(p.ResolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the pod's resolv.conf: %w", err)
	}
	for _, n := range nics {
		c, err := serveNIC(p, n, resolv, hostname, log)
		if err != nil {
			stop()
			return nil, fmt.Errorf("interface %s: DHCP server: %w", n.Name, err)
		}
		if c != nil {
			conns = append(conns, c)
		}
	}
	return stop, nil
}

// serveNIC starts the DHCP server of n, if its guest is served one: the
// server's socket, which ends it when closed.
func serveNIC(p Paths, n NICConfig, resolv []byte, hostname string, log *slog.Logger) (net.PacketConn, error) {
	l, dev, err := nicLease(p, n, resolv, hostname)
	if err != nil || l == nil {
		return nil, err
	}
	c, err := dhcp.Listen(dev)
	if err != nil {
		return nil, err
	}
	log.Info("DHCP server started", "interface", n.Name, "device", dev, "ip", l.IP.String(), "mac", n.MAC.String())
	go func() {
		if err := dhcp.Serve(c, n.MAC, l); err != nil {
			log.Error("DHCP server failed", "interface", n.Name, "error", err)
		}
	}()
	return c, nil
}

// nicLease is the lease n's guest is served and the device it is served
// on; nil for a NIC whose guest gets none.
func nicLease(p Paths, n NICConfig, resolv []byte, hostname string) (*dhcp.Lease, string, error) {
	switch n.DHCP {
	case masqueradeLease:
		// The guest's MTU is the pod network's, as KubeVirt's masquerade
		// lease gives.
		b, err := os.ReadFile(filepath.Join(p.SysClassNet, vmispec.PodInterface, "mtu"))
		if err != nil {
			return nil, "", fmt.Errorf("the MTU of the pod interface: %w", err)
		}
		mtu, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, "", fmt.Errorf("the MTU of the pod interface, %q: %w", b, err)
		}
		return vmispec.MasqueradeLease(resolv, hostname, mtu), n.Tap, nil
	case podBridgeLease:
		rec, err := podBridgeRecord(p.SysClassNet)
		if err != nil {
			return nil, "", err
		}
		l, err := rec.Lease(resolv, hostname)
		return l, vmispec.BridgeName(vmispec.PodInterface), err
	}
	return nil, "", nil
}

// podBridgeRecord reads the record virt-handler keeps on the in-pod
// bridge (vmispec.PodBridgeRecord), as sysClassNet shows it: once the taps
// exist, it does.
func podBridgeRecord(sysClassNet string) (vmispec.PodBridgeRecord, error) {
	b, err := os.ReadFile(filepath.Join(sysClassNet, vmispec.BridgeName(vmispec.PodInterface), "ifalias"))
	if err != nil {
		return vmispec.PodBridgeRecord{}, fmt.Errorf("the pod network recorded on %s: %w", vmispec.BridgeName(vmispec.PodInterface), err)
	}
	return vmispec.ParsePodBridgeRecord(strings.TrimSpace(string(b)))
}
