package install_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

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
}
