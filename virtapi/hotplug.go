package virtapi

import (
	"context"
	"encoding/json"
	"errors"
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

// volumeOp serves PUT .../virtualmachineinstances/NAME/addvolume and
// removevolume (vm: .../virtualmachines/NAME/...). 202 once the VMI's spec
// holds the change, or the VM's status the request (on a dry run: once it
// would).
func (s *Server) volumeOp(op string, vm bool) func(http.ResponseWriter, *http.Request, userInfo) {
	return func(w http.ResponseWriter, r *http.Request, u userInfo) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		b, err := io.ReadAll(io.LimitReader(r.Body, maxVolumeBody+1))
		if err != nil || len(b) > maxVolumeBody {
			writeErr(w, badRequest("reading the %s body (at most %d bytes): %v", op, maxVolumeBody, err))
			return
		}
		if err := s.hotplugGate(op); err != nil {
			writeErr(w, err)
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
			if vm {
				do = func() error { return s.vmAddVolume(r.Context(), ns, name, opts) }
			}
		default:
			opts := &v1.RemoveVolumeOptions{}
			if err := json.Unmarshal(b, opts); err != nil {
				writeErr(w, badRequest("decoding RemoveVolumeOptions: %v", err))
				return
			}
			do = func() error { return s.removeVolume(r.Context(), ns, name, opts) }
			if vm {
				do = func() error { return s.vmRemoveVolume(r.Context(), ns, name, opts) }
			}
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, do); err != nil {
			writeErr(w, err)
			return
		}
		kind := "vmi"
		if vm {
			kind = "vm"
		}
		s.Log.Info("subresource", "op", op, kind, ns+"/"+name, "user", u.Name)
		w.WriteHeader(http.StatusAccepted)
	}
}

// vmAddVolume records an addvolume on a VM (status.volumeRequests) once
// it fits the VM's template; virt-controller applies it to the template
// and to the running VMI.
func (s *Server) vmAddVolume(ctx context.Context, ns, name string, opts *v1.AddVolumeOptions) error {
	if errs := validateAddVolume(opts); len(errs) > 0 {
		return invalidRequest("AddVolumeOptions", errs)
	}
	vm := &v1.VirtualMachine{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm); err != nil {
		return err
	}
	if err := checkVolumeRequest(vm, opts.Name, func(t *v1.VirtualMachineInstanceSpec) error { return t.AddHotplugVolume(opts) }); err != nil {
		return err
	}
	if vm.Spec.Template.Spec.Domain.Devices.DisableHotplug {
		return conflict("spec.template.spec.domain.devices.disableHotplug: the VM takes no hot-plugged volumes")
	}
	if err := s.checkHotplugSource(ctx, ns, opts.VolumeSource); err != nil {
		return err
	}
	if dryRun(opts.DryRun) {
		return nil
	}
	return s.requestVolume(ctx, vm, v1.VirtualMachineVolumeRequest{AddVolumeOptions: opts})
}

// vmRemoveVolume records a removevolume on a VM.
func (s *Server) vmRemoveVolume(ctx context.Context, ns, name string, opts *v1.RemoveVolumeOptions) error {
	if errs := validateRemoveVolume(opts); len(errs) > 0 {
		return invalidRequest("RemoveVolumeOptions", errs)
	}
	vm := &v1.VirtualMachine{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm); err != nil {
		return err
	}
	if err := checkVolumeRequest(vm, opts.Name, func(t *v1.VirtualMachineInstanceSpec) error { return t.RemoveHotplugVolume(opts.Name) }); err != nil {
		return err
	}
	if dryRun(opts.DryRun) {
		return nil
	}
	return s.requestVolume(ctx, vm, v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: opts})
}

// checkVolumeRequest refuses a request on a volume that another pending
// request names, and one that apply cannot make to the VM's template.
func checkVolumeRequest(vm *v1.VirtualMachine, volume string, apply func(*v1.VirtualMachineInstanceSpec) error) error {
	for _, r := range vm.Status.VolumeRequests {
		if (r.AddVolumeOptions != nil && r.AddVolumeOptions.Name == volume) || (r.RemoveVolumeOptions != nil && r.RemoveVolumeOptions.Name == volume) {
			return conflict("name: a request for volume %q is pending; try again", volume)
		}
	}
	if vm.Spec.Template == nil {
		return conflict("the VM has no template")
	}
	return specErr(apply(vm.Spec.Template.Spec.DeepCopy()))
}

