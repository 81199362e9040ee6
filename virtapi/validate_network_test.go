package virtapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// multusNIC adds a bridge NIC on a multus network of the same name.
func multusNIC(s *v1.VirtualMachineInstanceSpec, name, nad string) *v1.Interface {
	s.Networks = append(s.Networks, v1.Network{Name: name, NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: nad}}})
	s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces,
		v1.Interface{Name: name, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
	return &s.Domain.Devices.Interfaces[len(s.Domain.Devices.Interfaces)-1]
}

func TestValidateNetworksAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstanceSpec)
	}{
		{"bridge on a multus network beside masquerade", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "br1") }},
		{"several multus NICs, a namespaced NAD, a MAC", func(s *v1.VirtualMachineInstanceSpec) {
			multusNIC(s, "a", "ns1/br1").MacAddress = "02:00:00:00:00:0a"
			multusNIC(s, "b", "br2")
		}},
		{"only multus NICs", func(s *v1.VirtualMachineInstanceSpec) {
			s.Networks, s.Domain.Devices.Interfaces = nil, nil
			multusNIC(s, "br1", "br1")
		}},
		{"bridge on the pod network beside a multus bridge", func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
			multusNIC(s, "br1", "br1")
		}},
		{"state down", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "br1").State = "down" }},
		{"masquerade ports", func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Name: "http", Port: 80}, {Port: 53, Protocol: "UDP"}, {Port: 49152, Protocol: "UDP"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(t)
			tc.mutate(s)
			assert.Empty(t, validate(s, nil))
		})
	}
}

func TestValidateNetworksRefuses(t *testing.T) {
	nic := func(s *v1.VirtualMachineInstanceSpec) *v1.Interface { return &s.Domain.Devices.Interfaces[0] }
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstanceSpec)
		field  string
		typ    field.ErrorType
		detail string
	}{
		{"masquerade on multus", func(s *v1.VirtualMachineInstanceSpec) {
			b := multusNIC(s, "br1", "br1")
			b.Bridge, b.Masquerade = nil, &v1.InterfaceMasquerade{}
		}, "domain.devices.interfaces[1].masquerade", field.ErrorTypeInvalid, "only for the pod network"},
		{"bridge on the pod network with ports", func(s *v1.VirtualMachineInstanceSpec) {
			nic(s).Masquerade, nic(s).Bridge = nil, &v1.InterfaceBridge{}
			nic(s).Ports = []v1.Port{{Port: 80}}
		}, "domain.devices.interfaces[0].ports", field.ErrorTypeInvalid, "only for the masquerade binding"},
		{"sriov on multus", func(s *v1.VirtualMachineInstanceSpec) {
			b := multusNIC(s, "br1", "br1")
			b.Bridge, b.SRIOV = nil, &v1.InterfaceSRIOV{}
		}, "domain.devices.interfaces[1].sriov", field.ErrorTypeNotSupported, ""},
		{"multus default", func(s *v1.VirtualMachineInstanceSpec) {
			multusNIC(s, "br1", "br1")
			s.Networks[1].Multus.Default = true
		}, "networks[1].multus.default", field.ErrorTypeNotSupported, ""},
		{"multus without networkName", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "") },
			"networks[1].multus.networkName", field.ErrorTypeRequired, ""},
		{"multus networkName a/b/c", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "a/b/c") },
			"networks[1].multus.networkName", field.ErrorTypeInvalid, ""},
		{"pod and multus in one network", func(s *v1.VirtualMachineInstanceSpec) {
			s.Networks[0].Multus = &v1.MultusNetwork{NetworkName: "x"}
		}, "networks[0]", field.ErrorTypeInvalid, "exactly one"},
		{"two pod networks", func(s *v1.VirtualMachineInstanceSpec) {
			s.Networks = append(s.Networks, v1.Network{Name: "p2", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}})
		}, "networks", field.ErrorTypeInvalid, "pod network"},
		{"two interfaces of one network", func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, *nic(s))
		}, "domain.devices.interfaces[1].name", field.ErrorTypeDuplicate, ""},
		{"duplicate network name", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "default", "x") },
			"networks[1].name", field.ErrorTypeDuplicate, ""},
		{"an interface without its network", func(s *v1.VirtualMachineInstanceSpec) {
			multusNIC(s, "br1", "br1")
			s.Networks = s.Networks[:1]
		}, "domain.devices.interfaces[1].name", field.ErrorTypeInvalid, ""},
		{"ports on bridge", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "br1").Ports = []v1.Port{{Port: 80}} },
			"domain.devices.interfaces[1].ports", field.ErrorTypeInvalid, "masquerade"},
		{"port 0", func(s *v1.VirtualMachineInstanceSpec) { nic(s).Ports = []v1.Port{{Port: 0}} },
			"domain.devices.interfaces[0].ports[0].port", field.ErrorTypeInvalid, ""},
		{"port 65536", func(s *v1.VirtualMachineInstanceSpec) { nic(s).Ports = []v1.Port{{Port: 65536}} },
			"domain.devices.interfaces[0].ports[0].port", field.ErrorTypeInvalid, ""},
		{"the migration port", func(s *v1.VirtualMachineInstanceSpec) { nic(s).Ports = []v1.Port{{Port: 22}, {Port: 49152}} },
			"domain.devices.interfaces[0].ports[1].port", field.ErrorTypeInvalid, "migration"},
		{"protocol SCTP", func(s *v1.VirtualMachineInstanceSpec) { nic(s).Ports = []v1.Port{{Port: 80, Protocol: "SCTP"}} },
			"domain.devices.interfaces[0].ports[0].protocol", field.ErrorTypeNotSupported, ""},
		{"duplicate port name", func(s *v1.VirtualMachineInstanceSpec) {
			nic(s).Ports = []v1.Port{{Name: "a", Port: 80}, {Name: "a", Port: 81}}
		}, "domain.devices.interfaces[0].ports[1].name", field.ErrorTypeDuplicate, ""},
		{"a port name that is no IANA service name", func(s *v1.VirtualMachineInstanceSpec) { nic(s).Ports = []v1.Port{{Name: "Web_1", Port: 80}} },
			"domain.devices.interfaces[0].ports[0].name", field.ErrorTypeInvalid, ""},
		{"the masquerade gateway's MAC", func(s *v1.VirtualMachineInstanceSpec) { nic(s).MacAddress = "02:00:00:6B:76:01" },
			"domain.devices.interfaces[0].macAddress", field.ErrorTypeInvalid, "reserved"},
		{"state absent", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "br1").State = "absent" },
			"domain.devices.interfaces[1].state", field.ErrorTypeNotSupported, ""},
		{"a bad MAC on a multus NIC", func(s *v1.VirtualMachineInstanceSpec) { multusNIC(s, "br1", "br1").MacAddress = "02:00:00" },
			"domain.devices.interfaces[1].macAddress", field.ErrorTypeInvalid, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec(t)
			tc.mutate(s)
			errs := validate(s, nil)
			var got *field.Error
			for _, e := range errs {
				if e.Field == "spec."+tc.field {
					got = e
				}
			}
			require.NotNil(t, got, "no error for spec.%s in %v", tc.field, errs)
			assert.Equal(t, tc.typ, got.Type, "%v", got)
			assert.True(t, strings.Contains(got.Error(), tc.detail), "%v: want %q", got, tc.detail)
		})
	}
}
