package spec

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Only a NIC bridge-bound on the pod network without macAddress takes the
// pod interface's MAC.
func TestTakesPodMAC(t *testing.T) {
	bridge := v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	masq := v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}
	pod := v1.NetworkSource{Pod: &v1.PodNetwork{}}
	multus := v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}
	for _, tc := range []struct {
		name string
		ifc  v1.Interface
		net  v1.NetworkSource
		want bool
	}{
		{"bridge on the pod network", v1.Interface{InterfaceBindingMethod: bridge}, pod, true},
		{"with a macAddress", v1.Interface{InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:00:01"}, pod, false},
		{"masquerade", v1.Interface{InterfaceBindingMethod: masq}, pod, false},
		{"bridge on a multus network", v1.Interface{InterfaceBindingMethod: bridge}, multus, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ifc.Name = "n"
			s := &v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Devices: v1.Devices{Interfaces: []v1.Interface{tc.ifc}}},
				Networks: []v1.Network{{Name: "n", NetworkSource: tc.net}}}
			nics := PodNICs(s)
			require.Len(t, nics, 1)
			assert.Equal(t, tc.want, nics[0].TakesPodMAC())
		})
	}
}

// The recorded MAC is the guest's; a record without one (an older
// virt-handler's) means the fallback; a bad one is refused, naming it.
func TestPodBridgeRecordGuestMAC(t *testing.T) {
	fallback := net.HardwareAddr{2, 0x6b, 0x76, 1, 2, 3}
	r, err := ParsePodBridgeRecord(`{"addr":"10.244.0.7/24","mtu":1450,"mac":"0a:58:0a:f4:00:07","routes":[{"dst":"0.0.0.0/0","gw":"10.244.0.1"}]}`)
	require.NoError(t, err)
	assert.Equal(t, PodBridgeRecord{Addr: "10.244.0.7/24", MTU: 1450, MAC: "0a:58:0a:f4:00:07", Routes: []PodBridgeRoute{{Dst: "0.0.0.0/0", Gw: "10.244.0.1"}}}, r)
	m, err := r.GuestMAC(fallback)
	require.NoError(t, err)
	assert.Equal(t, "0a:58:0a:f4:00:07", m.String())

	m, err = PodBridgeRecord{Addr: "10.244.0.7/24"}.GuestMAC(fallback)
	require.NoError(t, err)
	assert.Equal(t, fallback, m)

	for _, bad := range []string{"junk", "01:00:5e:00:00:01", "00:11:22:33:44:55:66:77"} {
		_, err := PodBridgeRecord{MAC: bad}.GuestMAC(fallback)
		assert.ErrorContains(t, err, `"`+bad+`": not a unicast MAC address`)
	}
	_, err = ParsePodBridgeRecord("{")
	assert.ErrorContains(t, err, "the pod network recorded on k6t-eth0")
}
