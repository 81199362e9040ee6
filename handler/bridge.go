package handler

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Bridge binding, KubeVirt's for secondary networks: the pod interface
// Multus created for the network (vmispec.PodNIC.PodInterface, a veth into
// the node's bridge for a NAD of type bridge) and the guest's tap are the
// two ports of an in-pod Linux bridge, vmispec.BridgeName:
//
//	guest eth1 ── tap1 ── k6t-<hash> ── pod<hash> ══ node: br1
//
// so the guest, with its own MAC, is on the network's layer 2 as the pod
// would be. The pod interface keeps the addresses the NAD's IPAM gave it,
// if any; the guest configures its own address on the network (cloud-init
// networkData, or by hand). On the pod network the guest gets the pod's
// address instead (podbridge.go). A bridge never
// forwards a frame addressed to one of its ports' own MACs: a pod
// interface that has the guest's MAC (Multus sets the interface's
// macAddress on it, the networks annotation's "mac") first gets another.
// A migration target's pod has its own pod interface: the same wiring on
// the target plugs the guest, with its MAC, into the network there.

// setupBridge wires one bridge-bound NIC in ns, its tap last. Where the
// NIC TakesPodMAC, guestMAC (MACFor's) is only the fallback of
// vmispec.PodBridgeRecord.GuestMAC: the guest's is eth0's original.
func setupBridge(ns netns.NsHandle, nic vmispec.PodNIC, guestMAC net.HardwareAddr, owner int) error {
	br := vmispec.BridgeName(nic.PodInterface)
	return inNetns(ns, func() error {
		pod, err := netlink.LinkByName(nic.PodInterface)
		if err != nil {
			return fmt.Errorf("pod interface %s (the network's attachment): %w", nic.PodInterface, err)
		}
		if nic.PodBridge() {
			pn, err := setupPodBridgeAddrs(pod, br)
			if err != nil {
				return err
			}
			if nic.TakesPodMAC() {
				if guestMAC, err = vmispec.PodBridgeRecord(pn).GuestMAC(guestMAC); err != nil {
					return err
				}
			}
		}
		if bytes.Equal(pod.Attrs().HardwareAddr, guestMAC) {
			mac, err := randomMAC()
			if err != nil {
				return err
			}
			if err := netlink.LinkSetHardwareAddr(pod, mac); err != nil {
				return fmt.Errorf("moving %s off the guest's MAC: %w", nic.PodInterface, err)
			}
		}
		if _, err := netlink.LinkByName(br); err != nil {
			if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br, MTU: pod.Attrs().MTU}}); err != nil {
				return fmt.Errorf("creating bridge %s: %w", br, err)
			}
		}
		b, err := netlink.LinkByName(br)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", br, err)
		}
		if err := netlink.LinkSetUp(b); err != nil {
			return fmt.Errorf("setting %s up: %w", br, err)
		}
		if err := netlink.LinkSetMaster(pod, b); err != nil {
			return fmt.Errorf("adding %s to %s: %w", nic.PodInterface, br, err)
		}
		if err := netlink.LinkSetUp(pod); err != nil {
			return fmt.Errorf("setting %s up: %w", nic.PodInterface, err)
		}
		if err := createTap(nic.Tap, owner, nic.Queues); err != nil {
			return err
		}
		tap, err := netlink.LinkByName(nic.Tap)
		if err != nil {
			return fmt.Errorf("tap %s: %w", nic.Tap, err)
		}
		// The guest's frames fit the network's MTU.
		if err := netlink.LinkSetMTU(tap, pod.Attrs().MTU); err != nil {
			return fmt.Errorf("MTU of %s: %w", nic.Tap, err)
		}
		if err := netlink.LinkSetMaster(tap, b); err != nil {
			return fmt.Errorf("adding %s to %s: %w", nic.Tap, br, err)
		}
		if err := netlink.LinkSetUp(tap); err != nil {
			return fmt.Errorf("setting %s up: %w", nic.Tap, err)
		}
		return nil
	})
}

// randomMAC is a random locally administered unicast MAC.
func randomMAC() (net.HardwareAddr, error) {
	m := make(net.HardwareAddr, 6)
	if _, err := rand.Read(m); err != nil {
		return nil, fmt.Errorf("random MAC: %w", err)
	}
	m[0] = m[0]&^1 | 2
	return m, nil
}
