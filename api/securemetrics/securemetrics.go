// Package securemetrics is how a component's manager serves /metrics:
// over TLS, and only to callers the API server vouches for. The caller's
// bearer token is checked with a TokenReview and its right to GET the
// non-resource URL with a SubjectAccessReview, as kube-rbac-proxy and
// controller-runtime's secure serving do (done here with client-go alone:
// controller-runtime's filter brings in k8s.io/apiserver and its tracing
// for two API calls). The metrics of virt-handler and virt-controller
// name every tenant's VMs; a pod on the pod network without that right
// gets 401 (no token, or one the API server does not know) or 403.
//
// A manager serves them with Options. A server of the component's own
// (a webhook's HTTPS port that also answers GET /metrics: kubemacpool,
// virt-api, the template validator) puts its metrics behind Guard, with
// Route.
//
// The component's ServiceAccount needs system:auth-delegator, or
// ReviewRules in its ClusterRole (create tokenreviews and
// subjectaccessreviews); a scraper needs a role with
//
//	nonResourceURLs: ["/metrics"], verbs: ["get"]
//
// A manager's serving certificate is self-signed, made in memory at start,
// as kube-controller-manager's is: the traffic is encrypted, and the
// token, not the server's name, is what is checked.
package securemetrics

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options serve the manager's metrics at bindAddress ("0" turns them off)
// over TLS with authentication and authorization.
func Options(bindAddress string) metricsserver.Options {
	return metricsserver.Options{BindAddress: bindAddress, SecureServing: true, FilterProvider: filterProvider}
}

// ReviewRules are what a component needs to check its scrapers: the rules
// of system:auth-delegator.
func ReviewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{authnv1.GroupName}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{authzv1.GroupName}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
}

// Guard returns what puts a handler of the component's own server behind
// Options' checks, which it asks of the API server at cfg.
func Guard(cfg *rest.Config, log logr.Logger) (func(http.Handler) http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics review client: %w", err)
	}
	r, err := newReviewer(cfg, hc)
	if err != nil {
		return nil, err
	}
	c := newCache(r, time.Minute)
	return func(next http.Handler) http.Handler { return c.guard(log, next) }, nil
}

// Route serves reg's metrics at GET /metrics on mux behind guard (Guard's,
// or a test's); with guard nil there is no /metrics.
func Route(mux *http.ServeMux, guard func(http.Handler) http.Handler, reg prometheus.Gatherer) {
	if guard == nil {
		return
	}
	mux.Handle("GET /metrics", guard(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
}

// Reviewer asks the API server who a token is and whether they may GET a
// path.
type Reviewer interface {
	// Review returns the token's user and whether it may GET path;
	// authenticated is false for a token the API server does not know.
	Review(ctx context.Context, token, path string) (user string, authenticated, allowed bool, err error)
}

// apiReviewer is Reviewer through TokenReview and SubjectAccessReview.
type apiReviewer struct {
	authn authnclient.TokenReviewInterface
	authz authzclient.SubjectAccessReviewInterface
}

func (a apiReviewer) Review(ctx context.Context, token, path string) (string, bool, bool, error) {
	tr, err := a.authn.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", false, false, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return "", false, false, nil
	}
	u := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.authz.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return u.Username, true, false, fmt.Errorf("subject access review: %w", err)
	}
	return u.Username, true, sar.Status.Allowed, nil
}

func newReviewer(c *rest.Config, hc *http.Client) (Reviewer, error) {
	authn, err := authnclient.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authorization client: %w", err)
	}
	return apiReviewer{authn: authn.TokenReviews(), authz: authz.SubjectAccessReviews()}, nil
}

func filterProvider(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	r, err := newReviewer(c, hc)
	if err != nil {
		return nil, err
	}
	return Filter(r, time.Minute), nil
}

// Filter admits GETs whose bearer token r allows for the path. A decision
// is remembered for ttl (kube-rbac-proxy's default is a few minutes), so a
// scraper every few seconds costs the API server two calls a minute; a
// revoked right ends within ttl.
func Filter(r Reviewer, ttl time.Duration) metricsserver.Filter {
	c := newCache(r, ttl)
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return c.guard(log, next), nil
	}
}

// guard is next behind the token and access checks.
func (c *cache) guard(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		d, err := c.decide(req.Context(), token, req.URL.Path)
		switch {
		case err != nil:
			log.Error(err, "reviewing a metrics request")
			http.Error(w, "the API server could not review the request", http.StatusInternalServerError)
		case !d.authenticated:
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case !d.allowed:
			http.Error(w, fmt.Sprintf("Forbidden: %s may not get %s", d.user, req.URL.Path), http.StatusForbidden)
		default:
			next.ServeHTTP(w, req)
		}
	})
}

type decision struct {
	user                   string
	authenticated, allowed bool
	until                  time.Time
}

type cache struct {
	r   Reviewer
	ttl time.Duration
	mu  sync.Mutex
	m   map[[sha256.Size]byte]decision
}

func newCache(r Reviewer, ttl time.Duration) *cache {
	return &cache{r: r, ttl: ttl, m: map[[sha256.Size]byte]decision{}}
}

func (c *cache) decide(ctx context.Context, token, path string) (decision, error) {
	k := sha256.Sum256([]byte(path + "\x00" + token))
	now := time.Now()
	c.mu.Lock()
	d, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Before(d.until) {
		return d, nil
	}
	user, authn, allowed, err := c.r.Review(ctx, token, path)
	if err != nil {
		return decision{}, err // not remembered: the next scrape asks again
	}
	d = decision{user: user, authenticated: authn, allowed: allowed, until: now.Add(c.ttl)}
	c.mu.Lock()
	for k2, old := range c.m { // tokens rotate: drop what has expired
		if now.After(old.until) {
			delete(c.m, k2)
		}
	}
	c.m[k] = d
	c.mu.Unlock()
	return d, nil
}
