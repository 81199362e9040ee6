package virtapi

import (
	"net"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// validateInterfaces checks the guest NICs against their networks, with
// KubeVirt's rules where kubevmm implements the binding (vmispec.PodNICs):
// masquerade on the pod network, with ports; bridge on the pod network
// (the guest gets the pod's IP by DHCP) and on multus networks;
// every NIC named after a network, names unique, at most one on the pod
// network; state up or down.
func validateInterfaces(p *field.Path, ifcs []v1.Interface, networks []v1.Network) field.ErrorList {
	var errs field.ErrorList
	nets := map[string]v1.Network{}
	for _, n := range networks {
		nets[n.Name] = n
	}
	seen := map[string]bool{}
	podNICs := 0
	for i, ifc := range ifcs {
		ip := p.Index(i)
		n, ok := nets[ifc.Name]
		if !ok {
			errs = append(errs, invalid(ip.Child("name"), ifc.Name, "no network named %q", ifc.Name))
		} else if seen[ifc.Name] {
			errs = append(errs, field.Duplicate(ip.Child("name"), ifc.Name))
		}
		seen[ifc.Name] = true
		if n.Pod != nil {
			podNICs++
		}
		switch ifc.Model {
		case "", "virtio", "e1000":
		default:
			errs = append(errs, notSupported(ip.Child("model"), ifc.Model, "virtio, e1000"))
		}
		errs = append(errs, validateBinding(ip, ifc, n)...)
		if ifc.MacAddress != "" {
			mac, err := net.ParseMAC(ifc.MacAddress)
			switch {
			case err != nil || len(mac) != 6 || mac[0]&1 != 0:
				errs = append(errs, invalid(ip.Child("macAddress"), ifc.MacAddress, "not a unicast MAC address"))
			case ifc.Masquerade != nil && mac.String() == vmispec.GatewayMAC:
				// As KubeVirt refuses its in-pod bridge's MAC.
				errs = append(errs, invalid(ip.Child("macAddress"), ifc.MacAddress, "reserved for the guest's masquerade gateway"))
			}
		}
		if ifc.BootOrder != nil {
			errs = append(errs, unsupported(ip, "bootOrder", "NICs are not boot devices"))
		}
		if ifc.PciAddress != "" {
			errs = append(errs, unsupported(ip, "pciAddress", "NICs are virtio-mmio devices in the kubevmm VMM"))
		}
		if ifc.Tag != "" {
			errs = append(errs, unsupported(ip, "tag", ""))
		}
		if ifc.ACPIIndex != 0 {
			errs = append(errs, unsupported(ip, "acpiIndex", ""))
		}
		switch ifc.State {
		case "", "up", "down":
		default:
			// absent is KubeVirt's hot-unplug, which kubevmm lacks.
			errs = append(errs, notSupported(ip.Child("state"), ifc.State, "up, down"))
		}
	}
	if podNICs > 1 {
		errs = append(errs, invalid(p, podNICs, "only one interface can use the pod network"))
	}
	return errs
}

// validateBinding checks the one binding of an interface, on network n
// (zero when the interface names none), and its ports.
func validateBinding(ip *field.Path, ifc v1.Interface, n v1.Network) field.ErrorList {
	var errs field.ErrorList
	m := ifc.InterfaceBindingMethod
	bindings := []struct {
		name string
		set  bool
		why  string
	}{
		{"masquerade", m.Masquerade != nil, ""},
		{"bridge", m.Bridge != nil, ""},
		{"slirp", m.Slirp != nil, ""},
		{"sriov", m.SRIOV != nil, ""},
		{"macvtap", m.Macvtap != nil, ""},
		{"passt", m.Passt != nil, ""},
		{"passtBinding", m.PasstBinding != nil, ""},
		{"binding", ifc.Binding != nil, "network binding plugins"},
	}
	var set []string
	for _, b := range bindings {
		if !b.set {
			continue
		}
		set = append(set, b.name)
		switch {
		case b.name == "masquerade" && n.Multus != nil:
			errs = append(errs, invalid(ip.Child("masquerade"), ifc.Name, "masquerade binding is only for the pod network"))
		case b.name != "masquerade" && b.name != "bridge":
			errs = append(errs, unsupported(ip, b.name, b.why))
		}
	}
	switch {
	case len(set) == 0:
		errs = append(errs, required(ip.Child("masquerade"), "the interface needs a binding"))
	case len(set) > 1:
		errs = append(errs, invalid(ip, strings.Join(set, ", "), "only one binding per interface"))
	}
	if len(ifc.Ports) > 0 && m.Masquerade == nil {
		errs = append(errs, invalid(ip.Child("ports"), len(ifc.Ports), "ports are only for the masquerade binding"))
	}
	names := map[string]bool{}
	for j, port := range ifc.Ports {
		pp := ip.Child("ports").Index(j)
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, invalid(pp.Child("port"), port.Port, "a port number is 1 to 65535"))
		}
		if port.Port == vmispec.MigrationPort && port.Protocol != "UDP" {
			errs = append(errs, invalid(pp.Child("port"), port.Port, "the launcher's migration port is reserved"))
		}
		switch port.Protocol {
		case "", "TCP", "UDP":
		default:
			errs = append(errs, notSupported(pp.Child("protocol"), port.Protocol, "TCP, UDP"))
		}
		if port.Name != "" {
			if msgs := validation.IsValidPortName(port.Name); len(msgs) > 0 {
				errs = append(errs, invalid(pp.Child("name"), port.Name, "%s", strings.Join(msgs, "; ")))
			}
			if names[port.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names[port.Name] = true
		}
	}
	return errs
}

