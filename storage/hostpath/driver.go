// Package hostpath is the hostpath provisioner's CSI driver,
// kubevirt.io.hostpath-provisioner: volumes are directories
// <pool path>/csi/<volume ID> on the node that holds the pool, as in
// KubeVirt's hostpath provisioner (HPP).
//
// As in HPP, every service runs per node, in one process: the Controller
// service creates and deletes volumes in this node's pools (the provisioner
// of this package calls it for the claims scheduled to this node), the Node
// service publishes them into pods. The kubelet's own CSI code calls the
// Node service, after Register announced the driver on its
// plugin-registration socket.
//
// A Filesystem volume is the directory itself, bind-mounted at the target.
// A Block volume is a sparse regular file of the requested size at the
// same path, <pool>/csi/<volume ID>, attached to a loop device when
// published; the device node is bind-mounted at the target file. The
// entry's type is the volume's mode: no user of a volume can change it (a
// Filesystem volume's users see only what is inside its directory, a Block
// volume's only the device), whereas a file inside a volume directory
// would be no mark at all: a VM on a Filesystem claim keeps its image there
// as disk.img. Volumes are not staged (no STAGE_UNSTAGE_VOLUME):
// publishing is a bind mount.
//
// A volume is on one node, and by default one node's access modes only
// (ReadWriteOnce, ReadWriteOncePod), as in HPP. A StorageClass with the
// parameter sharedOnNode: "true" also gives ReadWriteMany and
// ReadOnlyMany claims, meaning shared by the pods of the volume's node:
// its topology still pins every consumer there, so a pod elsewhere never
// schedules. That is what a VMI's same-node live migration needs (both
// launcher pods have the claim at once); a migration to another node
// cannot place its target pod, and fails as an unschedulable one does.
// The class says so in its name in the dev cluster (hostpath-csi-shared).
//
// Volume IDs are ours: CreateVolume accepts names that are one path
// element of lower-case letters, digits and dashes (the provisioner's
// pvc-<uid>), and every RPC refuses any other ID, so no request can name a
// path outside a pool.
package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// DriverName is the CSI driver's name, HPP's.
	DriverName = "kubevirt.io.hostpath-provisioner"
	// TopologyKey is the topology segment naming a volume's node.
	TopologyKey = "topology.hostpath.csi/node"
	// StoragePoolParameter is the StorageClass parameter selecting a pool.
	StoragePoolParameter = "storagePool"
	// SharedOnNodeParameter is the StorageClass parameter that, "true"
	// (and so in its volumes' context), lets volumes be shared by the
	// pods of their node: multi-node access modes are accepted, the
	// topology keeping every pod on the volume's node.
	SharedOnNodeParameter = "sharedOnNode"
)

// sharedOnNode reads SharedOnNodeParameter from parameters or a volume
// context.
func sharedOnNode(params map[string]string) bool { return params[SharedOnNodeParameter] == "true" }

// Version is the driver's version, reported by GetPluginInfo.
var Version = "devel"

