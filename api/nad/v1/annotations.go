package v1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The pod annotations of the multi-network specification, Multus's.
const (
	// NetworksAnnotation asks for secondary networks: a comma-separated
	// list of [namespace/]name[@interface], or a JSON list of
	// NetworkSelectionElement.
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// NetworkStatusAnnotation is what the meta-plugin attached: a JSON
	// list of NetworkStatus, the pod network first.
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	// ResourceNameAnnotation on a NetworkAttachmentDefinition names the
	// node resource a pod using it needs (for a linux bridge
	// bridge.network.kubevirt.io/<bridge>, which bridge-marker publishes),
	// so such pods are scheduled only where the network exists.
	ResourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"
)

// MaxNetworks is how many secondary networks one pod may ask for: more is
// refused rather than running that many plugins for one sandbox.
const MaxNetworks = 32

// NetworkSelectionElement is one secondary network a pod asks for.
type NetworkSelectionElement struct {
	// Name of the NetworkAttachmentDefinition.
	Name string `json:"name"`
	// Namespace of the NetworkAttachmentDefinition; the pod's when empty.
	Namespace string `json:"namespace,omitempty"`
	// InterfaceRequest is the interface's name in the pod; net<N> when
	// empty, N its position in the list counting from 1.
	InterfaceRequest string `json:"interface,omitempty"`
	// MacRequest is the interface's MAC address (the plugin's "mac"
	// capability).
	MacRequest string `json:"mac,omitempty"`
	// IPRequest are the interface's addresses in CIDR form (the "ips"
	// capability).
	IPRequest []string `json:"ips,omitempty"`
	// GatewayRequest makes the default route go through this interface,
	// via these gateways.
	GatewayRequest []string `json:"default-route,omitempty"`
}

// NetworkStatus is one interface of a pod as the network-status
// annotation reports it.
type NetworkStatus struct {
	// Name is "namespace/name" of the NetworkAttachmentDefinition, or the
	// pod network's CNI network name.
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	Mac       string   `json:"mac,omitempty"`
	Mtu       int      `json:"mtu,omitempty"`
	// Default is true for the pod network.
	Default bool     `json:"default,omitempty"`
	DNS     DNS      `json:"dns,omitempty"`
	Gateway []string `json:"gateway,omitempty"`
}

// DNS is the DNS configuration a plugin returned.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// ParseNetworks reads a networks annotation (either form) into its
// elements, namespaces defaulted to podNamespace and interface names to
// net1, net2... by position. Anything a plugin could trip over, or that
// could name a file instead of an object, is refused with an error
// naming the element.
func ParseNetworks(annotation, podNamespace string) ([]NetworkSelectionElement, error) {
	s := strings.TrimSpace(annotation)
	if s == "" {
		return nil, nil
	}
	var nets []NetworkSelectionElement
	if strings.HasPrefix(s, "[") {
		d := json.NewDecoder(bytes.NewReader([]byte(s)))
		d.DisallowUnknownFields()
		if err := d.Decode(&nets); err != nil {
			return nil, fmt.Errorf("%s: not a JSON list of networks: %w", NetworksAnnotation, err)
		}
		if d.More() {
			return nil, fmt.Errorf("%s: data after the JSON list", NetworksAnnotation)
		}
	} else {
		for _, item := range strings.Split(s, ",") {
			e, err := parseShort(strings.TrimSpace(item))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", NetworksAnnotation, err)
			}
			nets = append(nets, e)
		}
	}
	if len(nets) > MaxNetworks {
		return nil, fmt.Errorf("%s: %d networks, at most %d", NetworksAnnotation, len(nets), MaxNetworks)
	}
	seen := map[string]int{}
	for i := range nets {
		e := &nets[i]
		if e.Namespace == "" {
			e.Namespace = podNamespace
		}
		if e.InterfaceRequest == "" {
			e.InterfaceRequest = fmt.Sprintf("net%d", i+1)
		}
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("%s: network %d (%q): %w", NetworksAnnotation, i+1, e.Name, err)
		}
		if j, dup := seen[e.InterfaceRequest]; dup {
			return nil, fmt.Errorf("%s: networks %d and %d both use interface %q", NetworksAnnotation, j+1, i+1, e.InterfaceRequest)
		}
		seen[e.InterfaceRequest] = i
	}
	return nets, nil
}

// parseShort reads [namespace/]name[@interface].
func parseShort(item string) (NetworkSelectionElement, error) {
	var e NetworkSelectionElement
	if item == "" {
		return e, fmt.Errorf("empty network in the list")
	}
	rest := item
	if ns, name, ok := strings.Cut(rest, "/"); ok {
		e.Namespace, rest = ns, name
	}
	if name, ifname, ok := strings.Cut(rest, "@"); ok {
		rest, e.InterfaceRequest = name, ifname
		if ifname == "" {
			return e, fmt.Errorf("network %q: empty interface name after @", item)
		}
	}
	e.Name = rest
	if e.Namespace == "" && strings.Contains(item, "/") {
		return e, fmt.Errorf("network %q: empty namespace before /", item)
	}
	return e, nil
}

func (e *NetworkSelectionElement) validate() error {
	// Object names only: no "/" or ".." that would make a path of a
	// name in the file lookup of an empty config.
	if errs := validation.IsDNS1123Subdomain(e.Name); len(errs) > 0 {
		return fmt.Errorf("name: %s", strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(e.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", e.Namespace, strings.Join(errs, "; "))
	}
	if err := ValidInterfaceName(e.InterfaceRequest); err != nil {
		return err
	}
	if e.MacRequest != "" {
		if hw, err := net.ParseMAC(e.MacRequest); err != nil || len(hw) != 6 {
			return fmt.Errorf("mac %q: not a 48-bit MAC address", e.MacRequest)
		}
	}
	for _, ip := range e.IPRequest {
		if _, _, err := net.ParseCIDR(ip); err != nil {
			return fmt.Errorf("ips: %q is not an address in CIDR form (10.1.1.11/24)", ip)
		}
	}
	for _, gw := range e.GatewayRequest {
		if net.ParseIP(gw) == nil {
			return fmt.Errorf("default-route: %q is not an IP address", gw)
		}
	}
	return nil
}

// ValidInterfaceName checks a Linux interface name as the kernel does
// (dev_valid_name): 1 to 15 bytes, not . or .., no /, : or white space.
func ValidInterfaceName(n string) error {
	if n == "" || len(n) > 15 || n == "." || n == ".." || strings.ContainsAny(n, "/: \t\n\r\v\f") {
		return fmt.Errorf("interface %q: not a Linux interface name (1-15 bytes, not . or .., no /, : or spaces)", n)
	}
	return nil
}
