package virtapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/find"
)

// maxExpandBody bounds the VM a client may send to expand-vm-spec.
const maxExpandBody = 4 << 20

// expandVMSpec serves PUT .../namespaces/NS/expand-vm-spec: the VM in the
// body (not stored), returned with its instance type and preference
// applied, as KubeVirt's virtctl and UI use it before creating a VM. Any
// failure is the request's fault: 400.
func (s *Server) expandVMSpec(w http.ResponseWriter, r *http.Request, _ userInfo) {
	ns := r.PathValue("namespace")
	b, err := io.ReadAll(io.LimitReader(r.Body, maxExpandBody+1))
	if err != nil || len(b) > maxExpandBody {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("reading the VirtualMachine (at most %d bytes): %v", maxExpandBody, err))
		return
	}
	vm := &v1.VirtualMachine{}
	if err := json.Unmarshal(b, vm); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the VirtualMachine: "+err.Error())
		return
	}
	if vm.Namespace != "" && vm.Namespace != ns {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "VM namespace must be empty or "+ns)
		return
	}
	vm.Namespace = ns
	out, err := s.expandVM(r.Context(), vm)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	writeJSON(w, out)
}

// expandSpec serves GET .../virtualmachines/NAME/expand-spec: the stored
// VM, expanded. A failure to expand a VM already admitted is the
// server's (500, as KubeVirt answers).
func (s *Server) expandSpec(w http.ResponseWriter, r *http.Request, _ userInfo) {
	vm := &v1.VirtualMachine{}
	if err := s.Client.Get(r.Context(), types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}, vm); err != nil {
		writeErr(w, err)
		return
	}
	out, err := s.expandVM(r.Context(), vm)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	writeJSON(w, out)
}

// expandVM returns a copy of vm with its instance type and preference
// (their captured revisions where it has them) applied to its template
// and the matchers removed; a VM without either is returned as it is.
func (s *Server) expandVM(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachine, error) {
	if vm.Spec.Instancetype == nil && vm.Spec.Preference == nil {
		return vm, nil
	}
	if vm.Spec.Template == nil {
		return nil, errors.New("spec.template is required")
	}
	e, err := find.ForVM(ctx, s.Client, vm)
	if err != nil {
		return nil, err
	}
	out := vm.DeepCopy()
	t := out.Spec.Template
	if errs := e.Apply(&t.Spec, &t.ObjectMeta); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	out.Spec.Instancetype, out.Spec.Preference = nil, nil
	return out, nil
}
