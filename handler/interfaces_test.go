package handler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// status.interfaces reports every NIC in spec order: MAC, link state, pod
// interface; the masquerade NIC with the pod's IP; a multus NIC with
// "multus-status" when Multus reports its pod interface (a malformed
// annotation reports none), and with the guest's addresses once the agent
// knows them.
func TestStatusInterfacesSeveralNICs(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	vmi := vmiWithPodNIC()
	bridge := v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces,
		v1.Interface{Name: "br1", InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:0b:01"},
		v1.Interface{Name: "br2", InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:0b:02", State: "down"})
	vmi.Spec.Networks = append(vmi.Spec.Networks,
		v1.Network{Name: "br1", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}},
		v1.Network{Name: "br2", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br2"}}})
	pod1, pod2 := vmispec.MultusInterfaceName("br1"), vmispec.MultusInterfaceName("br2")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{nadv1.NetworkStatusAnnotation: `[
			{"name":"cbr0","interface":"eth0","ips":["10.244.0.9"],"default":true},
			{"name":"ns/br1","interface":"` + pod1 + `","mac":"aa:bb:cc:dd:ee:01"}]`}},
		Status: corev1.PodStatus{PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}},
	}
	st := vmi.Status.DeepCopy()
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, now)
	mac0 := st.Interfaces[0].MAC
	assert.Equal(t, []v1.VirtualMachineInstanceNetworkInterface{
		{Name: "default", MAC: mac0, IP: "10.244.0.9", IPs: []string{"10.244.0.9"}, PodInterfaceName: "eth0", InfoSource: "domain", QueueCount: 1, LinkState: "up"},
		{Name: "br1", MAC: "02:00:00:00:0b:01", PodInterfaceName: pod1, InfoSource: "domain, multus-status", QueueCount: 1, LinkState: "up"},
		{Name: "br2", MAC: "02:00:00:00:0b:02", PodInterfaceName: pod2, InfoSource: "domain", QueueCount: 1, LinkState: "down"},
	}, st.Interfaces)

	agent := &api.GuestAgent{Connected: true, Interfaces: []ga.Interface{
		{Name: "eth1", HardwareAddress: "02:00:00:00:0b:01", IPAddresses: []ga.IPAddress{{Type: "ipv4", Address: "192.168.50.1", Prefix: 24}}},
	}}
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning, GuestAgent: agent}, pod, now)
	assert.Equal(t, v1.VirtualMachineInstanceNetworkInterface{Name: "br1", MAC: "02:00:00:00:0b:01", IP: "192.168.50.1", IPs: []string{"192.168.50.1"},
		PodInterfaceName: pod1, InterfaceName: "eth1", InfoSource: "domain, guest-agent, multus-status", QueueCount: 1, LinkState: "up"}, st.Interfaces[1])

	pod.Annotations[nadv1.NetworkStatusAnnotation] = "{not json"
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, now)
	assert.Equal(t, "domain", st.Interfaces[1].InfoSource)
}

// A NIC bridge-bound on the pod network reports the pod's IP: the guest's
// own, handed out by DHCP; and, without a macAddress, the pod
// interface's MAC as its CNI reported it (the guest's); not known until
// it is reported.
func TestStatusInterfacesPodBridge(t *testing.T) {
	vmi := vmiWithPodNIC()
	vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = ""
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{nadv1.NetworkStatusAnnotation: `[
			{"name":"cbr0","interface":"eth0","ips":["10.244.0.9"],"mac":"0a:58:0a:f4:00:09","default":true}]`}},
		Status: corev1.PodStatus{PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}},
	}
	st := vmi.Status.DeepCopy()
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, metav1.NewTime(time.Unix(1000, 0)))
	assert.Len(t, st.Interfaces, 1)
	assert.Equal(t, "10.244.0.9", st.Interfaces[0].IP)
	assert.Equal(t, "eth0", st.Interfaces[0].PodInterfaceName)
	assert.Equal(t, "0a:58:0a:f4:00:09", st.Interfaces[0].MAC)

	delete(pod.Annotations, nadv1.NetworkStatusAnnotation)
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, metav1.NewTime(time.Unix(1000, 0)))
	assert.Empty(t, st.Interfaces[0].MAC)

	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:00:00:00:0a:01"
	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, metav1.NewTime(time.Unix(1000, 0)))
	assert.Equal(t, "02:00:00:00:0a:01", st.Interfaces[0].MAC, "a macAddress is the guest's")
}
