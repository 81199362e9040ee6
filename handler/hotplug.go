package handler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// Hot-plugged volumes, virt-handler's half (virt-controller's, the
// attachment pod that has the kubelet publish the claim on this node, is
// controller/hotplug_pod.go). The launcher cannot see a claim published
// for another pod; virt-handler can, through the kubelet's pods and plugins
// directories (mounted with HostToContainer propagation, so it sees the
// kubelet's CSI mounts made after it started). It opens the claim's image
// there (a Filesystem claim's disk.img, a Block claim's device) and hands
// the open descriptor to the launcher (vmispec.HotplugSocket), which attaches
// it to the guest's SCSI controller as it is: the launcher's container may
// not open that device node itself. A hot-plugged volume gone from the
// spec is detached. volumeStatus phases written here:
//
//	AttachedToNode --attached to the guest--> Ready (target sdX, size)
//	(gone from the spec) --detached--> entry dropped
//
// What is attached is what the launcher says (GET /v1/vm/volumes), so a
// restarted handler picks up where it was.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

// ReasonVolumeReady is a hot-plugged volume's reason once the guest has it.
const ReasonVolumeReady = "VolumeReady"

// ReasonHotplugFailed is the event of a volume that could not be attached
// or detached.
const ReasonHotplugFailed = "HotplugFailed"

// csiPlugin is the kubelet's directory of a pod's CSI volumes, one per PV.
const csiPlugin = "volumes/kubernetes.io~csi"

// hotplugAttach is one volume to hand to the launcher.
type hotplugAttach struct {
	name   string
	claim  string
	block  bool
	podUID types.UID // the attachment pod's
}

// hotplugPlan is what one pass does with the VMI's hot-plugged volumes.
type hotplugPlan struct {
	attach []hotplugAttach
	detach []string
}

func (p hotplugPlan) empty() bool { return len(p.attach) == 0 && len(p.detach) == 0 }

// hasHotplug says whether the VMI has hot-plugged volumes to look after:
// in its spec, or left in its status to detach.
func hasHotplug(vmi *v1.VirtualMachineInstance) bool {
	return slices.ContainsFunc(vmi.Spec.Volumes, func(v v1.Volume) bool { return v.IsHotplug() }) ||
		slices.ContainsFunc(vmi.Status.VolumeStatus, func(s v1.VolumeStatus) bool { return s.HotplugVolume != nil })
}

// planHotplug decides from the VMI and what its launcher has attached:
// attach each hot-plugged volume in the spec whose attachment pod runs
// (AttachedToNode or later) and is not attached yet, detach each attached
// volume no longer hot-plugged in the spec.
func planHotplug(vmi *v1.VirtualMachineInstance, attached []api.Volume) hotplugPlan {
	var p hotplugPlan
	status := map[string]v1.VolumeStatus{}
	for _, s := range vmi.Status.VolumeStatus {
		status[s.Name] = s
	}
	has := func(name string) bool {
		return slices.ContainsFunc(attached, func(v api.Volume) bool { return v.Name == name })
	}
	inSpec := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		if !v.IsHotplug() {
			continue
		}
		inSpec[v.Name] = true
		s, ok := status[v.Name]
		if !ok || has(v.Name) || s.HotplugVolume == nil || s.HotplugVolume.AttachPodUID == "" || s.PersistentVolumeClaimInfo == nil {
			continue
		}
		switch s.Phase {
		case v1.HotplugVolumeAttachedToNode, v1.HotplugVolumeMounted, v1.VolumeReady:
			p.attach = append(p.attach, hotplugAttach{name: v.Name, claim: s.PersistentVolumeClaimInfo.ClaimName,
				block:  s.PersistentVolumeClaimInfo.VolumeMode != nil && *s.PersistentVolumeClaimInfo.VolumeMode == corev1.PersistentVolumeBlock,
				podUID: s.HotplugVolume.AttachPodUID})
		}
	}
	for _, v := range attached {
		if !inSpec[v.Name] {
			p.detach = append(p.detach, v.Name)
		}
	}
	return p
}

