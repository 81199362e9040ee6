package v1_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
)

func TestParseNetworks(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []nadv1.NetworkSelectionElement
	}{
		{"empty", "  ", nil},
		{"short forms", "br1, other/br2@eth7 ,br3",
			[]nadv1.NetworkSelectionElement{
				{Name: "br1", Namespace: "pods", InterfaceRequest: "net1"},
				{Name: "br2", Namespace: "other", InterfaceRequest: "eth7"},
				{Name: "br3", Namespace: "pods", InterfaceRequest: "net3"},
			}},
		{"json", `[{"name":"br1","interface":"lan","mac":"02:00:00:00:00:01","ips":["10.1.1.11/24"],"default-route":["10.1.1.1"]},{"name":"br2","namespace":"x"}]`,
			[]nadv1.NetworkSelectionElement{
				{Name: "br1", Namespace: "pods", InterfaceRequest: "lan", MacRequest: "02:00:00:00:00:01",
					IPRequest: []string{"10.1.1.11/24"}, GatewayRequest: []string{"10.1.1.1"}},
				{Name: "br2", Namespace: "x", InterfaceRequest: "net2"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nadv1.ParseNetworks(tc.in, "pods")
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseNetworksRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"bad json", `[{"name":`, "not a JSON list"},
		{"json object", `[{"name":"a"}] x`, "after the JSON list"},
		{"unknown field", `[{"name":"a","bandwidth":{}}]`, `unknown field "bandwidth"`},
		{"too many", strings.Repeat("a,", nadv1.MaxNetworks) + "a", "33 networks, at most 32"},
		{"path name", "../etc/passwd", "network 1"},
		{"slash in json name", `[{"name":"a/b"}]`, "name"},
		{"empty item", "a,,b", "empty network"},
		{"empty namespace", "/a", "empty namespace"},
		{"empty interface", "a@", "empty interface"},
		{"bad namespace", `[{"name":"a","namespace":"A_B"}]`, "namespace"},
		{"long interface", "a@abcdefghijklmnop", "not a Linux interface name"},
		{"interface with slash", `[{"name":"a","interface":"x/y"}]`, "not a Linux interface name"},
		{"bad mac", `[{"name":"a","mac":"02:00:00:00:00"}]`, "48-bit MAC"},
		{"long mac", `[{"name":"a","mac":"02:00:00:00:00:00:00:01"}]`, "48-bit MAC"},
		{"bad ip", `[{"name":"a","ips":["10.1.1.1"]}]`, "CIDR"},
		{"bad gateway", `[{"name":"a","default-route":["x"]}]`, "not an IP"},
		{"same interface", "a@x,b@x", `networks 1 and 2 both use interface "x"`},
		{"default name taken", "a@net2,b", `both use interface "net2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nadv1.ParseNetworks(tc.in, "pods")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), nadv1.NetworksAnnotation)
		})
	}
}
