package v1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseNetworks: a pod's networks annotation is any pod author's
// text, read by the privileged CNI meta-plugin on the node. Whatever it
// holds, the parser returns an error or elements that are safe to act on:
// object names that make no path, a Linux interface name each, none the
// same, at most MaxNetworks.
func FuzzParseNetworks(f *testing.F) {
	for _, s := range []string{
		"", "br1", "ns/br1@eth1", "a,b,ns/c@x", "../../etc/passwd", "ns/@", "/br1", "br1@",
		`[{"name":"br1","namespace":"ns","interface":"net1","mac":"02:00:00:00:00:01","ips":["10.1.1.11/24"]}]`,
		`[{"name":"br1"},{"name":"br1"}]`, `[{"name":"x","interface":"a/b"}]`, `[{"name":"x"}] trailing`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nets, err := ParseNetworks(s, "pods")
		if err != nil {
			return
		}
		if len(nets) > MaxNetworks {
			t.Fatalf("%d networks admitted, at most %d", len(nets), MaxNetworks)
		}
		seen := map[string]bool{}
		for _, e := range nets {
			if len(validation.IsDNS1123Subdomain(e.Name)) > 0 || strings.Contains(e.Name, "/") {
				t.Fatalf("name %q admitted", e.Name)
			}
			if len(validation.IsDNS1123Label(e.Namespace)) > 0 {
				t.Fatalf("namespace %q admitted", e.Namespace)
			}
			if ValidInterfaceName(e.InterfaceRequest) != nil || seen[e.InterfaceRequest] {
				t.Fatalf("interface %q admitted (seen: %v)", e.InterfaceRequest, seen[e.InterfaceRequest])
			}
			seen[e.InterfaceRequest] = true
		}
	})
}
