package virtapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Volume hot-plug, the API half (KubeVirt's addvolume/removevolume on
// virtualmachineinstances): the request is checked here and written into
// the running VMI's spec as a volume marked hotpluggable with a disk on the
// SCSI bus; what attaches it to the guest acts on that spec.

// maxVolumeBody bounds an addvolume/removevolume body: a disk and a claim
// are a few hundred bytes.
const maxVolumeBody = 64 << 10

// badRequest is a 400 for the caller.
func badRequest(format string, a ...any) error {
	return &opError{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, msg: fmt.Sprintf(format, a...)}
}

// invalidRequest is a 422 naming each field that is wrong.
func invalidRequest(what string, errs field.ErrorList) error {
	return &opError{code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid, msg: what + ": " + errs.ToAggregate().Error()}
}

// vmiVolume serves PUT .../virtualmachineinstances/NAME/addvolume and
// removevolume. 202 once the spec holds the change (or, on a dry run, once
// it would).
func (s *Server) vmiVolume(op string) func(http.ResponseWriter, *http.Request, userInfo) {
	return func(w http.ResponseWriter, r *http.Request, u userInfo) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		b, err := io.ReadAll(io.LimitReader(r.Body, maxVolumeBody+1))
		if err != nil || len(b) > maxVolumeBody {
			writeErr(w, badRequest("reading the %s body (at most %d bytes): %v", op, maxVolumeBody, err))
			return
		}
		var do func() error
		switch op {
		case "addvolume":
			opts := &v1.AddVolumeOptions{}
			if err := json.Unmarshal(b, opts); err != nil {
				writeErr(w, badRequest("decoding AddVolumeOptions: %v", err))
				return
			}
			do = func() error { return s.addVolume(r.Context(), ns, name, opts) }
		default:
			opts := &v1.RemoveVolumeOptions{}
			if err := json.Unmarshal(b, opts); err != nil {
				writeErr(w, badRequest("decoding RemoveVolumeOptions: %v", err))
				return
			}
			do = func() error { return s.removeVolume(r.Context(), ns, name, opts) }
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, do); err != nil {
			writeErr(w, err)
			return
		}
		s.Log.Info("subresource", "op", op, "vmi", ns+"/"+name, "user", u.Name)
		w.WriteHeader(http.StatusAccepted)
	}
}

// addVolume puts the volume and its disk into the running VMI's spec.
func (s *Server) addVolume(ctx context.Context, ns, name string, opts *v1.AddVolumeOptions) error {
	if errs := validateAddVolume(opts); len(errs) > 0 {
		return invalidRequest("AddVolumeOptions", errs)
	}
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if !vmi.IsRunning() {
		return conflict("VMI is not running")
	}
	if err := s.checkHotplugSource(ctx, ns, opts.VolumeSource); err != nil {
		return err
	}
	orig := vmi.DeepCopy()
	if err := addHotplugVolume(&vmi.Spec, opts); err != nil {
		return err
	}
	if dryRun(opts.DryRun) {
		return nil
	}
	return s.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// removeVolume takes a hot-plugged volume and its disk out of the running
// VMI's spec.
func (s *Server) removeVolume(ctx context.Context, ns, name string, opts *v1.RemoveVolumeOptions) error {
	if errs := validateRemoveVolume(opts); len(errs) > 0 {
		return invalidRequest("RemoveVolumeOptions", errs)
	}
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if !vmi.IsRunning() {
		return conflict("VMI is not running")
	}
	orig := vmi.DeepCopy()
	if err := removeHotplugVolume(&vmi.Spec, opts.Name); err != nil {
		return err
	}
	if dryRun(opts.DryRun) {
		return nil
	}
	return s.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

func dryRun(d []string) bool { return slices.Contains(d, metav1.DryRunAll) }

// checkHotplugSource refuses a claim or DataVolume that does not exist in
// the VMI's namespace, naming the field that names it.
func (s *Server) checkHotplugSource(ctx context.Context, ns string, src *v1.HotplugVolumeSource) error {
	var obj client.Object
	var key, path, kind string
	switch {
	case src.PersistentVolumeClaim != nil:
		obj, key, path, kind = &corev1.PersistentVolumeClaim{}, src.PersistentVolumeClaim.ClaimName, "volumeSource.persistentVolumeClaim.claimName", "PersistentVolumeClaim"
	default:
		obj, key, path, kind = &cdiv1.DataVolume{}, src.DataVolume.Name, "volumeSource.dataVolume.name", "DataVolume"
	}
	err := s.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: key}, obj)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return badRequest("%s: %s %s/%s not found", path, kind, ns, key)
	}
	if err != nil {
		return fmt.Errorf("looking up %s %s/%s: %w", kind, ns, key, err)
	}
	return nil
}

