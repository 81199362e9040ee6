package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadcrd "github.com/kubevmm/kubevmm/api/nad/crd"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// installNADCRD installs Multus's NetworkAttachmentDefinition CRD.
func installNADCRD(t *testing.T) {
	t.Helper()
	crd, err := nadcrd.NetworkAttachmentDefinition()
	require.NoError(t, err)
	_, err = envtest.InstallCRDs(restConfig, envtest.CRDInstallOptions{CRDs: []*apiextv1.CustomResourceDefinition{crd}})
	require.NoError(t, err)
}

func createNAD(t *testing.T, ns, name, resourceName string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(nadv1.GroupName + "/" + nadv1.GroupVersion.Version)
	u.SetKind("NetworkAttachmentDefinition")
	u.SetNamespace(ns)
	u.SetName(name)
	if resourceName != "" {
		u.SetAnnotations(map[string]string{nadv1.ResourceNameAnnotation: resourceName})
	}
	require.NoError(t, unstructured.SetNestedField(u.Object, `{"cniVersion":"0.3.1","type":"bridge","bridge":"`+name+`"}`, "spec", "config"))
	require.NoError(t, k8s.Create(context.Background(), u))
}

// A VMI on a multus network whose NAD does not exist gets no pod and a
// Synchronized condition naming the NAD; once the NAD exists the pod
// comes, with the networks annotation and the NAD's resource.
func TestVMIMultusNetworks(t *testing.T) {
	needEnv(t)
	installNADCRD(t)
	ns := namespace(t)
	vmi := newVMI(ns, "br")
	vmi.Spec.Networks = []v1.Network{
		{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}},
		{Name: "br1", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}},
	}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{
		{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}},
		{Name: "br1", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}, MacAddress: "02:00:00:00:01:01"},
	}
	require.NoError(t, k8s.Create(context.Background(), vmi))
	vmi = waitVMI(t, ns, "br", "to say its NAD is missing", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "network attachment definition "+ns+"/br1 not found")
	})
	assert.Empty(t, launcherPods(t, vmi), "no pod without its NAD")

	createNAD(t, ns, "br1", "bridge.network.kubevirt.io/br1")
	waitVMI(t, ns, "br", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	var nets []map[string]string
	require.NoError(t, json.Unmarshal([]byte(pods[0].Annotations[nadv1.NetworksAnnotation]), &nets))
	assert.Equal(t, []map[string]string{{"name": "br1", "namespace": ns, "interface": vmispec.MultusInterfaceName("br1"), "mac": "02:00:00:00:01:01"}}, nets)
	c := pods[0].Spec.Containers[0]
	for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		q := l["bridge.network.kubevirt.io/br1"]
		assert.Equal(t, int64(1), q.Value())
	}
}
