package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// The networks annotation lists the multus networks in spec order, the
// NAD's namespace defaulted to the VMI's, the pod interface named as
// KubeVirt names it, the interface's MAC; each NAD's resource is requested
// once per network that uses it.
func TestWithNetworks(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "vms"}}
	bridge := v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	vmi.Spec.Networks = []v1.Network{
		{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}},
		{Name: "a", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}},
		{Name: "b", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "infra/br2"}}},
		{Name: "c", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}},
	}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}},
		{Name: "c", InterfaceBindingMethod: bridge},
		{Name: "a", InterfaceBindingMethod: bridge, MacAddress: "02:00:00:00:00:0a"},
		{Name: "b", InterfaceBindingMethod: bridge},
	}
	nets := multusNetworks(vmi)
	require.Equal(t, []networkSelection{
		{Name: "br1", Namespace: "vms", InterfaceRequest: vmispec.MultusInterfaceName("a"), MacRequest: "02:00:00:00:00:0a"},
		{Name: "br2", Namespace: "infra", InterfaceRequest: vmispec.MultusInterfaceName("b")},
		{Name: "br1", Namespace: "vms", InterfaceRequest: vmispec.MultusInterfaceName("c")},
	}, nets)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute"}}}}
	res := map[string]string{nets[0].InterfaceRequest: "bridge.network.kubevirt.io/br1", nets[2].InterfaceRequest: "bridge.network.kubevirt.io/br1"}
	require.NoError(t, withNetworks(pod, nets, res))
	assert.JSONEq(t, `[{"name":"br1","namespace":"vms","interface":"`+vmispec.MultusInterfaceName("a")+`","mac":"02:00:00:00:00:0a"},
		{"name":"br2","namespace":"infra","interface":"`+vmispec.MultusInterfaceName("b")+`"},
		{"name":"br1","namespace":"vms","interface":"`+vmispec.MultusInterfaceName("c")+`"}]`, pod.Annotations[nadv1.NetworksAnnotation])
	c := pod.Spec.Containers[0].Resources
	for _, l := range []corev1.ResourceList{c.Requests, c.Limits} {
		require.Len(t, l, 1)
		q := l["bridge.network.kubevirt.io/br1"]
		assert.Equal(t, int64(2), q.Value())
	}

	// Without multus networks the pod is left as it is.
	vmi.Spec.Networks = vmi.Spec.Networks[:1]
	pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute"}}}}
	require.NoError(t, withNetworks(pod, multusNetworks(vmi), nil))
	assert.Empty(t, pod.Annotations)
	assert.Nil(t, pod.Spec.Containers[0].Resources.Requests)
}
