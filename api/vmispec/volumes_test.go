package vmispec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func claim(request, capacity string, mode corev1.PersistentVolumeMode, access ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: access,
			VolumeMode:  ptr.To(mode),
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}},
		},
	}
	if capacity != "" {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
	}
	return pvc
}

// KubeVirt's disk.img size: the smaller of request and capacity, a whole
// number of MiB.
func TestDiskImgSize(t *testing.T) {
	for _, tc := range []struct {
		name              string
		request, capacity string
		want              int64
	}{
		{"unbound: the request", "1Gi", "", 1 << 30},
		{"bigger volume than asked: the request", "1Gi", "2Gi", 1 << 30},
		{"smaller volume than asked: the capacity", "1Gi", "512Mi", 512 << 20},
		{"not MiB-aligned: rounded down", "1000000000", "", 953 << 20},
		{"less than a MiB: nothing", "1000", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DiskImgSize(claim(tc.request, tc.capacity, corev1.PersistentVolumeFilesystem)))
		})
	}
}

func TestNewPVCInfo(t *testing.T) {
	i := NewPVCInfo(claim("1Gi", "1Gi", corev1.PersistentVolumeBlock, corev1.ReadWriteOnce))
	assert.Equal(t, PVCInfo{ClaimName: "data", Block: true, Size: 1 << 30}, i)

	rwx := claim("1Gi", "", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany)
	assert.True(t, NewPVCInfo(rwx).Shared, "RWX asked")
	rwx.Status.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	assert.False(t, NewPVCInfo(rwx).Shared, "the bound volume's modes win")

	noMode := claim("1Gi", "", corev1.PersistentVolumeFilesystem)
	noMode.Spec.VolumeMode = nil
	assert.False(t, NewPVCInfo(noMode).Block, "Filesystem is the default mode")
}

func TestPVCInfoEncoding(t *testing.T) {
	in := map[string]PVCInfo{"data": {ClaimName: "c", Block: true, Shared: true, Size: 42}}
	s, err := EncodePVCInfo(in)
	require.NoError(t, err)
	out, err := DecodePVCInfo(s)
	require.NoError(t, err)
	assert.Equal(t, in, out)

	out, err = DecodePVCInfo("")
	require.NoError(t, err)
	assert.Empty(t, out)
	_, err = DecodePVCInfo("{")
	assert.ErrorContains(t, err, PVCInfoEnv)
}

// The LiveMigratable decision for disks: the volume that keeps the VMI on
// its node is named.
func TestLiveMigratableDisks(t *testing.T) {
	withVolume := func(src v1.VolumeSource, readOnly bool) *v1.VirtualMachineInstanceSpec {
		s := kernelBootSpec()
		s.Domain.Devices.Disks = []v1.Disk{{Name: "vol", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{ReadOnly: readOnly}}}}
		s.Volumes = []v1.Volume{{Name: "vol", VolumeSource: src}}
		return s
	}
	pvc := v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}
	dv := v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}
	for _, tc := range []struct {
		name string
		s    *v1.VirtualMachineInstanceSpec
		pvcs map[string]PVCInfo
		msg  string // "": migratable
	}{
		{"RWX PVC", withVolume(pvc, false), map[string]PVCInfo{"vol": {ClaimName: "data", Shared: true}}, ""},
		{"RWX Block PVC", withVolume(pvc, false), map[string]PVCInfo{"vol": {ClaimName: "data", Shared: true, Block: true}}, ""},
		{"RWO PVC", withVolume(pvc, false), map[string]PVCInfo{"vol": {ClaimName: "data"}}, "volume vol: PVC data is not shared, live migration requires ReadWriteMany"},
		{"RWO PVC read-only", withVolume(pvc, true), map[string]PVCInfo{"vol": {ClaimName: "data"}}, "volume vol: PVC data is not shared"},
		{"PVC not read", withVolume(pvc, false), nil, "volume vol: PVC data was not read"},
		{"DataVolume on an RWX claim", withVolume(dv, false), map[string]PVCInfo{"vol": {ClaimName: "dv-claim", Shared: true}}, ""},
		{"DataVolume on an RWO claim", withVolume(dv, false), map[string]PVCInfo{"vol": {ClaimName: "dv-claim"}}, "volume vol: PVC dv-claim is not shared, live migration requires ReadWriteMany"},
		{"DataVolume not read", withVolume(dv, false), nil, "volume vol: PVC dv was not read"},
		{"hot-plugged DataVolume on an RWX claim", withVolume(v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv", Hotpluggable: true}}, false),
			map[string]PVCInfo{"vol": {ClaimName: "dv-claim", Shared: true}}, "volume vol is hot-plugged: kubevmm does not carry hot-plugged volumes over a migration yet"},
		{"emptyDisk", withVolume(v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}, false), nil, "disk vol is an emptyDisk"},
		{"writable containerDisk", withVolume(v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "i"}}, false), nil, "disk vol is a writable containerDisk"},
		{"read-only containerDisk", withVolume(v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "i"}}, true), nil, ""},
		{"ephemeral on an RWX PVC", withVolume(v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}, false),
			map[string]PVCInfo{"vol": {ClaimName: "data", Shared: true}}, "disk vol is ephemeral: its overlay is local to the launcher pod"},
		{"hostDisk", withVolume(v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists}}, false), nil, "disk vol is a hostDisk that is not shared"},
		{"hostDisk shared: false", withVolume(v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists, Shared: ptr.To(false)}}, false), nil, "not shared"},
		{"shared hostDisk", withVolume(v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists, Shared: ptr.To(true)}}, false), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason, msg := LiveMigratable(nil, tc.s, tc.pvcs)
			if tc.msg == "" {
				assert.True(t, ok, msg)
				return
			}
			assert.False(t, ok)
			assert.Equal(t, ReasonDisksNotLiveMigratable, reason)
			assert.Contains(t, msg, tc.msg)
		})
	}
}
