package handler

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoTLS serves cfg on a loopback port, echoing what each connection
// sends; a connection that fails its handshake is closed.
func echoTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends a line and reads it back: with TLS 1.3 a refused client
// certificate shows only on the first read.
func roundTrip(c net.Conn) error {
	msg := []byte("ping\n")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != string(msg) {
		return fmt.Errorf("read %q", buf)
	}
	return nil
}

func writeBundle(t *testing.T, path string, cas ...*testCA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.pem...)
	}
	// As the kubelet does: the new content replaces the file at once.
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, b, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// During a CA rotation the bundle holds the new CA and the previous one:
// virt-handler's server and both ends of migration streams then accept
// peers with a leaf of either, read from the bundle file as it changes,
// without a restart; once the previous CA leaves the bundle its leaves are
// refused; a session established before keeps going.
func TestTrustFollowsTheCABundle(t *testing.T) {
	oldCA, newCA := newTestCA(t, "old-ca"), newTestCA(t, "new-ca")
	dir := t.TempDir()

	t.Run("virt-handler's server", func(t *testing.T) {
		files := oldCA.issue(t, filepath.Join(dir, "server"), HandlerName, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
		cfg, err := ServerTLS(files)
		require.NoError(t, err)
		addr := echoTLS(t, cfg)
		client := func(ca *testCA, name string) *tls.Config {
			f := ca.issue(t, filepath.Join(dir, name), VirtAPIClientName, x509.ExtKeyUsageClientAuth)
			pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			require.NoError(t, err)
			// The server's own certificate is not what is tested here.
			return &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true} //nolint:gosec
		}
		withOld, withNew := client(oldCA, "api-old"), client(newCA, "api-new")
		dial := func(c *tls.Config) (net.Conn, error) {
			conn, err := tls.Dial("tcp", addr, c)
			if err != nil {
				return nil, err
			}
			if err := roundTrip(conn); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}
		check := func(step string, c *tls.Config, ok bool) {
			conn, err := dial(c)
			if ok {
				require.NoError(t, err, step)
				conn.Close()
			} else {
				require.Error(t, err, step)
			}
		}

		check("old CA only: the old leaf", withOld, true)
		check("old CA only: the new leaf", withNew, false)
		writeBundle(t, files.CA, newCA, oldCA)
		check("both: the old leaf", withOld, true)
		check("both: the new leaf", withNew, true)
		open, err := dial(withOld)
		require.NoError(t, err)
		defer open.Close()
		writeBundle(t, files.CA, newCA)
		check("new CA only: the old leaf", withOld, false)
		check("new CA only: the new leaf", withNew, true)
		assert.NoError(t, roundTrip(open), "a session established before the old CA left goes on")
	})

	t.Run("migration streams", func(t *testing.T) {
		// Two handlers mid-rotation: one still on a leaf of the old CA,
		// one already on the new; both bundles hold both CAs.
		oldFiles := oldCA.issue(t, filepath.Join(dir, "h-old"), HandlerName, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
		newFiles := newCA.issue(t, filepath.Join(dir, "h-new"), HandlerName, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
		oldH, err := NewMigrationTLS(oldFiles)
		require.NoError(t, err)
		newH, err := NewMigrationTLS(newFiles)
		require.NoError(t, err)
		oldAddr, newAddr := echoTLS(t, oldH.Server), echoTLS(t, newH.Server)
		stream := func(from *MigrationTLS, to string) error {
			conn, err := tls.Dial("tcp", to, from.Client)
			if err != nil {
				return err
			}
			defer conn.Close()
			return roundTrip(conn)
		}
		require.Error(t, stream(oldH, newAddr), "the old handler does not yet trust the new CA")
		require.Error(t, stream(newH, oldAddr), "nor the new handler the old one")
		writeBundle(t, oldFiles.CA, newCA, oldCA)
		writeBundle(t, newFiles.CA, newCA, oldCA)
		require.NoError(t, stream(oldH, newAddr), "old leaf to new")
		require.NoError(t, stream(newH, oldAddr), "new leaf to old")
	})
}
