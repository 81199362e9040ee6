// Package serve is how CDI's HTTPS services (cdi-apiserver,
// cdi-uploadproxy) serve alike: the API client, the serving certificate
// read per handshake, and the shutdown when the process is told to stop.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// grace is how long open requests have to end at shutdown.
const grace = 5 * time.Second

// Client is an API client from the kubeconfig (in a pod, its service
// account) with client-go's scheme.
func Client() (client.Client, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return c, nil
}

// Certificate is a tls.Config's GetCertificate reading dir's tls.crt and
// tls.key on every handshake: a rotated Secret takes effect without a
// restart.
func Certificate(dir string) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(dir+"/tls.crt", dir+"/tls.key")
		return &c, err
	}
}

// ListenAndServeTLS serves srv (its TLSConfig has the certificate) until
// ctx ends, then shuts it down: past the grace time, requests still open
// are cut.
func ListenAndServeTLS(ctx context.Context, srv *http.Server) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		// What is cut has nothing to save: a client tries again.
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