// hotplugStatus writes the volumeStatus of the hot-plugged volumes the
// launcher has attached (Ready), and drops those of removed volumes it
// has detached.
func hotplugStatus(st *v1.VirtualMachineInstanceStatus, vmi *v1.VirtualMachineInstance, attached []api.Volume) {
	inSpec := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		inSpec[v.Name] = true
	}
	first := scsiDisksBefore(vmi)
	out := st.VolumeStatus[:0:0]
	for _, s := range st.VolumeStatus {
		i := slices.IndexFunc(attached, func(v api.Volume) bool { return v.Name == s.Name })
		switch {
		case i >= 0:
			v := attached[i]
			s.Phase, s.Reason = v1.VolumeReady, ReasonVolumeReady
			s.Message = fmt.Sprintf("Successfully attach hotplugged volume %s to VM", s.Name)
			s.Target = scsiDiskName(first + v.Target)
			s.Size = int64(v.SizeBytes)
		case !inSpec[s.Name] && s.HotplugVolume != nil:
			continue // detached
		}
		out = append(out, s)
	}
	st.VolumeStatus = out
}

// scsiDisksBefore is how many of the VMI's own (not hot-plugged) disks are
// on the SCSI bus: the guest names them first.
func scsiDisksBefore(vmi *v1.VirtualMachineInstance) int {
	hot := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		hot[v.Name] = v.IsHotplug()
	}
	n := 0
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if !hot[d.Name] && d.Disk != nil && d.Disk.Bus == v1.DiskBusSCSI {
			n++
		}
	}
	return n
}

// scsiDiskName is Linux's name of the i-th SCSI disk: sda ... sdz, sdaa ...
func scsiDiskName(i int) string {
	name := ""
	for i++; i > 0; i = (i - 1) / 26 {
		name = string(rune('a'+(i-1)%26)) + name
	}
	return "sd" + name
}

// volumes asks the launcher which volumes it has hot-plugged.
func (l launcherConn) volumes(ctx context.Context) ([]api.Volume, error) {
	ctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	defer cancel()
	return l.client().Volumes(ctx)
}

// syncHotplug carries out the plan and returns what is attached after it,
// with the first error met (the others are events).
func (r *VMIReconciler) syncHotplug(ctx context.Context, vmi *v1.VirtualMachineInstance, pod *corev1.Pod, l launcherConn, attached []api.Volume, p hotplugPlan) ([]api.Volume, error) {
	var errs []error
	for _, name := range p.detach {
		qctx, cancel := context.WithTimeout(ctx, hotplugTimeout)
		_, err := l.client().DetachVolume(qctx, name)
		cancel()
		if err != nil {
			err = fmt.Errorf("detaching hot-plugged volume %s of VMI %s/%s: %w", name, vmi.Namespace, vmi.Name, err)
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonHotplugFailed, "DetachVolume", "%v", err)
			errs = append(errs, err)
			continue
		}
		attached = slices.DeleteFunc(attached, func(v api.Volume) bool { return v.Name == name })
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonVolumeReady, "DetachVolume", "Detached hot-plugged volume %s", name)
	}
	for _, a := range p.attach {
		v, err := r.attachVolume(ctx, vmi, pod, l, a)
		if err != nil {
			err = fmt.Errorf("attaching hot-plugged volume %s of VMI %s/%s: %w", a.name, vmi.Namespace, vmi.Name, err)
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonHotplugFailed, "AttachVolume", "%v", err)
			errs = append(errs, err)
			continue
		}
		attached = append(attached, v)
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonVolumeReady, "AttachVolume", "Attached hot-plugged volume %s (PVC %s) at SCSI target %d", a.name, a.claim, v.Target)
	}
	return attached, errors.Join(errs...)
}

// hotplugTimeout bounds one attach or detach: a detach waits for the
// guest's requests on the volume to finish.
const hotplugTimeout = 30 * time.Second

// attachVolume opens the volume's image where the kubelet published it
// for the attachment pod and hands it to the launcher.
func (r *VMIReconciler) attachVolume(ctx context.Context, vmi *v1.VirtualMachineInstance, pod *corev1.Pod, l launcherConn, a hotplugAttach) (api.Volume, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: a.claim}, pvc); err != nil {
		return api.Volume{}, fmt.Errorf("reading PVC %s: %w", a.claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		return api.Volume{}, fmt.Errorf("PVC %s is not bound", a.claim)
	}
	var gid int
	if pod != nil && pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsGroup != nil {
		gid = int(*pod.Spec.SecurityContext.RunAsGroup)
	}
	var f *os.File
	var err error
	if a.block {
		f, err = openPublishedDevice(r.PluginsDir, a.podUID, pvc.Spec.VolumeName)
	} else {
		f, err = openPublishedImage(r.PodsDir, a.podUID, pvc.Spec.VolumeName, vmispec.DiskImgSize(pvc), gid)
	}
	if err != nil {
		return api.Volume{}, err
	}
	defer func() { _ = f.Close() }() // the launcher holds its own descriptor
	ctx, cancel := context.WithTimeout(ctx, hotplugTimeout)
	defer cancel()
	c, err := l.dir.dial(ctx, vmispec.HotplugSocket)
	if err != nil {
		return api.Volume{}, err
	}
	defer func() { _ = c.Close() }()
	return api.SendVolumeFile(ctx, c.(*net.UnixConn), api.VolumeRequest{Name: a.name}, f)
}

