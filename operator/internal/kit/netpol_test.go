package kit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDenyByDefault(t *testing.T) {
	p := DenyByDefault("ns")
	assert.Equal(t, "ns", p.Namespace)
	assert.Empty(t, p.Spec.PodSelector.MatchLabels, "every pod of the namespace")
	assert.Empty(t, p.Spec.PodSelector.MatchExpressions)
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, p.Spec.PolicyTypes)
	assert.Empty(t, p.Spec.Ingress, "nothing allowed in")
	assert.Empty(t, p.Spec.Egress, "nothing allowed out")
}

// rule is a policy rule flattened for comparison: its ports as
// "proto/port" and its peers as "pods:k=v", "any-namespace" or "anywhere".
type rule struct {
	ports []string
	peers []string
}

func flatten(ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer) rule {
	var r rule
	for _, p := range ports {
		r.ports = append(r.ports, string(*p.Protocol)+"/"+p.Port.String())
	}
	for _, p := range peers {
		switch {
		case p.NamespaceSelector != nil && len(p.NamespaceSelector.MatchLabels) == 0:
			r.peers = append(r.peers, "any-namespace")
		case p.PodSelector != nil:
			for k, v := range p.PodSelector.MatchLabels {
				r.peers = append(r.peers, "pods:"+k+"="+v)
			}
		}
	}
	if len(peers) == 0 {
		r.peers = []string{"anywhere"}
	}
	return r
}

func TestNetworkPolicy(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{Selector: sel}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"}, Spec: appsv1.DaemonSetSpec{Selector: sel}}
	base := []rule{
		{ports: []string{"TCP/443", "TCP/6443"}, peers: []string{"anywhere"}},
		{ports: []string{"TCP/53", "UDP/53"}, peers: []string{"anywhere"}},
	}
	for _, tc := range []struct {
		name            string
		workload        interface{ GetName() string }
		traffic         Traffic
		ingress, egress []rule
	}{
		{name: "nothing: the API server and DNS only", workload: dep, egress: base},
		{name: "served to anyone", workload: dep, traffic: Traffic{Serve: []int32{8443, 8080}},
			ingress: []rule{{ports: []string{"TCP/8443", "TCP/8080"}, peers: []string{"anywhere"}}}, egress: base},
		{name: "peers of the namespace, both ways", workload: ds,
			traffic: Traffic{From: []Peer{{Pods: map[string]string{"app": "api"}, Ports: []int32{8186}}}, To: []Peer{{Pods: map[string]string{"app": "d"}, Ports: []int32{8188}}}},
			ingress: []rule{{ports: []string{"TCP/8186"}, peers: []string{"pods:app=api"}}},
			egress:  append(append([]rule{}, base...), rule{ports: []string{"TCP/8188"}, peers: []string{"pods:app=d"}})},
		{name: "pods of any namespace", workload: dep, traffic: Traffic{ToPods: []int32{8443}},
			egress: append(append([]rule{}, base...), rule{ports: []string{"TCP/8443"}, peers: []string{"any-namespace"}})},
		{name: "anywhere", workload: dep, traffic: Traffic{ToAnywhere: true},
			egress: append(append([]rule{}, base...), rule{peers: []string{"anywhere"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *networkingv1.NetworkPolicy
			switch w := tc.workload.(type) {
			case *appsv1.Deployment:
				p = NetworkPolicy(w, tc.traffic)
			case *appsv1.DaemonSet:
				p = NetworkPolicy(w, tc.traffic)
			}
			require.NotNil(t, p)
			assert.Equal(t, tc.workload.GetName(), p.Name)
			assert.Equal(t, "ns", p.Namespace)
			assert.Equal(t, *sel, p.Spec.PodSelector, "the workload's pods")
			assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, p.Spec.PolicyTypes,
				"isolated both ways: what is not listed is refused")
			var in, out []rule
			for _, r := range p.Spec.Ingress {
				in = append(in, flatten(r.Ports, r.From))
			}
			for _, r := range p.Spec.Egress {
				out = append(out, flatten(r.Ports, r.To))
			}
			assert.Equal(t, tc.ingress, in)
			assert.Equal(t, tc.egress, out)
		})
	}
	// The selector is the policy's own: editing the workload's later
	// does not move the policy.
	p := NetworkPolicy(dep, Traffic{})
	sel.MatchLabels["app"] = "other"
	assert.Equal(t, "c", p.Spec.PodSelector.MatchLabels["app"])
}

func TestNetworkPolicyOfAnotherKindPanics(t *testing.T) {
	assert.Panics(t, func() { NetworkPolicy(&corev1.Pod{}, Traffic{}) })
}
