// Command cdi-apiserver serves CDI's aggregated API
// upload.cdi.kubevirt.io/v1beta1 (see storage/cdi/apiserver): upload
// tokens for users allowed to create uploadtokenrequests.
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

	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/storage/cdi/apiserver"
	"github.com/kubevmm/kubevmm/storage/cdi/serve"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-apiserver:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, certDir, keyFile string
	flag.StringVar(&addr, "listen", ":8443", "HTTPS address")
	flag.StringVar(&certDir, "cert-dir", "/etc/cdi-apiserver/server", "tls.crt and tls.key of the serving certificate")
	flag.StringVar(&keyFile, "token-key", "/etc/cdi-apiserver/token/"+token.PrivateKeyKey, "the private key upload tokens are signed with")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	// Read again when the mounted Secret changes: the operator replaces
	// a key pair that went missing or bad.
	signer, err := token.SignerFile(keyFile)
	if err != nil {
		return err
	}
	c, err := serve.Client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	auth, err := frontproxy.Watch(ctx, c, func(err error) {
		log.Error("re-reading the front-proxy settings (the ones read before stay)", "error", err)
	})
	if err != nil {
		return err
	}
	s := &apiserver.Server{Auth: auth, Callers: auth, Client: c, Signer: signer, Log: log}
	srv := &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serve.Certificate(certDir),
			// The front proxy's certificate (on proxied requests and
			// admission reviews alike) is checked per request.
			ClientAuth: tls.RequestClientCert}}
	log.Info("starting cdi-apiserver", "addr", addr)
	return serve.ListenAndServeTLS(ctx, srv)
}
