package hostpath

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These tests run the driver on real directories, bind mounts and loop
// devices: they need root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the driver mounts and attaches loop devices")
	}
}

func newDriver(t *testing.T) (*Driver, string) {
	t.Helper()
	pool := filepath.Join(t.TempDir(), "pool")
	require.NoError(t, os.MkdirAll(pool, 0o750))
	return &Driver{NodeID: "node-a", Pools: map[string]string{"local": pool}}, pool
}

var ctx = context.Background()

func fsCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
}

func createReq(name string, size int64, c *csi.VolumeCapability) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{c}, Parameters: map[string]string{StoragePoolParameter: "local"}}
}

func code(err error) codes.Code { return status.Code(err) }

func TestIdentity(t *testing.T) {
	d, _ := newDriver(t)
	info, err := d.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, "kubevirt.io.hostpath-provisioner", info.GetName())
	caps, err := d.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	require.NoError(t, err)
	var got []csi.PluginCapability_Service_Type
	var expansion []csi.PluginCapability_VolumeExpansion_Type
	for _, c := range caps.GetCapabilities() {
		if c.GetService() != nil {
			got = append(got, c.GetService().GetType())
		}
		if c.GetVolumeExpansion() != nil {
			expansion = append(expansion, c.GetVolumeExpansion().GetType())
		}
	}
	assert.Equal(t, []csi.PluginCapability_VolumeExpansion_Type{csi.PluginCapability_VolumeExpansion_ONLINE}, expansion)
	assert.ElementsMatch(t, []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}, got)
	_, err = d.Probe(ctx, &csi.ProbeRequest{})
	require.NoError(t, err)

	d.Pools["gone"] = filepath.Join(t.TempDir(), "missing")
	_, err = d.Probe(ctx, &csi.ProbeRequest{})
	assert.Equal(t, codes.FailedPrecondition, code(err), "a pool that is not a directory: %v", err)

	ni, err := d.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, "node-a", ni.GetNodeId())
	assert.Equal(t, map[string]string{"topology.hostpath.csi/node": "node-a"}, ni.GetAccessibleTopology().GetSegments())
}

func TestCreateDeleteFilesystem(t *testing.T) {
	d, pool := newDriver(t)
	r, err := d.CreateVolume(ctx, createReq("pvc-1", 1<<20, fsCap()))
	require.NoError(t, err)
	assert.Equal(t, "pvc-1", r.GetVolume().GetVolumeId())
	assert.Equal(t, map[string]string{TopologyKey: "node-a"}, r.GetVolume().GetAccessibleTopology()[0].GetSegments())
	dir := filepath.Join(pool, "csi", "pvc-1")
	require.DirExists(t, dir)
	// The same name as a block volume is another volume, even while empty.
	_, err = d.CreateVolume(ctx, createReq("pvc-1", 1<<20, blockCap()))
	assert.Equal(t, codes.AlreadyExists, code(err), "%v", err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), []byte("kept"), 0o600))

	// Again: the same volume, its data untouched.
	r2, err := d.CreateVolume(ctx, createReq("pvc-1", 1<<20, fsCap()))
	require.NoError(t, err)
	assert.Equal(t, r.GetVolume().GetVolumeId(), r2.GetVolume().GetVolumeId())
	assert.FileExists(t, filepath.Join(dir, "data"))
	// The same name as a block volume is another volume.
	_, err = d.CreateVolume(ctx, createReq("pvc-1", 1<<20, blockCap()))
	assert.Equal(t, codes.AlreadyExists, code(err), "%v", err)

	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"})
	require.NoError(t, err)
	assert.NoDirExists(t, dir)
	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"})
	require.NoError(t, err, "deleting a deleted volume succeeds")
}

