package spec

// Multus's pod annotations (the Network Plumbing Working Group's
// multi-net spec) and NetworkAttachmentDefinitions.
const (
	// NetworksAnnotation on a pod asks for secondary networks: a JSON
	// list of network selection elements (name, namespace, interface,
	// mac), which virt-controller writes on launcher pods.
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// NetworkStatusAnnotation is written on the pod by Multus: a JSON
	// list of what each attachment got (name, interface, ips, mac,
	// default).
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	// NADResourceNameAnnotation on a NetworkAttachmentDefinition names
	// the device-plugin resource a pod on that network needs (the
	// bridge-marker's bridge.network.kubevirt.io/<bridge>, SR-IOV's VF
	// pools).
	NADResourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"
)

// NAD's API group, version and kind.
const (
	NADGroup   = "k8s.cni.cncf.io"
	NADVersion = "v1"
	NADKind    = "NetworkAttachmentDefinition"
)
