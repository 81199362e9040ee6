package handler

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/vmm/api"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// What the guest agent reports lands in the status: guestOSInfo, the
// AgentConnected condition and the guest's interfaces merged with the
// domain's; when the agent goes, the condition and the guest's
// interfaces go too, guestOSInfo stays.
func TestStatusFromTheGuestAgent(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	vmi := vmiWithPodNIC()
	st := vmi.Status.DeepCopy()
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, now)
	require.Len(t, st.Interfaces, 1)
	mac := st.Interfaces[0].MAC

	agent := &api.GuestAgent{
		Connected: true,
		OS:        ga.OSInfo{Name: "kubevmm test guest", PrettyName: "kubevmm test guest (busybox)", ID: "kubevmm-guest", VersionID: "1", KernelRelease: "6.1.0", Machine: "x86_64"},
		Interfaces: []ga.Interface{
			{Name: "lo", HardwareAddress: "00:00:00:00:00:00", IPAddresses: []ga.IPAddress{{Type: "ipv4", Address: "127.0.0.1", Prefix: 8}}},
			// the NIC, MAC in upper case: still the domain's
			{Name: "eth0", HardwareAddress: strings.ToUpper(mac), IPAddresses: []ga.IPAddress{{Type: "ipv4", Address: "10.0.2.2", Prefix: 24}}},
			{Name: "dummy0", HardwareAddress: "0a:00:00:00:00:01", IPAddresses: []ga.IPAddress{{Type: "ipv4", Address: "192.168.7.1", Prefix: 24}, {Type: "ipv6", Address: "fd00::1", Prefix: 64}}},
		},
	}
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning, GuestAgent: agent}, pod, now)
	assert.Equal(t, v1.VirtualMachineInstanceGuestOSInfo{Name: "kubevmm test guest", PrettyName: "kubevmm test guest (busybox)", ID: "kubevmm-guest", VersionID: "1", KernelRelease: "6.1.0", Machine: "x86_64"}, st.GuestOSInfo)
	c := (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstanceAgentConnected)
	require.NotNil(t, c)
	assert.Equal(t, corev1.ConditionTrue, c.Status)
	assert.Equal(t, []v1.VirtualMachineInstanceNetworkInterface{
		{Name: "default", MAC: mac, IP: "10.244.0.9", IPs: []string{"10.244.0.9"}, PodInterfaceName: "eth0", InterfaceName: "eth0", InfoSource: "domain, guest-agent", QueueCount: 1, LinkState: "up"},
		{InterfaceName: "dummy0", MAC: "0a:00:00:00:00:01", IP: "192.168.7.1", IPs: []string{"192.168.7.1", "fd00::1"}, InfoSource: "guest-agent"},
	}, st.Interfaces)

	statusFromInfo(st, vmi, api.Info{State: api.StateRunning, GuestAgent: &api.GuestAgent{}}, pod, now)
	assert.Nil(t, (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstanceAgentConnected), "no agent: no condition")
	require.Len(t, st.Interfaces, 1)
	assert.Equal(t, "domain", st.Interfaces[0].InfoSource)
	assert.Equal(t, "kubevmm test guest", st.GuestOSInfo.Name, "the last OS info stays")

	statusFromInfo(st, vmi, api.Info{State: api.StateRunning, GuestAgent: agent}, pod, now)
	statusFromInfo(st, vmi, api.Info{State: api.StateStopped, Exit: "poweroff"}, pod, now)
	assert.Nil(t, (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstanceAgentConnected), "a stopped guest has no agent")
}
