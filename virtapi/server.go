// Package virtapi is virt-api: kubevmm's HTTPS entry point for what the
// API server does not do by itself. It serves
//
//   - the admission webhooks of kubevirt.io objects: defaults (machine
//     type, the pod network's masquerade interface, phase Pending) and
//     refusal of what kubevmm cannot run, naming the field;
//   - the aggregated API group subresources.kubevirt.io/v1 behind an
//     APIService: start, stop, restart (VMs), pause, unpause, migrate
//     (VMs and VMIs), reset and softreboot (VMIs), the serial console,
//     port forwarding and vsock streams, version and healthz, as
//     KubeVirt's virt-api, so that KubeVirt's virtctl URLs work.
//
// Requests proxied by the API server are authenticated by its front-proxy
// client certificate (requestheader CA and allowed names from
// kube-system/extension-apiserver-authentication) and authorized with a
// SubjectAccessReview of the user they carry. Node-side work (pause,
// reset, console, port forwarding, vsock) goes to virt-handler on the VMI's node over mutual TLS.
package virtapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	admissionv1 "k8s.io/api/admission/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/clusterconfig"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/api/version"
)

// Server is virt-api.
type Server struct {
	Client client.Client
	// Namespace is where virt-handler pods run.
	Namespace string
	// HandlerTLS is the client side of the mutual TLS to virt-handler.
	HandlerTLS *tls.Config
	// Proxy authenticates the API server's front proxy and reads the
	// user (frontproxy.Watcher: its CA re-read as it rotates).
	Proxy frontproxy.Users
	// Callers tells the API server's admission reviews from anyone
	// else's (frontproxy.Watcher): the webhooks answer only it.
	Callers frontproxy.Callers
	// MetricsGuard checks a scraper's token (securemetrics.Guard); nil:
	// no /metrics.
	MetricsGuard func(http.Handler) http.Handler
	Log          logr.Logger
	// Config is the cluster configuration (KubeVirt's feature gates),
	// asked per request; nil: none enabled.
	Config func() (clusterconfig.ClusterConfig, error)
}

// withoutContext makes a decision that reads nothing from the API an
// admission.Func.
func withoutContext(decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) admission.Func {
	return func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return decide(req)
	}
}

// Handler is every route.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// The webhooks answer the API server only (its front-proxy client
	// certificate): a review is the API server's word on what is stored.
	review := func(path string, decide admission.Func) {
		mux.Handle("POST "+path, frontproxy.OnlyAPIServer(s.Callers, admission.Handler(decide)))
	}
	review(PathMutateVMI, s.mutateVMI)
	review(PathMutateVM, withoutContext(mutateVM))
	review(PathValidateVMI, withoutContext(s.gateSeccomp(false, s.gateHotplugSpecs(false, validateVMI))))
	review(PathValidateVM, func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return s.gateSeccomp(true, s.gateHotplugSpecs(true, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return s.validateVMClones(ctx, req)
		}))(req)
	})
	review(PathValidateVMIM, withoutContext(validateVMIM))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Prometheus scrapes the same HTTPS port, as KubeVirt's virt-api
	// serves it, with a token allowed to GET /metrics, as for every
	// component; the process's own metrics make its `up` series.
	securemetrics.Route(mux, s.MetricsGuard, metricsRegistry())

	mux.HandleFunc("GET /apis", s.discoveryGroups)
	mux.HandleFunc("GET /apis/"+v1.SubresourceGroupName, s.discoveryGroup)
	mux.HandleFunc("GET /apis/"+v1.SubresourceGroupVersion.String(), s.discoveryResources)
	sr := "/apis/" + v1.SubresourceGroupVersion.String()
	mux.HandleFunc("GET "+sr+"/version", s.authn(s.version))
	mux.HandleFunc("GET "+sr+"/healthz", s.authn(s.healthz))
	ns := sr + "/namespaces/{namespace}/"
	for _, op := range []string{"start", "stop", "restart", "migrate", "pause", "unpause"} {
		mux.HandleFunc("PUT "+ns+"virtualmachines/{name}/"+op, s.authz("virtualmachines", op, "update", s.vmOp(op)))
	}
	for _, op := range vmiOps {
		mux.HandleFunc("PUT "+ns+"virtualmachineinstances/{name}/"+op, s.authz("virtualmachineinstances", op, "update", s.vmiOp(op)))
	}
	for _, op := range []string{"addvolume", "removevolume"} {
		mux.HandleFunc("PUT "+ns+"virtualmachineinstances/{name}/"+op, s.authz("virtualmachineinstances", op, "update", s.volumeOp(op, false)))
		mux.HandleFunc("PUT "+ns+"virtualmachines/{name}/"+op, s.authz("virtualmachines", op, "update", s.volumeOp(op, true)))
	}
	mux.HandleFunc("GET "+ns+"virtualmachineinstances/{name}/console", s.authz("virtualmachineinstances", "console", "get", s.console))
	s.portForwardRoutes(mux, ns)
	mux.HandleFunc("GET "+ns+"virtualmachineinstances/{name}/vsock", s.authz("virtualmachineinstances", "vsock", "get", s.vsock))
	s.guestAgentRoutes(mux, ns)
	mux.HandleFunc("PUT "+ns+"expand-vm-spec", s.authz("expand-vm-spec", "", "update", s.expandVMSpec))
	mux.HandleFunc("GET "+ns+"virtualmachines/{name}/expand-spec", s.authz("virtualmachines", "expand-spec", "get", s.expandSpec))
	return mux
}

