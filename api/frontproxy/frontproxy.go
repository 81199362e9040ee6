// Package frontproxy authenticates requests that the API server's
// aggregation layer proxies to an extension API server (virt-api,
// cdi-apiserver), and the admission reviews it sends to webhooks
// (APIServer, OnlyAPIServer): the front proxy's client certificate, checked against
// the requestheader CA and allowed names that the API server publishes in
// kube-system/extension-apiserver-authentication, carries the user in
// headers. Authorize then asks the API server, with a
// SubjectAccessReview, whether that user may do what it asks.
package frontproxy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Authenticator checks the front proxy's certificate and reads the user.
type Authenticator struct {
	// CAs and allowed client names (any when empty) of the front proxy.
	CAs          *x509.CertPool
	Names        []string
	UserHeaders  []string
	GroupHeaders []string
}

// User is who a proxied request is for.
type User struct {
	Name   string
	Groups []string
	Extra  map[string]authzv1.ExtraValue
}

// Load reads the front proxy's settings as the API server publishes them
// for extension API servers.
func Load(ctx context.Context, c client.Reader) (*Authenticator, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, cm); err != nil {
		return nil, fmt.Errorf("reading the front-proxy settings: %w", err)
	}
	a := &Authenticator{CAs: x509.NewCertPool()}
	if !a.CAs.AppendCertsFromPEM([]byte(cm.Data["requestheader-client-ca-file"])) {
		return nil, errors.New("extension-apiserver-authentication has no requestheader-client-ca-file: is the aggregation layer configured?")
	}
	// A malformed list must not silently widen or empty what is trusted.
	for _, l := range []struct {
		key string
		out *[]string
	}{
		{"requestheader-allowed-names", &a.Names},
		{"requestheader-username-headers", &a.UserHeaders},
		{"requestheader-group-headers", &a.GroupHeaders},
	} {
		if s := cm.Data[l.key]; s != "" {
			if err := json.Unmarshal([]byte(s), l.out); err != nil {
				return nil, fmt.Errorf("extension-apiserver-authentication %s: %w", l.key, err)
			}
		}
	}
	if len(a.UserHeaders) == 0 {
		a.UserHeaders = []string{"X-Remote-User"}
	}
	if len(a.GroupHeaders) == 0 {
		a.GroupHeaders = []string{"X-Remote-Group"}
	}
	return a, nil
}

// ErrNoCertificate is a request without a client certificate: not the
// API server's (401, where a certificate that is not its own is 403).
var ErrNoCertificate = errors.New("no client certificate: this API is served through the API server")

// APIServer checks that r came from the API server: a client certificate
// from the front-proxy CA with an allowed name. The API server presents it
// when proxying to an extension API server, and to admission webhooks
// where its admission configuration names that certificate for them
// (WebhookAdmission kubeConfigFile; hack/cluster/up.sh).
func (a *Authenticator) APIServer(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ErrNoCertificate
	}
	cert := r.TLS.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: a.CAs, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range r.TLS.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cert.Verify(opts); err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if len(a.Names) > 0 && !slices.Contains(a.Names, cert.Subject.CommonName) {
		return fmt.Errorf("client certificate %q is not an allowed front proxy", cert.Subject.CommonName)
	}
	return nil
}

// User authenticates r: only requests proxied by the API server, with a
// client certificate from the front-proxy CA and an allowed name, name a
// user.
func (a *Authenticator) User(r *http.Request) (User, error) {
	if err := a.APIServer(r); err != nil {
		return User{}, err
	}
	u := User{Extra: map[string]authzv1.ExtraValue{}}
	for _, h := range a.UserHeaders {
		if v := r.Header.Get(h); v != "" {
			u.Name = v
			break
		}
	}
	for _, h := range a.GroupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for k, vs := range r.Header {
		if rest, ok := strings.CutPrefix(k, "X-Remote-Extra-"); ok {
			u.Extra[strings.ToLower(rest)] = vs
		}
	}
	if u.Name == "" {
		return User{}, errors.New("the proxied request names no user")
	}
	return u, nil
}

