package clone_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/clone"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadserver"
)

// The source image reaches a real upload server over mutual TLS with the
// clone client's certificate, byte for byte; a client certificate of
// another name (the upload proxy's, another clone's of the same CA: one
// tenant's Secret must not write into another's clone) is refused by a
// clone target's server and nothing is written.
func TestSend(t *testing.T) {
	now := time.Now()
	cfg := certs.Config{Duration: time.Hour, RenewBefore: time.Minute}
	ca, err := certs.NewCA("cdi-uploadserver-ca", cfg, now)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	server, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "cdi-upload-target.ns.svc", DNSNames: []string{"127.0.0.1", "localhost"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, cfg, now)
	require.NoError(t, err)
	serverTLS, err := uploadserver.TLSConfig(write("tls.crt", server.Cert), write("tls.key", server.Key), write("ca.crt", ca.Cert))
	require.NoError(t, err)

	dest := t.TempDir()
	srv := uploadserver.New(uploadserver.Config{Dest: dest, Size: 4 << 20, ScratchDir: t.TempDir(), ClientName: clone.ClientNameFor("target-uid")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := httptest.NewUnstartedServer(srv.Handler())
	h.TLS = serverTLS
	h.StartTLS()
	defer h.Close()

	srcDir := t.TempDir()
	img := make([]byte, 1<<20)
	_, err = rand.Read(img[:64<<10])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(srcDir, uploadserver.DiskImage), img, 0o600))

	clientTLS := func(name string) string {
		leaf, err := certs.NewLeaf(ca, certs.Leaf{CommonName: name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, cfg, now)
		require.NoError(t, err)
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, "tls.crt"), leaf.Cert, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, "tls.key"), leaf.Key, 0o600))
		return d
	}
	url := "https://localhost:" + h.URL[len("https://127.0.0.1:"):]
	ctx := context.Background()

	p := &importer.Progress{}
	for _, name := range []string{"cdi-uploadproxy", clone.ClientNameFor("another-uid"), clone.ClientName} {
		other := clientTLS(name)
		tc, err := clone.ClientTLS(filepath.Join(other, "tls.crt"), filepath.Join(other, "tls.key"), filepath.Join(dir, "ca.crt"))
		require.NoError(t, err)
		err = clone.Send(ctx, clone.SourcePath(srcDir, ""), url, tc, p)
		require.ErrorContains(t, err, "401", name)
		require.NoFileExists(t, filepath.Join(dest, uploadserver.DiskImage))
	}

	src := clientTLS(clone.ClientNameFor("target-uid"))
	tc, err := clone.ClientTLS(filepath.Join(src, "tls.crt"), filepath.Join(src, "tls.key"), filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	require.NoError(t, clone.Send(ctx, clone.SourcePath(srcDir, ""), url, tc, p))
	require.InDelta(t, 100.0, p.Get(), 0.001)
	got, err := os.ReadFile(filepath.Join(dest, uploadserver.DiskImage))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(got), len(img))
	require.True(t, bytes.Equal(img, got[:len(img)]), "the target's image differs from the source's")
	require.True(t, bytes.Equal(make([]byte, len(got)-len(img)), got[len(img):]), "the target's image beyond the source's is not zero")

	// A missing source is an error naming it, nothing sent.
	require.ErrorContains(t, clone.Send(ctx, clone.SourcePath(t.TempDir(), ""), url, tc, p), "opening the source")
}