// vmiOps are the PUT subresources of VMIs.
var vmiOps = []string{"pause", "unpause", "migrate", "reset", "softreboot"}

// metricsRegistry holds what virt-api reports: the Go runtime's and the
// process's metrics (KubeVirt's kubevirt_virt_api_up is a recording rule
// over the scrape's `up`).
func metricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// userInfo is who a proxied request is for.
type userInfo struct {
	Name   string
	Groups []string
	Extra  map[string]authzv1.ExtraValue
}

// authn accepts only requests proxied by the API server: a client
// certificate from the front-proxy CA with an allowed name.
func (s *Server) authn(next func(http.ResponseWriter, *http.Request, userInfo)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, err := s.proxiedUser(r)
		if err != nil {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, err.Error())
			return
		}
		next(w, r, u)
	}
}

func (s *Server) proxiedUser(r *http.Request) (userInfo, error) {
	u, err := s.Proxy.User(r)
	return userInfo(u), err
}

// authz checks with the API server that the user may use the
// subresource (KubeVirt's RBAC: group subresources.kubevirt.io, resource
// "virtualmachines/start" etc.).
func (s *Server) authz(resource, sub, verb string, next func(http.ResponseWriter, *http.Request, userInfo)) http.HandlerFunc {
	return s.authn(func(w http.ResponseWriter, r *http.Request, u userInfo) {
		allowed, err := frontproxy.Authorize(r.Context(), s.Client, frontproxy.User(u), authzv1.ResourceAttributes{
			Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Verb: verb,
			Group: v1.SubresourceGroupName, Version: "v1", Resource: resource, Subresource: sub,
		})
		if err != nil {
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
			return
		}
		if !allowed {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
				"%s %q cannot %s resource %q in API group %q in the namespace %q", "User", u.Name, verb, resource+"/"+sub, v1.SubresourceGroupName, r.PathValue("namespace")))
			return
		}
		next(w, r, u)
	})
}

// writeStatus answers with a metav1.Status, which kubectl and virtctl print.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}
	if code < 300 {
		st.Status = metav1.StatusSuccess
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is sent: a client gone mid-body cannot be told more.
	_ = json.NewEncoder(w).Encode(st)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	// A client gone mid-body cannot be told more.
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) discoveryGroups(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{subresourceGroup()}})
}

func (s *Server) discoveryGroup(w http.ResponseWriter, _ *http.Request) {
	g := subresourceGroup()
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	writeJSON(w, g)
}

func subresourceGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: v1.SubresourceGroupVersion.String(), Version: "v1"}
	return metav1.APIGroup{Name: v1.SubresourceGroupName, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func (s *Server) discoveryResources(w http.ResponseWriter, _ *http.Request) {
	l := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: v1.SubresourceGroupVersion.String()}
	add := func(name string, verbs ...string) {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: name, Namespaced: true, Verbs: verbs})
	}
	for _, op := range []string{"start", "stop", "restart", "migrate", "pause", "unpause"} {
		add("virtualmachines/"+op, "update")
	}
	for _, op := range vmiOps {
		add("virtualmachineinstances/"+op, "update")
	}
	for _, r := range []string{"virtualmachineinstances", "virtualmachines"} {
		add(r+"/addvolume", "update")
		add(r+"/removevolume", "update")
	}
	add("virtualmachineinstances/console", "get")
	for _, r := range portForwardResources {
		add(r, "get")
	}
	add("virtualmachineinstances/vsock", "get")
	guestAgentResources(add)
	add("expand-vm-spec", "update")
	add("virtualmachines/expand-spec", "get")
	writeJSON(w, l)
}

// version is KubeVirt's version.Info of this build, which KubeVirt's
// virtctl reads (and prints) as the server version.
func (s *Server) version(w http.ResponseWriter, _ *http.Request, _ userInfo) {
	writeJSON(w, version.Get())
}

// healthz says, in KubeVirt's shape, whether virt-api reaches the API
// server (it lists the virt-handlers it sends node work to).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ userInfo) {
	pods := &corev1.PodList{}
	if err := s.Client.List(r.Context(), pods, client.InNamespace(s.Namespace), client.Limit(1)); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		// The status is sent: a client gone mid-body cannot be told more.
		_ = json.NewEncoder(w).Encode(map[string]any{"apiserver": map[string]string{"connectivity": "failed", "error": err.Error()}})
		return
	}
	writeJSON(w, map[string]any{"apiserver": map[string]string{"connectivity": "ok"}})
}

// handlerURL is the virt-handler on node.
func (s *Server) handlerURL(ctx context.Context, node string) (string, error) {
	pods := &corev1.PodList{}
	if err := s.Client.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{v1.AppLabel: "virt-handler"}); err != nil {
		return "", fmt.Errorf("finding virt-handler: %w", err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return fmt.Sprintf("https://%s:%d", p.Status.PodIP, 8186), nil
		}
	}
	return "", fmt.Errorf("no running virt-handler on node %s", node)
}

func (s *Server) getVMI(ctx context.Context, ns, name string) (*v1.VirtualMachineInstance, error) {
	vmi := &v1.VirtualMachineInstance{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vmi); err != nil {
		return nil, err
	}
	return vmi, nil
}

// HandlerClientTLS is the client side of the mutual TLS to virt-handler:
// virt-api's certificate; the handler's must be signed by the CA and name
// handlerName (handlers are reached by pod IP, which no certificate names).
func HandlerClientTLS(certFile, keyFile, caFile, handlerName string) (*tls.Config, error) {
	// The bundle is read per handshake: during a rotation it holds the new
	// CA and the previous one (the kubelet updates the mounted file), so a
	// handler with either leaf verifies. An established session (a console)
	// is not verified again.
	caPool := func() (*x509.CertPool, error) {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("CA bundle %s: no certificates", caFile)
		}
		return pool, nil
	}
	if _, err := caPool(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &c, err
		},
		// Verified below against the CA, by name rather than address.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("virt-handler sent no certificate")
			}
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			pool, err := caPool()
			if err != nil {
				return err
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("virt-handler certificate: %w", err)
			}
			if c.Subject.CommonName != handlerName {
				return fmt.Errorf("virt-handler certificate names %q, not %q", c.Subject.CommonName, handlerName)
			}
			return nil
		},
	}, nil
}

// admissionTimeout: the API server gives webhooks 10 s by default.
const admissionTimeout = 10 * time.Second

var _ = admissionv1.Create
