// Package uploadproxy is cdi-uploadproxy: the one entry point for
// uploads. It checks the client's token (signed by cdi-apiserver), finds
// the PVC the token names, and streams the request to that PVC's upload
// server (Service cdi-upload-<pvc>) over mutual TLS: the upload server
// trusts only the proxy's client certificate.
//
// Answers before proxying, as CDI's: 400 no or a malformed Authorization
// header (or a token not for an upload to a PVC), 401 a token that is
// not valid (signature, issuer, expired), 503 the PVC is missing, not an
// upload target, already uploaded, or its server is not ready within
// ReadyWait.
package uploadproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadserver"
)

// ReadyWait is how long a request waits for the upload server to become
// ready (CDI's 10 s): a client that asks right after UploadReady may find
// the annotation a moment behind.
const ReadyWait = 10 * time.Second

// Proxy is cdi-uploadproxy.
type Proxy struct {
	Client   client.Reader
	Verifier *token.Verifier
	// Transport carries the mutual TLS to the upload servers.
	Transport http.RoundTripper
	// ServerURL is where PVC ns/name's upload server listens (ServerURL
	// by default).
	ServerURL func(ns, name string) string
	ReadyWait time.Duration
	Log       *slog.Logger
}

// ServerURL is the upload server Service of PVC ns/name.
func ServerURL(ns, name string) string {
	return fmt.Sprintf("https://%s.%s.svc", ServerName(name), ns)
}

// ServerName is the upload server's pod, Service and Secret for a PVC.
func ServerName(pvc string) string { return "cdi-upload-" + pvc }

// Handler is every route.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	for _, path := range uploadserver.Paths {
		mux.HandleFunc("POST "+path, p.upload)
		mux.HandleFunc("HEAD "+path, func(http.ResponseWriter, *http.Request) {})
	}
	return mux
}

func (p *Proxy) upload(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		http.Error(w, "no Authorization header: send Bearer <upload token>", http.StatusBadRequest)
		return
	}
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" || strings.ContainsAny(tok, " \t") {
		http.Error(w, "malformed Authorization header: want Bearer <upload token>", http.StatusBadRequest)
		return
	}
	grant, err := p.Verifier.Verify(tok, time.Now())
	if err != nil {
		p.Log.Info("upload refused", "err", err)
		http.Error(w, "invalid upload token", http.StatusUnauthorized)
		return
	}
	if err := grant.Grants(grant.Namespace, grant.Name); err != nil || grant.Name == "" || grant.Namespace == "" {
		http.Error(w, "the token grants no upload to a PVC", http.StatusBadRequest)
		return
	}
	if err := p.waitReady(r.Context(), grant.Namespace, grant.Name); err != nil {
		p.Log.Info("upload refused", "pvc", grant.Namespace+"/"+grant.Name, "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	target, err := url.Parse(p.serverURL(grant.Namespace, grant.Name))
	if err != nil {
		http.Error(w, "upload server address: "+err.Error(), http.StatusInternalServerError)
		return
	}
	p.Log.Info("proxying upload", "pvc", grant.Namespace+"/"+grant.Name, "path", r.URL.Path)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The token is the proxy's business, not the server's.
			pr.Out.Header.Del("Authorization")
		},
		Transport: p.Transport,
		// Streams pass through as they come: an upload is not buffered.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			p.Log.Error("upload to the server failed", "pvc", grant.Namespace+"/"+grant.Name, "err", err)
			http.Error(w, "error in upload-proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

func (p *Proxy) serverURL(ns, name string) string {
	if p.ServerURL != nil {
		return p.ServerURL(ns, name)
	}
	return ServerURL(ns, name)
}

// waitReady returns nil once PVC ns/name's upload server is ready, and
// why not when it is not within ReadyWait (or never can be).
func (p *Proxy) waitReady(ctx context.Context, ns, name string) error {
	wait := p.ReadyWait
	if wait == 0 {
		wait = ReadyWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(wait / 10)
	defer tick.Stop()
	var readErr error
	for {
		ready, err := p.ready(ctx, ns, name)
		var transient *transientError
		switch {
		case errors.As(err, &transient):
			if ctx.Err() == nil { // not a read the wait's end cut
				readErr = err // tried again until the wait ends
			}
		case ready || err != nil:
			return err
		default:
			readErr = nil
		}
		select {
		case <-ctx.Done():
			if readErr != nil {
				return readErr
			}
			return fmt.Errorf("the upload server of PVC %s/%s is not ready", ns, name)
		case <-tick.C:
		}
	}
}

// transientError is a failed read of the PVC, which may pass.
type transientError struct{ error }

func (e *transientError) Unwrap() error { return e.error }

func (p *Proxy) ready(ctx context.Context, ns, name string) (bool, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("rejecting the upload to PVC %s/%s: it does not exist", ns, name)
		}
		return false, &transientError{fmt.Errorf("reading PVC %s/%s: %w", ns, name, err)}
	}
	if _, ok := pvc.Annotations[cdiv1.AnnUploadRequest]; !ok {
		return false, fmt.Errorf("rejecting the upload to PVC %s/%s: it is not an upload target", ns, name)
	}
	if corev1.PodPhase(pvc.Annotations[cdiv1.AnnPodPhase]) == corev1.PodSucceeded {
		return false, fmt.Errorf("rejecting the upload to PVC %s/%s: it already finished uploading", ns, name)
	}
	return pvc.Annotations[cdiv1.AnnPodReady] == "true", nil
}

// Transport is the mutual TLS to upload servers: the proxy's client
// certificate, servers verified against the CA in caFile by the name in
// the URL. resolve, when set, gives the address to dial for that name
// (ServiceResolver: clusters without DNS). Files are read per connection,
// so rotated Secrets take effect without a restart.
func Transport(certFile, keyFile, caFile string, resolve func(ctx context.Context, host string) (string, error)) (*http.Transport, error) {
	if _, err := loadPool(caFile); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		dial := host
		if resolve != nil {
			if dial, err = resolve(ctx, host); err != nil {
				return nil, err
			}
		}
		d := &tls.Dialer{Config: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: host, Certificates: []tls.Certificate{cert}}}
		// A server just ready may not be routed to yet (kube-proxy
		// programs a Service's new endpoints a moment later: refused
		// until then): tried again for up to ReadyWait, as readiness is.
		ctx, cancel := context.WithTimeout(ctx, ReadyWait)
		defer cancel()
		for {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(dial, port))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return c, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return tr, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("upload server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("upload server CA %s: no certificates", caFile)
	}
	return pool, nil
}

// ServiceResolver resolves NAME.NAMESPACE.svc to the Service's cluster IP
// through the API: the proxy finds upload servers without cluster DNS.
func ServiceResolver(c client.Reader) func(ctx context.Context, host string) (string, error) {
	return func(ctx context.Context, host string) (string, error) {
		rest, ok := strings.CutSuffix(host, ".svc")
		name, ns, ok2 := strings.Cut(rest, ".")
		if !ok || !ok2 || strings.Contains(ns, ".") {
			return "", fmt.Errorf("%s is not a Service name (NAME.NAMESPACE.svc)", host)
		}
		svc := &corev1.Service{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			return "", fmt.Errorf("finding Service %s/%s: %w", ns, name, err)
		}
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return "", fmt.Errorf("the Service %s/%s has no cluster IP", ns, name)
		}
		return svc.Spec.ClusterIP, nil
	}
}