func (s *Server) requestVolume(ctx context.Context, vm *v1.VirtualMachine, r v1.VirtualMachineVolumeRequest) error {
	orig := vm.DeepCopy()
	vm.Status.VolumeRequests = append(vm.Status.VolumeRequests, r)
	return s.Client.Status().Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
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
	if vmi.Spec.Domain.Devices.DisableHotplug {
		return conflict("spec.domain.devices.disableHotplug: the VMI takes no hot-plugged volumes")
	}
	if err := s.checkHotplugSource(ctx, ns, opts.VolumeSource); err != nil {
		return err
	}
	orig := vmi.DeepCopy()
	if err := specErr(vmi.Spec.AddHotplugVolume(opts)); err != nil {
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
	if err := specErr(vmi.Spec.RemoveHotplugVolume(opts.Name)); err != nil {
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
	errs := validateDryRun(opts.DryRun)
	return append(errs, validateHotplug(opts, field.NewPath("name"), field.NewPath("disk"), field.NewPath("volumeSource"))...)
}

// validateHotplug checks a hot-plugged volume: in an addvolume body, or
// in a spec (then the paths are the volume's name, its disk's and the
// volume's own, where the claim or DataVolume sit under the same names).
func validateHotplug(opts *v1.AddVolumeOptions, np, dp, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if opts.Name == "" {
		errs = append(errs, required(np, "the volume's name"))
	}
	if opts.Disk == nil {
		errs = append(errs, required(dp, "the disk the guest sees"))
	} else {
		errs = append(errs, validateHotplugDisk(dp, opts.Disk, opts.Name)...)
	}
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

// specErr is the 4xx for a refusal of AddHotplugVolume or
// RemoveHotplugVolume.
func specErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, v1.ErrVolumeExists):
		return conflict("name: %v", err)
	default:
		return badRequest("name: %v", err)
	}
}

// validateHotplugUpdate is the VMI webhook's rule for a spec update: only
// hot-plugged volumes (and their disks) may come and go, each as
// addvolume would accept it; everything else stays as it was created.
func validateHotplugUpdate(old, cur *v1.VirtualMachineInstanceSpec) field.ErrorList {
	p := field.NewPath("spec")
	a, _ := json.Marshal(old.WithoutHotplugVolumes())
	b, _ := json.Marshal(cur.WithoutHotplugVolumes())
	if string(a) != string(b) {
		return field.ErrorList{field.Forbidden(p, "a VirtualMachineInstance's spec cannot be changed, but for its hotpluggable volumes")}
	}
	return validateHotplugVolumes(p, cur)
}

// validateHotplugVolumes checks each hotpluggable volume of s and its disk
// as addvolume checks its request; in a spec the disk's bus is written
// out (scsi), not left to a default.
func validateHotplugVolumes(p *field.Path, s *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	disks := p.Child("domain", "devices", "disks")
	// The others are checked without the hot-plugged ones: a name both
	// use is caught here.
	seen := map[string]bool{}
	for _, v := range s.Volumes {
		if !v.IsHotplug() {
			seen[v.Name] = true
		}
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		if !v.IsHotplug() {
			continue
		}
		vp := p.Child("volumes").Index(i)
		errs = append(errs, uniqueName(vp.Child("name"), v.Name, seen, "volume")...)
		opts := &v1.AddVolumeOptions{Name: v.Name, VolumeSource: &v1.HotplugVolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim, DataVolume: v.DataVolume}}
		dp := disks
		if j := slices.IndexFunc(s.Domain.Devices.Disks, func(d v1.Disk) bool { return d.Name == v.Name }); j >= 0 {
			opts.Disk, dp = &s.Domain.Devices.Disks[j], disks.Index(j)
			if d := opts.Disk.Disk; d != nil && d.Bus == "" {
				errs = append(errs, required(dp.Child("disk", "bus"), "scsi, for a hotpluggable volume"))
			}
		}
		errs = append(errs, validateHotplug(opts, vp.Child("name"), dp, vp)...)
	}
	return errs
}
