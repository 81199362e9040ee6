package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Launcher pods, a migration's target included, pass the PodSecurity
// "restricted" level, as the API server's admission judges it, whatever
// the VMI brings in (kernelBoot and containerDisk init containers, the
// sysctl that lets the launcher serve its masquerade NIC DHCP); and each
// VMI's launchers run as a user of their own.
func TestLauncherPodsAreRestricted(t *testing.T) {
	vmi := func(uid string) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: types.UID("uid-" + uid)},
			Spec: v1.VirtualMachineInstanceSpec{
				Domain: v1.DomainSpec{
					Memory: &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))},
					Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
						Image: "kernels:1", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initrd"}}},
					Devices: v1.Devices{Interfaces: []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}},
				},
				Networks: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
				Volumes:  []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disks:1"}}}},
			},
		}
	}
	a, b := vmi("a"), vmi("b")
	podA, err := RenderLauncherPod(a, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	podB, err := RenderLauncherPod(b, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	target, err := RenderMigrationTargetPod(a, &v1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"}}, LauncherConfig{Image: "launcher:1"}, "node01", false)
	require.NoError(t, err)

	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	for name, pod := range map[string]*corev1.Pod{"launcher": podA, "migration target": target} {
		res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
		assert.True(t, res.Allowed, "%s: %v %v", name, res.ForbiddenReasons, res.ForbiddenDetails)
		for _, v := range pod.Spec.Volumes {
			assert.Nil(t, v.HostPath, "%s: volume %s", name, v.Name)
		}
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, "%s: container %s", name, c.Name)
		}
		assert.Equal(t, corev1.SeccompProfileTypeLocalhost, pod.Spec.SecurityContext.SeccompProfile.Type)
		assert.Equal(t, vmispec.SeccompProfile, *pod.Spec.SecurityContext.SeccompProfile.LocalhostProfile)
		assert.Equal(t, []corev1.Sysctl{{Name: vmispec.UnprivilegedPortSysctl, Value: "67"}}, pod.Spec.SecurityContext.Sysctls, name)
	}

	uidA, uidB := *podA.Spec.SecurityContext.RunAsUser, *podB.Spec.SecurityContext.RunAsUser
	assert.NotEqual(t, uidA, uidB, "two VMIs, two users")
	assert.Equal(t, uidA, *target.Spec.SecurityContext.RunAsUser, "a migration's two launchers share the VMI's user")
	assert.Equal(t, uidA, *podA.Spec.SecurityContext.RunAsGroup)
	for _, u := range []int64{uidA, uidB} {
		assert.GreaterOrEqual(t, u, int64(vmispec.LauncherUIDBase))
		assert.Less(t, u, int64(vmispec.LauncherUIDBase+vmispec.LauncherUIDCount))
	}
	again, err := RenderLauncherPod(a, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	assert.Equal(t, uidA, *again.Spec.SecurityContext.RunAsUser, "stable")
}