// openPublishedImage opens the disk.img of a Filesystem PV as the kubelet
// published it for pod podUID, below the pods directory and through no
// symlink: what is in the volume is the user's (any pod of theirs using
// the claim may have put a symlink at disk.img). An absent disk.img is
// created, sparse, of size bytes (less when the file system has less
// free, as the launcher does), group gid, as KubeVirt does for a claim
// with no image yet.
func openPublishedImage(podsDir string, podUID types.UID, pv string, size int64, gid int) (*os.File, error) {
	if err := checkNames(podUID, pv); err != nil {
		return nil, err
	}
	dirRel := filepath.Join(string(podUID), csiPlugin, pv, "mount")
	dir, err := openBeneath(podsDir, dirRel, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("the published volume %s: %w (is the kubelet's pods directory mounted with HostToContainer propagation?)", filepath.Join(podsDir, dirRel), err)
	}
	defer unix.Close(dir)
	where := filepath.Join(podsDir, dirRel, diskImg)
	fd, err := unix.Openat2(dir, diskImg, &unix.OpenHow{Flags: unix.O_RDWR | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: beneath})
	if errors.Is(err, unix.ENOENT) {
		fd, err = createImage(dir, size, gid)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", where, err)
	}
	f := os.NewFile(uintptr(fd), where)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		_ = f.Close()
		return nil, fmt.Errorf("%s is not a regular file with one link", where)
	}
	return f, nil
}

// csiBlockPublish is where, below the kubelet's plugins directory, CSI
// publishes a Block PV for a pod: <PV>/<pod UID>, the device node the
// driver bind-mounted there (the pod's volumeDevices entry is the
// kubelet's symlink to it).
const csiBlockPublish = "kubernetes.io/csi/volumeDevices/publish"

// openPublishedDevice opens a Block PV's device as the kubelet published it
// for pod podUID, below the plugins directory and through no symlink.
func openPublishedDevice(pluginsDir string, podUID types.UID, pv string) (*os.File, error) {
	if err := checkNames(podUID, pv); err != nil {
		return nil, err
	}
	rel := filepath.Join(csiBlockPublish, pv, string(podUID))
	where := filepath.Join(pluginsDir, rel)
	fd, err := openBeneath(pluginsDir, rel, unix.O_RDWR|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("the published device %s: %w (is the kubelet's plugins directory mounted with HostToContainer propagation?)", where, err)
	}
	f := os.NewFile(uintptr(fd), where)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		_ = f.Close()
		return nil, fmt.Errorf("%s is not a block device", where)
	}
	return f, nil
}

// checkNames refuses a pod UID or PV name that is not one path element.
func checkNames(podUID types.UID, pv string) error {
	for _, n := range []string{string(podUID), pv} {
		if n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
			return fmt.Errorf("pod UID %q or PV %q is no name", podUID, pv)
		}
	}
	return nil
}

// diskImg is a Filesystem claim's VM image (KubeVirt's name).
const diskImg = "disk.img"

// createImage creates disk.img in dir (exclusively), sparse.
func createImage(dir int, size int64, gid int) (int, error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(dir, &sf); err != nil {
		return -1, err
	}
	if free := int64(sf.Bavail) * sf.Bsize; size > free {
		size = free &^ (1<<20 - 1)
	}
	if size <= 0 {
		return -1, errors.New("no room for a disk image")
	}
	fd, err := unix.Openat2(dir, diskImg, &unix.OpenHow{Flags: unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC | unix.O_NOFOLLOW, Mode: 0o660, Resolve: beneath})
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("sizing: %w", err)
	}
	if err := unix.Fchmod(fd, 0o660); err != nil { // not the handler's umask
		_ = unix.Close(fd)
		return -1, err
	}
	if err := unix.Fchown(fd, -1, gid); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("giving it to group %d: %w", gid, err)
	}
	return fd, nil
}
