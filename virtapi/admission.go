package virtapi

import (
	"cmp"
	"context"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Webhook paths (registered by the deployment's webhook configurations).
const (
	PathMutateVMI    = "/mutate-virtualmachineinstances"
	PathMutateVM     = "/mutate-virtualmachines"
	PathValidateVMI  = "/validate-virtualmachineinstances"
	PathValidateVM   = "/validate-virtualmachines"
	PathValidateVMIM = "/validate-migrations"
)

// DefaultMachineType is what KubeVirt's defaulting gives a VMI without one.
const DefaultMachineType = "q35"

// defaultSpec returns the JSON patch operations that apply KubeVirt's
// defaults to a VMI spec at path p: the machine type, a disk for each
// volume that has none (KubeVirt's SetDefaultVolumeDisk: a virtio disk of
// the volume's name; KubeVirt's examples rely on it), and, when no NIC is
// given and the pod interface is auto-attached, a masquerade interface on
// the pod network named "default".
func defaultSpec(s *v1.VirtualMachineInstanceSpec, p string) []admission.PatchOp {
	var ops []admission.PatchOp
	if s.Domain.Machine == nil || s.Domain.Machine.Type == "" {
		ops = append(ops, admission.PatchOp{Op: "add", Path: p + "/domain/machine", Value: v1.Machine{Type: DefaultMachineType}})
	}
	hasDisk := map[string]bool{}
	for _, d := range s.Domain.Devices.Disks {
		hasDisk[d.Name] = true
	}
	var disks []v1.Disk
	for _, v := range s.Volumes {
		if !hasDisk[v.Name] {
			disks = append(disks, v1.Disk{Name: v.Name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
		}
	}
	switch {
	case len(disks) > 0 && len(s.Domain.Devices.Disks) == 0:
		ops = append(ops, admission.PatchOp{Op: "add", Path: p + "/domain/devices/disks", Value: disks})
	case len(disks) > 0:
		for _, d := range disks {
			ops = append(ops, admission.PatchOp{Op: "add", Path: p + "/domain/devices/disks/-", Value: d})
		}
	}
	auto := s.Domain.Devices.AutoattachPodInterface == nil || *s.Domain.Devices.AutoattachPodInterface
	if auto && len(s.Domain.Devices.Interfaces) == 0 && len(s.Networks) == 0 {
		ops = append(ops,
			admission.PatchOp{Op: "add", Path: p + "/domain/devices/interfaces", Value: []v1.Interface{{
				Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
			}}},
			admission.PatchOp{Op: "add", Path: p + "/networks", Value: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}},
		)
	}
	return ops
}

// mutateVMI applies, to a VMI being created, the presets that select it
// (applyPresets) and KubeVirt's defaults (defaultSpec), and records it
// Pending.
func (s *Server) mutateVMI(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create {
		return admission.Allow()
	}
	vmi := &v1.VirtualMachineInstance{}
	if resp, ok := admission.DecodeToMutate(req.Object.Raw, vmi); !ok {
		return resp
	}
	ns := cmp.Or(vmi.Namespace, req.Namespace)
	presets, err := s.listPresets(ctx, ns)
	if err != nil {
		return admission.Refuse(http.StatusInternalServerError, err.Error())
	}
	ops, warnings, err := applyPresets(vmi, presets)
	if err != nil {
		return admission.Refuse(http.StatusUnprocessableEntity, err.Error())
	}
	ops = append(ops, defaultSpec(&vmi.Spec, "/spec")...)
	// KubeVirt records acceptance on create: the VMI starts out Pending.
	if vmi.Status.Phase == "" {
		ops = append(ops, admission.PatchOp{Op: "add", Path: "/status", Value: map[string]any{"phase": v1.Pending}})
	}
	return admission.Patch(ops, warnings...)
}

func mutateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allow()
	}
	vm := &v1.VirtualMachine{}
	if resp, ok := admission.DecodeToMutate(req.Object.Raw, vm); !ok {
		return resp
	}
	if vm.Spec.Template == nil {
		return admission.Allow()
	}
	return admission.Patch(defaultSpec(&vm.Spec.Template.Spec, "/spec/template/spec"))
}

func validateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vmi := &v1.VirtualMachineInstance{}
	if resp := admission.Decode(req.Object.Raw, vmi, "the VirtualMachineInstance"); resp != nil {
		return resp
	}
	if req.Operation == admissionv1.Update {
		// The spec of a VMI is fixed once created (the launcher runs it),
		// but for its hot-plugged volumes (addvolume/removevolume).
		old := &v1.VirtualMachineInstance{}
		if resp := admission.Decode(req.OldObject.Raw, old, "the old VirtualMachineInstance"); resp != nil {
			return resp
		}
		if errs := validateHotplugUpdate(&old.Spec, &vmi.Spec); len(errs) > 0 {
			return admission.Deny(errs)
		}
		return admission.Allow()
	}
	if errs := ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, field.NewPath("metadata"), vmi.Annotations); len(errs) > 0 {
		return admission.Deny(errs)
	}
	return admission.Allow()
}

func validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm := &v1.VirtualMachine{}
	if resp := admission.Decode(req.Object.Raw, vm, "the VirtualMachine"); resp != nil {
		return resp
	}
	var errs field.ErrorList
	p := field.NewPath("spec")
	if vm.Spec.Running != nil && vm.Spec.RunStrategy != nil {
		errs = append(errs, field.Invalid(p.Child("running"), *vm.Spec.Running, v1.ErrRunningAndRunStrategy.Error()))
	}
	if rs := vm.Spec.RunStrategy; rs != nil {
		switch *rs {
		case v1.RunStrategyAlways, v1.RunStrategyHalted, v1.RunStrategyManual, v1.RunStrategyRerunOnFailure, v1.RunStrategyOnce:
		default:
			errs = append(errs, notSupported(p.Child("runStrategy"), string(*rs), "Always, Halted, Manual, RerunOnFailure, Once"))
		}
	}
	for _, f := range v1.UnmodeledFields(&vm.Spec) {
		// A dataVolumeTemplate's spec and status are CDI's, checked by
		// validateDataVolumeTemplates.
		if !strings.HasPrefix(f, "template.") && !strings.HasPrefix(f, "dataVolumeTemplates[") {
			errs = append(errs, unsupported(p, f, ""))
		}
	}
	ns := vm.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	errs = append(errs, validateDataVolumeTemplates(p.Child("dataVolumeTemplates"), vm, ns)...)
	if vm.Spec.UpdateVolumesStrategy != nil {
		errs = append(errs, unsupported(p, "updateVolumesStrategy", "volumes cannot be updated"))
	}
	if vm.Spec.Template == nil {
		errs = append(errs, field.Required(p.Child("template"), "the VirtualMachineInstance to run"))
	} else {
		errs = append(errs, validateVMTemplate(p.Child("template"), vm)...)
	}
	errs = append(errs, validateMatchers(p, vm.Spec.Instancetype, vm.Spec.Preference)...)
	if req.Operation == admissionv1.Update {
		old := &v1.VirtualMachine{}
		if resp := admission.Decode(req.OldObject.Raw, old, "the old object"); resp != nil {
			return resp
		}
		errs = append(errs, validateMatcherUpdates(p, old, vm)...)
	}
	if len(errs) > 0 {
		return admission.Deny(errs)
	}
	return admission.Allow()
}

func validateVMIM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m := &v1.VirtualMachineInstanceMigration{}
	if resp := admission.Decode(req.Object.Raw, m, "the migration"); resp != nil {
		return resp
	}
	var errs field.ErrorList
	p := field.NewPath("spec")
	if m.Spec.VMIName == "" {
		errs = append(errs, field.Required(p.Child("vmiName"), "the VirtualMachineInstance to migrate"))
	}
	for _, f := range v1.UnmodeledFields(&m.Spec) {
		errs = append(errs, unsupported(p, f, ""))
	}
	if m.Spec.Priority != nil {
		errs = append(errs, unsupported(p, "priority", ""))
	}
	if len(errs) > 0 {
		return admission.Deny(errs)
	}
	return admission.Allow()
}
