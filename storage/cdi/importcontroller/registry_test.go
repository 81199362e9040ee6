package importcontroller_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/importcontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
)

func registryPVC(method, url string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "uid", Annotations: map[string]string{
		cdiv1.AnnSource: cdiv1.SourceRegistry, cdiv1.AnnEndpoint: url, cdiv1.AnnRegistryImportMethod: method}},
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

func mountsOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, v := range c.VolumeMounts {
		m[v.MountPath] = v.Name
	}
	return m
}

// pullMethod pod: the importer image pulls, with scratch space.
func TestRegistryPodPull(t *testing.T) {
	pvc := registryPVC("pod", "docker://10.200.0.1:5000/kubevmm/guest:v1")
	pvc.Annotations[cdiv1.AnnRegistryArchitecture] = "arm64"
	pod, err := importcontroller.Pod(pvc, importcontroller.PodConfig{Image: "importer-img"})
	require.NoError(t, err)
	require.Empty(t, pod.Spec.InitContainers)
	c := pod.Spec.Containers[0]
	assert.Equal(t, "importer-img", c.Image)
	assert.Equal(t, importer.ScratchDir, findKey(mountsOf(c), "cdi-scratch-vol"))
	assert.Contains(t, c.Env, corev1.EnvVar{Name: importer.EnvRegistryPullMethod, Value: "pod"})
	assert.Contains(t, c.Env, corev1.EnvVar{Name: importer.EnvRegistryArchitecture, Value: "arm64"})
	assert.Contains(t, c.Env, corev1.EnvVar{Name: importer.EnvSource, Value: "registry"})
	assert.NotContains(t, c.Env, corev1.EnvVar{Name: importer.EnvInsecureTLS, Value: "true"})

	// CDIConfig insecureRegistries names the registry's host:port.
	for list, insecure := range map[string]bool{"10.200.0.1:5000": true, "10.200.0.1": false, "other:5000": false} {
		pod, err := importcontroller.Pod(pvc, importcontroller.PodConfig{Image: "importer-img", InsecureRegistries: []string{list}})
		require.NoError(t, err)
		assert.Equal(t, insecure, slices.Contains(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: importer.EnvInsecureTLS, Value: "true"}), list)
	}
}

// pullMethod node: the importer container runs the containerDisk image,
// the kubelet pulls it; the binary comes through an emptyDir.
func TestRegistryNodePull(t *testing.T) {
	for url, policy := range map[string]corev1.PullPolicy{
		"docker://10.200.0.1:5000/kubevmm/guest:v1":     corev1.PullIfNotPresent,
		"docker://10.200.0.1:5000/kubevmm/guest":        corev1.PullAlways,
		"docker://10.200.0.1:5000/kubevmm/guest:latest": corev1.PullAlways,
	} {
		pod, err := importcontroller.Pod(registryPVC("node", url), importcontroller.PodConfig{Image: "importer-img", PullPolicy: corev1.PullNever})
		require.NoError(t, err)
		c := pod.Spec.Containers[0]
		assert.Equal(t, url[len("docker://"):], c.Image)
		assert.Equal(t, policy, c.ImagePullPolicy, url)
		assert.Equal(t, []string{importer.InstallDir + "/cdi-importer"}, c.Command)
		require.Len(t, pod.Spec.InitContainers, 1)
		ic := pod.Spec.InitContainers[0]
		assert.Equal(t, "importer-img", ic.Image)
		assert.Equal(t, corev1.PullNever, ic.ImagePullPolicy)
		assert.Equal(t, []string{"/usr/bin/cdi-importer", "install", importer.InstallDir}, ic.Command)
		assert.Equal(t, map[string]string{importer.DataDir: "cdi-data-vol", importer.InstallDir: "cdi-importer-bin"}, mountsOf(c), "no scratch space")
		assert.Equal(t, int64(107), *pod.Spec.SecurityContext.RunAsUser, "the containerDisk's owner reads its disk")
		assert.Equal(t, c.SecurityContext, ic.SecurityContext, "the installer is confined as the importer")
	}
}

func findKey(m map[string]string, v string) string {
	for k, x := range m {
		if x == v {
			return k
		}
	}
	return ""
}
