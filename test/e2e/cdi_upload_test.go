package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

// TestCDIUpload: `virtctl image-upload dv` of a qcow2 made by qemu-img
// through cdi-apiserver's token and cdi-uploadproxy: the DataVolume is
// Succeeded and its disk.img holds what `qemu-img convert -O raw` makes
// of the file, grown to the size asked for. The proxy answers 401 to an expired token and to one
// signed by another key, 503 to a token for a PVC that is not an upload
// target, 400 without a token. The namespace enforces the restricted
// PodSecurity level: the upload server runs as user 107.
func TestCDIUpload(t *testing.T) {
	freshNamespace(t)
	// The upload server pod passes the restricted level.
	kubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "dv,pvc,pods", "-o", "wide")
			t.Logf("at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cdi", "get", "pods", "-o", "wide")
			t.Logf("cdi:\n%s", out)
			for _, d := range []string{"cdi-deployment", "cdi-apiserver", "cdi-uploadproxy"} {
				out, _ = run(t, "kubectl.sh", "-n", "cdi", "logs", "deploy/"+d, "--tail=40")
				t.Logf("%s:\n%s", d, out)
			}
		}
	})
	dir := t.TempDir()
	raw := make([]byte, 32<<20)
	copy(raw, "kubevmm CDI upload e2e")
	for i := range 1 << 20 {
		raw[20<<20+i] = byte(i*7 + 3)
	}
	rawPath, qcowPath, converted := filepath.Join(dir, "disk.raw"), filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "converted.raw")
	require.NoError(t, os.WriteFile(rawPath, raw, 0o600))
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", qcowPath, converted)
	want, err := os.ReadFile(converted)
	require.NoError(t, err)

	// The node reaches Services (kube-proxy); the proxy's certificate
	// names its Service, not the address: --insecure.
	proxy := "https://" + kubectl(t, "-n", "cdi", "get", "svc/cdi-uploadproxy", "-o", "jsonpath={.spec.clusterIP}")
	out := virtctl(t, "image-upload", "dv", "uploaded", "--size=100Mi", "--image-path="+qcowPath, "--uploadproxy-url="+proxy, "--insecure")
	t.Logf("virtctl image-upload:\n%s", out)
	assert.Contains(t, out, "completed successfully")
	assert.Equal(t, "Succeeded", jsonpath(t, "dv/uploaded", "{.status.phase}"))
	// Grown to the size asked for (the claim is that plus the overhead).
	requireImage(t, diskImage(t, "uploaded"), want, 100<<20)
	st, err := os.Stat(diskImage(t, "uploaded"))
	require.NoError(t, err)
	assert.Equal(t, uint32(podsecurity.UID), st.Sys().(*syscall.Stat_t).Uid, "written as user 107")
	// The upload server is gone with its job.
	out, _ = run(t, "kubectl.sh", "-n", ns, "get", "pod/cdi-upload-uploaded")
	assert.Contains(t, out, "NotFound")

	// Tokens made here: with the cluster's key (read as the admin), but
	// expired; with another key; for a PVC no upload fills.
	keyB64 := kubectl(t, "-n", "cdi", "get", "secret/cdi-upload-token-key", "-o", "jsonpath={.data.id_ecdsa}")
	key, err := base64.StdEncoding.DecodeString(keyB64)
	require.NoError(t, err)
	cluster, err := token.NewSigner(key)
	require.NoError(t, err)
	otherKey, _, err := token.NewKey()
	require.NoError(t, err)
	other, err := token.NewSigner(otherKey)
	require.NoError(t, err)
	applyYAML(t, "plain", `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: plain
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
`)
	sign := func(s *token.Signer, pvc string, at time.Time) string {
		tok, err := s.Sign(token.Upload(ns, pvc), at)
		require.NoError(t, err)
		return "Bearer " + tok
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- the address is a ClusterIP
	for _, tc := range []struct {
		name, auth string
		code       int
	}{
		{"no token", "", http.StatusBadRequest},
		{"expired", sign(cluster, "uploaded", time.Now().Add(-10*time.Minute)), http.StatusUnauthorized},
		{"another key", sign(other, "uploaded", time.Now()), http.StatusUnauthorized},
		{"not an upload target", sign(cluster, "plain", time.Now()), http.StatusServiceUnavailable},
		{"already uploaded", sign(cluster, "uploaded", time.Now()), http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, proxy+"/v1beta1/upload", strings.NewReader("data"))
			require.NoError(t, err)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := hc.Do(req)
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, tc.code, resp.StatusCode, string(b))
		})
	}
}
