package apiserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// ValidateDataVolumePath is the DataVolume validating webhook's path
// (upstream's).
const ValidateDataVolumePath = "/datavolume-validate"

// maxReview bounds an AdmissionReview: one DataVolume.
const maxReview = 4 << 20

// validateDataVolume is the DataVolume create webhook: a clone from
// another namespace is admitted only when the request's user may create
// datavolumes/source there (cloneauth.Check).
func (s *Server) validateDataVolume(w http.ResponseWriter, r *http.Request) {
	var ar admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, maxReview)).Decode(&ar); err != nil || ar.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := s.reviewDataVolume(r, ar.Request)
	resp.UID = ar.Request.UID
	writeJSON(w, http.StatusOK, admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp})
}

func (s *Server) reviewDataVolume(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	dv := &cdiv1.DataVolume{}
	if err := json.Unmarshal(req.Object.Raw, dv); err != nil {
		return refused(http.StatusBadRequest, metav1.StatusReasonBadRequest, "cannot decode the DataVolume: "+err.Error(), nil)
	}
	ferr, err := cloneauth.Check(r.Context(), s.Client, field.NewPath("spec"), req.Namespace, &dv.Spec, cloneauth.User(req.UserInfo))
	switch {
	case err != nil:
		return refused(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil)
	case ferr != nil:
		s.Log.Info("cross-namespace clone refused", "user", req.UserInfo.Username, "datavolume", req.Namespace+"/"+dv.Name, "field", ferr.Field)
		return refused(http.StatusForbidden, metav1.StatusReasonForbidden, ferr.Error(),
			&metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseType(ferr.Type), Field: ferr.Field, Message: ferr.Error()}}})
	}
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func refused(code int32, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg, Details: details}}
}
