// Package admission is the one scaffold of kubevmm's admission webhooks
// (virt-api's, kubemacpool's, the template validator's, cdi-apiserver's and
// the HyperConverged's): it reads an AdmissionReview v1, hands its request
// to a decision function and writes the review back with the response, and
// it builds the responses the way KubeVirt's webhooks shape them (a
// field.ErrorList as status causes, JSON patches, plain refusals). Serving
// the webhook over TLS with a certificate re-read per handshake is ServeTLS.
//
// Who may call a webhook is not decided here: every endpoint sits behind
// api/frontproxy.OnlyAPIServer, which the caller wraps around Handler.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxReview bounds the body of a review: an object of the kinds reviewed
// here, and its old version, are well under it (the API server's own limit
// for an object is 3 MiB; a review carries two).
const MaxReview = 8 << 20

// Func decides one review. It never returns nil.
type Func func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Handler serves POSTed AdmissionReviews with decide. A body that is not a
// review is answered 400 and decide is not called; otherwise the response
// carries the request's UID, as the API server requires.
func Handler(decide Func) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxReview))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ar admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &ar); err != nil || ar.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := decide(r.Context(), ar.Request)
		resp.UID = ar.Request.UID
		out := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: resp,
		}
		w.Header().Set("Content-Type", "application/json")
		// An API server gone mid-body retries the review or fails it itself.
		_ = json.NewEncoder(w).Encode(out)
	})
}

// Allow admits the object unchanged, with warnings for the client.
func Allow(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// PatchOp is one RFC 6902 operation of a mutating webhook's patch.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Patch admits the object changed by ops (none: unchanged).
func Patch(ops []PatchOp, warnings ...string) *admissionv1.AdmissionResponse {
	resp := Allow(warnings...)
	if len(ops) == 0 {
		return resp
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return Refuse(http.StatusInternalServerError, "encoding the patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = b, &pt
	return resp
}

// Deny refuses the object as invalid (422), with one cause per field
// error, as KubeVirt's webhooks do: status.details.causes carry each
// error's type (FieldValueNotSupported, FieldValueInvalid, ...), field and
// message, and the status message joins the causes' messages.
func Deny(errs field.ErrorList) *admissionv1.AdmissionResponse {
	return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, errs)
}

// Forbid refuses the request as one its user may not make (403), naming
// the fields that ask for what they may not have.
func Forbid(errs field.ErrorList) *admissionv1.AdmissionResponse {
	return deny(http.StatusForbidden, metav1.StatusReasonForbidden, errs)
}

func deny(code int32, reason metav1.StatusReason, errs field.ErrorList) *admissionv1.AdmissionResponse {
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
	return status(code, reason, strings.Join(msgs, ", "), causes)
}

// DenyCauses refuses the object as invalid (422) with causes the caller
// words itself (the template validator's rules carry their own messages,
// as upstream's do); the status message joins each cause's field and
// message.
func DenyCauses(causes []metav1.StatusCause) *admissionv1.AdmissionResponse {
	msgs := make([]string, len(causes))
	for i, c := range causes {
		msgs[i] = c.Field + ": " + c.Message
	}
	return status(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, strings.Join(msgs, ", "), causes)
}

func status(code int32, reason metav1.StatusReason, msg string, causes []metav1.StatusCause) *admissionv1.AdmissionResponse {
	st := &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
	if len(causes) > 0 {
		st.Details = &metav1.StatusDetails{Causes: causes}
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: st}
}

// reasons are the status reasons of the codes Refuse is given.
var reasons = map[int32]metav1.StatusReason{
	http.StatusBadRequest:          metav1.StatusReasonBadRequest,
	http.StatusForbidden:           metav1.StatusReasonForbidden,
	http.StatusConflict:            metav1.StatusReasonConflict,
	http.StatusUnprocessableEntity: metav1.StatusReasonInvalid,
	http.StatusServiceUnavailable:  metav1.StatusReasonServiceUnavailable,
	http.StatusInternalServerError: metav1.StatusReasonInternalError,
}

// Refuse refuses for a reason that is no one field's, with the status
// code's reason (400 BadRequest, 403 Forbidden, ...).
func Refuse(code int32, msg string) *admissionv1.AdmissionResponse {
	return status(code, reasons[code], msg, nil)
}

// Decode reads the review's object (or old object) raw into obj. An
// object that does not decode is refused (400), saying which (what: "the
// VirtualMachine", "the old DataVolume"); the refusal is nil when it
// decodes.
func Decode(raw []byte, obj any, what string) *admissionv1.AdmissionResponse {
	if err := json.Unmarshal(raw, obj); err != nil {
		return Refuse(http.StatusBadRequest, fmt.Sprintf("cannot decode %s: %v", what, err))
	}
	return nil
}

// DecodeToMutate is Decode for a mutating webhook. An object that does not
// decode is admitted unchanged rather than refused: the API server
// validates the object against its CRD's schema after the mutating
// webhooks, and refuses it there naming the field and the value
// (`spec.domain.resources.requests.memory: Invalid value: "lots"`), where
// a decoding error could only quote Go's JSON decoder. Whatever the schema
// lets through still meets the validating webhooks, which refuse what they
// cannot decode. ok is false when the object did not decode: the caller
// returns resp.
func DecodeToMutate(raw []byte, obj any) (resp *admissionv1.AdmissionResponse, ok bool) {
	if err := json.Unmarshal(raw, obj); err != nil {
		return Allow(), false
	}
	return nil, true
}
