package kit

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The components' namespaces are closed by default: DenyByDefault
// selects every pod of the namespace and allows nothing, so a pod
// receives and sends only what a policy of its own allows. Each
// component's policy (NetworkPolicy, from its Traffic) opens what its
// job needs; the API server and DNS are open to every component.

// apiServerPorts are the API server's ports a component connects to: 443
// is the kubernetes Service's, 6443 the usual port behind it (policies
// see the address after the Service's DNAT on some enforcers and before
// it on others). The API server's addresses are not known here; the port
// is what names it.
var apiServerPorts = []int32{443, 6443}

// dnsPort is DNS's, over UDP and TCP.
const dnsPort = 53

// DenyByDefault is the NetworkPolicy that makes every pod of namespace
// isolated in both directions without allowing anything.
func DenyByDefault(namespace string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{TypeMeta: netpolType,
		ObjectMeta: metav1.ObjectMeta{Name: "deny-by-default", Namespace: namespace},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
}

// Traffic is what one component's pods may receive and send besides
// reaching the API server and DNS.
type Traffic struct {
	// Serve are ports any address may connect to. Only servers that
	// authenticate every caller themselves (webhooks and aggregated
	// APIs answer only the API server's client certificate, /metrics a
	// token allowed to GET it) or serve users (the upload proxy, the CLI
	// downloads) are: their callers (the API server, Prometheus, a user's
	// port-forward) run on the host network, on other nodes or in
	// namespaces not known here, where no selector can name them.
	Serve []int32
	// From are ports only some pods of the component's namespace may
	// connect to.
	From []Peer
	// To are ports of pods of the component's namespace it connects to.
	To []Peer
	// ToPods are ports of pods in any namespace it connects to (a
	// tenant's upload server).
	ToPods []int32
	// ToAnywhere lets it connect to any address and port: addresses its
	// users name (a registry polled for a DataImportCron).
	ToAnywhere bool
}

// Peer is some pods of the namespace, by label, and ports.
type Peer struct {
	Pods  map[string]string
	Ports []int32
}

// NetworkPolicy is the policy of workload (a Deployment or a DaemonSet,
// whose name it takes and whose pods it selects) allowing t.
func NetworkPolicy(workload client.Object, t Traffic) *networkingv1.NetworkPolicy {
	var sel *metav1.LabelSelector
	switch w := workload.(type) {
	case *appsv1.Deployment:
		sel = w.Spec.Selector
	case *appsv1.DaemonSet:
		sel = w.Spec.Selector
	}
	if sel == nil {
		// A caller's bug, never the user's input: every workload kind
		// the operators deploy is above.
		panic("kit.NetworkPolicy: not a Deployment or DaemonSet with a selector: " + workload.GetName())
	}
	spec := networkingv1.NetworkPolicySpec{PodSelector: *sel.DeepCopy(),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
	if len(t.Serve) > 0 {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: tcp(t.Serve...)})
	}
	for _, p := range t.From {
		spec.Ingress = append(spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: tcp(p.Ports...), From: pods(p.Pods)})
	}
	spec.Egress = []networkingv1.NetworkPolicyEgressRule{
		{Ports: tcp(apiServerPorts...)},
		{Ports: append(tcp(dnsPort), port(corev1.ProtocolUDP, dnsPort))},
	}
	for _, p := range t.To {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: tcp(p.Ports...), To: pods(p.Pods)})
	}
	if len(t.ToPods) > 0 {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: tcp(t.ToPods...),
			To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}})
	}
	if t.ToAnywhere {
		spec.Egress = append(spec.Egress, networkingv1.NetworkPolicyEgressRule{})
	}
	return &networkingv1.NetworkPolicy{TypeMeta: netpolType,
		ObjectMeta: metav1.ObjectMeta{Name: workload.GetName(), Namespace: workload.GetNamespace()}, Spec: spec}
}

var netpolType = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}

func pods(labels map[string]string) []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: labels}}}
}

func tcp(ports ...int32) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, 0, len(ports))
	for _, p := range ports {
		out = append(out, port(corev1.ProtocolTCP, p))
	}
	return out
}

func port(proto corev1.Protocol, p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &intstr.IntOrString{Type: intstr.Int, IntVal: p}}
}
