package handler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/net/dhcp"
)

// The guest of a bridge NIC on the pod network gets its lease from its
// launcher (package launcher, dhcp.go). A launcher pod from an earlier
// version, still running after an upgrade (such a VMI does not migrate),
// has a launcher that serves none: virt-handler served it then, and for
// those pods, and only those (vmispec.LauncherServesDHCP is false: the pod
// lacks the sysctl that lets its launcher bind the port), it still does,
// so that their guests keep renewing their leases until they are
// restarted. It goes once no supported upgrade starts from such a
// version.

// dhcpServers are the DHCP servers of the VMIs on this node with a NIC
// bridge-bound on the pod network, one per VMI (only one NIC can be on
// the pod network), with the launcher pod it serves in.
type dhcpServers struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*podDHCP
}

type podDHCP struct {
	pod  types.UID
	conn net.PacketConn
}

// running says whether the server of VMI key serves pod.
func (d *dhcpServers) running(key types.NamespacedName, pod types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[key] != nil && d.m[key].pod == pod
}

// start starts the server of VMI key for the guest MAC mac (MACFor's;
// with podMAC, vmispec.PodNIC.TakesPodMAC, only the fallback of the recorded
// one) in ns, the network namespace of its launcher pod, with the pod's
// resolv.conf, unless it runs already; one serving another pod of the VMI
// is stopped first. Until the NIC is wired (its record on the bridge)
// there is nothing to serve yet.
func (d *dhcpServers) start(log logr.Logger, key types.NamespacedName, pod types.UID, ns netns.NsHandle, resolv []byte, mac net.HardwareAddr, podMAC bool, hostname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.m[key]; s != nil {
		if s.pod == pod {
			return nil
		}
		_ = s.conn.Close() // a UDP socket's close fails only when closed already
		delete(d.m, key)
	}
	pn, ok, err := recordedPodNet(ns)
	if err != nil || !ok {
		return err
	}
	l, err := vmispec.PodBridgeRecord(pn).Lease(resolv, hostname)
	if err != nil {
		return err
	}
	if podMAC {
		if mac, err = vmispec.PodBridgeRecord(pn).GuestMAC(mac); err != nil {
			return err
		}
	}
	var conn net.PacketConn
	if err := inNetns(ns, func() error {
		conn, err = dhcp.Listen(vmispec.BridgeName(vmispec.PodInterface))
		return err
	}); err != nil {
		return err
	}
	if d.m == nil {
		d.m = map[types.NamespacedName]*podDHCP{}
	}
	d.m[key] = &podDHCP{pod: pod, conn: conn}
	log.Info("DHCP server started", "vmi", key.String(), "pod", pod, "ip", l.IP.String(), "mac", mac.String())
	go func() {
		if err := dhcp.Serve(conn, mac, l); err != nil {
			// Forgotten, so that the next pass starts it again.
			log.Error(err, "DHCP server failed", "vmi", key.String())
			d.mu.Lock()
			if s := d.m[key]; s != nil && s.conn == conn {
				delete(d.m, key)
			}
			d.mu.Unlock()
			_ = conn.Close()
		}
	}()
	return nil
}

// stop stops the server of VMI key, if any.
func (d *dhcpServers) stop(log logr.Logger, key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.m[key]; s != nil {
		_ = s.conn.Close() // Serve returns
		delete(d.m, key)
		log.Info("DHCP server stopped", "vmi", key.String(), "pod", s.pod)
	}
}

// serveDHCP makes sure the DHCP server of the VMI's NIC bridge-bound on
// the pod network runs in its launcher's pod, one of an earlier version.
func (r *VMIReconciler) serveDHCP(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn) error {
	for _, n := range vmispec.PodNICs(&vmi.Spec) {
		if !n.PodBridge() {
			continue
		}
		key := client.ObjectKeyFromObject(vmi)
		if r.dhcp.running(key, l.dir.podUID) {
			return nil
		}
		mac, err := n.MACFor(string(vmi.UID))
		if err != nil {
			return fmt.Errorf("VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		proc, err := l.process(ctx)
		if err != nil {
			return fmt.Errorf("finding the launcher of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		defer proc.Close()
		// The DNS settings the kubelet gave the pod are the guest's.
		resolv, err := proc.readFile("/etc/resolv.conf")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the resolv.conf of the pod of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		ns, err := proc.netns()
		if err != nil {
			return fmt.Errorf("the launcher of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		defer ns.Close()
		hostname := vmi.Spec.Hostname
		if hostname == "" {
			hostname = vmi.Name
		}
		if err := r.dhcp.start(log.FromContext(ctx), key, l.dir.podUID, ns, resolv, mac, n.TakesPodMAC(), hostname); err != nil {
			return fmt.Errorf("DHCP server of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
	}
	return nil
}
