package serve_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/serve"
)

// writePair writes a fresh serving certificate for cn as dir's tls.crt
// and tls.key, as the kubelet updates a mounted Secret.
func writePair(t *testing.T, dir, cn string) {
	t.Helper()
	cfg := certs.Config{Duration: time.Hour, RenewBefore: time.Minute}
	ca, err := certs.NewCA("ca", cfg, time.Now())
	require.NoError(t, err)
	leaf, err := certs.NewLeaf(ca, certs.Leaf{CommonName: cn, DNSNames: []string{cn}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, cfg, time.Now())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), leaf.Cert, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), leaf.Key, 0o600))
}

// A rotated certificate is served from the next handshake on, without a
// restart; a missing one fails the handshake, not the process.
func TestCertificateFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	get := serve.Certificate(dir)
	_, err := get(&tls.ClientHelloInfo{})
	require.Error(t, err, "no certificate yet")
	for _, cn := range []string{"first", "second"} {
		writePair(t, dir, cn)
		c, err := get(&tls.ClientHelloInfo{})
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		require.NoError(t, err)
		assert.Equal(t, cn, leaf.Subject.CommonName)
	}
}

// The server stops cleanly when its context ends, and an address it
// cannot listen on is an error.
func TestListenAndServeTLS(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "server")
	newSrv := func(addr string) *http.Server {
		return &http.Server{Addr: addr, ReadHeaderTimeout: time.Second, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serve.Certificate(dir)}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.ListenAndServeTLS(ctx, newSrv("127.0.0.1:0")) }()
	cancel()
	require.NoError(t, <-done)
	require.Error(t, serve.ListenAndServeTLS(context.Background(), newSrv("256.0.0.1:1")))
}
