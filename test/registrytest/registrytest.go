// Package registrytest runs a real distribution registry (the one the
// dev cluster runs, built by hack/cluster/registry.sh) for a test: TLS
// with a CA of the test's own, optionally Basic authentication, storage
// in the test's temporary directory, stopped at the test's end.
package registrytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// EnvBin names the registry binary; without it the test builds it with
// hack/cluster/registry.sh build (cached under $KUBEVMM_CACHE/registry).
const EnvBin = "KUBEVMM_REGISTRY_BIN"

// Registry is a running registry.
type Registry struct {
	// Addr is host:port.
	Addr string
	// CA is the PEM certificate that signed the registry's.
	CA []byte
	// Dir is the registry's storage directory.
	Dir string
}

// Options are a registry's.
type Options struct {
	// Username and Password, if set, are required (Basic, htpasswd).
	Username, Password string
}

// Bin returns the registry binary's path, building it if need be.
func Bin(t testing.TB) string {
	t.Helper()
	if b := os.Getenv(EnvBin); b != "" {
		return b
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "cluster", "registry.sh")
	out, err := exec.Command(script, "build").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("building the registry (%s build): %v\n%s", script, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// Start runs a registry until the test ends.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	bin := Bin(t)
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := certs(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}
http: {addr: %q, tls: {certificate: %s, key: %s}}
`, filepath.Join(dir, "storage"), addr, write("tls.crt", certPEM), write("tls.key", keyPEM))
	if o.Username != "" {
		h, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth: {htpasswd: {realm: test, path: %s}}\n", write("htpasswd", []byte(o.Username+":"+string(h)+"\n")))
	}
	cmd := exec.Command(bin, "serve", write("config.yml", []byte(cfg)))
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	// Ready when /v2/ answers (401 with authentication); the bound only
	// turns a registry that never comes up into a failure.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if resp, err := hc.Get("https://" + addr + "/v2/"); err == nil {
			_ = resp.Body.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("registry exited:\n%s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry did not answer on %s within 60s", addr)
		}
	}
	return &Registry{Addr: addr, CA: caPEM, Dir: filepath.Join(dir, "storage")}
}

// certs makes a CA and a server certificate for 127.0.0.1 and localhost.
func certs(t testing.TB) (ca, cert, key []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "registrytest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "registry"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
