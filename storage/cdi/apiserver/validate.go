package apiserver

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

// The DataVolume webhooks' paths (upstream's).
const (
	ValidateDataVolumePath = "/datavolume-validate"
	MutateDataVolumePath   = "/datavolume-mutate"
)

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
	resp, _ := s.reviewDataVolume(r, ar.Request)
	resp.UID = ar.Request.UID
	writeJSON(w, http.StatusOK, admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp})
}

// mutateDataVolume is the DataVolume create webhook that issues clone
// tokens (upstream's datavolume-mutate): a clone admitted as
// validateDataVolume admits it gets cdiv1.AnnCloneToken, a token
// (storage/cdi/token) naming the source authorized and the DataVolume,
// which the DataVolume controller requires of a clone from another
// namespace. A token or extended token the creator wrote is dropped: only
// cdi-apiserver's and cdi-controller's count.
func (s *Server) mutateDataVolume(w http.ResponseWriter, r *http.Request) {
	var ar admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, maxReview)).Decode(&ar); err != nil || ar.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp, dv := s.reviewDataVolume(r, ar.Request)
	if resp.Allowed && dv != nil {
		resp = s.issueCloneToken(ar.Request, dv)
	}
	resp.UID = ar.Request.UID
	writeJSON(w, http.StatusOK, admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp})
}

// issueCloneToken is the admission of dv with its clone token (a JSON
// patch), or without one when it clones nothing.
func (s *Server) issueCloneToken(req *admissionv1.AdmissionRequest, dv *admissionDV) *admissionv1.AdmissionResponse {
	ann := maps.Clone(dv.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, cdiv1.AnnCloneToken)
	delete(ann, cdiv1.AnnExtendedCloneToken)
	if dv.source != (cloneauth.Source{}) {
		tok, err := s.Signer.Sign(token.Clone(dv.source, req.Namespace, dv.Name), time.Now())
		if err != nil {
			return refused(http.StatusInternalServerError, metav1.StatusReasonInternalError, "issuing the clone token: "+err.Error(), nil)
		}
		ann[cdiv1.AnnCloneToken] = tok
		s.Log.Info("clone token issued", "user", req.UserInfo.Username, "datavolume", req.Namespace+"/"+dv.Name, "source", dv.source.String())
	}
	if maps.Equal(ann, dv.Annotations) {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": "/metadata/annotations", "value": ann}})
	if err != nil {
		return refused(http.StatusInternalServerError, metav1.StatusReasonInternalError, "the clone token's patch: "+err.Error(), nil)
	}
	return &admissionv1.AdmissionResponse{Allowed: true, PatchType: ptr.To(admissionv1.PatchTypeJSONPatch), Patch: patch}
}

// admissionDV is a DataVolume under review and the source its clone was
// authorized for (zero when it clones nothing).
type admissionDV struct {
	*cdiv1.DataVolume
	source cloneauth.Source
}

// reviewDataVolume admits a DataVolume create (cloneauth.Check) and
// returns it with its authorized source. An update is refused if it
// changes the source, which a clone's authorization and token name
// (upstream's webhook refuses it too), and otherwise admitted.
func (s *Server) reviewDataVolume(r *http.Request, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, *admissionDV) {
	if req.Operation == admissionv1.Update {
		return reviewUpdate(req), nil
	}
	if req.Operation != admissionv1.Create {
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	}
	dv := &cdiv1.DataVolume{}
	if err := json.Unmarshal(req.Object.Raw, dv); err != nil {
		return refused(http.StatusBadRequest, metav1.StatusReasonBadRequest, "cannot decode the DataVolume: "+err.Error(), nil), nil
	}
	if dv.Name == "" {
		// The request names it where the object does not; a token names
		// the DataVolume it is for.
		dv.Name = req.Name
	}
	src, ferr, err := cloneauth.Check(r.Context(), s.Client, field.NewPath("spec"), req.Namespace, &dv.Spec, cloneauth.User(req.UserInfo))
	switch {
	case err != nil:
		return refused(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil), nil
	case ferr != nil:
		s.Log.Info("cross-namespace clone refused", "user", req.UserInfo.Username, "datavolume", req.Namespace+"/"+dv.Name, "field", ferr.Field)
		return refused(http.StatusForbidden, metav1.StatusReasonForbidden, ferr.Error(),
			&metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseType(ferr.Type), Field: ferr.Field, Message: ferr.Error()}}}), nil
	}
	return &admissionv1.AdmissionResponse{Allowed: true}, &admissionDV{DataVolume: dv, source: src}
}

// reviewUpdate refuses a DataVolume update that changes spec.source or
// spec.sourceRef, naming the field.
func reviewUpdate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var old, dv cdiv1.DataVolume
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return refused(http.StatusBadRequest, metav1.StatusReasonBadRequest, "cannot decode the old DataVolume: "+err.Error(), nil)
	}
	if err := json.Unmarshal(req.Object.Raw, &dv); err != nil {
		return refused(http.StatusBadRequest, metav1.StatusReasonBadRequest, "cannot decode the DataVolume: "+err.Error(), nil)
	}
	var errs field.ErrorList
	p := field.NewPath("spec")
	if !equality.Semantic.DeepEqual(old.Spec.Source, dv.Spec.Source) {
		errs = append(errs, field.Forbidden(p.Child("source"), "cannot be changed once the DataVolume is created"))
	}
	if !equality.Semantic.DeepEqual(old.Spec.SourceRef, dv.Spec.SourceRef) {
		errs = append(errs, field.Forbidden(p.Child("sourceRef"), "cannot be changed once the DataVolume is created"))
	}
	if len(errs) == 0 {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	causes := make([]metav1.StatusCause, 0, len(errs))
	for _, e := range errs {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Field: e.Field, Message: e.Error()})
	}
	return refused(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, errs.ToAggregate().Error(), &metav1.StatusDetails{Causes: causes})
}

func refused(code int32, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg, Details: details}}
}
