package launcher

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// volumePaths are testPaths with the directories a pod gives PVC and
// emptyDisk volumes: a mount per Filesystem claim (made here, as the
// kubelet would) and the device directory.
func volumePaths(t *testing.T, pvcs map[string]vmispec.PVCInfo) Paths {
	p := testPaths(t)
	d := t.TempDir()
	p.PVCDiskDir, p.BlockDeviceDir, p.EmptyDiskDir = filepath.Join(d, "vmi-disks"), filepath.Join(d, "dev"), filepath.Join(d, "disk-data")
	p.PVCs = pvcs
	require.NoError(t, os.MkdirAll(p.BlockDeviceDir, 0o755))
	for name, info := range pvcs {
		if !info.Block {
			require.NoError(t, os.MkdirAll(filepath.Join(p.PVCDiskDir, name), 0o755))
		}
	}
	return p
}

// prepareVMI runs the launcher's preparation of vmi.
func prepareVMI(t *testing.T, vmi *v1.VirtualMachineInstance, p Paths) (VMConfig, error) {
	b, err := json.Marshal(vmi)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "vmi.json")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	_, _, _, cfg, err := prepare(Options{VMIFile: f, Paths: p}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return cfg, err
}

func withVolumes(vols ...v1.Volume) *v1.VirtualMachineInstance {
	vmi := testVMI()
	for _, v := range vols {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v)
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: v.Name})
	}
	return vmi
}

func pvcVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func ephemeralVolume(name, claim string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
}

func hostDiskVolume(name, path string, typ v1.HostDiskType, capacity string) v1.Volume {
	hd := &v1.HostDisk{Path: path, Type: typ}
	if capacity != "" {
		hd.Capacity = resource.MustParse(capacity)
	}
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostDisk: hd}}
}

func sizeAndBlocks(t *testing.T, path string) (int64, int64) {
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Size, st.Blocks
}

// A Filesystem claim's disk.img and an emptyDisk's image are made sparse
// at their size, and the guest gets them, raw, in disk order.
func TestPrepareCreatesVolumeImages(t *testing.T) {
	p := volumePaths(t, map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 64 << 20}})
	vmi := withVolumes(pvcVolume("data", "c", false),
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("32Mi")}}})
	cfg, err := prepareVMI(t, vmi, p)
	require.NoError(t, err)

	img := filepath.Join(p.PVCDiskDir, "data", "disk.img")
	size, blocks := sizeAndBlocks(t, img)
	assert.Equal(t, int64(64<<20), size)
	assert.Zero(t, blocks, "sparse")
	scratch := filepath.Join(p.EmptyDiskDir, "scratch", "disk.img")
	size, blocks = sizeAndBlocks(t, scratch)
	assert.Equal(t, int64(32<<20), size)
	assert.Zero(t, blocks, "sparse")

	require.Len(t, cfg.Disks, 3)
	assert.Equal(t, "root", cfg.Disks[0].Name)
	for i, want := range []string{img, scratch} {
		d := cfg.Disks[i+1]
		assert.Equal(t, want, d.Path)
		assert.False(t, d.ReadOnly)
		assert.Equal(t, block.FormatRaw, d.Format)
	}
}

// A dataVolume volume is its claim's, as a persistentVolumeClaim volume:
// the imported disk.img is the guest's disk, kept as it is; a blank one
// that is missing is made.
func TestPrepareDataVolumeImages(t *testing.T) {
	p := volumePaths(t, map[string]vmispec.PVCInfo{"root": {ClaimName: "dv-root", Size: 64 << 20}, "blank": {ClaimName: "dv-blank", Size: 16 << 20}})
	img := filepath.Join(p.PVCDiskDir, "root", "disk.img")
	require.NoError(t, os.MkdirAll(filepath.Dir(img), 0o750))
	require.NoError(t, os.WriteFile(img, []byte("GOLDEN-IMG\n"), 0o600))
	dv := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv-" + name}}}
	}
	cfg, err := prepareVMI(t, withVolumes(dv("root"), dv("blank")), p)
	require.NoError(t, err)
	got, err := os.ReadFile(img)
	require.NoError(t, err)
	assert.Equal(t, "GOLDEN-IMG\n", string(got), "the imported image, kept")
	blank := filepath.Join(p.PVCDiskDir, "blank", "disk.img")
	size, _ := sizeAndBlocks(t, blank)
	assert.Equal(t, int64(16<<20), size)
	require.Len(t, cfg.Disks, 3)
	for i, want := range []string{img, blank} {
		assert.Equal(t, want, cfg.Disks[i+1].Path)
		assert.False(t, cfg.Disks[i+1].ReadOnly)
		assert.Equal(t, block.FormatRaw, cfg.Disks[i+1].Format)
	}
}

