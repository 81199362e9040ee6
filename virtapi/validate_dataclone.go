package virtapi

import (
	"context"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// validateVMClones is validateVM, then KubeVirt's authorizeDataVolumeClone:
// a dataVolumeTemplate cloning a claim in another namespace (by
// source.pvc, or a sourceRef whose DataSource names one) is refused unless
// the VM's creator or updater may create datavolumes/source there. The
// DataVolume itself is created by virt-controller, whose own right to
// clone would otherwise let any VM author read any claim.
func (s *Server) validateVMClones(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if resp := validateVM(req); !resp.Allowed {
		return resp
	}
	vm := &v1.VirtualMachine{}
	if resp := admission.Decode(req.Object.Raw, vm, "the VirtualMachine"); resp != nil {
		return resp
	}
	ns := vm.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	p := field.NewPath("spec", "dataVolumeTemplates")
	var errs field.ErrorList
	for i := range vm.Spec.DataVolumeTemplates {
		// validateVM has decoded every template's spec.
		spec, err := vm.Spec.DataVolumeTemplates[i].DataVolumeSpec()
		if err != nil {
			return admission.Refuse(http.StatusBadRequest, "cannot decode the object: "+err.Error())
		}
		_, ferr, err := cloneauth.Check(ctx, s.Client, p.Index(i).Child("spec"), ns, spec, cloneauth.User(req.UserInfo))
		if err != nil {
			return admission.Refuse(http.StatusInternalServerError, "authorizing the clone: "+err.Error())
		}
		if ferr != nil {
			errs = append(errs, ferr)
		}
	}
	if len(errs) > 0 {
		return admission.Deny(errs)
	}
	return admission.Allow()
}
