package handler

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a leaf certificate for cn, its key and this CA into dir
// and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, cn string, usage ...x509.ExtKeyUsage) TLSFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	f := TLSFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	require.NoError(t, os.WriteFile(f.CA, ca.pem, 0o600))
	return f
}

// handlerTLS is a virt-handler's migration TLS from a fresh cluster CA.
func handlerTLS(t *testing.T) (*MigrationTLS, *testCA) {
	t.Helper()
	ca := newTestCA(t, "kubevmm-ca")
	m, err := NewMigrationTLS(ca.issue(t, filepath.Join(t.TempDir(), "handler"), HandlerName,
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
	require.NoError(t, err)
	return m, ca
}

// recordingConn keeps the first bytes read from the connection.
type recordingConn struct {
	net.Conn
	mu   sync.Mutex
	read []byte
}

func (c *recordingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if len(c.read) < 16 {
		c.read = append(c.read, b[:min(n, 16-len(c.read))]...)
	}
	c.mu.Unlock()
	return n, err
}

// migrationServer serves a MigrationServer on a loopback port.
func migrationServer(t *testing.T, cfg *MigrationTLS) (*MigrationServer, string) {
	t.Helper()
	srv := &MigrationServer{TLS: cfg.Server, Logf: t.Logf}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return srv, l.Addr().String()
}

// TestMigrationServerRefusesStrangers: whatever connects to a handler's
// migration port before the source (plain TCP, TLS without a
// certificate, a certificate of another CA, one of the cluster CA that is
// not virt-handler's, even a handler naming a migration this node does
// not expect) gets nothing, and the source handler's stream then carries
// the migration both ways between the launchers' unix sockets.
func TestMigrationServerRefusesStrangers(t *testing.T) {
	tlsCfg, ca := handlerTLS(t)
	dir := t.TempDir()
	srv, addr := migrationServer(t, tlsCfg)

	// The target launcher: its VMM answers what the source sends, upper-cased.
	in, inDir := testSocketDir(t)
	vmm, err := net.Listen("unix", filepath.Join(inDir, vmispec.MigrationInSocket))
	require.NoError(t, err)
	defer vmm.Close()
	go func() {
		c, err := vmm.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(io.LimitReader(c, 5))
		c.Write(bytes.ToUpper(b))
	}()
	srv.Expect("migration-1", "ns/target", in)

	// A plain client: its bytes are no TLS handshake.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	c.Write([]byte("KVMMIG\x00\x01 here is a VM"))
	c.SetReadDeadline(time.Now().Add(time.Minute))
	io.ReadAll(c) // until the server closes it (an alert, or a reset)
	c.Close()

	// TLS clients without a handler's certificate; the stream is TLS.
	other := newTestCA(t, "another-ca")
	for _, tc := range []struct {
		name string
		cert *TLSFiles
	}{
		{"no certificate", nil},
		{"another CA's certificate", toPtr(other.issue(t, filepath.Join(dir, "other"), HandlerName, x509.ExtKeyUsageClientAuth))},
		{"the cluster CA's virt-api client", toPtr(ca.issue(t, filepath.Join(dir, "api"), "kubevirt.io:system:client:virt-api", x509.ExtKeyUsageClientAuth))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			rc := &recordingConn{Conn: raw}
			cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
			if tc.cert != nil {
				pair, err := tls.LoadX509KeyPair(tc.cert.Cert, tc.cert.Key)
				require.NoError(t, err)
				cfg.Certificates = []tls.Certificate{pair}
			}
			tc2 := tls.Client(rc, cfg)
			tc2.SetDeadline(time.Now().Add(time.Minute))
			err = tc2.Handshake()
			if err == nil {
				// TLS 1.3: the client may finish before the server has
				// judged its certificate; the refusal comes on the first read.
				io.WriteString(tc2, "migration-1\n")
				_, err = tc2.Read(make([]byte, 1))
			}
			require.Error(t, err, "refused")
			tc2.Close()
			rc.mu.Lock()
			assert.Equal(t, []byte{0x16, 0x03}, rc.read[:2], "the server's first bytes are a TLS handshake record")
			rc.mu.Unlock()
		})
	}
	assert.Eventually(t, func() bool { return srv.Refused() == 4 }, time.Minute, 10*time.Millisecond,
		"every stranger was refused (%d)", srv.Refused())

	// A handler naming a migration this node does not expect gets nothing.
	src, srcDir := testSocketDir(t)
	out := filepath.Join(srcDir, vmispec.MigrationOutSocket)
	send := func(uid, data string) string {
		t.Helper()
		p, err := listenSource(src, launcherUID, addr, uid, tlsCfg.Client, t.Logf)
		require.NoError(t, err)
		defer p.stop()
		var st unix.Stat_t
		require.NoError(t, unix.Stat(out, &st))
		assert.Equal(t, uint32(launcherUID), st.Uid, "the launcher, not root, may connect")
		assert.Equal(t, uint32(0o600), st.Mode&0o777)
		s, err := net.Dial("unix", out)
		require.NoError(t, err)
		defer s.Close()
		s.Write([]byte(data))
		s.SetReadDeadline(time.Now().Add(time.Minute))
		got, _ := io.ReadAll(s)
		return string(got)
	}
	assert.Empty(t, send("migration-2", "hello"), "a migration the node does not expect")

	// The real source: its launcher connects to the unix socket its
	// handler made; the stream reaches the target launcher and back.
	assert.Equal(t, "HELLO", send("migration-1", "hello"))
	assert.Empty(t, send("migration-1", "again"), "one stream per migration")
	assert.Equal(t, 4, srv.Refused())
}

// A source handler whose peer is not virt-handler (a listener with
// another certificate on the target's address) does not send it the VM.
func TestMigrationProxySourceChecksTheTarget(t *testing.T) {
	tlsCfg, ca := handlerTLS(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		ca   *testCA
		cn   string
	}{
		{"another CA", newTestCA(t, "another-ca"), HandlerName},
		{"the cluster CA, another name", ca, "virt-api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.ca.issue(t, filepath.Join(dir, tc.name), tc.cn, x509.ExtKeyUsageServerAuth)
			pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			require.NoError(t, err)
			l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
			require.NoError(t, err)
			defer l.Close()
			received := make(chan []byte, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				b, _ := io.ReadAll(c)
				received <- b
			}()
			src, srcDir := testSocketDir(t)
			sock := filepath.Join(srcDir, vmispec.MigrationOutSocket)
			source, err := listenSource(src, launcherUID, l.Addr().String(), "migration-1", tlsCfg.Client, t.Logf)
			require.NoError(t, err)
			defer source.stop()
			s, err := net.Dial("unix", sock)
			require.NoError(t, err)
			s.Write([]byte("the guest's memory"))
			s.SetReadDeadline(time.Now().Add(time.Minute))
			io.ReadAll(s) // the proxy ends the stream (unread data: a reset)
			s.Close()
			assert.Empty(t, <-received, "nothing reached the impostor")
		})
	}
}

func toPtr[T any](v T) *T { return &v }

// launcherUID is the user a launcher runs as in these tests (nobody).
const launcherUID = 65534