// The image on a claim is the guest's data: a restart keeps it whatever
// its size, and never reads what the guest wrote as a qcow2 header.
func TestPrepareKeepsAnExistingImage(t *testing.T) {
	p := volumePaths(t, map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 64 << 20}})
	img := filepath.Join(p.PVCDiskDir, "data", "disk.img")
	data := append([]byte{'Q', 'F', 'I', 0xfb}, "written by the guest"...)
	require.NoError(t, os.WriteFile(img, data, 0o600))

	cfg, err := prepareVMI(t, withVolumes(pvcVolume("data", "c", true)), p)
	require.NoError(t, err)
	got, err := os.ReadFile(img)
	require.NoError(t, err)
	assert.Equal(t, data, got, "kept, not truncated or resized")
	d := cfg.Disks[1]
	assert.True(t, d.ReadOnly, "a read-only claim is a read-only disk")
	f, err := d.format()
	require.NoError(t, err)
	assert.Equal(t, block.FormatRaw, f, "a qcow2 header in a claim's image is data")
}

func TestPrepareVolumeErrors(t *testing.T) {
	blk := map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Block: true}}
	for _, tc := range []struct {
		name  string
		pvcs  map[string]vmispec.PVCInfo
		vol   v1.Volume
		setup func(t *testing.T, p Paths)
		err   string
	}{
		{name: "bigger than the file system", pvcs: map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 1 << 60}},
			vol: pvcVolume("data", "c", false), err: "volume data (PVC c): no room for"},
		{name: "smaller than a MiB", pvcs: map[string]vmispec.PVCInfo{"data": {ClaimName: "c"}},
			vol: pvcVolume("data", "c", false), err: "smaller than a MiB"},
		{name: "read-only claim without an image", pvcs: map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 1 << 20}},
			vol: pvcVolume("data", "c", true), err: "does not exist and the volume is read-only"},
		{name: "nothing said of the claim", vol: pvcVolume("data", "c", false), err: vmispec.PVCInfoEnv},
		{name: "no device", pvcs: blk, vol: pvcVolume("data", "c", false), err: "volume data (PVC c): the Block PVC's device"},
		{name: "not a device", pvcs: blk, vol: pvcVolume("data", "c", false), err: "is not a block device",
			setup: func(t *testing.T, p Paths) {
				require.NoError(t, os.WriteFile(filepath.Join(p.BlockDeviceDir, "data"), nil, 0o600))
			}},
		{name: "ephemeral claim without an image", pvcs: map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 1 << 20}},
			vol: ephemeralVolume("data", "c"), err: "volume data (ephemeral, PVC c): the PVC's image"},
		{name: "ephemeral Block claim without a device", pvcs: blk,
			vol: ephemeralVolume("data", "c"), err: "volume data (ephemeral, PVC c): the Block PVC's device"},
		{name: "hostDisk Disk without its image", vol: hostDiskVolume("data", "/srv/vm.img", v1.HostDiskExists, ""),
			err: "volume data (hostDisk /srv/vm.img, type Disk): stat"},
		{name: "hostDisk Disk that is a directory", vol: hostDiskVolume("data", "/srv/vm.img", v1.HostDiskExists, ""),
			err: "not a regular file",
			setup: func(t *testing.T, p Paths) {
				require.NoError(t, os.MkdirAll(filepath.Join(p.PVCDiskDir, "data", "vm.img"), 0o755))
			}},
		{name: "hostDisk DiskOrCreate bigger than the file system", vol: hostDiskVolume("data", "/srv/vm.img", v1.HostDiskExistsOrCreate, "1Ei"),
			err: "volume data (hostDisk /srv/vm.img): no room for",
			setup: func(t *testing.T, p Paths) {
				require.NoError(t, os.MkdirAll(filepath.Join(p.PVCDiskDir, "data"), 0o755))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := volumePaths(t, tc.pvcs)
			if tc.setup != nil {
				tc.setup(t, p)
			}
			_, err := prepareVMI(t, withVolumes(tc.vol), p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			matches, _ := filepath.Glob(filepath.Join(p.PVCDiskDir, "*", "disk.img"))
			assert.Empty(t, matches, "no image left behind")
		})
	}
}

// A Block claim's device is the disk itself.
func TestPrepareBlockClaim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a device node")
	}
	p := volumePaths(t, map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Block: true}})
	dev := filepath.Join(p.BlockDeviceDir, "data")
	// loop0's numbers: only stat reads the node here.
	require.NoError(t, unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
	cfg, err := prepareVMI(t, withVolumes(pvcVolume("data", "c", false)), p)
	require.NoError(t, err)
	assert.Equal(t, dev, cfg.Disks[1].Path)
	assert.Equal(t, block.FormatRaw, cfg.Disks[1].Format)
}

// The QEMU backend gets the same disks, raw, in disk order.
func TestVolumeDisksOnQEMU(t *testing.T) {
	p := volumePaths(t, map[string]vmispec.PVCInfo{"data": {ClaimName: "c", Size: 8 << 20}})
	img := filepath.Join(p.PVCDiskDir, "data", "disk.img")
	// A qcow2 header the guest wrote stays data.
	require.NoError(t, os.WriteFile(img, []byte{'Q', 'F', 'I', 0xfb}, 0o600))
	vmi := withVolumes(pvcVolume("data", "c", false),
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}})
	vmi.Annotations = map[string]string{vmispec.BackendAnnotation: "qemu"}
	require.NoError(t, os.WriteFile(filepath.Join(p.ContainerDiskDir, "root.img"), make([]byte, 512), 0o600))
	cfg, err := prepareVMI(t, vmi, p)
	require.NoError(t, err)
	qc, err := cfg.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	require.NoError(t, err)
	require.Len(t, qc.Disks, 3)
	for i, want := range []string{img, filepath.Join(p.EmptyDiskDir, "scratch", "disk.img")} {
		d := qc.Disks[i+1]
		assert.Equal(t, want, d.Path)
		assert.Equal(t, qemu.FormatRaw, d.Format)
		assert.False(t, d.ReadOnly)
	}
}