// validateAddVolume checks an addvolume body on its own: a volume name, a
// disk on the SCSI bus (the controller whose LUNs come and go) with
// nothing kubevmm does not do for a hot-plugged disk, and exactly one
// claim or DataVolume marked hotpluggable.
func validateAddVolume(opts *v1.AddVolumeOptions) field.ErrorList {
	var errs field.ErrorList
	if opts.Name == "" {
		errs = append(errs, required(field.NewPath("name"), "the volume's name"))
	}
	errs = append(errs, validateDryRun(opts.DryRun)...)
	dp := field.NewPath("disk")
	switch d := opts.Disk; {
	case d == nil:
		errs = append(errs, required(dp, "the disk the guest sees"))
	default:
		errs = append(errs, validateHotplugDisk(dp, d, opts.Name)...)
	}
	sp := field.NewPath("volumeSource")
	switch src := opts.VolumeSource; {
	case src == nil || (src.PersistentVolumeClaim == nil && src.DataVolume == nil):
		errs = append(errs, required(sp, "a persistentVolumeClaim or a dataVolume"))
	case src.PersistentVolumeClaim != nil && src.DataVolume != nil:
		errs = append(errs, invalid(sp, opts.Name, "only one of persistentVolumeClaim and dataVolume"))
	case src.PersistentVolumeClaim != nil:
		cp := sp.Child("persistentVolumeClaim")
		errs = append(errs, validateClaimName(cp.Child("claimName"), src.PersistentVolumeClaim.ClaimName)...)
		if !src.PersistentVolumeClaim.Hotpluggable {
			errs = append(errs, invalid(cp.Child("hotpluggable"), false, "must be true: only hotpluggable volumes can be added to a running VMI"))
		}
	default:
		dvp := sp.Child("dataVolume")
		errs = append(errs, validateClaimName(dvp.Child("name"), src.DataVolume.Name)...)
		if !src.DataVolume.Hotpluggable {
			errs = append(errs, invalid(dvp.Child("hotpluggable"), false, "must be true: only hotpluggable volumes can be added to a running VMI"))
		}
	}
	return errs
}

// validateHotplugDisk checks a hot-plugged volume's disk: a plain disk on
// the SCSI bus (an empty bus is SCSI), named as its volume; the guest
// knows it by the volume's name (its SCSI serial), so no serial of its
// own, and it is no boot device.
func validateHotplugDisk(dp *field.Path, d *v1.Disk, volume string) field.ErrorList {
	var errs field.ErrorList
	if d.Name != "" && volume != "" && d.Name != volume {
		errs = append(errs, invalid(dp.Child("name"), d.Name, "must be the volume's name %q", volume))
	}
	switch {
	case d.LUN != nil:
		errs = append(errs, unsupported(dp, "lun", "a hot-plugged volume is a disk"))
	case d.CDRom != nil:
		errs = append(errs, unsupported(dp, "cdrom", "a hot-plugged volume is a disk"))
	case d.Disk != nil && d.Disk.Bus != "" && d.Disk.Bus != v1.DiskBusSCSI:
		errs = append(errs, notSupported(dp.Child("disk", "bus"), string(d.Disk.Bus), "hot-plugged disks are on the scsi bus"))
	case d.Disk != nil && d.Disk.PciAddress != "":
		errs = append(errs, unsupported(dp, "disk.pciAddress", "a SCSI disk has no PCI address"))
	}
	if d.BootOrder != nil {
		errs = append(errs, unsupported(dp, "bootOrder", "a hot-plugged disk is no boot device"))
	}
	if d.Serial != "" {
		errs = append(errs, unsupported(dp, "serial", "the guest sees the volume's name as the disk's serial"))
	}
	for _, s := range []struct{ name, v string }{{"cache", d.Cache}, {"io", d.IO}, {"tag", d.Tag}} {
		if s.v != "" {
			errs = append(errs, unsupported(dp, s.name, ""))
		}
	}
	if d.ErrorPolicy != nil {
		errs = append(errs, unsupported(dp, "errorPolicy", ""))
	}
	for _, b := range []struct {
		name string
		v    *bool
	}{{"shareable", d.Shareable}, {"dedicatedIOThread", d.DedicatedIOThread}, {"changedBlockTracking", d.ChangedBlockTracking}} {
		if isTrue(b.v) {
			errs = append(errs, unsupported(dp, b.name, ""))
		}
	}
	for _, f := range v1.UnmodeledFields(d) {
		errs = append(errs, unsupported(dp, f, ""))
	}
	return errs
}

func validateRemoveVolume(opts *v1.RemoveVolumeOptions) field.ErrorList {
	var errs field.ErrorList
	if opts.Name == "" {
		errs = append(errs, required(field.NewPath("name"), "the volume to remove"))
	}
	return append(errs, validateDryRun(opts.DryRun)...)
}

