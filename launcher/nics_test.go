package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Several NICs: one device per interface in spec order, each on its own
// tap with its MAC (the spec's, else a derived one); the masquerade
// address goes to the guest NIC the masquerade interface becomes; state
// down reaches our VMM's device and is refused by the QEMU backend.
func TestBuildVMConfigSeveralNICs(t *testing.T) {
	p := testPaths(t)
	vmi := testVMI()
	bridge := v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "br1", InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:00:01"},
		vmi.Spec.Domain.Devices.Interfaces[0],
		{Name: "br2", InterfaceBindingMethod: bridge, State: "down"},
	}
	vmi.Spec.Networks = append(vmi.Spec.Networks,
		v1.Network{Name: "br1", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}},
		v1.Network{Name: "br2", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "other/br2"}}})
	c, err := BuildVMConfig(vmi, p)
	require.NoError(t, err)
	require.Len(t, c.NICs, 3)
	assert.Equal(t, []string{"br1", "default", "br2"}, []string{c.NICs[0].Name, c.NICs[1].Name, c.NICs[2].Name})
	assert.Equal(t, []string{"tap0", "tap1", "tap2"}, []string{c.NICs[0].Tap, c.NICs[1].Tap, c.NICs[2].Tap})
	assert.Equal(t, "02:00:00:00:00:01", c.NICs[0].MAC.String())
	assert.NotEqual(t, c.NICs[1].MAC.String(), c.NICs[2].MAC.String())
	assert.Equal(t, []bool{false, false, true}, []bool{c.NICs[0].LinkDown, c.NICs[1].LinkDown, c.NICs[2].LinkDown})
	assert.Equal(t, []dhcpLease{noLease, masqueradeLease, noLease}, []dhcpLease{c.NICs[0].DHCP, c.NICs[1].DHCP, c.NICs[2].DHCP},
		"the launcher serves a lease to the masquerade NIC only")
	assert.Contains(t, c.Cmdline, " ip=10.0.2.2::10.0.2.1:255.255.255.0::eth1:off", "the masquerade NIC is the guest's second")

	os.WriteFile(c.Kernel, []byte("kernel"), 0o644)
	os.WriteFile(c.Initrd, []byte("initrd"), 0o644)
	os.WriteFile(c.Disks[0].Path, make([]byte, 4096), 0o644)
	mc, err := c.MachineConfig(nil)
	require.NoError(t, err)
	require.Len(t, mc.NICs, 3)
	assert.True(t, mc.NICs[2].LinkDown)
	assert.Equal(t, c.NICs[0].MAC, mc.NICs[0].MAC)

	_, err = c.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	assert.ErrorContains(t, err, "interface br2: state down")
	c.NICs[2].LinkDown = false
	qc, err := c.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	require.NoError(t, err)
	require.Len(t, qc.NICs, 3)
	assert.Equal(t, []string{"tap0", "02:00:00:00:00:01"}, []string{qc.NICs[0].Tap, qc.NICs[0].MAC})

	// Without a masquerade NIC, no masquerade address.
	vmi.Spec.Domain.Devices.Interfaces = vmi.Spec.Domain.Devices.Interfaces[:1]
	c, err = BuildVMConfig(vmi, p)
	require.NoError(t, err)
	assert.NotContains(t, c.Cmdline, "ip=")
}

// A NIC bridge-bound on the pod network without macAddress takes the pod
// interface's original MAC, which virt-handler records on the in-pod
// bridge when it wires the NIC: the launcher reads it there, once the tap
// exists. A missing or broken record is a clear error, not a guessed MAC;
// a record without a MAC (an older virt-handler's, which gave the guest
// the derived MAC) leaves the derived one.
func TestPodBridgeNICTakesPodMAC(t *testing.T) {
	p := testPaths(t)
	vmi := testVMI()
	vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = ""
	c, err := BuildVMConfig(vmi, p)
	require.NoError(t, err)
	require.Len(t, c.NICs, 1)
	assert.True(t, c.NICs[0].PodMAC)
	assert.Equal(t, podBridgeLease, c.NICs[0].DHCP)
	derived := c.NICs[0].MAC
	require.NotNil(t, derived)

	alias := filepath.Join(p.SysClassNet, vmispec.BridgeName(vmispec.PodInterface), "ifalias")
	assert.ErrorContains(t, readPodMACs(p.SysClassNet, c.NICs), "interface default: the pod interface's MAC")
	require.NoError(t, os.MkdirAll(filepath.Dir(alias), 0o755))
	for _, bad := range []string{"{not json\n", `{"addr":"10.244.0.7/24","mtu":1500,"mac":"03:00:00:00:00:01"}` + "\n", `{"mac":"junk"}`} {
		require.NoError(t, os.WriteFile(alias, []byte(bad), 0o644))
		assert.ErrorContains(t, readPodMACs(p.SysClassNet, c.NICs), "interface default: ", bad)
	}
	require.NoError(t, os.WriteFile(alias, []byte(`{"addr":"10.244.0.7/24","mtu":1500}`+"\n"), 0o644))
	require.NoError(t, readPodMACs(p.SysClassNet, c.NICs))
	assert.Equal(t, derived, c.NICs[0].MAC, "an older handler's record: the derived MAC")
	require.NoError(t, os.WriteFile(alias, []byte(`{"addr":"10.244.0.7/24","mtu":1500,"mac":"0a:58:0a:f4:00:07"}`+"\n"), 0o644))
	require.NoError(t, readPodMACs(p.SysClassNet, c.NICs))
	assert.Equal(t, "0a:58:0a:f4:00:07", c.NICs[0].MAC.String())

	// With a macAddress, that is the guest's: nothing to read.
	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:00:00:00:0a:01"
	c, err = BuildVMConfig(vmi, p)
	require.NoError(t, err)
	assert.False(t, c.NICs[0].PodMAC)
	require.NoError(t, readPodMACs(t.TempDir(), c.NICs))
	assert.Equal(t, "02:00:00:00:0a:01", c.NICs[0].MAC.String())
}
