package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/frontproxy"
	tv "github.com/kubevmm/kubevmm/templatevalidator"
)

// failing is an API server whose every read fails with err: the error
// paths of the reads (the envtest covers the rest against a real one).
type failing struct{ err error }

func (f failing) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return f.err
}

func (f failing) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return f.err
}

var unreachable = failing{errors.New("connection refused")}

func post(t *testing.T, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	return rec
}

func TestAdmissionErrors(t *testing.T) {
	// Metrics unguarded here: the guard is the envtest's (a real API
	// server reviews the tokens).
	unguarded := func(h http.Handler) http.Handler { return h }
	s := &Server{Client: unreachable, Callers: anyCaller{}, MetricsGuard: unguarded, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	const violating = `{"metadata": {"name": "v", "annotations": {"vm.kubevirt.io/validations": "[{\"name\": \"m\", \"rule\": \"integer\", \"path\": \"jsonpath::.spec.domain.memory.guest\", \"message\": \"more\", \"min\": 2147483648}]"}},
		"spec": {"template": {"spec": {"domain": {"memory": {"guest": "1Gi"}, "devices": {}}}}}}`
	for _, tc := range []struct {
		name, path string
		op         admissionv1.Operation
		object     string
		allowed    bool
		code       int32
		message    string
	}{
		{name: "a VM that does not decode", path: PathVirtualMachine, op: admissionv1.Create, object: `{"spec": 1}`,
			code: http.StatusBadRequest, message: "cannot decode the VirtualMachine"},
		{name: "a VM whose template can't be read", path: PathVirtualMachine, op: admissionv1.Create,
			object: `{"metadata": {"name": "v", "labels": {"vm.kubevirt.io/template": "t", "vm.kubevirt.io/template.namespace": "templates"}}}`,
			code:   http.StatusInternalServerError, message: "reading template templates/t: connection refused"},
		{name: "a VM deletion is no concern", path: PathVirtualMachine, op: admissionv1.Delete, object: violating, allowed: true},
		{name: "a VM being deleted loses its finalizers", path: PathVirtualMachine, op: admissionv1.Update,
			object: `{"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", ` + violating[len(`{"metadata": {`):], allowed: true},
		{name: "a violating VM", path: PathVirtualMachine, op: admissionv1.Create, object: violating,
			code: http.StatusUnprocessableEntity, message: ".spec.domain.memory.guest: more: value 1073741824 is lower than minimum [2147483648]"},
		{name: "a template whose VMs can't be listed", path: PathTemplate, op: admissionv1.Delete, object: `{"metadata": {"name": "t"}}`,
			code: http.StatusInternalServerError, message: "listing the VMs of the template: connection refused"},
		{name: "a template that does not decode", path: PathTemplate, op: admissionv1.Delete, object: `[]`,
			code: http.StatusBadRequest, message: "cannot decode the Template"},
		{name: "a template's creation is no concern", path: PathTemplate, op: admissionv1.Create, object: `{}`, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &admissionv1.AdmissionRequest{UID: "u1", Name: "t", Namespace: "templates", Operation: tc.op,
				Object: runtime.RawExtension{Raw: []byte(tc.object)}}
			if tc.op == admissionv1.Delete {
				req.Object, req.OldObject = runtime.RawExtension{}, runtime.RawExtension{Raw: []byte(tc.object)}
			}
			body, err := json.Marshal(admissionv1.AdmissionReview{Request: req})
			require.NoError(t, err)
			rec := post(t, h, tc.path, body)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var out admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
			assert.Equal(t, metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, out.TypeMeta)
			require.NotNil(t, out.Response)
			assert.Equal(t, req.UID, out.Response.UID)
			assert.Equal(t, tc.allowed, out.Response.Allowed)
			if !tc.allowed {
				require.NotNil(t, out.Response.Result)
				assert.Equal(t, tc.code, out.Response.Result.Code)
				assert.Contains(t, out.Response.Result.Message, tc.message)
			}
		})
	}

	t.Run("the refusal is counted", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Body.String(), "\nkubevirt_ssp_template_validator_rejected_total 1\n", "one VM was refused for its rules")
		assert.Contains(t, rec.Body.String(), "go_goroutines")
	})
	t.Run("not an AdmissionReview", func(t *testing.T) {
		for _, body := range []string{"nope", "{}"} {
			assert.Equal(t, http.StatusBadRequest, post(t, h, PathVirtualMachine, []byte(body)).Code, body)
		}
	})
	t.Run("a cluster without the Template kind has no template rules", func(t *testing.T) {
		s := &Server{Client: failing{&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: tv.TemplateGroup, Kind: tv.TemplateKind}}}, Callers: anyCaller{}, Log: s.Log}
		obj := `{"metadata": {"labels": {"vm.kubevirt.io/template": "t", "vm.kubevirt.io/template.namespace": "templates"}}}`
		body, err := json.Marshal(admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(obj)}}})
		require.NoError(t, err)
		var out admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(post(t, s.Handler(), PathVirtualMachine, body).Body.Bytes(), &out))
		assert.True(t, out.Response.Allowed)
	})
	t.Run("skip-validations skips the template read", func(t *testing.T) {
		obj := `{"metadata": {"annotations": {"` + tv.AnnotationSkipValidations + `": "true"}, "labels": {"vm.kubevirt.io/template": "t", "vm.kubevirt.io/template.namespace": "templates"}}}`
		body, err := json.Marshal(admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(obj)}}})
		require.NoError(t, err)
		var out admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(post(t, h, PathVirtualMachine, body).Body.Bytes(), &out))
		assert.True(t, out.Response.Allowed)
	})
}

// writeCert writes a self-signed serving certificate with this serial
// number to dir/tls.crt and dir/tls.key.
func writeCert(t *testing.T, dir string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
}

// TestCertificateRotation: the server is ready once its certificate is
// there, and serves a rotated one on the next connection, as the
// kubelet updates a mounted Secret.
func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Client: unreachable, CertDir: dir, Callers: anyCaller{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathReady, nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "not ready without a certificate")

	// Each request on a new connection: the certificate of its handshake.
	served := func() int64 {
		var got int64
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // the test reads which certificate is served
			VerifyConnection: func(cs tls.ConnectionState) error {
				got = cs.PeerCertificates[0].SerialNumber.Int64()
				return nil
			},
		}}}
		resp, err := hc.Get("https://" + ln.Addr().String() + PathReady)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		return got
	}
	writeCert(t, dir, 1)
	assert.Equal(t, int64(1), served())
	writeCert(t, dir, 2)
	assert.Equal(t, int64(2), served(), "the rotated certificate, without a restart")
}

// anyCaller takes every caller for the API server (who calls is
// TestWebhooksAnswerOnlyTheAPIServer's and the envtest's).
type anyCaller struct{}

func (anyCaller) APIServer(*http.Request) error { return nil }

// TestWebhooksAnswerOnlyTheAPIServer: a review without the API server's
// certificate is refused unread; a server told no Callers does not start.
func TestWebhooksAnswerOnlyTheAPIServer(t *testing.T) {
	h := (&Server{Client: unreachable, Callers: &frontproxy.Authenticator{CAs: x509.NewCertPool()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	for _, path := range []string{PathVirtualMachine, PathTemplate} {
		assert.Equal(t, http.StatusUnauthorized, post(t, h, path, []byte(`{"request":{"uid":"1"}}`)).Code, path)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	assert.ErrorContains(t, (&Server{Client: unreachable, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Serve(t.Context(), ln), "no Callers")
}
