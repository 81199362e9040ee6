package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

func diskVMI(vols ...v1.Volume) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid"}}
	vmi.Spec.Domain.Memory = &v1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))}
	vmi.Spec.Volumes = vols
	for _, v := range vols {
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: v.Name})
	}
	return vmi
}

// A pod volume is named after its VMI volume: one the pod already has
// is refused, naming it, rather than mounted in its place.
func TestAddDiskVolumesRefusesTakenNames(t *testing.T) {
	vmi := diskVMI(v1.Volume{Name: vmispec.SocketsVolume, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
	require.NoError(t, err)
	err = addDiskVolumes(pod, vmi, map[string]vmispec.PVCInfo{vmispec.SocketsVolume: {ClaimName: "c"}})
	assert.ErrorContains(t, err, "spec.volumes["+vmispec.SocketsVolume+"]: the name is taken")
}

// A VMI with only an emptyDisk gets its directory and nothing of claims.
func TestAddDiskVolumesEmptyDiskOnly(t *testing.T) {
	vmi := diskVMI(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}})
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
	require.NoError(t, err)
	require.NoError(t, addDiskVolumes(pod, vmi, nil))
	c := pod.Spec.Containers[0]
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: emptyDiskVolume, MountPath: vmispec.EmptyDiskDir})
	assert.Nil(t, pod.Spec.SecurityContext.FSGroup)
	for _, e := range c.Env {
		assert.NotEqual(t, vmispec.PVCInfoEnv, e.Name)
	}
}

// An ephemeral volume's claim is mounted read-only (its writes go to the
// overlay in the scratch emptyDir, which the pod then has); a hostDisk's
// node directory is a hostPath volume, created only for DiskOrCreate.
func TestAddDiskVolumesEphemeralAndHostDisk(t *testing.T) {
	eph := func(name, claim string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
	vmi := diskVMI(eph("golden", "golden-fs"), eph("raw", "golden-blk"),
		v1.Volume{Name: "made", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/var/vms/a.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}},
		v1.Volume{Name: "found", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/srv/b.img", Type: v1.HostDiskExists}}})
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
	require.NoError(t, err)
	require.NoError(t, addDiskVolumes(pod, vmi, map[string]vmispec.PVCInfo{
		"golden": {ClaimName: "golden-fs"}, "raw": {ClaimName: "golden-blk", Block: true}}))

	vols := map[string]corev1.VolumeSource{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v.VolumeSource
	}
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden-fs", ReadOnly: true}, vols["golden"].PersistentVolumeClaim)
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden-blk", ReadOnly: true}, vols["raw"].PersistentVolumeClaim)
	assert.Equal(t, &corev1.HostPathVolumeSource{Path: "/var/vms", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}, vols["made"].HostPath)
	assert.Equal(t, &corev1.HostPathVolumeSource{Path: "/srv", Type: ptr.To(corev1.HostPathDirectory)}, vols["found"].HostPath)
	assert.NotNil(t, vols[emptyDiskVolume].EmptyDir, "the overlays' emptyDir")

	c := pod.Spec.Containers[0]
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "golden", MountPath: vmispec.PVCDiskDir + "/golden", ReadOnly: true})
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "made", MountPath: vmispec.PVCDiskDir + "/made"})
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "found", MountPath: vmispec.PVCDiskDir + "/found"})
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: emptyDiskVolume, MountPath: vmispec.EmptyDiskDir})
	assert.Contains(t, c.VolumeDevices, corev1.VolumeDevice{Name: "raw", DevicePath: vmispec.BlockDeviceDir + "/raw"})
}

// hostDisk volumes need KubeVirt's HostDisk feature gate.
func TestCheckHostDisks(t *testing.T) {
	vmi := diskVMI(v1.Volume{Name: "hd", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/srv/b.img", Type: v1.HostDiskExists}}})
	assert.ErrorContains(t, checkHostDisks(vmi, ClusterConfig{}), "spec.volumes[hd].hostDisk: the HostDisk feature gate is not enabled")
	gated := ClusterConfig{DeveloperConfiguration: DeveloperConfiguration{FeatureGates: []string{FeatureGateHostDisk}}}
	assert.NoError(t, checkHostDisks(vmi, gated))
	assert.NoError(t, checkHostDisks(diskVMI(), ClusterConfig{}), "no hostDisk, no gate needed")
}
