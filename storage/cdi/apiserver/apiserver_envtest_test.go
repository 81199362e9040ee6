package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	uploadv1 "github.com/kubevmm/kubevmm/api/cdi/upload/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestUploadTokenRequest: a user the front proxy vouches for, allowed by
// RBAC, gets a token for the PVC; others are refused.
func TestUploadTokenRequest(t *testing.T) {
	_, c := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = nil })
	ctx := context.Background()
	now := time.Now()
	life := certs.Config{Duration: time.Hour, RenewBefore: time.Minute}
	leaf := func(ca certs.KeyPair, cn string, usage x509.ExtKeyUsage, dns ...string) tls.Certificate {
		kp, err := certs.NewLeaf(ca, certs.Leaf{CommonName: cn, DNSNames: dns, Usages: []x509.ExtKeyUsage{usage}}, life, now)
		require.NoError(t, err)
		c, err := tls.X509KeyPair(kp.Cert, kp.Key)
		require.NoError(t, err)
		return c
	}
	proxyCA, err := certs.NewCA("front-proxy-ca", life, now)
	require.NoError(t, err)
	otherCA, err := certs.NewCA("other", life, now)
	require.NoError(t, err)
	servingCA, err := certs.NewCA("cdi-apiserver-ca", life, now)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(proxyCA.Cert)

	signer, verifier, err := token.NewPair()
	require.NoError(t, err)
	s := &Server{Auth: &frontproxy.Authenticator{CAs: pool, Names: []string{"front-proxy-client"}, UserHeaders: []string{"X-Remote-User"}, GroupHeaders: []string{"X-Remote-Group"}},
		Client: c, Signer: signer, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := httptest.NewUnstartedServer(s.Handler())
	h.TLS = &tls.Config{Certificates: []tls.Certificate{leaf(servingCA, "cdi-api", x509.ExtKeyUsageServerAuth, "localhost")}, ClientAuth: tls.RequestClientCert}
	h.StartTLS()
	t.Cleanup(h.Close)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA.Cert)
	clientWith := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	frontProxy := leaf(proxyCA, "front-proxy-client", x509.ExtKeyUsageClientAuth)
	impostor := leaf(otherCA, "front-proxy-client", x509.ExtKeyUsageClientAuth)
	wrongName := leaf(proxyCA, "someone", x509.ExtKeyUsageClientAuth)

	path := "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/default/uploadtokenrequests"
	post := func(hc *http.Client, user, body string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, h.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-Remote-User", user)
		req.Header.Set("X-Remote-Group", "system:authenticated")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	good := `{"apiVersion":"upload.cdi.kubevirt.io/v1beta1","kind":"UploadTokenRequest","metadata":{"name":"x"},"spec":{"pvcName":"disk"}}`

	code, body := post(clientWith(&frontProxy), "alice", good)
	require.Equal(t, http.StatusForbidden, code, "alice may not yet: %s", body)

	require.NoError(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "uploader", Namespace: "default"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{uploadv1.GroupName}, Resources: []string{uploadv1.Resource}, Verbs: []string{"create"}}}}))
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "uploader", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "uploader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}))
	require.Eventually(t, func() bool { code, _ = post(clientWith(&frontProxy), "alice", good); return code == http.StatusOK },
		time.Minute, 200*time.Millisecond, "RBAC allows alice")
	code, body = post(clientWith(&frontProxy), "alice", good)
	require.Equal(t, http.StatusOK, code, string(body))
	var got uploadv1.UploadTokenRequest
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, "UploadTokenRequest", got.Kind)
	p, err := verifier.Verify(got.Status.Token, time.Now())
	require.NoError(t, err)
	require.NoError(t, p.Grants("default", "disk"))

	for _, tc := range []struct {
		name   string
		client *http.Client
		user   string
		body   string
		code   int
		msg    string
	}{
		{"bob is not allowed", clientWith(&frontProxy), "bob", good, http.StatusForbidden, `User \"bob\" cannot create`},
		{"no client certificate", clientWith(nil), "alice", good, http.StatusUnauthorized, "no client certificate"},
		{"another CA", clientWith(&impostor), "alice", good, http.StatusUnauthorized, "client certificate"},
		{"not an allowed proxy", clientWith(&wrongName), "alice", good, http.StatusUnauthorized, "not an allowed front proxy"},
		{"no user", clientWith(&frontProxy), "", good, http.StatusUnauthorized, "names no user"},
		{"no PVC", clientWith(&frontProxy), "alice", `{"spec":{}}`, http.StatusUnprocessableEntity, "spec.pvcName"},
		{"bad PVC name", clientWith(&frontProxy), "alice", `{"spec":{"pvcName":"../x"}}`, http.StatusUnprocessableEntity, "spec.pvcName"},
		{"unknown field", clientWith(&frontProxy), "alice", `{"spec":{"pvcName":"disk","size":3}}`, http.StatusBadRequest, "unknown field"},
		{"other namespace", clientWith(&frontProxy), "alice", `{"metadata":{"namespace":"kube-system"},"spec":{"pvcName":"disk"}}`, http.StatusBadRequest, "does not match"},
		{"other kind", clientWith(&frontProxy), "alice", `{"kind":"Pod","spec":{"pvcName":"disk"}}`, http.StatusBadRequest, "not an UploadTokenRequest"},
		{"not JSON", clientWith(&frontProxy), "alice", `{`, http.StatusBadRequest, "decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.client, tc.user, tc.body)
			require.Equal(t, tc.code, code, string(body))
			require.Contains(t, string(body), tc.msg)
		})
	}

	t.Run("discovery", func(t *testing.T) {
		resp, err := clientWith(nil).Get(h.URL + "/apis/upload.cdi.kubevirt.io/v1beta1")
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		var l metav1.APIResourceList
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
		require.Len(t, l.APIResources, 1)
		require.Equal(t, "uploadtokenrequests", l.APIResources[0].Name)
		require.True(t, l.APIResources[0].Namespaced)
		require.Equal(t, []string{"create"}, []string(l.APIResources[0].Verbs))
	})
}
