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
	"github.com/kubevmm/kubevmm/launcher/spec"
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
	vmi := diskVMI(v1.Volume{Name: spec.SocketsVolume, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
	require.NoError(t, err)
	err = addDiskVolumes(pod, vmi, map[string]spec.PVCInfo{spec.SocketsVolume: {ClaimName: "c"}})
	assert.ErrorContains(t, err, "spec.volumes["+spec.SocketsVolume+"]: the name is taken")
}

// A VMI with only an emptyDisk gets its directory and nothing of claims.
func TestAddDiskVolumesEmptyDiskOnly(t *testing.T) {
	vmi := diskVMI(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}})
	pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
	require.NoError(t, err)
	require.NoError(t, addDiskVolumes(pod, vmi, nil))
	c := pod.Spec.Containers[0]
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: emptyDiskVolume, MountPath: spec.EmptyDiskDir})
	assert.Nil(t, pod.Spec.SecurityContext.FSGroup)
	for _, e := range c.Env {
		assert.NotEqual(t, spec.PVCInfoEnv, e.Name)
	}
}