func TestCreateBlock(t *testing.T) {
	d, pool := newDriver(t)
	_, err := d.CreateVolume(ctx, createReq("pvc-b", 64<<20, blockCap()))
	require.NoError(t, err)
	f := filepath.Join(pool, "csi", "pvc-b")
	fi, err := os.Stat(f)
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20), fi.Size())
	var st unix.Stat_t
	require.NoError(t, unix.Stat(f, &st))
	assert.Less(t, st.Blocks*512, int64(1<<20), "the file is sparse")
	assert.True(t, fi.Mode().IsRegular(), "a block volume is a regular file")

	_, err = d.CreateVolume(ctx, createReq("pvc-b", 64<<20, blockCap()))
	require.NoError(t, err, "the same request again")
	_, err = d.CreateVolume(ctx, createReq("pvc-b", 128<<20, blockCap()))
	assert.Equal(t, codes.AlreadyExists, code(err), "another size: %v", err)
	_, err = d.CreateVolume(ctx, createReq("pvc-b", 64<<20, fsCap()))
	assert.Equal(t, codes.AlreadyExists, code(err), "as a filesystem: %v", err)
	// A CreateVolume that stopped before its file's size was set left its
	// scratch file, which the next one starts afresh.
	scratch := filepath.Join(pool, "csi", ".pvc-p.tmp")
	require.NoError(t, os.WriteFile(scratch, []byte("partial"), 0o600))
	_, err = d.CreateVolume(ctx, createReq("pvc-p", 1<<20, blockCap()))
	require.NoError(t, err)
	fi, err = os.Stat(filepath.Join(pool, "csi", "pvc-p"))
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), fi.Size())
	assert.NoFileExists(t, scratch)

	_, err = d.CreateVolume(ctx, createReq("pvc-z", 0, blockCap()))
	assert.Equal(t, codes.InvalidArgument, code(err), "a block volume without a size: %v", err)
}

func TestCreateRefusals(t *testing.T) {
	d, _ := newDriver(t)
	multi := fsCap()
	multi.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	flags := fsCap()
	flags.GetMount().MountFlags = []string{"noexec"}
	for _, tc := range []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", createReq("", 1, fsCap()), codes.InvalidArgument},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "pvc-x", Parameters: map[string]string{StoragePoolParameter: "local"}}, codes.InvalidArgument},
		{"multi-node access", createReq("pvc-x", 1, multi), codes.InvalidArgument},
		{"mount flags", createReq("pvc-x", 1, flags), codes.InvalidArgument},
		{"no pool", &csi.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: []*csi.VolumeCapability{fsCap()}}, codes.InvalidArgument},
		{"unknown pool", &csi.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: []*csi.VolumeCapability{fsCap()},
			Parameters: map[string]string{StoragePoolParameter: "ssd"}}, codes.InvalidArgument},
		{"another node", &csi.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: []*csi.VolumeCapability{fsCap()},
			Parameters:                map[string]string{StoragePoolParameter: "local"},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{TopologyKey: "node-b"}}}}},
			codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.CreateVolume(ctx, tc.req)
			assert.Equal(t, tc.want, code(err), "%v", err)
		})
	}
}

// TestPathEscape: names and volume IDs that are not one plain path element
// reach nothing outside the pool.
func TestPathEscape(t *testing.T) {
	d, pool := newDriver(t)
	// A victim beside the pool, and one a relative path from csi/ reaches.
	victim := filepath.Join(filepath.Dir(pool), "victim")
	require.NoError(t, os.MkdirAll(victim, 0o750))
	require.NoError(t, os.MkdirAll(filepath.Join(pool, "csi"), 0o750))
	target := filepath.Join(t.TempDir(), "target")
	for _, id := range []string{"../../victim", "..", ".", "a/b", "/etc", "PVC-1", "pvc-1\x00", "-pvc", "pvc.1"} {
		t.Run(id, func(t *testing.T) {
			_, err := d.CreateVolume(ctx, createReq(id, 1, fsCap()))
			assert.Equal(t, codes.InvalidArgument, code(err), "CreateVolume: %v", err)
			_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: fsCap()})
			assert.Equal(t, codes.NotFound, code(err), "NodePublishVolume: %v", err)
			_, err = d.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{fsCap()}})
			assert.Equal(t, codes.NotFound, code(err), "ValidateVolumeCapabilities: %v", err)
			_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			require.NoError(t, err, "DeleteVolume of a volume that cannot exist")
			assert.DirExists(t, victim)
			assert.DirExists(t, pool)
		})
	}
	assert.NoFileExists(t, target)
}

