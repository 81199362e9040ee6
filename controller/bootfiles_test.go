package controller

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/cloudinit"
)

// The launcher pod brings the files of kernelBoot and containerDisk images
// in through init containers that run the launcher binary, copied first.
func TestRenderLauncherPodBootFiles(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))},
				Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
					Image: "kernels:1", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initrd", ImagePullSecret: "pull"}}},
			},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disks:1"}}}},
		},
	}
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	require.Len(t, pod.Spec.InitContainers, 3)
	bin, kb, disk := pod.Spec.InitContainers[0], pod.Spec.InitContainers[1], pod.Spec.InitContainers[2]
	assert.Equal(t, "launcher:1", bin.Image)
	assert.Equal(t, []string{"/usr/bin/virt-launcher", "install", vmispec.BinDir}, bin.Command)
	assert.Equal(t, "kernels:1", kb.Image)
	assert.Equal(t, []string{vmispec.BinDir + "/virt-launcher", "copy", "/boot/vmlinux", vmispec.KernelBootDir + "/kernel", "/boot/initrd", vmispec.KernelBootDir + "/initrd"}, kb.Command)
	assert.Equal(t, "disks:1", disk.Image)
	assert.Equal(t, []string{vmispec.BinDir + "/virt-launcher", "copy", "/disk", vmispec.ContainerDiskFile("root")}, disk.Command)
	for _, c := range pod.Spec.InitContainers {
		assert.Equal(t, []string{"ALL"}, []string{string(c.SecurityContext.Capabilities.Drop[0])}, c.Name)
	}
	mounts := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	assert.Contains(t, mounts, vmispec.KernelBootDir)
	assert.Contains(t, mounts, vmispec.ContainerDiskDir)
	assert.Equal(t, "pull", pod.Spec.ImagePullSecrets[0].Name)
	require.NotNil(t, pod.Spec.SecurityContext)
	assert.Equal(t, int64(vmispec.LauncherUID(vmi.UID)), *pod.Spec.SecurityContext.RunAsUser)
	assert.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)

	// Nothing to bring in: no init containers.
	vmi.Spec.Domain.Firmware, vmi.Spec.Volumes = nil, nil
	pod, err = RenderLauncherPod(vmi, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	assert.Empty(t, pod.Spec.InitContainers)
}

// A containerDisk image is pulled as the VMI asks, else as KubeVirt
// defaults: Always for :latest (or no tag), IfNotPresent otherwise.
func TestContainerDiskPullPolicy(t *testing.T) {
	for _, tc := range []struct {
		image string
		set   corev1.PullPolicy
		want  corev1.PullPolicy
	}{
		{"10.200.0.1:5000/kubevmm/guest:v1", "", corev1.PullIfNotPresent},
		{"10.200.0.1:5000/kubevmm/guest", "", corev1.PullAlways},
		{"10.200.0.1:5000/kubevmm/guest:latest", "", corev1.PullAlways},
		{"registry:5000/guest@sha256:" + strings.Repeat("a", 64), "", corev1.PullIfNotPresent},
		{"registry:5000/guest:latest", corev1.PullNever, corev1.PullNever},
		{"localhost/kubevmm/test-bootdisk:devel", corev1.PullIfNotPresent, corev1.PullIfNotPresent},
	} {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid"},
			Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}},
				Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{
					ContainerDisk: &v1.ContainerDiskSource{Image: tc.image, ImagePullPolicy: tc.set}}}}}}
		pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "launcher:1", ImagePullPolicy: corev1.PullNever})
		require.NoError(t, err)
		require.Len(t, pod.Spec.InitContainers, 2)
		assert.Equal(t, corev1.PullNever, pod.Spec.InitContainers[0].ImagePullPolicy, "the launcher image's own")
		assert.Equal(t, tc.want, pod.Spec.InitContainers[1].ImagePullPolicy, "%s %q", tc.image, tc.set)
	}
}

// A cloud-init volume's Secrets (user data, network data, SSH keys
// propagated through it) are mounted where the launcher reads them, with
// an emptyDir for the disk it renders; keys for the guest agent are not.
func TestRenderLauncherPodCloudInit(t *testing.T) {
	key := func(secret string, m v1.SSHPublicKeyAccessCredentialPropagationMethod) v1.AccessCredential {
		return v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
			Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
			PropagationMethod: m,
		}}
	}
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}},
			Volumes: []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
				UserDataSecretRef: &v1.LocalObjectReference{Name: "ud"}, NetworkDataSecretRef: &v1.LocalObjectReference{Name: "nd"}}}}},
			AccessCredentials: []v1.AccessCredential{
				key("keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}}),
				key("keys", v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}}),
				key("agent", v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: &v1.Unmodeled{Raw: []byte("{}")}}),
			},
		},
	}
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	secrets := map[string]string{} // volume -> Secret
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	mounts := map[string]string{} // path -> volume
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m.Name
		if secrets[m.Name] != "" {
			assert.True(t, m.ReadOnly, m.Name)
		}
	}
	assert.Equal(t, map[string]string{"cloud-init-userdata": "ud", "cloud-init-networkdata": "nd", "access-cred-0": "keys"}, secrets)
	assert.Equal(t, "cloud-init-userdata", mounts[cloudinit.UserDataSecretDir(vmispec.SecretDir, "ci")])
	assert.Equal(t, "cloud-init-networkdata", mounts[cloudinit.NetworkDataSecretDir(vmispec.SecretDir, "ci")])
	assert.Equal(t, "access-cred-0", mounts[cloudinit.AccessCredentialDir(vmispec.SecretDir, "keys")])
	assert.Equal(t, "cloud-init", mounts[vmispec.CloudInitDir])
}
