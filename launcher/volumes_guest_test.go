package launcher

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/launcher/spec"
	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// TestVolumesGuest boots the test guest on the kubevmm VMM with the disks
// the launcher prepares for a Filesystem claim (its disk.img), a Block
// claim (a loop device, as the hostpath provisioner gives one) and an
// emptyDisk, in that order: a user-data script writes a marker at the
// start of each claim's disk and reports the emptyDisk's size, and the
// markers are in the claim's file and behind the loop device. One boot.
func TestVolumesGuest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	const script = "#!/bin/sh\n" +
		"echo FS-$((6*7)) | dd of=/dev/vda conv=fsync 2>/dev/null && echo BLK-$((6*7)) | dd of=/dev/vdb conv=fsync 2>/dev/null && echo wrote both\n" +
		"echo \"scratch sectors $(cat /sys/block/vdc/size)\"\n"
	backing := filepath.Join(t.TempDir(), "block.img")
	require.NoError(t, os.WriteFile(backing, nil, 0o600))
	require.NoError(t, os.Truncate(backing, 8<<20))
	loop := strings.TrimSpace(hosttools.Run(t, "losetup", "--find", "--show", backing))
	t.Cleanup(func() { hosttools.Run(t, "losetup", "-d", loop) })

	p := volumePaths(t, map[string]spec.PVCInfo{
		"fs":  {ClaimName: "fs-claim", Size: 16 << 20},
		"blk": {ClaimName: "blk-claim", Block: true},
	})
	require.NoError(t, os.Symlink(loop, filepath.Join(p.BlockDeviceDir, "blk")))
	for src, dst := range map[string]string{guestimage.Kernel(t): spec.KernelFile, guestimage.Initramfs(t): spec.InitrdFile} {
		require.NoError(t, os.Symlink(src, filepath.Join(p.KernelBootDir, dst)))
	}
	g := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns", UID: "0a7d2c1e-uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: &g},
				Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{
					KernelArgs: "console=ttyS0 reboot=k panic=-1 quiet",
					Container:  &v1.KernelBootContainer{Image: "img", KernelPath: "/k", InitrdPath: "/i"}}},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "fs"}, {Name: "blk"}, {Name: "scratch"}, {Name: "ci"}}},
			},
			Volumes: []v1.Volume{
				pvcVolume("fs", "fs-claim", false),
				pvcVolume("blk", "blk-claim", false),
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("4Mi")}}},
				{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: script}}},
			},
		},
	}
	b, err := json.Marshal(vmi)
	require.NoError(t, err)
	vmiFile := filepath.Join(t.TempDir(), "vmi.json")
	require.NoError(t, os.WriteFile(vmiFile, b, 0o644))
	_, _, _, cfg, err := prepare(Options{VMIFile: vmiFile, Paths: p}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)

	con := &syncBuffer{}
	mc, err := cfg.MachineConfig(con)
	require.NoError(t, err)
	require.Len(t, mc.Disks, 4)
	m, err := machine.New(mc)
	require.NoError(t, err)
	defer m.Close()
	exit := m.Run()
	out := con.String()
	t.Logf("guest console:\n%s", out)
	require.False(t, exit.Failed(), "guest ended with %v", exit)
	assert.Contains(t, out, "wrote both")
	assert.Contains(t, out, "scratch sectors 8192", "the 4Mi emptyDisk")

	img, err := os.ReadFile(filepath.Join(p.PVCDiskDir, "fs", "disk.img"))
	require.NoError(t, err)
	assert.Len(t, img, 16<<20)
	assert.True(t, strings.HasPrefix(string(img), "FS-42\n"), "the guest's write is in the claim's disk.img")
	blk, err := os.ReadFile(backing)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(blk), "BLK-42\n"), "the guest's write is behind the Block claim's device")
}
