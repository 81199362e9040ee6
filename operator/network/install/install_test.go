package install_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/operator/network/install"
)

func TestObjects(t *testing.T) {
	c := install.Config{MultusImage: "m:1", BridgeMarkerImage: "b:1", CNIBinDir: "/cache/cni/bin", CNIConfDir: "/cluster/net.d", ClusterNetwork: "10-bridge.conflist"}
	objs, err := install.Objects(c)
	require.NoError(t, err)
	crd, ok := objs[0].(*apiextensionsv1.CustomResourceDefinition)
	require.True(t, ok, "the CRD comes first")
	assert.Equal(t, "network-attachment-definitions.k8s.cni.cncf.io", crd.Name)
	assert.Equal(t, "string", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["config"].Type)

	ds := map[string]*appsv1.DaemonSet{}
	for _, o := range objs {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds[d.Name] = d
		}
	}
	require.Len(t, ds, 2)
	for _, d := range ds {
		assert.True(t, d.Spec.Template.Spec.HostNetwork, "%s runs in the host's network namespace", d.Name)
	}

	// The installer writes files that name host paths: each CNI
	// directory is mounted at its host path, and those are its flags.
	m := ds[install.Multus].Spec.Template.Spec
	paths := map[string]string{}
	for _, v := range m.Volumes {
		paths[v.Name] = v.HostPath.Path
	}
	for _, vm := range m.Containers[0].VolumeMounts {
		assert.Equal(t, paths[vm.Name], vm.MountPath, "volume %s", vm.Name)
	}
	args := m.Containers[0].Args
	assert.Equal(t, "install", args[0])
	for _, want := range []string{"--bin-dir=/cache/cni/bin", "--conf-dir=/cluster/net.d", "--cluster-network=10-bridge.conflist"} {
		assert.True(t, slices.Contains(args, want), "%s in %s", want, strings.Join(args, " "))
	}
	assert.ElementsMatch(t, []string{"/cache/cni/bin", "/cluster/net.d"}, []string{paths["cni-bin"], paths["cni-conf"]})

	// bridge-marker's init container installs the bridge and tuning
	// plugins into the CNI bin directory, mounted at its host path.
	b := ds[install.BridgeMarker].Spec.Template.Spec
	require.Len(t, b.InitContainers, 1)
	assert.Equal(t, []string{"install-plugins", "--bin-dir=/cache/cni/bin"}, b.InitContainers[0].Args)
	assert.Equal(t, "b:1", b.InitContainers[0].Image)
	require.Len(t, b.Volumes, 1)
	assert.Equal(t, "/cache/cni/bin", b.Volumes[0].HostPath.Path)
	assert.Equal(t, "/cache/cni/bin", b.InitContainers[0].VolumeMounts[0].MountPath)
}

func TestKubeMacPoolObjects(t *testing.T) {
	c := install.KubeMacPoolConfig{Image: "k:1", RangeStart: "02:00:00:00:00:00", RangeEnd: "02:00:00:00:00:ff", CABundle: []byte("ca")}
	objs, err := install.KubeMacPoolObjects(c)
	require.NoError(t, err)
	kinds := map[string]client.Object{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
		switch {
		case o.GetName() == "kubevmm:kubemacpool-auth-reader":
			// The front-proxy settings' reader Role is kube-system's.
			assert.Equal(t, "kube-system", o.GetNamespace())
		case o.GetObjectKind().GroupVersionKind().Kind != "MutatingWebhookConfiguration" && !strings.HasPrefix(o.GetObjectKind().GroupVersionKind().Kind, "Cluster"):
			assert.Equal(t, install.Namespace, o.GetNamespace(), o.GetName())
		}
	}
	reader, ok := kinds["RoleBinding/kubevmm:kubemacpool-auth-reader"].(*rbacv1.RoleBinding)
	require.True(t, ok, "kubemacpool reads who the API server is (it answers only its reviews)")
	assert.Equal(t, "extension-apiserver-authentication-reader", reader.RoleRef.Name)
	cm, ok := kinds["ConfigMap/kubemacpool-mac-range-config"].(*corev1.ConfigMap)
	require.True(t, ok, "the range's ConfigMap")
	assert.Equal(t, map[string]string{"RANGE_START": "02:00:00:00:00:00", "RANGE_END": "02:00:00:00:00:ff"}, cm.Data)
	d, ok := kinds["Deployment/"+install.KubeMacPool].(*appsv1.Deployment)
	require.True(t, ok)
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "never two pools at once")
	assert.Equal(t, install.KubeMacPoolSecret, d.Spec.Template.Spec.Volumes[0].Secret.SecretName)
	svc, ok := kinds["Service/"+install.KubeMacPoolService].(*corev1.Service)
	require.True(t, ok)
	assert.Equal(t, d.Spec.Template.Labels, svc.Spec.Selector)
	hook, ok := kinds["MutatingWebhookConfiguration/"+install.KubeMacPoolWebhook].(*admissionregistrationv1.MutatingWebhookConfiguration)
	require.True(t, ok)
	w := hook.Webhooks[0]
	assert.Equal(t, "mutatevirtualmachines.kubemacpool.io", w.Name)
	assert.Equal(t, []byte("ca"), w.ClientConfig.CABundle)
	assert.Equal(t, install.KubeMacPoolService, w.ClientConfig.Service.Name)
	assert.Equal(t, []metav1.LabelSelectorRequirement{{Key: "mutatevirtualmachines.kubemacpool.io", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"ignore"}}},
		w.NamespaceSelector.MatchExpressions)
	for _, kind := range []string{"ServiceAccount/kubemacpool", "ClusterRole/kubevmm:kubemacpool", "ClusterRoleBinding/kubevmm:kubemacpool", "Role/kubevmm:kubemacpool", "RoleBinding/kubevmm:kubemacpool"} {
		assert.Contains(t, kinds, kind)
	}

	for _, tc := range []struct {
		name       string
		start, end string
		ca         []byte
		err        string
	}{
		{name: "no range", ca: []byte("ca"), err: "kubeMacPool: no MAC range (rangeStart, rangeEnd)"},
		{name: "half a range", start: "02:00:00:00:00:00", ca: []byte("ca"), err: "kubeMacPool: the MAC range needs both its start and its end"},
		{name: "multicast", start: "03:00:00:00:00:00", end: "03:00:00:00:00:ff", ca: []byte("ca"), err: "kubeMacPool: range start: \"03:00:00:00:00:00\" is a multicast MAC address"},
		{name: "reversed", start: "02:00:00:00:00:ff", end: "02:00:00:00:00:00", ca: []byte("ca"), err: "is not after its start"},
		{name: "no CA", start: "02:00:00:00:00:00", end: "02:00:00:00:00:ff", err: "no CA bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := install.KubeMacPoolObjects(install.KubeMacPoolConfig{Image: "k:1", RangeStart: tc.start, RangeEnd: tc.end, CABundle: tc.ca})
			assert.ErrorContains(t, err, tc.err)
		})
	}
}
