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
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// TestVolumesGuest boots the test guest on the kubevmm VMM with the disks
// the launcher prepares for a Filesystem claim (its disk.img), a Block
// claim (a loop device, as the hostpath provisioner gives one), an
// emptyDisk, an ephemeral volume (a qcow2 overlay over a claim's image)
// and a DiskOrCreate hostDisk, in that order: a user-data script writes a
// marker at the start of each claim's disk and the hostDisk, reads the
// ephemeral claim's content and writes over it, and reports the
// emptyDisk's size; the markers are in the claim's file, behind the loop
// device and in the hostDisk's image, and the ephemeral write is in the
// overlay only. One boot.
func TestVolumesGuest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	const script = "#!/bin/sh\n" +
		"echo FS-$((6*7)) | dd of=/dev/vda conv=fsync 2>/dev/null && echo BLK-$((6*7)) | dd of=/dev/vdb conv=fsync 2>/dev/null && echo wrote both\n" +
		"echo \"scratch sectors $(cat /sys/block/vdc/size)\"\n" +
		"echo \"golden $(dd if=/dev/vde bs=8 count=1 2>/dev/null)\"\n" +
		"echo EPH-$((6*7)) | dd of=/dev/vde conv=fsync 2>/dev/null && echo HOST-$((6*7)) | dd of=/dev/vdf conv=fsync 2>/dev/null && echo wrote the others\n"
	backing := filepath.Join(t.TempDir(), "block.img")
	require.NoError(t, os.WriteFile(backing, nil, 0o600))
	require.NoError(t, os.Truncate(backing, 8<<20))
	loop := strings.TrimSpace(hosttools.Run(t, "losetup", "--find", "--show", backing))
	t.Cleanup(func() { hosttools.Run(t, "losetup", "-d", loop) })

	p := volumePaths(t, map[string]vmispec.PVCInfo{
		"fs":   {ClaimName: "fs-claim", Size: 16 << 20},
		"blk":  {ClaimName: "blk-claim", Block: true},
		"gold": {ClaimName: "gold-claim", Size: 4 << 20},
	})
	golden := make([]byte, 4<<20)
	copy(golden, "GOLDEN-7")
	goldenImg := filepath.Join(p.PVCDiskDir, "gold", "disk.img")
	require.NoError(t, os.WriteFile(goldenImg, golden, 0o400))
	require.NoError(t, os.MkdirAll(filepath.Join(p.PVCDiskDir, "host"), 0o755))
	require.NoError(t, os.Symlink(loop, filepath.Join(p.BlockDeviceDir, "blk")))
	for src, dst := range map[string]string{guestimage.Kernel(t): vmispec.KernelFile, guestimage.Initramfs(t): vmispec.InitrdFile} {
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
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "fs"}, {Name: "blk"}, {Name: "scratch"}, {Name: "ci"}, {Name: "gold"}, {Name: "host"}}},
			},
			Volumes: []v1.Volume{
				pvcVolume("fs", "fs-claim", false),
				pvcVolume("blk", "blk-claim", false),
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("4Mi")}}},
				{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: script}}},
				ephemeralVolume("gold", "gold-claim"),
				hostDiskVolume("host", "/var/vms/host.img", v1.HostDiskExistsOrCreate, "2Mi"),
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
	require.Len(t, mc.Disks, 6)
	m, err := machine.New(mc)
	require.NoError(t, err)
	exit := m.Run()
	// Closed before the images are read: it flushes the disks and lets go
	// of their locks.
	require.NoError(t, m.Close())
	out := con.String()
	t.Logf("guest console:\n%s", out)
	require.False(t, exit.Failed(), "guest ended with %v", exit)
	assert.Contains(t, out, "wrote both")
	assert.Contains(t, out, "scratch sectors 8192", "the 4Mi emptyDisk")
	assert.Contains(t, out, "golden GOLDEN-7", "the ephemeral disk reads as its claim")
	assert.Contains(t, out, "wrote the others")

	img, err := os.ReadFile(filepath.Join(p.PVCDiskDir, "fs", "disk.img"))
	require.NoError(t, err)
	assert.Len(t, img, 16<<20)
	assert.True(t, strings.HasPrefix(string(img), "FS-42\n"), "the guest's write is in the claim's disk.img")
	blk, err := os.ReadFile(backing)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(blk), "BLK-42\n"), "the guest's write is behind the Block claim's device")
	host, err := os.ReadFile(filepath.Join(p.PVCDiskDir, "host", "host.img"))
	require.NoError(t, err)
	assert.Len(t, host, 2<<20)
	assert.True(t, strings.HasPrefix(string(host), "HOST-42\n"), "the guest's write is in the hostDisk's image")
	gold, err := os.ReadFile(goldenImg)
	require.NoError(t, err)
	assert.Equal(t, golden, gold, "the ephemeral volume's claim is never written")
	ov, err := block.OpenQcow2(filepath.Join(p.EmptyDiskDir, "gold", "disk.qcow2"), true)
	require.NoError(t, err)
	got := make([]byte, 7)
	_, err = ov.ReadAt(got, 0)
	require.NoError(t, err)
	require.NoError(t, ov.Close())
	assert.Equal(t, "EPH-42\n", string(got), "the guest's write is in the overlay")
}