func TestPublishFilesystem(t *testing.T) {
	needRoot(t)
	d, pool := newDriver(t)
	_, err := d.CreateVolume(ctx, createReq("pvc-fs", 1<<20, fsCap()))
	require.NoError(t, err)
	target := filepath.Join(t.TempDir(), "pod", "mount")
	pub := &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target, VolumeCapability: fsCap()}
	_, err = d.NodePublishVolume(ctx, pub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	_, err = d.NodePublishVolume(ctx, pub)
	require.NoError(t, err, "publishing again")
	n := countMounts(t, target)
	assert.Equal(t, 1, n, "published once")

	// What the pod writes is in the pool.
	require.NoError(t, os.WriteFile(filepath.Join(target, "f"), []byte("hello"), 0o600))
	b, err := os.ReadFile(filepath.Join(pool, "csi", "pvc-fs", "f"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b))

	stats, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-fs", VolumePath: target})
	require.NoError(t, err)
	assert.Positive(t, stats.GetUsage()[0].GetTotal())

	// Deleting a published filesystem volume is the CO's mistake; the
	// block case is refused (below). Unpublish, twice.
	unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target}
	_, err = d.NodeUnpublishVolume(ctx, unpub)
	require.NoError(t, err)
	_, err = d.NodeUnpublishVolume(ctx, unpub)
	require.NoError(t, err, "unpublishing again")
	assert.NoDirExists(t, target)
	assert.FileExists(t, filepath.Join(pool, "csi", "pvc-fs", "f"), "unpublishing keeps the data")

	// Read-only.
	pub.Readonly = true
	_, err = d.NodePublishVolume(ctx, pub)
	require.NoError(t, err)
	err = os.WriteFile(filepath.Join(target, "g"), []byte("x"), 0o600)
	require.ErrorIs(t, err, unix.EROFS)
	_, err = d.NodeUnpublishVolume(ctx, unpub)
	require.NoError(t, err)

	// A block publish of a filesystem volume is refused.
	_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-fs", TargetPath: target, VolumeCapability: blockCap()})
	assert.Equal(t, codes.InvalidArgument, code(err), "%v", err)
	_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-none", TargetPath: target, VolumeCapability: fsCap()})
	assert.Equal(t, codes.NotFound, code(err), "%v", err)
}

// A Filesystem volume holding a VM's disk.img (the name a Block volume's
// file once had) stays a Filesystem volume: published as a directory
// again after its pod is gone, never taken for a Block one.
func TestPublishFilesystemWithDiskImg(t *testing.T) {
	needRoot(t)
	d, pool := newDriver(t)
	_, err := d.CreateVolume(ctx, createReq("pvc-vm", 1<<20, fsCap()))
	require.NoError(t, err)
	target := filepath.Join(t.TempDir(), "pod", "mount")
	pub := &csi.NodePublishVolumeRequest{VolumeId: "pvc-vm", TargetPath: target, VolumeCapability: fsCap()}
	unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-vm", TargetPath: target}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	for i := range 2 {
		_, err = d.NodePublishVolume(ctx, pub)
		require.NoError(t, err, "publish %d", i+1)
		fi, err := os.Stat(target)
		require.NoError(t, err)
		assert.True(t, fi.IsDir(), "publish %d: a directory", i+1)
		if i == 0 {
			require.NoError(t, os.WriteFile(filepath.Join(target, "disk.img"), []byte("VM image"), 0o600))
		}
		b, err := os.ReadFile(filepath.Join(target, "disk.img"))
		require.NoError(t, err)
		assert.Equal(t, "VM image", string(b))
		_, err = d.NodeUnpublishVolume(ctx, unpub)
		require.NoError(t, err)
	}
	_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-vm", TargetPath: target, VolumeCapability: blockCap()})
	assert.Equal(t, codes.InvalidArgument, code(err), "a block publish: %v", err)
	_, err = d.CreateVolume(ctx, createReq("pvc-vm", 1<<20, fsCap()))
	require.NoError(t, err, "created again as a filesystem")
	r, err := d.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-vm", VolumeCapabilities: []*csi.VolumeCapability{fsCap()}})
	require.NoError(t, err)
	assert.NotNil(t, r.GetConfirmed(), "a filesystem volume: %s", r.GetMessage())
	assert.FileExists(t, filepath.Join(pool, "csi", "pvc-vm", "disk.img"))
}

func countMounts(t *testing.T, path string) int {
	t.Helper()
	ms, err := mounts()
	require.NoError(t, err)
	n := 0
	for _, m := range ms {
		if m.point == path {
			n++
		}
	}
	return n
}

