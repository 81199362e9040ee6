package apiserver

import (
	"context"
	"maps"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

// The DataVolume webhooks' paths (upstream's).
const (
	ValidateDataVolumePath = "/datavolume-validate"
	MutateDataVolumePath   = "/datavolume-mutate"
)

// validateDataVolume is the DataVolume create webhook: a clone from
// another namespace is admitted only when the request's user may create
// datavolumes/source there (cloneauth.Check).
func (s *Server) validateDataVolume(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp, _ := s.reviewDataVolume(ctx, req)
	return resp
}

// mutateDataVolume is the DataVolume create webhook that issues clone
// tokens (upstream's datavolume-mutate): a clone admitted as
// validateDataVolume admits it gets cdiv1.AnnCloneToken, a token
// (storage/cdi/token) naming the source authorized and the DataVolume,
// which the DataVolume controller requires of a clone from another
// namespace. A token or extended token the creator wrote is dropped: only
// cdi-apiserver's and cdi-controller's count.
func (s *Server) mutateDataVolume(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if resp, ok := admission.DecodeToMutate(req.Object.Raw, &cdiv1.DataVolume{}); !ok {
		return resp // without a token: the schema, then the validating webhook, refuse it
	}
	resp, dv := s.reviewDataVolume(ctx, req)
	if resp.Allowed && dv != nil {
		resp = s.issueCloneToken(req, dv)
	}
	return resp
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
			return admission.Refuse(http.StatusInternalServerError, "issuing the clone token: "+err.Error())
		}
		ann[cdiv1.AnnCloneToken] = tok
		s.Log.Info("clone token issued", "user", req.UserInfo.Username, "datavolume", req.Namespace+"/"+dv.Name, "source", dv.source.String())
	}
	if maps.Equal(ann, dv.Annotations) {
		return admission.Allow()
	}
	return admission.Patch([]admission.PatchOp{{Op: "add", Path: "/metadata/annotations", Value: ann}})
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
func (s *Server) reviewDataVolume(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, *admissionDV) {
	if req.Operation == admissionv1.Update {
		return reviewUpdate(req), nil
	}
	if req.Operation != admissionv1.Create {
		return admission.Allow(), nil
	}
	dv := &cdiv1.DataVolume{}
	if resp := admission.Decode(req.Object.Raw, dv, "the DataVolume"); resp != nil {
		return resp, nil
	}
	if dv.Name == "" {
		// The request names it where the object does not; a token names
		// the DataVolume it is for.
		dv.Name = req.Name
	}
	src, ferr, err := cloneauth.Check(ctx, s.Client, field.NewPath("spec"), req.Namespace, &dv.Spec, cloneauth.User(req.UserInfo))
	switch {
	case err != nil:
		return admission.Refuse(http.StatusInternalServerError, err.Error()), nil
	case ferr != nil:
		s.Log.Info("cross-namespace clone refused", "user", req.UserInfo.Username, "datavolume", req.Namespace+"/"+dv.Name, "field", ferr.Field)
		return admission.Forbid(field.ErrorList{ferr}), nil
	}
	return admission.Allow(), &admissionDV{DataVolume: dv, source: src}
}

// reviewUpdate refuses a DataVolume update that changes spec.source or
// spec.sourceRef, naming the field.
func reviewUpdate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var old, dv cdiv1.DataVolume
	if resp := admission.Decode(req.OldObject.Raw, &old, "the old DataVolume"); resp != nil {
		return resp
	}
	if resp := admission.Decode(req.Object.Raw, &dv, "the DataVolume"); resp != nil {
		return resp
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
		return admission.Allow()
	}
	return admission.Deny(errs)
}