func validateDryRun(d []string) field.ErrorList {
	for i, v := range d {
		if v != metav1.DryRunAll {
			return field.ErrorList{field.NotSupported(field.NewPath("dryRun").Index(i), v, []string{metav1.DryRunAll})}
		}
	}
	return nil
}

// addHotplugVolume adds a validated request to spec: the volume, and its
// disk on the SCSI bus. A name some volume or disk has is refused.
func addHotplugVolume(spec *v1.VirtualMachineInstanceSpec, opts *v1.AddVolumeOptions) error {
	for _, v := range spec.Volumes {
		if v.Name == opts.Name {
			return conflict("name: volume %q already exists", opts.Name)
		}
	}
	for _, d := range spec.Domain.Devices.Disks {
		if d.Name == opts.Name {
			return conflict("name: disk %q already exists", opts.Name)
		}
	}
	vol := v1.Volume{Name: opts.Name}
	if c := opts.VolumeSource.PersistentVolumeClaim; c != nil {
		vol.PersistentVolumeClaim = c.DeepCopy()
	} else {
		vol.DataVolume = opts.VolumeSource.DataVolume.DeepCopy()
	}
	disk := *opts.Disk.DeepCopy()
	disk.Name = opts.Name
	if disk.Disk == nil {
		disk.Disk = &v1.DiskTarget{}
	}
	disk.Disk.Bus = v1.DiskBusSCSI
	spec.Volumes = append(spec.Volumes, vol)
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, disk)
	return nil
}

// removeHotplugVolume takes a hot-plugged volume and its disk out of spec;
// a volume the VMI started with stays (the guest cannot lose it).
func removeHotplugVolume(spec *v1.VirtualMachineInstanceSpec, name string) error {
	i := slices.IndexFunc(spec.Volumes, func(v v1.Volume) bool { return v.Name == name })
	if i < 0 {
		return badRequest("name: the VMI has no volume %q", name)
	}
	if !isHotplugVolume(&spec.Volumes[i]) {
		return badRequest("name: volume %q is not hotpluggable: only hot-plugged volumes can be removed", name)
	}
	spec.Volumes = slices.Delete(spec.Volumes, i, i+1)
	spec.Domain.Devices.Disks = slices.DeleteFunc(spec.Domain.Devices.Disks, func(d v1.Disk) bool { return d.Name == name })
	return nil
}

// isHotplugVolume is a volume marked hotpluggable.
func isHotplugVolume(v *v1.Volume) bool {
	return (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable) ||
		(v.DataVolume != nil && v.DataVolume.Hotpluggable)
}

// validateHotplugUpdate is the VMI webhook's rule for a spec update: only
// hot-plugged volumes (and their disks) may come and go, each as
// addvolume would accept it; everything else stays as it was created.
func validateHotplugUpdate(old, cur *v1.VirtualMachineInstanceSpec) field.ErrorList {
	p := field.NewPath("spec")
	a, _ := json.Marshal(withoutHotplugVolumes(old))
	b, _ := json.Marshal(withoutHotplugVolumes(cur))
	if string(a) != string(b) {
		return field.ErrorList{field.Forbidden(p, "a VirtualMachineInstance's spec cannot be changed, but for its hotpluggable volumes")}
	}
	var errs field.ErrorList
	for i := range cur.Volumes {
		v := &cur.Volumes[i]
		if !isHotplugVolume(v) {
			continue
		}
		opts := &v1.AddVolumeOptions{Name: v.Name, VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim, DataVolume: v.DataVolume}}
		if j := slices.IndexFunc(cur.Domain.Devices.Disks, func(d v1.Disk) bool { return d.Name == v.Name }); j >= 0 {
			opts.Disk = &cur.Domain.Devices.Disks[j]
			// addvolume writes the bus; in the spec it is not left to a default.
			if d := opts.Disk.Disk; d != nil && d.Bus == "" {
				errs = append(errs, required(p.Child("domain", "devices", "disks").Index(j).Child("disk", "bus"), "scsi, for a hotpluggable volume"))
			}
		}
		for _, e := range validateAddVolume(opts) {
			e.Field = p.Child("volumes").Index(i).String() + ": " + e.Field
			errs = append(errs, e)
		}
	}
	return errs
}

// withoutHotplugVolumes is a copy of s without its hotpluggable volumes and
// their disks.
func withoutHotplugVolumes(s *v1.VirtualMachineInstanceSpec) *v1.VirtualMachineInstanceSpec {
	c := s.DeepCopy()
	hot := map[string]bool{}
	c.Volumes = slices.DeleteFunc(c.Volumes, func(v v1.Volume) bool {
		hot[v.Name] = isHotplugVolume(&v)
		return hot[v.Name]
	})
	c.Domain.Devices.Disks = slices.DeleteFunc(c.Domain.Devices.Disks, func(d v1.Disk) bool { return hot[d.Name] })
	return c
}
