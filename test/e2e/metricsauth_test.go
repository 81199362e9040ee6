package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// metricsReader is the RBAC a cluster admin gives their Prometheus to
// scrape the components (README, Metrics).
const metricsReader = `apiVersion: v1
kind: ServiceAccount
metadata: {name: e2e-prometheus, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubevirt-metrics-reader}
rules:
- {nonResourceURLs: [/metrics], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-prometheus-kubevirt-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubevirt-metrics-reader}
subjects:
- {kind: ServiceAccount, name: e2e-prometheus, namespace: default}
`

// scraperToken is a token of a ServiceAccount allowed to GET /metrics.
func scraperToken(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "metrics-reader.yaml")
	if err := os.WriteFile(f, []byte(metricsReader), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", f) // cluster-scoped, and the default namespace's
	return strings.TrimSpace(kubectl(t, "-n", "default", "create", "token", "e2e-prometheus", "--duration=1h"))
}

// podIPs are the IPs of the pods in namespace that selector selects; at
// least one, or the test fails.
func podIPs(t *testing.T, namespace, selector string) []string {
	t.Helper()
	ips := strings.Fields(kubectl(t, "-n", namespace, "get", "pods", "-l", selector, "-o", "jsonpath={.items[*].status.podIP}"))
	if len(ips) == 0 {
		t.Fatalf("no pod %s in %s with an IP", selector, namespace)
	}
	return ips
}

// componentIPs are the pod IPs of a kubevirt component (label kubevirt.io).
func componentIPs(t *testing.T, app string) []string {
	t.Helper()
	return podIPs(t, "kubevirt", "kubevirt.io="+app)
}

// serviceEndpoint is the address and port of a Service's first endpoint:
// its pod, straight, as anything on the pod network reaches it.
func serviceEndpoint(t *testing.T, namespace, service string) string {
	t.Helper()
	ep := kubectl(t, "-n", namespace, "get", "endpointslices", "-l", "kubernetes.io/service-name="+service,
		"-o", "jsonpath={.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}")
	if ep == ":" {
		t.Fatalf("no endpoint of Service %s/%s", namespace, service)
	}
	return ep
}

// metricsGet is GET https://hostPort/metrics with the bearer token (none
// when empty), as anything on the pod network could send it: the status
// code and the body.
func metricsGet(t *testing.T, hostPort, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+hostPort+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The components' metrics certificates are self-signed; the token is
	// what they check.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // see above
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET /metrics from %s: %v", hostPort, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
