package controller_test

import (
	"context"
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
	"github.com/kubevmm/kubevmm/controller"
)

func createPVC(t *testing.T, ns, name string, mode corev1.PersistentVolumeMode, access corev1.PersistentVolumeAccessMode) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{access},
			VolumeMode:  ptr.To(mode),
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
	require.NoError(t, k8s.Create(context.Background(), pvc))
}

// A VMI with PVC and emptyDisk volumes: while a claim is missing it gets
// no pod and Synchronized names the claim (KubeVirt's FailedPvcNotFound);
// once the claims exist the launcher pod mounts the Filesystem claim,
// gets the Block claim as a device and the emptyDisk directory, the
// launcher learns the claims' mode and size, and LiveMigratable is False
// naming the first volume that cannot move (the RWO claim).
func TestVMIDiskVolumes(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	vmi := newVMI(ns, "disks")
	vmi.Spec.Volumes = []v1.Volume{
		{Name: "shared", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rwx-fs"}}},
		{Name: "blk", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "rwo-block"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}},
	}
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "shared"}, {Name: "blk"}, {Name: "scratch"}}
	createPVC(t, ns, "rwx-fs", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany)
	require.NoError(t, k8s.Create(context.Background(), vmi))
	vmi = waitVMI(t, ns, "disks", "to say its PVC is missing", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "FailedPvcNotFound" &&
			strings.Contains(c.Message, "PVC "+ns+"/rwo-block of volume blk does not exist")
	})
	assert.Empty(t, launcherPods(t, vmi), "no pod without its PVC")

	createPVC(t, ns, "rwo-block", corev1.PersistentVolumeBlock, corev1.ReadWriteOnce)
	vmi = waitVMI(t, ns, "disks", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	pod := pods[0]
	claims := map[string]corev1.PersistentVolumeClaimVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = *v.PersistentVolumeClaim
		}
	}
	assert.Equal(t, map[string]corev1.PersistentVolumeClaimVolumeSource{"shared": {ClaimName: "rwx-fs"}, "blk": {ClaimName: "rwo-block"}}, claims)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []corev1.VolumeDevice{{Name: "blk", DevicePath: "/dev/blk"}}, c.VolumeDevices)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	assert.Equal(t, vmispec.PVCDiskDir+"/shared", mounts["shared"])
	assert.Equal(t, vmispec.EmptyDiskDir, mounts["ephemeral-disks"])
	assert.Equal(t, pod.Spec.SecurityContext.RunAsGroup, pod.Spec.SecurityContext.FSGroup, "the launcher's group owns the claims")
	var env string
	for _, e := range c.Env {
		if e.Name == vmispec.PVCInfoEnv {
			env = e.Value
		}
	}
	info, err := vmispec.DecodePVCInfo(env)
	require.NoError(t, err)
	assert.Equal(t, map[string]vmispec.PVCInfo{
		"shared": {ClaimName: "rwx-fs", Shared: true, Size: 64 << 20},
		"blk":    {ClaimName: "rwo-block", Block: true, Size: 64 << 20},
	}, info)

	lm := vmi.GetCondition(v1.VirtualMachineInstanceIsMigratable)
	require.NotNil(t, lm)
	assert.Equal(t, corev1.ConditionFalse, lm.Status)
	assert.Equal(t, vmispec.ReasonDisksNotLiveMigratable, lm.Reason)
	assert.Contains(t, lm.Message, "volume blk: PVC rwo-block is not shared")
}

func withClaim(claim string) func(*v1.VirtualMachineInstance) {
	return func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "data"})
	}
}

// A VMI on a ReadWriteMany claim migrates with no copy: its target pod
// mounts the same claim. Once the claim is single-node (its bound modes
// say RWO), LiveMigratable turns False (the controller watches claims)
// and a migration fails at once, both naming the volume.
func TestMigrationOfPVCVolumes(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	createPVC(t, ns, "shared", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany)
	runningVMI(t, ns, "rwx", withClaim("shared"))
	m := newMigration(ns, "rwx-job", "rwx")
	createMigration(t, m)
	target := waitTargetPod(t, m)
	var claims []string
	for _, v := range target.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.Name+"="+v.PersistentVolumeClaim.ClaimName)
		}
	}
	assert.Equal(t, []string{"data=shared"}, claims)
	assert.Contains(t, target.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: vmispec.PVCDiskDir + "/data"})
	require.NoError(t, k8s.Delete(context.Background(), m))

	createPVC(t, ns, "local", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany)
	runningVMI(t, ns, "rwo", withClaim("local"))
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, get(t, ns, "local", pvc))
	pvc.Status.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	require.NoError(t, k8s.Status().Update(context.Background(), pvc))
	waitVMI(t, ns, "rwo", "to be no longer live-migratable", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstanceIsMigratable)
		return c != nil && c.Status == corev1.ConditionFalse && c.Message == "volume data: PVC local is not shared, live migration requires ReadWriteMany"
	})
	createMigration(t, newMigration(ns, "rwo-job", "rwo"))
	waitMigration(t, ns, "rwo-job", "to fail naming the claim", func(m *v1.VirtualMachineInstanceMigration) bool {
		return m.Status.Phase == v1.MigrationFailed
	})
	waitEvent(t, ns, "VirtualMachineInstanceMigration", "rwo-job", controller.ReasonMigrationFailed,
		"Migration of VMI rwo failed: VMI rwo is not live-migratable (DisksNotLiveMigratable): volume data: PVC local is not shared, live migration requires ReadWriteMany")
}

// A hostDisk VMI gets no pod without the HostDisk feature gate, and
// Synchronized says so; once the gate is on it gets its pod (the refusal
// is retried), with the image's node directory as a hostPath volume.
func TestVMIHostDiskGate(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	vmi := newVMI(ns, "hostdisk")
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "hd", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{
		Path: "/var/lib/vms/hd.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}})
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "hd"})
	require.NoError(t, k8s.Create(context.Background(), vmi))
	vmi = waitVMI(t, ns, "hostdisk", "to name the missing gate", func(n *v1.VirtualMachineInstance) bool {
		c := n.GetCondition(v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == controller.ReasonInvalidSpec &&
			strings.Contains(c.Message, "spec.volumes[hd].hostDisk: the HostDisk feature gate is not enabled")
	})
	assert.Empty(t, launcherPods(t, vmi), "no pod without the gate")

	withConfig(t, controller.ClusterConfig{DeveloperConfiguration: controller.DeveloperConfiguration{FeatureGates: []string{controller.FeatureGateHostDisk}}})
	vmi = waitVMI(t, ns, "hostdisk", "to be Scheduling", func(n *v1.VirtualMachineInstance) bool { return n.Status.Phase == v1.Scheduling })
	pods := launcherPods(t, vmi)
	require.Len(t, pods, 1)
	var hostPath *corev1.HostPathVolumeSource
	for _, v := range pods[0].Spec.Volumes {
		if v.Name == "hd" {
			hostPath = v.HostPath
		}
	}
	assert.Equal(t, &corev1.HostPathVolumeSource{Path: "/var/lib/vms", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}, hostPath)
}
