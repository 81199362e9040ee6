// Command cdi-uploadproxy is CDI's upload proxy (see
// storage/cdi/uploadproxy): clients send images with an upload token; it
// streams them to the PVC's upload server over mutual TLS.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/storage/cdi/serve"
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

	// Read again when the mounted Secret changes, with cdi-apiserver's
	// private half.
	v, err := token.VerifierFile(publicKey)
	if err != nil {
		return err
	}
	c, err := serve.Client()
	if err != nil {
		return err
	}
	tr, err := uploadproxy.Transport(clientDir+"/tls.crt", clientDir+"/tls.key", clientDir+"/ca.crt", uploadproxy.ServiceResolver(c))
	if err != nil {
		return err
	}
	p := &uploadproxy.Proxy{Client: c, Verifier: v, Transport: tr, Log: log}
	srv := &http.Server{Addr: addr, Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serve.Certificate(certDir)}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// At shutdown, open uploads are cut: their servers stay ready for
	// another attempt.
	log.Info("starting cdi-uploadproxy", "addr", addr)
	return serve.ListenAndServeTLS(ctx, srv)
}
