package securemetrics_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestMetricsNeedAToken serves metrics as virt-handler does (a manager's
// server) and as kubemacpool does (Guard on its own server), acting as a
// ServiceAccount bound to system:auth-delegator only (what the operator
// grants), against a real API server: no token and a forged one get 401,
// a tenant's ServiceAccount token 403, a scraper's token with GET on
// /metrics the metrics, over TLS.
func TestMetricsNeedAToken(t *testing.T) {
	cfg, c := apiserver.Start(t)
	ctx := context.Background()
	const ns = "kubevirt"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for _, sa := range []string{"kubevirt-handler", "prometheus", "tenant"} {
		require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	}
	subject := func(sa string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	}
	for _, o := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "handler-auth-delegator"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}, Subjects: subject("kubevirt-handler")},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"}, Subjects: subject("prometheus")},
	} {
		require.NoError(t, c.Create(ctx, o))
	}
	apiserver.WaitAllowed(t, c, authzv1.SubjectAccessReviewSpec{User: "system:serviceaccount:" + ns + ":prometheus",
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}})
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	handlerCfg := apiserver.AsServiceAccount(cfg, ns, "kubevirt-handler")
	hc, err := rest.HTTPClientFor(handlerCfg)
	require.NoError(t, err)
	srv, err := metricsserver.NewServer(securemetrics.Options(addr), handlerCfg, hc)
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// A server of the component's own (a webhook's port), guarded the
	// same way: Guard and Route.
	guard, err := securemetrics.Guard(handlerCfg, logr.Discard())
	require.NoError(t, err)
	mux := http.NewServeMux()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	securemetrics.Route(mux, guard, reg)
	own := httptest.NewTLSServer(mux)
	t.Cleanup(own.Close)
	unguarded := http.NewServeMux()
	securemetrics.Route(unguarded, nil, reg)
	rec := httptest.NewRecorder()
	unguarded.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code, "without a guard, no /metrics")

	get := func(url, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The certificate is self-signed: what is checked is the token.
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // see above
		defer tr.CloseIdleConnections()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) { // the server starts listening
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil && time.Now().Before(deadline) {
				continue
			}
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
	}
	for _, server := range []struct{ name, url string }{
		{"a manager's", "https://" + addr + "/metrics"},
		{"a server's own", own.URL + "/metrics"},
	} {
		for _, tc := range []struct {
			who, token string
			want       int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.forged", http.StatusUnauthorized},
			{"a tenant's ServiceAccount", token("tenant"), http.StatusForbidden},
			{"the scraper", token("prometheus"), http.StatusOK},
		} {
			code, body := get(server.url, tc.token)
			assert.Equal(t, tc.want, code, "%s, %s: %s", server.name, tc.who, body)
			if tc.want == http.StatusOK {
				assert.Contains(t, body, "go_goroutines", "%s, %s gets the metrics", server.name, tc.who)
			} else {
				assert.NotContains(t, body, "go_goroutines", "%s, %s gets no metrics", server.name, tc.who)
			}
		}
		assert.Contains(t, fmt.Sprint(get(server.url, token("tenant"))), "system:serviceaccount:kubevirt:tenant may not get /metrics", "%s: the refusal names who was refused", server.name)
	}
}
