package virtapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// defaults to a VMI spec at path p: the machine type, and, when no NIC is
// given and the pod interface is auto-attached, a masquerade interface on
// the pod network named "default".
func defaultSpec(s *v1.VirtualMachineInstanceSpec, p string) []jsonPatchOp {
	var ops []jsonPatchOp
	if s.Domain.Machine == nil || s.Domain.Machine.Type == "" {
		ops = append(ops, jsonPatchOp{Op: "add", Path: p + "/domain/machine", Value: v1.Machine{Type: DefaultMachineType}})
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
	json.NewEncoder(w).Encode(out)
}

func allow() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

func deny(msgs []string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: strings.Join(msgs, ", "),
	}}
}

func patched(ops []jsonPatchOp) *admissionv1.AdmissionResponse {
	resp := allow()
	if len(ops) == 0 {
		return resp
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return deny([]string{"internal error: " + err.Error()})
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = b, &pt
	return resp
}

func decodeErr(err error) *admissionv1.AdmissionResponse {
	return deny([]string{"cannot decode the object: " + err.Error()})
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
		// The spec of a VMI is fixed once created (the launcher runs it).
		old := &v1.VirtualMachineInstance{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return decodeErr(err)
		}
		a, _ := json.Marshal(old.Spec)
		b, _ := json.Marshal(vmi.Spec)
		if string(a) != string(b) {
			return deny([]string{"spec: a VirtualMachineInstance's spec cannot be changed"})
		}
		return allow()
	}
	if msgs := ValidateVMISpec(&vmi.Spec, vmi.Annotations, "spec."); len(msgs) > 0 {
		return deny(msgs)
	}
	return allow()
}

func validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm := &v1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil {
		return decodeErr(err)
	}
	var msgs []string
	if vm.Spec.Running != nil && vm.Spec.RunStrategy != nil {
		msgs = append(msgs, "spec.running: "+v1.ErrRunningAndRunStrategy.Error())
	}
	if rs := vm.Spec.RunStrategy; rs != nil {
		switch *rs {
		case v1.RunStrategyAlways, v1.RunStrategyHalted, v1.RunStrategyManual, v1.RunStrategyRerunOnFailure, v1.RunStrategyOnce:
		default:
			msgs = append(msgs, fmt.Sprintf("spec.runStrategy: %q is not supported by kubevmm", *rs))
		}
	}
	for _, f := range v1.UnmodeledFields(&vm.Spec) {
		if !strings.HasPrefix(f, "template.") {
			msgs = append(msgs, "spec."+f+": is not supported by kubevmm")
		}
	}
	if len(vm.Spec.DataVolumeTemplates) > 0 {
		msgs = append(msgs, "spec.dataVolumeTemplates: is not supported by kubevmm yet")
	}
	if vm.Spec.Template == nil {
		msgs = append(msgs, "spec.template: is required")
	} else {
		msgs = append(msgs, ValidateVMISpec(&vm.Spec.Template.Spec, vm.Spec.Template.ObjectMeta.Annotations, "spec.template.spec.")...)
	}
	if len(msgs) > 0 {
		return deny(msgs)
	}
	return allow()
}

func validateVMIM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	m := &v1.VirtualMachineInstanceMigration{}
	if err := json.Unmarshal(req.Object.Raw, m); err != nil {
		return decodeErr(err)
	}
	var msgs []string
	if m.Spec.VMIName == "" {
		msgs = append(msgs, "spec.vmiName: is required")
	}
	for _, f := range v1.UnmodeledFields(&m.Spec) {
		msgs = append(msgs, "spec."+f+": is not supported by kubevmm")
	}
	if len(msgs) > 0 {
		return deny(msgs)
	}
	return allow()
}
