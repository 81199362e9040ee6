package controller

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Disk volumes: a launcher pod gets each persistentVolumeClaim volume as
// KubeVirt's does, a Filesystem claim mounted at vmispec.PVCDiskDir/<volume>
// (the launcher makes disk.img in it), a Block claim as the device
// vmispec.BlockDeviceDir/<volume>; an ephemeral volume's claim the same way,
// read-only; emptyDisk images and ephemeral overlays go in one emptyDir.
// A hostDisk's directory on the node is a hostPath volume at
// vmispec.PVCDiskDir/<volume> (DirectoryOrCreate for DiskOrCreate), only
// with the HostDisk feature gate, as in KubeVirt: it gives whoever creates
// VMIs files of the node. The claims are read only for VMIs that have
// some (from the cache by the VMI controller, which watches them: a claim
// that appears or changes brings its VMIs back; from the API server by
// the migration controller): their mode and size go to the launcher
// (vmispec.PVCInfoEnv), their access modes decide LiveMigratable.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch

// ReasonFailedPVCNotFound is the Synchronized reason of a VMI whose claim
// does not exist (KubeVirt's): it gets no pod until the claim appears.
const ReasonFailedPVCNotFound = "FailedPvcNotFound"

// emptyDiskVolume is the launcher pod's emptyDir of emptyDisk images and
// ephemeral overlays.
const emptyDiskVolume = "ephemeral-disks"

// FeatureGateHostDisk (KubeVirt's) lets VMIs have hostDisk volumes.
const FeatureGateHostDisk = "HostDisk"

// checkHostDisks refuses a VMI with a hostDisk volume unless the cluster
// configuration enables FeatureGateHostDisk.
func checkHostDisks(vmi *v1.VirtualMachineInstance, cfg ClusterConfig) error {
	for _, v := range vmi.Spec.Volumes {
		if v.HostDisk != nil && !cfg.HasFeatureGate(FeatureGateHostDisk) {
			return fmt.Errorf("spec.volumes[%s].hostDisk: the %s feature gate is not enabled (developerConfiguration.featureGates)", v.Name, FeatureGateHostDisk)
		}
	}
	return nil
}

// vmisOfClaim are the VMIs of the claim's namespace with a volume on it
// (from the cache): a VMI waiting for its claim starts once it exists,
// and LiveMigratable follows the claim's access modes.
func (r *VMIReconciler) vmisOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1.VirtualMachineInstanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing the VMIs of a claim's namespace", "claim", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		for _, v := range vmispec.PVCVolumes(&list.Items[i].Spec) {
			if claim, _, _ := vmispec.VolumeClaim(&v); claim == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				break
			}
		}
	}
	return out
}

// readPVCs reads the claim of each of the VMI's PVC volumes but the
// hot-plugged ones, by volume name. A missing claim is an error naming it (ReasonFailedPVCNotFound);
// a dataVolume volume's DataVolume must be ready (dataVolumeClaim).
func readPVCs(ctx context.Context, c client.Reader, vmi *v1.VirtualMachineInstance) (map[string]vmispec.PVCInfo, *syncError) {
	out := map[string]vmispec.PVCInfo{}
	for _, v := range vmispec.PVCVolumes(vmi.Spec.WithoutHotplugVolumes()) { // the launcher pod's
		name, _, _ := vmispec.VolumeClaim(&v)
		if v.DataVolume != nil {
			// A DataVolume's claim, once the DataVolume is ready.
			claim, syncErr := dataVolumeClaim(ctx, c, vmi.Namespace, v.DataVolume.Name)
			if syncErr != nil {
				return nil, syncErr
			}
			name = claim
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := c.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			return nil, &syncError{reason: ReasonFailedPVCNotFound, retry: true,
				err: fmt.Errorf("PVC %s/%s of volume %s does not exist, waiting for it to appear", vmi.Namespace, name, v.Name)}
		case err != nil:
			return nil, &syncError{reason: ReasonFailedCreate, retry: true,
				err: fmt.Errorf("reading PVC %s/%s of volume %s: %w", vmi.Namespace, name, v.Name, err)}
		}
		out[v.Name] = vmispec.NewPVCInfo(pvc)
	}
	return out, nil
}

// addDiskVolumes gives the launcher pod the VMI's PVC, ephemeral,
// hostDisk and emptyDisk volumes (pvcs from readPVCs). A pod volume is
// named after its VMI volume, as in KubeVirt; a name the pod already uses
// is refused.
func addDiskVolumes(pod *corev1.Pod, vmi *v1.VirtualMachineInstance, pvcs map[string]vmispec.PVCInfo) error {
	taken := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		taken[v.Name] = true
	}
	c := &pod.Spec.Containers[0]
	emptyDisk := false
	for _, v := range vmi.Spec.WithoutHotplugVolumes().Volumes { // hot-plugged ones come from the node
		claim, ro, isClaim := vmispec.VolumeClaim(&v)
		if (isClaim || v.HostDisk != nil) && taken[v.Name] {
			return fmt.Errorf("spec.volumes[%s]: the name is taken by the launcher pod's own volume", v.Name)
		}
		switch {
		case v.EmptyDisk != nil:
			emptyDisk = true
		case v.HostDisk != nil:
			t := corev1.HostPathDirectory
			if v.HostDisk.Type == v1.HostDiskExistsOrCreate {
				t = corev1.HostPathDirectoryOrCreate
			}
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(v.HostDisk.Path), Type: &t},
			}})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: vmispec.PVCDiskDir + "/" + v.Name})
		case isClaim:
			emptyDisk = emptyDisk || v.Ephemeral != nil
			info, ok := pvcs[v.Name]
			if !ok {
				return fmt.Errorf("spec.volumes[%s]: PVC %s was not read", v.Name, claim)
			}
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: info.ClaimName, ReadOnly: ro},
			}})
			if info.Block {
				c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: v.Name, DevicePath: vmispec.BlockDeviceDir + "/" + v.Name})
			} else {
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: vmispec.PVCDiskDir + "/" + v.Name, ReadOnly: ro})
			}
		}
	}
	if emptyDisk {
		pod.Spec.Volumes = append(pod.Spec.Volumes, emptyDirVolume(emptyDiskVolume))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: emptyDiskVolume, MountPath: vmispec.EmptyDiskDir})
	}
	if len(pvcs) == 0 {
		return nil
	}
	// The launcher's user owns nothing on the claim's filesystem: the
	// kubelet gives the volume to its group (KubeVirt's launcher runs with
	// fsGroup 107 the same way). A Block claim's device is the user's
	// already (the runtime's device ownership from the security context).
	pod.Spec.SecurityContext.FSGroup = ptr.To(*pod.Spec.SecurityContext.RunAsGroup)
	env, err := vmispec.EncodePVCInfo(pvcs)
	if err != nil {
		return err
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: vmispec.PVCInfoEnv, Value: env})
	return nil
}
