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

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// grace is how long open requests have to end at shutdown.
const grace = 5 * time.Second

// Scheme is what the services read: client-go's types and CDI's (the
// DataVolume webhook reads DataSources).
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering client-go's types: %w", err)
	}
	if err := cdiv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering cdi.kubevirt.io/v1beta1 types: %w", err)
	}
	return s, nil
}

// Client is an API client from the kubeconfig (in a pod, its service
// account) with Scheme's types.
func Client() (client.Client, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
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
