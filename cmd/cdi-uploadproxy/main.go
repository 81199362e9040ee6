// Command cdi-uploadproxy is CDI's upload proxy (see
// storage/cdi/uploadproxy): clients send images with an upload token; it
// streams them to the PVC's upload server over mutual TLS.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadproxy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-uploadproxy:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, certDir, clientDir, publicKey string
	flag.StringVar(&addr, "listen", ":8443", "HTTPS address")
	flag.StringVar(&certDir, "cert-dir", "/etc/cdi-uploadproxy/server", "tls.crt and tls.key of the serving certificate")
	flag.StringVar(&clientDir, "client-cert-dir", "/etc/cdi-uploadproxy/client", "tls.crt and tls.key of the client certificate, ca.crt of the upload servers'")
	flag.StringVar(&publicKey, "token-public-key", "/etc/cdi-uploadproxy/token/"+token.PublicKeyKey, "the public key upload tokens are checked with")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	pub, err := os.ReadFile(publicKey)
	if err != nil {
		return fmt.Errorf("token public key: %w", err)
	}
	v, err := token.NewVerifier(pub)
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	tr, err := uploadproxy.Transport(clientDir+"/tls.crt", clientDir+"/tls.key", clientDir+"/ca.crt", uploadproxy.ServiceResolver(c))
	if err != nil {
		return err
	}
	p := &uploadproxy.Proxy{Client: c, Verifier: v, Transport: tr, Log: log}
	srv := &http.Server{Addr: addr, Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			// Reloaded per handshake: a rotated Secret takes effect without a restart.
			c, err := tls.LoadX509KeyPair(certDir+"/tls.crt", certDir+"/tls.key")
			return &c, err
		}}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Past the grace time open uploads are cut: their servers stay
		// ready for another attempt.
		_ = srv.Shutdown(sctx)
	}()
	log.Info("starting cdi-uploadproxy", "addr", addr)
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
