package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// Certificate reads the serving certificate dir/tls.crt and its key
// dir/tls.key (a mounted kubernetes.io/tls Secret).
func Certificate(dir string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &c, nil
}

// ServeTLS serves h over HTTPS on ln until ctx ends, with the certificate
// in certDir read at each handshake: a rotated Secret's files take effect
// without a restart (the API server keeps its connections, so handshakes
// are few). Clients are asked for a certificate and not required to show
// one: reviews come with the API server's, which the routes check
// (frontproxy.OnlyAPIServer); probes and scrapes come without.
func ServeTLS(ctx context.Context, ln net.Listener, h http.Handler, certDir string) error {
	srv := &http.Server{
		Handler: h, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			ClientAuth:     tls.RequestClientCert,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return Certificate(certDir) },
		},
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Past the grace time open reviews are cut; the API server
		// applies the webhook's failure policy to them.
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
