package apiserver

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevmm/kubevmm/api/frontproxy"
)

// The DataVolume webhook's bad input: what is no AdmissionReview is a
// 400, an undecodable DataVolume (new or old) is refused saying so, and a
// delete is admitted; none reaches the API.
func TestValidateDataVolumeBadInput(t *testing.T) {
	h := (&Server{Callers: anyCaller{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	post := func(body []byte) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, ValidateDataVolumePath, bytes.NewReader(body)))
		return w
	}
	review := func(req admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		b, err := json.Marshal(admissionv1.AdmissionReview{Request: &req})
		require.NoError(t, err)
		w := post(b)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
		require.NotNil(t, out.Response)
		assert.Equal(t, req.UID, out.Response.UID)
		return out.Response
	}

	assert.Equal(t, http.StatusBadRequest, post([]byte("{")).Code)
	assert.Equal(t, http.StatusBadRequest, post([]byte("{}")).Code, "a review with no request")

	resp := review(admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{"spec":3}`)}})
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "cannot decode the DataVolume")

	resp = review(admissionv1.AdmissionRequest{UID: "2", Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: []byte(`{"spec":{}}`)},
		OldObject: runtime.RawExtension{Raw: []byte(`{"spec":3}`)}})
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "cannot decode the old DataVolume")
	resp = review(admissionv1.AdmissionRequest{UID: "3", Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: []byte(`{"spec":3}`)},
		OldObject: runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}})
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "cannot decode the DataVolume")
	resp = review(admissionv1.AdmissionRequest{UID: "4", Operation: admissionv1.Delete})
	assert.True(t, resp.Allowed)
}

// anyCaller takes every caller for the API server (who calls is
// TestWebhooksAnswerOnlyTheAPIServer's).
type anyCaller struct{}

func (anyCaller) APIServer(*http.Request) error { return nil }

// TestWebhooksAnswerOnlyTheAPIServer: a review without the API server's
// certificate is refused unread.
func TestWebhooksAnswerOnlyTheAPIServer(t *testing.T) {
	h := (&Server{Callers: &frontproxy.Authenticator{CAs: x509.NewCertPool()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	for _, path := range []string{ValidateDataVolumePath, MutateDataVolumePath} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"request":{"uid":"1"}}`)))
		assert.Equal(t, http.StatusUnauthorized, w.Code, path)
	}
}
