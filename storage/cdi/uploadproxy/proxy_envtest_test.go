package uploadproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadserver"
)

func startEnvtest(t *testing.T) client.Client {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "kubevmm", "k8s", "bin")
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Skipf("no kube-apiserver in %s (KUBEBUILDER_ASSETS): build it with `hack/cluster/build.sh envtest`", dir)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 3 * time.Minute}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	cfg.QPS = -1 // the proxy polls PVCs; the cluster one reads an informer cache
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	return c
}

// TestProxy runs the proxy against a real API server and a real upload
// server behind mutual TLS.
func TestProxy(t *testing.T) {
	c := startEnvtest(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The upload server of PVC default/disk, trusting the proxy's client
	// certificate only.
	now := time.Now()
	life := certs.Config{Duration: time.Hour, RenewBefore: time.Minute}
	ca, err := certs.NewCA("cdi-uploadserver-ca", life, now)
	require.NoError(t, err)
	srvCert, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "cdi-upload-disk", DNSNames: []string{"localhost"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, life, now)
	require.NoError(t, err)
	cliCert, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "cdi-uploadproxy", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, life, now)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	serverTLS, err := uploadserver.TLSConfig(write("s.crt", srvCert.Cert), write("s.key", srvCert.Key), write("ca.crt", ca.Cert))
	require.NoError(t, err)
	vol := t.TempDir()
	us := uploadserver.New(uploadserver.Config{Dest: vol, Size: 1 << 20, ScratchDir: t.TempDir(), ClientName: "cdi-uploadproxy"}, log)
	// The upload server's handlers counted as they start and return: the
	// proxy answers a client that cut its upload short as soon as its
	// forward fails, before the upload server's handler has seen the
	// cut and is ready for another.
	var handlers struct {
		sync.Mutex
		started, returned int
	}
	ush := us.Handler()
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Lock()
		handlers.started++
		handlers.Unlock()
		defer func() {
			handlers.Lock()
			handlers.returned++
			handlers.Unlock()
		}()
		ush.ServeHTTP(w, r)
	}))
	// idleAfter waits until a request beyond the first n has reached the
	// upload server and every one has returned.
	idleAfter := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			handlers.Lock()
			started, returned := handlers.started, handlers.returned
			handlers.Unlock()
			if started > n && returned == started {
				return
			}
			require.True(t, time.Now().Before(deadline), "the upload server's handlers: %d started, %d returned", started, returned)
		}
	}
	handlerCount := func() int {
		handlers.Lock()
		defer handlers.Unlock()
		return handlers.started
	}
	backend.TLS = serverTLS
	backend.StartTLS()
	t.Cleanup(backend.Close)
	_, port, err := net.SplitHostPort(backend.Listener.Addr().String())
	require.NoError(t, err)

	tr, err := Transport(write("c.crt", cliCert.Cert), write("c.key", cliCert.Key), filepath.Join(dir, "ca.crt"), nil)
	require.NoError(t, err)
	priv, pub, err := token.NewKey()
	require.NoError(t, err)
	signer, err := token.NewSigner(priv)
	require.NoError(t, err)
	verifier, err := token.NewVerifier(pub)
	require.NoError(t, err)
	foreignPriv, _, err := token.NewKey()
	require.NoError(t, err)
	foreign, err := token.NewSigner(foreignPriv)
	require.NoError(t, err)

	p := &Proxy{Client: c, Verifier: verifier, Transport: tr, ReadyWait: 500 * time.Millisecond, Log: log,
		ServerURL: func(ns, name string) string {
			if ns != "default" || name != "disk" {
				return "https://localhost:1"
			}
			return "https://localhost:" + port
		}}
	front := httptest.NewServer(p.Handler())
	t.Cleanup(front.Close)

	pvc := func(name string, ann map[string]string) {
		require.NoError(t, c.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}},
		}))
	}
	pvc("disk", map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Running", cdiv1.AnnPodReady: "true"})
	pvc("plain", nil)
	pvc("done", map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Succeeded", cdiv1.AnnPodReady: "false"})
	pvc("pending", map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Pending", cdiv1.AnnPodReady: "false"})

	sign := func(s *token.Signer, name string, at time.Time) string {
		tok, err := s.Sign(token.Upload("default", name), at)
		require.NoError(t, err)
		return "Bearer " + tok
	}
	img := bytes.Repeat([]byte("kubevmm "), 4096)
	post := func(auth string, body io.Reader) (int, string) {
		req, err := http.NewRequest(http.MethodPost, front.URL+uploadserver.PathUpload, body)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	for _, tc := range []struct {
		name, auth string
		code       int
		msg        string
	}{
		{"no header", "", http.StatusBadRequest, "no Authorization"},
		{"not bearer", "Basic dXNlcjpwdw==", http.StatusBadRequest, "malformed"},
		{"bearer without token", "Bearer ", http.StatusBadRequest, "malformed"},
		{"garbage token", "Bearer abc", http.StatusUnauthorized, "invalid upload token"},
		{"expired", sign(signer, "disk", now.Add(-token.Lifetime-time.Minute)), http.StatusUnauthorized, "invalid upload token"},
		{"foreign key", sign(foreign, "disk", now), http.StatusUnauthorized, "invalid upload token"},
		{"missing PVC", sign(signer, "nope", now), http.StatusServiceUnavailable, "does not exist"},
		{"not an upload target", sign(signer, "plain", now), http.StatusServiceUnavailable, "not an upload target"},
		{"already done", sign(signer, "done", now), http.StatusServiceUnavailable, "already finished"},
		{"server not ready", sign(signer, "pending", now), http.StatusServiceUnavailable, "not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := post(tc.auth, bytes.NewReader(img))
			require.Equal(t, tc.code, code, msg)
			require.Contains(t, msg, tc.msg)
		})
	}

	t.Run("service resolver", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "cdi-upload-disk", Namespace: "default"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}))
		svc := &corev1.Service{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cdi-upload-disk"}, svc))
		resolve := ServiceResolver(c)
		ip, err := resolve(ctx, "cdi-upload-disk.default.svc")
		require.NoError(t, err)
		require.Equal(t, svc.Spec.ClusterIP, ip)
		_, err = resolve(ctx, "cdi-upload-gone.default.svc")
		require.ErrorContains(t, err, "finding Service default/cdi-upload-gone")
		for _, bad := range []string{"localhost", "a.b.c.svc", "x.svc", "example.org"} {
			_, err = resolve(ctx, bad)
			require.ErrorContains(t, err, "not a Service name", bad)
		}
	})

	t.Run("cut short, then whole", func(t *testing.T) {
		// A client that stops halfway: the upload server keeps no disk
		// and, once it has seen the cut, takes the next attempt.
		before := handlerCount()
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n", uploadserver.PathUpload, sign(signer, "disk", now), len(img))
		require.NoError(t, err)
		_, err = conn.Write(img[:len(img)/2])
		require.NoError(t, err)
		require.NoError(t, conn.(*net.TCPConn).CloseWrite())
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.GreaterOrEqual(t, resp.StatusCode, 400)
		idleAfter(before)
		_, err = os.Stat(filepath.Join(vol, uploadserver.DiskImage))
		require.ErrorIs(t, err, os.ErrNotExist)

		code, msg := post(sign(signer, "disk", now), bytes.NewReader(img))
		require.Equal(t, http.StatusOK, code, msg)
		<-us.Done
		got, err := os.ReadFile(filepath.Join(vol, uploadserver.DiskImage))
		require.NoError(t, err)
		// The upload, then zeros: disk.img is grown to the claim's usable size.
		require.Len(t, got, 1<<20)
		require.True(t, bytes.Equal(img, got[:len(img)]), "disk.img starts with the upload")
		require.True(t, bytes.Equal(make([]byte, len(got)-len(img)), got[len(img):]), "and reads zeros after it")
		code, msg = post(sign(signer, "disk", now), strings.NewReader("x"))
		require.Equal(t, http.StatusConflict, code, msg)
	})
}