// volumeID is what CreateVolume accepts as a name and every RPC as a
// volume ID: one path element, never "." or "..".
var volumeID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,126}[a-z0-9])?$`)

// Driver serves the Identity, Controller and Node services for one node.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	// NodeID is this node's name.
	NodeID string
	// Pools are this node's storage pools: name to directory.
	Pools map[string]string
}

func checkID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !volumeID.MatchString(id) {
		return status.Errorf(codes.NotFound, "volume %q: not a volume of this driver", id)
	}
	return nil
}

// volume finds volume id in the pools: its path ("" when no pool holds
// it) and its mode, Block for a regular file, Filesystem for a directory.
func (d *Driver) volume(id string) (path string, block bool, err error) {
	if err := checkID(id); err != nil {
		return "", false, err
	}
	for _, name := range d.poolNames() {
		p := filepath.Join(d.Pools[name], "csi", id)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return "", false, status.Errorf(codes.Internal, "volume %s: %v", id, err)
		case fi.IsDir():
			return p, false, nil
		case fi.Mode().IsRegular():
			return p, true, nil
		default:
			return "", false, status.Errorf(codes.Internal, "volume %s: %s is neither a directory nor a regular file", id, p)
		}
	}
	return "", false, nil
}

func (d *Driver) poolNames() []string {
	names := make([]string, 0, len(d.Pools))
	for n := range d.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pool is the directory of the pool a StorageClass's parameters select.
func (d *Driver) pool(params map[string]string) (string, error) {
	name := params[StoragePoolParameter]
	if name == "" {
		return "", status.Errorf(codes.InvalidArgument, "parameter %s is required", StoragePoolParameter)
	}
	p, ok := d.Pools[name]
	if !ok {
		return "", status.Errorf(codes.InvalidArgument, "storage pool %q is not on node %s", name, d.NodeID)
	}
	return p, nil
}

// GetPluginInfo names the driver.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: Version}, nil
}

// Probe is ready when every pool is a directory.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	for _, name := range d.poolNames() {
		if fi, err := os.Stat(d.Pools[name]); err != nil || !fi.IsDir() {
			return nil, status.Errorf(codes.FailedPrecondition, "storage pool %s (%s) is not a directory", name, d.Pools[name])
		}
	}
	return &csi.ProbeResponse{}, nil
}

// GetPluginCapabilities says the driver has a Controller service, volumes
// reachable from their node only, and volumes that grow while in use.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	for _, t := range []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS} {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}})
	}
	// Volumes grow while in use (ControllerExpandVolume).
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// ControllerGetCapabilities says the controller creates, deletes and
// expands volumes and reports capacity.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME} {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

// checkCaps refuses capabilities a node-local volume cannot give: access
// from more than one node (unless shared, sharedOnNode), a mount with
// flags (a bind mount has none to give), and a filesystem type other than
// the pool's.
func checkCaps(caps []*csi.VolumeCapability, shared bool) (block bool, err error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for i, c := range caps {
		switch c.GetAccessMode().GetMode() {
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
			if !shared {
				return false, status.Errorf(codes.InvalidArgument, "access mode %s: volumes are on one node (a class with %s: \"true\" shares them among its pods)",
					c.GetAccessMode().GetMode(), SharedOnNodeParameter)
			}
		default:
			return false, status.Errorf(codes.InvalidArgument, "access mode %s: volumes are on one node", c.GetAccessMode().GetMode())
		}
		switch {
		case c.GetBlock() != nil:
			if i > 0 && !block {
				return false, status.Error(codes.InvalidArgument, "both block and mount access requested")
			}
			block = true
		case c.GetMount() != nil:
			if block {
				return false, status.Error(codes.InvalidArgument, "both block and mount access requested")
			}
			if len(c.GetMount().GetMountFlags()) > 0 {
				return false, status.Errorf(codes.InvalidArgument, "mount flags %v: the volume is a bind-mounted directory", c.GetMount().GetMountFlags())
			}
			if fs := c.GetMount().GetFsType(); fs != "" {
				return false, status.Errorf(codes.InvalidArgument, "fs type %q: the volume is a directory of the pool's filesystem", fs)
			}
		default:
			return false, status.Error(codes.InvalidArgument, "a volume capability needs block or mount access")
		}
	}
	return block, nil
}

// CreateVolume makes <pool>/csi/<name>: a directory, or for a Block volume
// a sparse file of the required size. Called again with the same name it
// returns the same volume, or AlreadyExists if the request differs.
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if !volumeID.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "name %q: one path element of lower-case letters, digits and dashes", name)
	}
	block, err := checkCaps(req.GetVolumeCapabilities(), sharedOnNode(req.GetParameters()))
	if err != nil {
		return nil, err
	}
	if src := req.GetVolumeContentSource(); src != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources are not supported")
	}
	if err := d.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	pool, err := d.pool(req.GetParameters())
	if err != nil {
		return nil, err
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && size > lim {
		return nil, status.Errorf(codes.InvalidArgument, "required bytes %d exceed the limit %d", size, lim)
	}
	if block && size == 0 {
		size = req.GetCapacityRange().GetLimitBytes()
	}
	if block && size <= 0 {
		return nil, status.Error(codes.InvalidArgument, "a block volume needs a size (capacity_range)")
	}
	existing, existingBlock, err := d.volume(name)
	if err != nil {
		return nil, err
	}
	if existing != "" && filepath.Dir(filepath.Dir(existing)) != pool {
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists in another pool (%s)", name, existing)
	}
	p := filepath.Join(pool, "csi", name)
	switch {
	case existing != "":
		if err := checkExisting(p, existingBlock, block, size); err != nil {
			return nil, err
		}
	case block:
		if err := makeBlockVolume(p, size); err != nil {
			return nil, err
		}
	default:
		if err := os.MkdirAll(p, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "creating %s: %v", p, err)
		}
	}
	volCtx := map[string]string{StoragePoolParameter: req.GetParameters()[StoragePoolParameter]}
	if sharedOnNode(req.GetParameters()) {
		volCtx[SharedOnNodeParameter] = "true"
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           name,
		CapacityBytes:      size,
		VolumeContext:      volCtx,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{TopologyKey: d.NodeID}}},
	}}, nil
}

// checkExisting answers a repeated CreateVolume: the volume at p (a Block
// one when isBlock) must have the mode, and a Block volume the size, asked
// for.
func checkExisting(p string, isBlock, block bool, size int64) error {
	switch {
	case !isBlock && block:
		return status.Error(codes.AlreadyExists, "the volume exists as a filesystem volume")
	case isBlock && !block:
		return status.Error(codes.AlreadyExists, "the volume exists as a block volume")
	case !block:
		return nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", p, err)
	}
	if fi.Size() != size {
		return status.Errorf(codes.AlreadyExists, "the volume exists with %d bytes, not %d", fi.Size(), size)
	}
	return nil
}

// makeBlockVolume makes a Block volume's sparse file at p, as a scratch
// file renamed into place once its size is set: a volume is always whole,
// and a crash leaves only the scratch file, which the next attempt starts
// afresh. (Its name, beginning with a dot, is no volume ID.)
func makeBlockVolume(p string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return status.Errorf(codes.Internal, "creating block volume %s: %v", p, err)
	}
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	err := os.RemoveAll(tmp)
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	}
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return status.Errorf(codes.Internal, "creating block volume %s: %v", p, err)
	}
	return nil
}

// checkTopology refuses a volume that must be reachable from other nodes
// only.
func (d *Driver) checkTopology(tr *csi.TopologyRequirement) error {
	if tr == nil || len(tr.GetRequisite()) == 0 {
		return nil
	}
	for _, t := range tr.GetRequisite() {
		if n, ok := t.GetSegments()[TopologyKey]; !ok || n == d.NodeID {
			return nil
		}
	}
	return status.Errorf(codes.ResourceExhausted, "the volume must be on another node than %s", d.NodeID)
}

// DeleteVolume removes the volume's directory or file; an unknown volume is gone
// already.
func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !volumeID.MatchString(req.GetVolumeId()) {
		return &csi.DeleteVolumeResponse{}, nil
	}
	p, block, err := d.volume(req.GetVolumeId())
	if err != nil || p == "" {
		return &csi.DeleteVolumeResponse{}, err
	}
	if block {
		if l, err := findLoop(p); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
		} else if l != "" {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published (%s)", req.GetVolumeId(), l)
		}
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", p, err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerExpandVolume grows a volume. A Block volume's file grows (never
// shrinks) and, when it is published, its loop device takes the new size
// at once: the controller runs on the volume's node, so no
// NodeExpandVolume is needed. A Filesystem volume is a directory of the
// pool's filesystem, with no size of its own to change.
func (d *Driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	file, block, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if file == "" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size <= 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range.required_bytes is required")
	}
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && size > lim {
		return nil, status.Errorf(codes.InvalidArgument, "required bytes %d exceed the limit %d", size, lim)
	}
	if !block {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
	}
	if fi.Size() >= size {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: fi.Size()}, nil
	}
	if err := os.Truncate(file, size); err != nil {
		return nil, status.Errorf(codes.Internal, "growing %s: %v", file, err)
	}
	if err := resizeLoop(file); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
}

// ValidateVolumeCapabilities confirms the capabilities a volume of this
// driver can give.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	p, isBlock, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if p == "" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	block, err := checkCaps(req.GetVolumeCapabilities(), sharedOnNode(req.GetVolumeContext()) || sharedOnNode(req.GetParameters()))
	if err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil //nolint:nilerr // unsupported capabilities are an answer, not an error
	}
	if isBlock != block {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume's mode differs"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// GetCapacity is the space left in the pool the parameters select (all
// pools when none is named): PoolCapacity.
func (d *Driver) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if seg := req.GetAccessibleTopology().GetSegments(); seg != nil && seg[TopologyKey] != d.NodeID {
		return &csi.GetCapacityResponse{}, nil
	}
	pools := d.poolNames()
	if req.GetParameters()[StoragePoolParameter] != "" {
		if _, err := d.pool(req.GetParameters()); err != nil {
			return nil, err
		}
		pools = []string{req.GetParameters()[StoragePoolParameter]}
	}
	var avail int64
	for _, p := range pools {
		c, err := d.PoolCapacity(p)
		if err != nil {
			return nil, err
		}
		avail += c
	}
	return &csi.GetCapacityResponse{AvailableCapacity: avail}, nil
}

// PoolCapacity is the space pool name has for new volumes: its
// filesystem's free space (statfs) less what its Block volumes were
// promised and have not written yet (their files are sparse: the space is
// taken as the guest writes, and must still be there then).
func (d *Driver) PoolCapacity(name string) (int64, error) {
	dir, ok := d.Pools[name]
	if !ok {
		return 0, status.Errorf(codes.InvalidArgument, "storage pool %q is not on node %s", name, d.NodeID)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, status.Errorf(codes.Internal, "storage pool %s: %v", name, err)
	}
	avail := int64(st.Bavail) * st.Bsize //nolint:gosec // block counts of a real filesystem fit
	entries, err := os.ReadDir(filepath.Join(dir, "csi"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, status.Errorf(codes.Internal, "storage pool %s: %v", name, err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !volumeID.MatchString(e.Name()) {
			continue
		}
		var fst unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "csi", e.Name()), &fst); err != nil {
			continue // deleted meanwhile
		}
		if unwritten := fst.Size - fst.Blocks*512; unwritten > 0 {
			avail -= unwritten
		}
	}
	return max(avail, 0), nil
}

// NodeGetInfo names the node and its topology segment.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.NodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: d.NodeID}}}, nil
}

// NodeGetCapabilities says the node service reports volume statistics.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_GET_VOLUME_STATS}}}}}, nil
}

// NodePublishVolume bind-mounts the volume at the target path: the
// directory for a Filesystem volume, the loop device of its file for a
// Block one. A target that is mounted already is published.
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || !filepath.IsAbs(target) {
		return nil, status.Errorf(codes.InvalidArgument, "target path %q: an absolute path is required", target)
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	block, err := checkCaps([]*csi.VolumeCapability{req.GetVolumeCapability()}, sharedOnNode(req.GetVolumeContext()))
	if err != nil {
		return nil, err
	}
	p, isBlock, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if p == "" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if isBlock != block {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: the requested access type is not the volume's mode", req.GetVolumeId())
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "target %s: %v", target, err)
	}
	if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	ro := req.GetReadonly() || req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	if block {
		err = publishBlock(p, target, ro)
	} else {
		err = publishDir(p, target, ro)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "publishing volume %s at %s: %v", req.GetVolumeId(), target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func publishDir(dir, target string, ro bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	return bindMount(dir, target, ro)
}

func publishBlock(file, target string, ro bool) error {
	dev, err := findLoop(file)
	if err != nil {
		return err
	}
	if dev == "" {
		if dev, err = attachLoop(file); err != nil {
			return err
		}
	}
	// The target is a file the SP creates (the CO creates its parent).
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return err
	}
	_ = f.Close()
	return bindMount(dev, target, ro)
}

// NodeUnpublishVolume unmounts and removes the target; a Block volume's
// loop device is detached once no other target shows it.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || !filepath.IsAbs(target) {
		return nil, status.Errorf(codes.InvalidArgument, "target path %q: an absolute path is required", target)
	}
	p, block, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	for {
		mounted, err := isMountPoint(target)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "target %s: %v", target, err)
		}
		if !mounted {
			break
		}
		// Lazily: a VM's hot-plugged volume is held open by its launcher
		// through the mount of the attachment pod that published it
		// (virt-handler opened it there), and that pod may go first when
		// another pod publishes the volume; the data is on the node's
		// file system either way, and the mount lasts while it is open.
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return nil, status.Errorf(codes.Internal, "unmounting %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	if block {
		if err := releaseLoop(p); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats is the filesystem's usage under a Filesystem volume
// (the pool's filesystem: volumes share it), a Block volume's size.
func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	p := req.GetVolumePath()
	if p == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	vol, block, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if vol == "" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if mounted, err := isMountPoint(p); err != nil || !mounted {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", req.GetVolumeId(), p)
	}
	if block {
		fi, err := os.Stat(vol)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: fi.Size()}}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", p, err)
	}
	bs := st.Bsize
	//nolint:gosec // block and inode counts of a real filesystem fit
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}