// An ephemeral volume: the guest's disk is a qcow2 overlay in the pod's
// scratch directory over the claim's disk.img, which reads as the claim
// and takes the writes while the claim's image stays as it was. A second
// preparation in the same pod (the launcher restarted) keeps the overlay
// and what was written to it. The QEMU backend gets the same overlay.
func TestPrepareEphemeral(t *testing.T) {
	p := volumePaths(t, map[string]vmispec.PVCInfo{"golden": {ClaimName: "c", Size: 4 << 20}})
	base := make([]byte, 4<<20)
	copy(base, "the golden image")
	claimImg := filepath.Join(p.PVCDiskDir, "golden", "disk.img")
	require.NoError(t, os.WriteFile(claimImg, base, 0o400))
	vmi := withVolumes(ephemeralVolume("golden", "c"))
	require.NoError(t, os.WriteFile(filepath.Join(p.ContainerDiskDir, "root.img"), make([]byte, 512), 0o600))

	cfg, err := prepareVMI(t, vmi, p)
	require.NoError(t, err)
	overlay := filepath.Join(p.EmptyDiskDir, "golden", "disk.qcow2")
	d := cfg.Disks[1]
	assert.Equal(t, overlay, d.Path)
	assert.Equal(t, block.FormatQcow2, d.Format)
	assert.False(t, d.ReadOnly, "the guest writes to the overlay")

	img, err := block.OpenQcow2(overlay, false)
	require.NoError(t, err)
	assert.Equal(t, claimImg, img.Header().BackingFile)
	assert.Equal(t, uint64(len(base)), img.Size())
	got := make([]byte, 16)
	_, err = img.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, "the golden image", string(got))
	_, err = img.WriteAt([]byte("the guest's own "), 0)
	require.NoError(t, err)
	require.NoError(t, img.Close())
	b, err := os.ReadFile(claimImg)
	require.NoError(t, err)
	assert.Equal(t, base, b, "the claim's image is never written")

	vmi.Annotations = map[string]string{vmispec.BackendAnnotation: "qemu"}
	cfg, err = prepareVMI(t, vmi, p)
	require.NoError(t, err)
	img, err = block.OpenQcow2(overlay, true)
	require.NoError(t, err)
	_, err = img.ReadAt(got, 0)
	require.NoError(t, err)
	require.NoError(t, img.Close())
	assert.Equal(t, "the guest's own ", string(got), "the pod's overlay is kept")
	qc, err := cfg.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	require.NoError(t, err)
	assert.Equal(t, overlay, qc.Disks[1].Path)
	assert.Equal(t, qemu.FormatQCOW2, qc.Disks[1].Format)
}

// hostDisks: DiskOrCreate makes the image, sparse at its capacity, in the
// node directory mounted at PVCDiskDir/<volume>; Disk uses the image
// there; both raw and writable, and an existing image is kept.
func TestPrepareHostDisks(t *testing.T) {
	p := volumePaths(t, nil)
	for _, v := range []string{"created", "existing"} {
		require.NoError(t, os.MkdirAll(filepath.Join(p.PVCDiskDir, v), 0o755))
	}
	existing := filepath.Join(p.PVCDiskDir, "existing", "vm.img")
	require.NoError(t, os.WriteFile(existing, []byte("the node's image"), 0o600))
	vmi := withVolumes(hostDiskVolume("created", "/var/data/new.img", v1.HostDiskExistsOrCreate, "16Mi"),
		hostDiskVolume("existing", "/srv/vm.img", v1.HostDiskExists, ""))
	cfg, err := prepareVMI(t, vmi, p)
	require.NoError(t, err)
	created := filepath.Join(p.PVCDiskDir, "created", "new.img")
	size, blocks := sizeAndBlocks(t, created)
	assert.Equal(t, int64(16<<20), size)
	assert.Zero(t, blocks, "sparse")
	for i, want := range []string{created, existing} {
		d := cfg.Disks[i+1]
		assert.Equal(t, want, d.Path)
		assert.Equal(t, block.FormatRaw, d.Format)
		assert.False(t, d.ReadOnly)
	}

	// Again (a DiskOrCreate image that exists is the guest's data).
	require.NoError(t, os.WriteFile(created, []byte("written"), 0o600))
	_, err = prepareVMI(t, vmi, p)
	require.NoError(t, err)
	b, err := os.ReadFile(created)
	require.NoError(t, err)
	assert.Equal(t, "written", string(b))
	b, err = os.ReadFile(existing)
	require.NoError(t, err)
	assert.Equal(t, "the node's image", string(b))
}