// validateNetworks: names unique, exactly one source each, the pod
// network with kubevmm's masquerade CIDR, multus networks naming their
// NetworkAttachmentDefinition as secondary networks.
func validateNetworks(p *field.Path, networks []v1.Network) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	pods := 0
	for i, n := range networks {
		np := p.Index(i)
		errs = append(errs, uniqueName(np.Child("name"), n.Name, seen, "network")...)
		sources := 0
		for _, set := range []bool{n.Pod != nil, n.Multus != nil, n.ResourceClaim != nil} {
			if set {
				sources++
			}
		}
		switch {
		case sources == 0:
			errs = append(errs, required(np.Child("pod"), "the network needs a source"))
		case sources > 1:
			errs = append(errs, invalid(np, n.Name, "must have exactly one network source: pod or multus"))
		}
		if n.ResourceClaim != nil {
			errs = append(errs, unsupported(np, "resourceClaim", ""))
		}
		if m := n.Multus; m != nil {
			if m.NetworkName == "" {
				errs = append(errs, required(np.Child("multus", "networkName"), "the NetworkAttachmentDefinition, <name> or <namespace>/<name>"))
			} else if parts := strings.Split(m.NetworkName, "/"); len(parts) > 2 || parts[0] == "" || parts[len(parts)-1] == "" {
				errs = append(errs, invalid(np.Child("multus", "networkName"), m.NetworkName, "want <name> or <namespace>/<name>"))
			}
			if m.Default {
				errs = append(errs, unsupported(np, "multus.default", "a multus network as the pod's primary network"))
			}
		}
		if pod := n.Pod; pod != nil {
			pods++
			// The masquerade NAT (handler) uses vmispec.DefaultVMNetworkCIDR.
			if c := pod.VMNetworkCIDR; c != "" && c != vmispec.DefaultVMNetworkCIDR {
				errs = append(errs, notSupported(np.Child("pod", "vmNetworkCIDR"), c, vmispec.DefaultVMNetworkCIDR+" only"))
			}
			if pod.VMIPv6NetworkCIDR != "" {
				errs = append(errs, unsupported(np, "pod.vmIPv6NetworkCIDR", "the guest has no IPv6 on the pod network"))
			}
		}
	}
	if pods > 1 {
		errs = append(errs, invalid(p, pods, "more than one network is the pod network"))
	}
	return errs
}
