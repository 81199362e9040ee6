package virtapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

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

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// defaultSpec returns the JSON patch operations that apply KubeVirt's
// defaults to a VMI spec at path p: the machine type, a disk for each
// volume that has none (KubeVirt's SetDefaultVolumeDisk: a virtio disk of
// the volume's name; KubeVirt's examples rely on it), and, when no NIC is
// given and the pod interface is auto-attached, a masquerade interface on
// the pod network named "default".
func defaultSpec(s *v1.VirtualMachineInstanceSpec, p string) []jsonPatchOp {
	var ops []jsonPatchOp
	if s.Domain.Machine == nil || s.Domain.Machine.Type == "" {
		ops = append(ops, jsonPatchOp{Op: "add", Path: p + "/domain/machine", Value: v1.Machine{Type: DefaultMachineType}})
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
		ops = append(ops, jsonPatchOp{Op: "add", Path: p + "/domain/devices/disks", Value: disks})
	case len(disks) > 0:
		for _, d := range disks {
			ops = append(ops, jsonPatchOp{Op: "add", Path: p + "/domain/devices/disks/-", Value: d})
		}
	}
	auto := s.Domain.Devices.AutoattachPodInterface == nil || *s.Domain.Devices.AutoattachPodInterface
	if auto && len(s.Domain.Devices.Interfaces) == 0 && len(s.Networks) == 0 {
		ops = append(ops,
			jsonPatchOp{Op: "add", Path: p + "/domain/devices/interfaces", Value: []v1.Interface{{
				Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
			}}},
			jsonPatchOp{Op: "add", Path: p + "/networks", Value: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}},
		)
	}
	return ops
}

func (s *Server) admission(w http.ResponseWriter, r *http.Request, review func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &ar); err != nil || ar.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := review(ar.Request)
	resp.UID = ar.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	// An API server gone mid-body retries the review or fails it itself.
	_ = json.NewEncoder(w).Encode(out)
}

func allow() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

// deny refuses the object with one cause per field error, as KubeVirt's
// webhooks do: status.details.causes carry each error's type
// (FieldValueNotSupported, FieldValueInvalid, FieldValueRequired, ...), field
// and message, and the status message joins the causes' messages.
func deny(errs field.ErrorList) *admissionv1.AdmissionResponse {
	causes := make([]metav1.StatusCause, len(errs))
	msgs := make([]string, len(errs))
	for i, e := range errs {
		// A not-supported error's detail says it all ("... is not
		// supported by kubevmm"); the others read as Kubernetes' do.
		body := e.ErrorBody()
		if e.Type == field.ErrorTypeNotSupported && e.Detail != "" {
			body = e.Detail
		}
		msgs[i] = e.Field + ": " + body
		causes[i] = metav1.StatusCause{Type: metav1.CauseType(e.Type), Field: e.Field, Message: msgs[i]}
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: strings.Join(msgs, ", "), Details: &metav1.StatusDetails{Causes: causes},
	}}
}

// refuse denies for a reason that is no field's (an undecodable object).
func refuse(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: msg,
	}}
}

func patched(ops []jsonPatchOp) *admissionv1.AdmissionResponse {
	resp := allow()
	if len(ops) == 0 {
		return resp
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return refuse("internal error: " + err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = b, &pt
	return resp
}

func decodeErr(err error) *admissionv1.AdmissionResponse {
	return refuse("cannot decode the object: " + err.Error())
}

func mutateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create {
		return allow()
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(req.Object.Raw, vmi); err != nil {
		return decodeErr(err)
	}
	ops := defaultSpec(&vmi.Spec, "/spec")
	// KubeVirt records acceptance on create: the VMI starts out Pending.
	if vmi.Status.Phase == "" {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/status", Value: map[string]any{"phase": v1.Pending}})
	}
	return patched(ops)
}

func mutateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow()
	}
	vm := &v1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil {
		return decodeErr(err)
	}
	if vm.Spec.Template == nil {
		return allow()
	}
	return patched(defaultSpec(&vm.Spec.Template.Spec, "/spec/template/spec"))
}

func validateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(req.Object.Raw, vmi); err != nil {
		return decodeErr(err)
	}
	if req.Operation == admissionv1.Update {
		// The spec of a VMI is fixed once created (the launcher runs it),
		// but for its hot-plugged volumes (addvolume/removevolume).
		old := &v1.VirtualMachineInstance{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return decodeErr(err)
		}
		if errs := validateHotplugUpdate(&old.Spec, &vmi.Spec); len(errs) > 0 {
			return deny(errs)
		}
		return allow()
	}
	if errs := ValidateVMISpec(field.NewPath("spec"), &vmi.Spec, field.NewPath("metadata"), vmi.Annotations); len(errs) > 0 {
		return deny(errs)
	}
	return allow()
}

func validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm := &v1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil {
		return decodeErr(err)
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
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return decodeErr(err)
		}
		errs = append(errs, validateMatcherUpdates(p, old, vm)...)
	}
	if len(errs) > 0 {
		return deny(errs)
	}
	return allow()
}

func validateVMIM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m := &v1.VirtualMachineInstanceMigration{}
	if err := json.Unmarshal(req.Object.Raw, m); err != nil {
		return decodeErr(err)
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
		return deny(errs)
	}
	return allow()
}
