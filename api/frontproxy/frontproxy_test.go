package frontproxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/vmm/migration/tlstest"
)

// TestOnlyAPIServer: a webhook behind OnlyAPIServer answers the front
// proxy's certificate only; without a certificate it is 401, with another
// CA's or another name's 403, and the handler never runs for them.
func TestOnlyAPIServer(t *testing.T) {
	proxyCA := tlstest.NewCA(t, "front-proxy-ca")
	otherCA := tlstest.NewCA(t, "other-ca")
	pem, err := os.ReadFile(proxyCA.File)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	a := &frontproxy.Authenticator{CAs: pool, Names: []string{"front-proxy-client"}}

	var served int
	srv := httptest.NewUnstartedServer(frontproxy.OnlyAPIServer(a, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served++
		_, _ = io.WriteString(w, "reviewed")
	})))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name   string
		leaf   *tlstest.Leaf
		code   int
		reason string
	}{
		{name: "no certificate", code: http.StatusUnauthorized, reason: "no client certificate"},
		{name: "another CA's", leaf: ptr(otherCA.Issue(t, "front-proxy-client")), code: http.StatusForbidden, reason: "certificate signed by unknown authority"},
		{name: "another name", leaf: ptr(proxyCA.Issue(t, "system:node:n1")), code: http.StatusForbidden, reason: `"system:node:n1" is not an allowed front proxy`},
		{name: "the API server's", leaf: ptr(proxyCA.Issue(t, "front-proxy-client")), code: http.StatusOK, reason: "reviewed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			if tc.leaf != nil {
				c, err := tls.LoadX509KeyPair(tc.leaf.Cert, tc.leaf.Key)
				require.NoError(t, err)
				cfg.Certificates = []tls.Certificate{c}
			}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			before := served
			resp, err := hc.Post(srv.URL, "application/json", strings.NewReader(`{}`))
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, tc.code, resp.StatusCode, "%s", body)
			assert.Contains(t, string(body), tc.reason)
			if tc.code != http.StatusOK {
				assert.Equal(t, before, served, "the handler ran for a caller that is not the API server")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
