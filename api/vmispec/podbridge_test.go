package vmispec

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Only a NIC bridge-bound on the pod network without macAddress takes the
// pod interface's MAC. The launcher serves DHCP to masquerade and bridge
// on the pod network, and only their pods lower the unprivileged ports.
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
		dhcp bool
	}{
		{"bridge on the pod network", v1.Interface{InterfaceBindingMethod: bridge}, pod, true, true},
		{"with a macAddress", v1.Interface{InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:00:01"}, pod, false, true},
		{"masquerade", v1.Interface{InterfaceBindingMethod: masq}, pod, false, true},
		{"bridge on a multus network", v1.Interface{InterfaceBindingMethod: bridge}, multus, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ifc.Name = "n"
			s := &v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Devices: v1.Devices{Interfaces: []v1.Interface{tc.ifc}}},
				Networks: []v1.Network{{Name: "n", NetworkSource: tc.net}}}
			nics := PodNICs(s)
			require.Len(t, nics, 1)
			assert.Equal(t, tc.want, nics[0].TakesPodMAC())
			assert.Equal(t, tc.dhcp, nics[0].ServesDHCP())
			if tc.dhcp {
				assert.Equal(t, []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "67"}}, LauncherSysctls(s))
			} else {
				assert.Empty(t, LauncherSysctls(s))
			}
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{Sysctls: LauncherSysctls(s)}}}
			assert.Equal(t, tc.dhcp, LauncherServesDHCP(pod), "its pod says whether its launcher serves DHCP")
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

func TestPodBridgeRecordLease(t *testing.T) {
	r := PodBridgeRecord{Addr: "10.244.0.7/24", MTU: 1450, Routes: []PodBridgeRoute{
		{Dst: "0.0.0.0/0", Gw: "10.244.0.1"}, {Dst: "10.96.0.0/12", Gw: "10.244.0.1"}}}
	resolv := []byte("# kubelet\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5\nnameserver\n")
	l, err := r.Lease(resolv, "vm1")
	require.NoError(t, err)
	assert.Equal(t, "10.244.0.7", l.IP.String())
	assert.Equal(t, "ffffff00", l.Mask.String())
	assert.Equal(t, "10.244.0.1", l.Router.String())
	assert.Equal(t, PodBridgeFakeIP, l.ServerID.String())
	assert.Equal(t, uint16(1450), l.MTU)
	assert.Equal(t, "vm1", l.Hostname)
	assert.Equal(t, LeaseTime, l.Time)
	assert.Equal(t, []net.IP{net.IPv4(10, 96, 0, 10).To4()}, l.DNS, "IPv4 nameservers only")
	assert.Equal(t, []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}, l.Search)
	var routes []string
	for _, r := range l.Routes {
		routes = append(routes, r.Dst.String()+" via "+r.Gateway.String())
	}
	assert.Equal(t, []string{"0.0.0.0/0 via 10.244.0.1", "10.96.0.0/12 via 10.244.0.1", PodBridgeFakeIP + "/32 via <nil>"}, routes,
		"the pod's routes, and the bridge's address on link")

	for _, bad := range []PodBridgeRecord{{Addr: "fd00::7/64"}, {Addr: "junk"}, {Addr: "10.0.0.2/24", Routes: []PodBridgeRoute{{Dst: "x"}}},
		{Addr: "10.0.0.2/24", Routes: []PodBridgeRoute{{Dst: "0.0.0.0/0", Gw: "nope"}}}} {
		_, err := bad.Lease(nil, "")
		assert.Error(t, err, "%+v", bad)
	}
}

// KubeVirt's masquerade lease: 10.0.2.2/24 behind 10.0.2.1, which also
// serves it, with the pod's MTU and DNS.
func TestMasqueradeLease(t *testing.T) {
	l := MasqueradeLease([]byte("search ns1.svc.cluster.local\nnameserver 10.96.0.10\n"), "vm1", 1400)
	assert.Equal(t, "10.0.2.2", l.IP.String())
	assert.Equal(t, "ffffff00", l.Mask.String())
	assert.Equal(t, "10.0.2.1", l.Router.String())
	assert.Equal(t, "10.0.2.1", l.ServerID.String())
	assert.Equal(t, uint16(1400), l.MTU)
	assert.Equal(t, "vm1", l.Hostname)
	assert.Equal(t, []net.IP{net.IPv4(10, 96, 0, 10).To4()}, l.DNS)
	assert.Equal(t, []string{"ns1.svc.cluster.local"}, l.Search)
	assert.Empty(t, l.Routes, "the router option is the default route")
}