func TestPublishBlock(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices here:", err)
	}
	d, pool := newDriver(t)
	const size = 8 << 20
	_, err := d.CreateVolume(ctx, createReq("pvc-blk", size, blockCap()))
	require.NoError(t, err)
	file := filepath.Join(pool, "csi", "pvc-blk")
	// The CO makes the target's parent; the driver the target file.
	target := filepath.Join(t.TempDir(), "publish", "pod-uid")
	require.NoError(t, os.MkdirAll(filepath.Dir(target), 0o750))
	pub := &csi.NodePublishVolumeRequest{VolumeId: "pvc-blk", TargetPath: target, VolumeCapability: blockCap()}
	_, err = d.NodePublishVolume(ctx, pub)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		_ = releaseLoop(file)
	})
	_, err = d.NodePublishVolume(ctx, pub)
	require.NoError(t, err, "publishing again")
	dev, err := findLoop(file)
	require.NoError(t, err)
	require.NotEmpty(t, dev, "a loop device backs the volume")

	var st unix.Stat_t
	require.NoError(t, unix.Stat(target, &st))
	assert.Equal(t, uint32(unix.S_IFBLK), st.Mode&unix.S_IFMT, "the target is a block device")

	// Written through the device, read from the file.
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	require.NoError(t, err)
	msg := bytes.Repeat([]byte("block"), 100)
	_, err = f.WriteAt(msg, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	got := make([]byte, len(msg))
	bf, err := os.Open(file)
	require.NoError(t, err)
	_, err = bf.ReadAt(got, 4096)
	require.NoError(t, err)
	require.NoError(t, bf.Close())
	assert.Equal(t, msg, got)

	stats, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-blk", VolumePath: target})
	require.NoError(t, err)
	assert.Equal(t, int64(size), stats.GetUsage()[0].GetTotal())

	// Grown while published: the device the pod has takes the new size.
	exp, err := d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-blk", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size}})
	require.NoError(t, err)
	assert.Equal(t, int64(2*size), exp.GetCapacityBytes())
	assert.False(t, exp.GetNodeExpansionRequired())
	assert.Equal(t, int64(2*size), deviceSize(t, target))
	// Never shrunk.
	exp, err = d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-blk", CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
	require.NoError(t, err)
	assert.Equal(t, int64(2*size), exp.GetCapacityBytes())
	assert.Equal(t, int64(2*size), deviceSize(t, target))

	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-blk"})
	assert.Equal(t, codes.FailedPrecondition, code(err), "deleting a published block volume: %v", err)

	unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-blk", TargetPath: target}
	_, err = d.NodeUnpublishVolume(ctx, unpub)
	require.NoError(t, err)
	_, err = d.NodeUnpublishVolume(ctx, unpub)
	require.NoError(t, err, "unpublishing again")
	assert.NoFileExists(t, target)
	dev, err = findLoop(file)
	require.NoError(t, err)
	assert.Empty(t, dev, "the loop device is detached")

	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-blk"})
	require.NoError(t, err)
	assert.NoFileExists(t, file)
}

func TestCapacity(t *testing.T) {
	d, _ := newDriver(t)
	c, err := d.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{StoragePoolParameter: "local"}})
	require.NoError(t, err)
	assert.Positive(t, c.GetAvailableCapacity())
	c, err = d.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: "node-b"}}})
	require.NoError(t, err)
	assert.Zero(t, c.GetAvailableCapacity(), "nothing of this node's is on another node")
	_, err = d.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{StoragePoolParameter: "ssd"}})
	assert.Equal(t, codes.InvalidArgument, code(err), "%v", err)
}

// A pool's capacity counts a Block volume's size as taken from its
// creation (its file is sparse: the space is promised), and gives it back
// when the volume goes; a Filesystem volume takes what is written in it.
func TestPoolCapacityBlock(t *testing.T) {
	d, _ := newDriver(t)
	before, err := d.PoolCapacity("local")
	require.NoError(t, err)
	require.Positive(t, before)
	// Half of what is free: far more than the rest of this machine writes
	// meanwhile, so the direction is the volume's.
	size := before / 2 &^ 4095
	_, err = d.CreateVolume(ctx, createReq("pvc-big", size, blockCap()))
	require.NoError(t, err)
	_, err = d.CreateVolume(ctx, createReq("pvc-dir", 0, fsCap()))
	require.NoError(t, err)
	during, err := d.PoolCapacity("local")
	require.NoError(t, err)
	assert.Less(t, during, before-size/2)
	c, err := d.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{StoragePoolParameter: "local"}})
	require.NoError(t, err)
	assert.Less(t, c.GetAvailableCapacity(), before-size/2, "GetCapacity says the same")

	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-big"})
	require.NoError(t, err)
	after, err := d.PoolCapacity("local")
	require.NoError(t, err)
	assert.Greater(t, after, during+size/2)
	_, err = d.PoolCapacity("ssd")
	assert.Equal(t, codes.InvalidArgument, code(err), "%v", err)
}

