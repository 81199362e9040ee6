package virtapi

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/certs"
)

// virt-api's client to virt-handler reads the CA bundle per handshake:
// mid-rotation (the bundle holds the new CA and the previous one) a
// handler with a leaf of either verifies, without a restart.
func TestHandlerClientTLSFollowsTheCABundle(t *testing.T) {
	const handlerName = "kubevirt.io:system:node:virt-handler"
	now := time.Now()
	cfg := certs.Config{Duration: time.Hour, RenewBefore: 10 * time.Minute}
	oldCA, err := certs.NewCA("old", cfg, now)
	require.NoError(t, err)
	newCA, err := certs.NewCA("new", cfg, now)
	require.NoError(t, err)
	leaf := func(ca certs.KeyPair, cn string, usage x509.ExtKeyUsage) certs.KeyPair {
		p, err := certs.NewLeaf(ca, certs.Leaf{CommonName: cn, Usages: []x509.ExtKeyUsage{usage}}, cfg, now)
		require.NoError(t, err)
		return p
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p+".new", b, 0o600))
		require.NoError(t, os.Rename(p+".new", p)) // replaced at once, as the kubelet does
		return p
	}
	client := leaf(oldCA, "kubevirt.io:system:client:virt-api", x509.ExtKeyUsageClientAuth)
	caFile := write("ca.crt", oldCA.Cert)
	cfgTLS, err := HandlerClientTLS(write("tls.crt", client.Cert), write("tls.key", client.Key), caFile, handlerName)
	require.NoError(t, err)

	// A handler serving a leaf of ca (the client certificate is not what
	// is tested here).
	handler := func(ca certs.KeyPair) string {
		p := leaf(ca, handlerName, x509.ExtKeyUsageServerAuth)
		pair, err := tls.X509KeyPair(p.Cert, p.Key)
		require.NoError(t, err)
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		return l.Addr().String()
	}
	onOld, onNew := handler(oldCA), handler(newCA)
	dial := func(addr string) error {
		c, err := tls.Dial("tcp", addr, cfgTLS)
		if err == nil {
			c.Close()
		}
		return err
	}
	require.NoError(t, dial(onOld))
	require.Error(t, dial(onNew), "the new CA is not trusted yet")
	write("ca.crt", append(append([]byte{}, newCA.Cert...), oldCA.Cert...))
	require.NoError(t, dial(onOld), "the old leaf, during the overlap")
	require.NoError(t, dial(onNew), "the new leaf, during the overlap")
	write("ca.crt", newCA.Cert)
	require.Error(t, dial(onOld), "the old CA left the bundle")
}
