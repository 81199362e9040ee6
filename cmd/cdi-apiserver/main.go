// Command cdi-apiserver serves CDI's aggregated API
// upload.cdi.kubevirt.io/v1beta1 (see storage/cdi/apiserver): upload
// tokens for users allowed to create uploadtokenrequests.
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

	"github.com/kubevmm/kubevmm/storage/cdi/apiserver"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/virtapi/frontproxy"
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

	key, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("token key: %w", err)
	}
	signer, err := token.NewSigner(key)
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	auth, err := frontproxy.Load(ctx, c)
	if err != nil {
		return err
	}
	s := &apiserver.Server{Auth: auth, Client: c, Signer: signer, Log: log}
	srv := &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12,
			// The front proxy's certificate is checked per request.
			ClientAuth: tls.RequestClientCert,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				// Reloaded per handshake: a rotated Secret takes effect without a restart.
				c, err := tls.LoadX509KeyPair(certDir+"/tls.crt", certDir+"/tls.key")
				return &c, err
			}}}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Past the grace time open requests are cut: nothing to save.
		_ = srv.Shutdown(sctx)
	}()
	log.Info("starting cdi-apiserver", "addr", addr)
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