func TestUnescape(t *testing.T) {
	assert.Equal(t, "/var/a b\\x", unescape(`/var/a\040b\134x`))
	assert.Equal(t, `/x\9`, unescape(`/x\9`))
}

func deviceSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	n, err := f.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	return n
}

func TestExpandRefusals(t *testing.T) {
	d, _ := newDriver(t)
	_, err := d.CreateVolume(ctx, createReq("pvc-fs", 1<<20, fsCap()))
	require.NoError(t, err)
	r, err := d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-fs", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	require.NoError(t, err, "a filesystem volume has the pool's space")
	assert.Equal(t, int64(2<<20), r.GetCapacityBytes())
	for _, tc := range []struct {
		name string
		req  *csi.ControllerExpandVolumeRequest
		want codes.Code
	}{
		{"no size", &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-fs"}, codes.InvalidArgument},
		{"over the limit", &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-fs", CapacityRange: &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}}, codes.InvalidArgument},
		{"unknown", &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-none", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}, codes.NotFound},
		{"escape", &csi.ControllerExpandVolumeRequest{VolumeId: "../pool", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}, codes.NotFound},
		{"no ID", &csi.ControllerExpandVolumeRequest{CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.ControllerExpandVolume(ctx, tc.req)
			assert.Equal(t, tc.want, code(err), "%v", err)
		})
	}
}

// A class with sharedOnNode: "true" gives multi-node access modes: the
// volume's context says so, and the volume is published at two targets
// at once (a VMI's source and target launcher pods on its node), a Block
// one through the same loop device, kept until the last target goes.
// Without the parameter the modes are refused (TestCreateRefusals).
func TestSharedOnNode(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices here:", err)
	}
	d, pool := newDriver(t)
	rwx := func(c *csi.VolumeCapability) *csi.VolumeCapability {
		c.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		return c
	}
	for _, tc := range []struct {
		name string
		cap  *csi.VolumeCapability
	}{{"pvc-shared-fs", rwx(fsCap())}, {"pvc-shared-blk", rwx(blockCap())}} {
		t.Run(tc.name, func(t *testing.T) {
			req := createReq(tc.name, 4<<20, tc.cap)
			req.Parameters[SharedOnNodeParameter] = "true"
			r, err := d.CreateVolume(ctx, req)
			require.NoError(t, err)
			volCtx := r.GetVolume().GetVolumeContext()
			assert.Equal(t, "true", volCtx[SharedOnNodeParameter])
			_, err = d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: tc.name, TargetPath: filepath.Join(t.TempDir(), "x"), VolumeCapability: tc.cap})
			assert.Equal(t, codes.InvalidArgument, code(err), "a multi-node publish without the volume's context: %v", err)

			var targets []string
			for range 2 {
				target := filepath.Join(t.TempDir(), "pod", "vol")
				require.NoError(t, os.MkdirAll(filepath.Dir(target), 0o750))
				_, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: tc.name, TargetPath: target, VolumeCapability: tc.cap, VolumeContext: volCtx})
				require.NoError(t, err)
				t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
				targets = append(targets, target)
			}
			if tc.cap.GetBlock() != nil {
				t.Cleanup(func() { _ = releaseLoop(filepath.Join(pool, "csi", tc.name)) })
				f, err := os.OpenFile(targets[0], os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte("from the source"), 0)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				_, err = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tc.name, TargetPath: targets[0]})
				require.NoError(t, err)
				got := make([]byte, len("from the source"))
				f, err = os.Open(targets[1])
				require.NoError(t, err, "the other target keeps its device")
				_, err = f.ReadAt(got, 0)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				assert.Equal(t, "from the source", string(got))
			} else {
				require.NoError(t, os.WriteFile(filepath.Join(targets[0], "disk.img"), []byte("from the source"), 0o600))
				_, err = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tc.name, TargetPath: targets[0]})
				require.NoError(t, err)
				b, err := os.ReadFile(filepath.Join(targets[1], "disk.img"))
				require.NoError(t, err)
				assert.Equal(t, "from the source", string(b))
			}
			_, err = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tc.name, TargetPath: targets[1]})
			require.NoError(t, err)
			_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: tc.name})
			require.NoError(t, err)
		})
	}
}