// Authorize asks the API server whether u may do what attrs say.
func Authorize(ctx context.Context, c client.Client, u User, attrs authzv1.ResourceAttributes) (bool, error) {
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Name, Groups: u.Groups, Extra: u.Extra, ResourceAttributes: &attrs}}
	if err := c.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("authorizing: %w", err)
	}
	return sar.Status.Allowed, nil
}

// Users authenticates a proxied request (Authenticator, Watcher).
type Users interface {
	User(r *http.Request) (User, error)
}

// Callers tells the API server's calls from anyone else's (Authenticator,
// Watcher).
type Callers interface {
	APIServer(r *http.Request) error
}

// OnlyAPIServer serves h to the API server alone: an admission webhook is
// reachable by every pod, and one that acts on what it is sent (a MAC
// allocated and held per review) must not act for them. No certificate is
// 401, another's 403; nothing of the request is read.
func OnlyAPIServer(c Callers, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c == nil {
			// Not configured: served to no one rather than to anyone.
			http.Error(w, "webhooks answer the API server only, and this server was not told how to know it", http.StatusInternalServerError)
			return
		}
		if err := c.APIServer(r); err != nil {
			code := http.StatusForbidden
			if errors.Is(err, ErrNoCertificate) {
				code = http.StatusUnauthorized
			}
			http.Error(w, "webhooks answer the API server only: "+err.Error(), code)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Watcher is an Authenticator kept current: the API server's front-proxy
// CA is rotated like any other (kubeadm certs renew, a new CA published
// beside the old in extension-apiserver-authentication), and a server
// that read it once at start would refuse every proxied request after
// the rotation until restarted.
type Watcher struct {
	c   client.Reader
	cur atomic.Pointer[Authenticator]
}

// WatchEvery is how often Run re-reads the settings.
const WatchEvery = time.Minute

// NewWatcher reads the settings (failing as Load does) and returns a
// Watcher holding them; Run keeps them current.
func NewWatcher(ctx context.Context, c client.Reader) (*Watcher, error) {
	a, err := Load(ctx, c)
	if err != nil {
		return nil, err
	}
	w := &Watcher{c: c}
	w.cur.Store(a)
	return w, nil
}

// Watch is NewWatcher with Run started until ctx ends, failures to
// re-read going to logf: what an extension API server does at start.
func Watch(ctx context.Context, c client.Reader, logf func(error)) (*Watcher, error) {
	w, err := NewWatcher(ctx, c)
	if err != nil {
		return nil, err
	}
	go w.Run(ctx, logf)
	return w, nil
}

// Refresh re-reads the settings; on an error the ones held stay (a
// settings ConfigMap briefly unreadable must not lock every user out).
func (w *Watcher) Refresh(ctx context.Context) error {
	a, err := Load(ctx, w.c)
	if err != nil {
		return err
	}
	w.cur.Store(a)
	return nil
}

// Run refreshes the settings every WatchEvery until ctx ends, reporting
// failures to logf.
func (w *Watcher) Run(ctx context.Context, logf func(error)) {
	t := time.NewTicker(WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.Refresh(ctx); err != nil {
				logf(err)
			}
		}
	}
}

// User authenticates r with the settings held now.
func (w *Watcher) User(r *http.Request) (User, error) { return w.cur.Load().User(r) }

// APIServer checks r's caller with the settings held now.
func (w *Watcher) APIServer(r *http.Request) error { return w.cur.Load().APIServer(r) }

// ReaderBinding binds the ServiceAccount namespace/account to the Role
// every cluster has for reading the front-proxy settings
// (extension-apiserver-authentication-reader in kube-system): what a
// component needs for Load and Watch.
func ReaderBinding(name, namespace, account string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: namespace}}}
}
