package virtapi

import (
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/clusterconfig"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// gateSeccomp wraps the VMI or VM validating webhook: a VMI (vm: a VM's
// template) may not ask for its VMM's seccomp filter to be loosened
// (vmispec.SeccompAnnotation other than "kill") unless the cluster enables
// clusterconfig.FeatureGateVMMSeccompOptOut. An update keeping the value
// it had passes, so that an object made while the gate was on can still
// be changed and deleted once it is off.
func (s *Server) gateSeccomp(vm bool, next func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return next(req)
		}
		p, mode, err := seccompMode(req.Object.Raw, vm)
		if err != nil {
			return admission.Refuse(http.StatusBadRequest, "cannot decode the object: "+err.Error())
		}
		if mode == "" || mode == "kill" {
			return next(req)
		}
		if req.Operation == admissionv1.Update {
			_, old, err := seccompMode(req.OldObject.Raw, vm)
			if err != nil {
				return admission.Refuse(http.StatusBadRequest, "cannot decode the object: "+err.Error())
			}
			if old == mode {
				return next(req)
			}
		}
		on := false
		if s.Config != nil {
			c, err := s.Config()
			if err != nil {
				return admission.Refuse(http.StatusInternalServerError, "reading the cluster configuration: "+err.Error())
			}
			on = c.HasFeatureGate(clusterconfig.FeatureGateVMMSeccompOptOut)
		}
		if on {
			return next(req)
		}
		return admission.Deny(field.ErrorList{field.Forbidden(p, clusterconfig.FeatureGateVMMSeccompOptOut+
			" feature gate is not enabled: only the cluster's configuration may loosen the VMM's seccomp filter (\""+mode+"\")")})
	}
}

// seccompMode decodes a VMI (vm: a VM, its template's) and returns the
// path of its seccomp annotation and its value ("" when absent).
func seccompMode(raw []byte, vm bool) (*field.Path, string, error) {
	var meta *metav1.ObjectMeta
	p := field.NewPath("metadata")
	if vm {
		o := struct {
			Spec struct {
				Template *struct {
					ObjectMeta metav1.ObjectMeta `json:"metadata"`
				} `json:"template"`
			} `json:"spec"`
		}{}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, "", err
		}
		if o.Spec.Template == nil {
			return nil, "", nil
		}
		meta, p = &o.Spec.Template.ObjectMeta, field.NewPath("spec", "template", "metadata")
	} else {
		o := struct {
			ObjectMeta metav1.ObjectMeta `json:"metadata"`
		}{}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, "", err
		}
		meta = &o.ObjectMeta
	}
	return p.Child("annotations").Key(vmispec.SeccompAnnotation), meta.Annotations[vmispec.SeccompAnnotation], nil
}
