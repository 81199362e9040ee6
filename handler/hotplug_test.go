package handler

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// hotplugVMI has a boot disk (virtio), a SCSI disk of its own, and the
// hot-plugged volumes named, with the statuses given.
func hotplugVMI(status []v1.VolumeStatus, hot ...string) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []v1.Volume{
		{Name: "root", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "root"}}},
		{Name: "own-scsi", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "own"}}},
	}
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{
		{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
		{Name: "own-scsi", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
	}
	for _, h := range hot {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: h, VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: h + "-dv", Hotpluggable: true}}})
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: h, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}})
	}
	vmi.Status.VolumeStatus = status
	return vmi
}

func hotStatus(name string, phase v1.VolumePhase, mode corev1.PersistentVolumeMode) v1.VolumeStatus {
	return v1.VolumeStatus{Name: name, Phase: phase,
		PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: name + "-dv", VolumeMode: ptr.To(mode)},
		HotplugVolume:             &v1.HotplugVolumeStatus{AttachPodName: "hp-volume-x", AttachPodUID: "pod-uid"}}
}

func TestPlanHotplug(t *testing.T) {
	fs, blk := corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock
	for _, tc := range []struct {
		name     string
		vmi      *v1.VirtualMachineInstance
		attached []api.Volume
		want     hotplugPlan
	}{
		{"published on the node: attach", hotplugVMI([]v1.VolumeStatus{hotStatus("a", v1.HotplugVolumeAttachedToNode, fs)}, "a"), nil,
			hotplugPlan{attach: []hotplugAttach{{name: "a", claim: "a-dv", podUID: "pod-uid"}}}},
		{"a Block claim is planned as such", hotplugVMI([]v1.VolumeStatus{hotStatus("a", v1.HotplugVolumeAttachedToNode, blk)}, "a"), nil,
			hotplugPlan{attach: []hotplugAttach{{name: "a", claim: "a-dv", block: true, podUID: "pod-uid"}}}},
		{"attached already: nothing", hotplugVMI([]v1.VolumeStatus{hotStatus("a", v1.VolumeReady, fs)}, "a"), []api.Volume{{Name: "a"}},
			hotplugPlan{}},
		{"Ready but the launcher lost it: attach again", hotplugVMI([]v1.VolumeStatus{hotStatus("a", v1.VolumeReady, fs)}, "a"), nil,
			hotplugPlan{attach: []hotplugAttach{{name: "a", claim: "a-dv", podUID: "pod-uid"}}}},
		{"still pending: nothing", hotplugVMI([]v1.VolumeStatus{{Name: "a", Phase: v1.VolumePending}}, "a"), nil,
			hotplugPlan{}},
		{"no status yet: nothing", hotplugVMI(nil, "a"), nil, hotplugPlan{}},
		{"gone from the spec: detach", hotplugVMI([]v1.VolumeStatus{hotStatus("a", v1.VolumeReady, fs)}), []api.Volume{{Name: "a"}},
			hotplugPlan{detach: []string{"a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, planHotplug(tc.vmi, tc.attached))
		})
	}
}

func TestHotplugStatus(t *testing.T) {
	fs := corev1.PersistentVolumeFilesystem
	own := v1.VolumeStatus{Name: "own-scsi", Phase: v1.VolumeReady}
	vmi := hotplugVMI([]v1.VolumeStatus{own, hotStatus("a", v1.HotplugVolumeAttachedToNode, fs), hotStatus("b", v1.HotplugVolumeAttachedToNode, fs), hotStatus("gone", v1.VolumeReady, fs)}, "a", "b")
	st := vmi.Status.DeepCopy()
	hotplugStatus(st, vmi, []api.Volume{{Name: "a", Target: 0, SizeBytes: 64 << 20}})
	require.Len(t, st.VolumeStatus, 3, "the detached volume's entry dropped")
	assert.Equal(t, own, st.VolumeStatus[0])
	a := st.VolumeStatus[1]
	assert.Equal(t, v1.VolumeReady, a.Phase)
	assert.Equal(t, ReasonVolumeReady, a.Reason)
	assert.Equal(t, "sdb", a.Target, "after the VMI's own SCSI disk")
	assert.Equal(t, int64(64<<20), a.Size)
	assert.Equal(t, v1.HotplugVolumeAttachedToNode, st.VolumeStatus[2].Phase, "not attached yet: as it was")
}

func TestSCSIDiskName(t *testing.T) {
	for i, want := range map[int]string{0: "sda", 1: "sdb", 25: "sdz", 26: "sdaa", 27: "sdab", 701: "sdzz", 702: "sdaaa"} {
		assert.Equal(t, want, scsiDiskName(i), "%d", i)
	}
}

// publishedVolume lays out a kubelet pods directory with one pod's
// published CSI volume and returns the pods directory and the volume's
// mount directory.
func publishedVolume(t *testing.T) (string, string) {
	pods := t.TempDir()
	mount := filepath.Join(pods, "pod-uid", csiPlugin, "pv-1", "mount")
	require.NoError(t, os.MkdirAll(mount, 0o750))
	return pods, mount
}

func TestOpenPublishedImage(t *testing.T) {
	t.Run("an image there is opened read-write", func(t *testing.T) {
		pods, mount := publishedVolume(t)
		require.NoError(t, os.WriteFile(filepath.Join(mount, "disk.img"), []byte("data"), 0o600))
		f, err := openPublishedImage(pods, "pod-uid", "pv-1", 1<<20, 0)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.WriteAt([]byte("DATA"), 0)
		require.NoError(t, err)
		b, _ := os.ReadFile(filepath.Join(mount, "disk.img"))
		assert.Equal(t, "DATA", string(b))
	})
	t.Run("no image: made sparse at the claim's size, group-writable", func(t *testing.T) {
		pods, mount := publishedVolume(t)
		f, err := openPublishedImage(pods, "pod-uid", "pv-1", 8<<20, os.Getgid())
		require.NoError(t, err)
		defer f.Close()
		fi, err := os.Stat(filepath.Join(mount, "disk.img"))
		require.NoError(t, err)
		assert.Equal(t, int64(8<<20), fi.Size())
		assert.Equal(t, os.FileMode(0o660), fi.Mode().Perm())
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(mount, "disk.img"), &st))
		assert.Less(t, st.Blocks*512, int64(1<<20), "sparse")
	})
	for _, tc := range []struct {
		name   string
		podUID string
		setup  func(t *testing.T, pods, mount string)
		want   string
	}{
		{"disk.img a symlink", "pod-uid", func(t *testing.T, _, mount string) {
			secret := filepath.Join(t.TempDir(), "secret")
			require.NoError(t, os.WriteFile(secret, []byte("root's"), 0o600))
			require.NoError(t, os.Symlink(secret, filepath.Join(mount, "disk.img")))
		}, "opening"},
		{"disk.img a second link of another file", "pod-uid", func(t *testing.T, _, mount string) {
			other := filepath.Join(filepath.Dir(mount), "other")
			require.NoError(t, os.WriteFile(other, nil, 0o600))
			require.NoError(t, os.Link(other, filepath.Join(mount, "disk.img")))
		}, "not a regular file with one link"},
		{"disk.img a directory", "pod-uid", func(t *testing.T, _, mount string) {
			require.NoError(t, os.Mkdir(filepath.Join(mount, "disk.img"), 0o700))
		}, "opening"},
		{"the pod UID a path", "../pod-uid", func(*testing.T, string, string) {}, "is no name"},
		{"the volume a symlink", "pod-uid", func(t *testing.T, _, mount string) {
			elsewhere := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "disk.img"), nil, 0o600))
			require.NoError(t, os.Remove(mount))
			require.NoError(t, os.Symlink(elsewhere, mount))
		}, "the published volume"},
	} {
		t.Run(tc.name+": refused", func(t *testing.T) {
			pods, mount := publishedVolume(t)
			tc.setup(t, pods, mount)
			_, err := openPublishedImage(pods, types.UID(tc.podUID), "pv-1", 1<<20, 0)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestOpenPublishedDeviceRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		podUID string
		setup  func(t *testing.T, target string)
		want   string
	}{
		{"a regular file", "pod-uid", func(t *testing.T, target string) {
			require.NoError(t, os.WriteFile(target, nil, 0o600))
		}, "is not a block device"},
		{"a symlink to a device", "pod-uid", func(t *testing.T, target string) {
			require.NoError(t, os.Symlink("/dev/null", target))
		}, "the published device"},
		{"nothing published", "pod-uid", func(*testing.T, string) {}, "the published device"},
		{"the pod UID a path", "..", func(*testing.T, string) {}, "is no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plugins := t.TempDir()
			dir := filepath.Join(plugins, csiBlockPublish, "pv-1")
			require.NoError(t, os.MkdirAll(dir, 0o750))
			tc.setup(t, filepath.Join(dir, "pod-uid"))
			_, err := openPublishedDevice(plugins, types.UID(tc.podUID), "pv-1")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
