package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// post sends body to h and returns the status and the decoded review.
func post(t *testing.T, h http.Handler, body string) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		return rec.Code, nil
	}
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	return rec.Code, &out
}

// The handler answers a review with the decision and the request's UID,
// and refuses a body that is no review without deciding anything.
func TestHandler(t *testing.T) {
	decided := 0
	h := Handler(func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		decided++
		return Allow("seen " + req.Name)
	})
	code, out := post(t, h, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","name":"vm1","operation":"CREATE"}}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "admission.k8s.io/v1", out.APIVersion)
	assert.Equal(t, "AdmissionReview", out.Kind)
	require.NotNil(t, out.Response)
	assert.EqualValues(t, "u-1", out.Response.UID)
	assert.True(t, out.Response.Allowed)
	assert.Equal(t, []string{"seen vm1"}, out.Response.Warnings)

	for _, body := range []string{`{"kind":"AdmissionReview"}`, `not json`, strings.Repeat(" ", MaxReview+1)} {
		code, _ = post(t, h, body)
		assert.Equal(t, http.StatusBadRequest, code, "%.40q", body)
	}
	assert.Equal(t, 1, decided, "only the review was decided")
}

// Deny and Forbid name each field as KubeVirt's webhooks do: one cause
// each, the message joining them; a not-supported error reads as its
// detail.
func TestDeny(t *testing.T) {
	p := field.NewPath("spec", "domain", "devices", "disks").Index(1)
	errs := field.ErrorList{
		field.Duplicate(p.Child("name"), "root"),
		field.NotSupported[string](p.Child("cache"), "none", nil),
	}
	errs[1].Detail = `spec.domain.devices.disks[1].cache is not supported by kubevmm`
	r := Deny(errs)
	assert.False(t, r.Allowed)
	assert.EqualValues(t, http.StatusUnprocessableEntity, r.Result.Code)
	assert.Equal(t, metav1.StatusReasonInvalid, r.Result.Reason)
	assert.Equal(t, `spec.domain.devices.disks[1].name: Duplicate value: "root", spec.domain.devices.disks[1].cache: spec.domain.devices.disks[1].cache is not supported by kubevmm`, r.Result.Message)
	require.Len(t, r.Result.Details.Causes, 2)
	assert.Equal(t, metav1.StatusCause{Type: metav1.CauseTypeFieldValueDuplicate, Field: "spec.domain.devices.disks[1].name",
		Message: `spec.domain.devices.disks[1].name: Duplicate value: "root"`}, r.Result.Details.Causes[0])

	f := Forbid(field.ErrorList{field.Forbidden(field.NewPath("spec", "source", "pvc"), "no")})
	assert.EqualValues(t, http.StatusForbidden, f.Result.Code)
	assert.Equal(t, metav1.StatusReasonForbidden, f.Result.Reason)

	c := DenyCauses([]metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: ".spec.x", Message: "too small: 1 < 2"}})
	assert.Equal(t, ".spec.x: too small: 1 < 2", c.Result.Message)
	assert.Equal(t, "too small: 1 < 2", c.Result.Details.Causes[0].Message, "the cause keeps the caller's words")

	r = Refuse(http.StatusServiceUnavailable, "not ready")
	assert.Equal(t, metav1.StatusReasonServiceUnavailable, r.Result.Reason)
	assert.Nil(t, r.Result.Details)
}

func TestPatch(t *testing.T) {
	r := Patch(nil)
	assert.True(t, r.Allowed)
	assert.Nil(t, r.PatchType, "no operations: no patch")
	r = Patch([]PatchOp{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{"a": "b"}}}, "w")
	require.NotNil(t, r.PatchType)
	assert.Equal(t, admissionv1.PatchTypeJSONPatch, *r.PatchType)
	assert.JSONEq(t, `[{"op":"add","path":"/metadata/annotations","value":{"a":"b"}}]`, string(r.Patch))
	assert.Equal(t, []string{"w"}, r.Warnings)
	r = Patch([]PatchOp{{Op: "add", Path: "/x", Value: func() {}}})
	assert.False(t, r.Allowed, "a patch that does not encode is refused")
}

// A validating webhook refuses an object that does not decode; a mutating
// one lets it through unchanged, for the API server's schema to refuse
// naming the field.
func TestDecode(t *testing.T) {
	type spec struct {
		Memory int `json:"memory"`
	}
	raw := runtime.RawExtension{Raw: []byte(`{"memory":"lots"}`)}
	var s spec
	r := Decode(raw.Raw, &s, "the VirtualMachine")
	require.NotNil(t, r)
	assert.False(t, r.Allowed)
	assert.EqualValues(t, http.StatusBadRequest, r.Result.Code)
	assert.Contains(t, r.Result.Message, "cannot decode the VirtualMachine: ")

	r, ok := DecodeToMutate(raw.Raw, &s)
	assert.False(t, ok)
	assert.True(t, r.Allowed)
	assert.Nil(t, r.Patch)

	r, ok = DecodeToMutate([]byte(`{"memory":3}`), &s)
	assert.True(t, ok)
	assert.Nil(t, r)
	assert.Equal(t, 3, s.Memory)
	assert.Nil(t, Decode([]byte(`{"memory":4}`), &s, "x"))
}
