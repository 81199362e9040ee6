package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// The attachment pod passes the PodSecurity "restricted" level, runs as
// the launcher's user with its group owning the claims, mounts a
// Filesystem claim and hands a Block claim's device.
func TestAttachmentPodIsRestricted(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "vmi-uid"},
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}}}}
	launcher, err := RenderLauncherPod(vmi, LauncherConfig{Image: "launcher:1"})
	require.NoError(t, err)
	launcher.Name, launcher.UID, launcher.Spec.NodeName = "virt-launcher-vm-x", "pod-uid", "node01"
	pod := RenderAttachmentPod(vmi, launcher, map[string]vmispec.PVCInfo{
		"fs":  {ClaimName: "fs-claim"},
		"blk": {ClaimName: "blk-claim", Block: true},
	}, LauncherConfig{Image: "launcher:1"})

	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
	assert.True(t, res.Allowed, "%v %v", res.ForbiddenReasons, res.ForbiddenDetails)
	assert.Equal(t, launcher.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.RunAsUser)
	assert.Equal(t, launcher.Spec.SecurityContext.RunAsGroup, pod.Spec.SecurityContext.FSGroup)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []corev1.VolumeMount{{Name: "fs", MountPath: HotplugDiskDir + "/fs"}}, c.VolumeMounts)
	assert.Equal(t, []corev1.VolumeDevice{{Name: "blk", DevicePath: HotplugDiskDir + "/blk"}}, c.VolumeDevices)
	assert.Equal(t, map[string]string{"fs": "fs-claim", "blk": "blk-claim"}, attachmentClaims(pod))
}

// volumeStatus entries virt-handler moved on are kept, a removed volume's
// included until the handler lets it go; one it never took goes with the
// volume.
func TestDecideVolumeStatusKeepsHandlersEntries(t *testing.T) {
	hp := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name, Hotpluggable: true}}}
	}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hp-volume-a", UID: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "new", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "new"}}}}}}
	ready := v1.VolumeStatus{Name: "ready", Target: "sda", Phase: v1.VolumeReady, Reason: "VolumeReady"}
	vmi := &v1.VirtualMachineInstance{
		Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{hp("ready"), hp("new")}},
		Status: v1.VirtualMachineInstanceStatus{VolumeStatus: []v1.VolumeStatus{
			ready,
			{Name: "removed-mounted", Phase: v1.HotplugVolumeMounted},
			{Name: "removed-pending", Phase: v1.VolumePending},
		}},
	}
	hc := hotplugClaims{ready: map[string]vmispec.PVCInfo{"ready": {ClaimName: "ready"}, "new": {ClaimName: "new"}}}
	got := decideVolumeStatus(vmi, hc, []*corev1.Pod{running})
	require.Len(t, got, 3)
	assert.Equal(t, ready, got[0])
	assert.Equal(t, v1.VolumeStatus{Name: "new", Phase: v1.HotplugVolumeAttachedToNode, Reason: ReasonSuccessfulCreate,
		Message:                   "Created hotplug attachment pod hp-volume-a, for volume new",
		PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "new", VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)},
		HotplugVolume:             &v1.HotplugVolumeStatus{AttachPodName: "hp-volume-a", AttachPodUID: "a"}}, got[1])
	assert.Equal(t, "removed-mounted", got[2].Name)
}
