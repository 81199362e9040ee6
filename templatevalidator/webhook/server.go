// Package webhook is virt-template-validator's admission server: the
// template rules (package templatevalidator) on VirtualMachine creates and
// updates, and template deletions refused while VMs are validated by them.
//
// Its contract with the deployment (SSP operator): HTTPS on one port,
// serving certificate tls.crt/tls.key in a directory read at each TLS
// handshake (a rotated Secret takes effect without a restart),
//
//	POST /virtualmachine-validate  AdmissionReview v1, kubevirt.io/v1 virtualmachines CREATE, UPDATE
//	POST /template-validate        AdmissionReview v1, template.openshift.io/v1 templates DELETE
//	                               (both from the API server only: its front-proxy client certificate; 401/403 else)
//	GET  /readyz                   200 once the serving certificate loads
//	GET  /metrics                  Prometheus, to a token allowed to GET /metrics (api/securemetrics; 401/403 else)
//
// and the API access ClusterRoleRules grants.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	admissionv1 "k8s.io/api/admission/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/admission"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/instancetype/find"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	tv "github.com/kubevmm/kubevmm/templatevalidator"
)

// The paths served.
const (
	PathVirtualMachine = "/virtualmachine-validate"
	PathTemplate       = "/template-validate"
	PathReady          = "/readyz"
)

// ClusterRoleRules is the API access the validator needs: the template a
// VM names (get), the instance type and preference it names and their
// captured revisions (get), when a template is deleted, the VMs naming it
// (list, their metadata only), and the reviews of its scrapers' tokens.
func ClusterRoleRules() []rbacv1.PolicyRule {
	return append([]rbacv1.PolicyRule{
		{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines"}, Verbs: []string{"list"}},
		{APIGroups: []string{tv.TemplateGroup}, Resources: []string{"templates"}, Verbs: []string{"get"}},
		{APIGroups: []string{v1beta1.GroupName}, Resources: []string{"virtualmachineinstancetypes", "virtualmachineclusterinstancetypes",
			"virtualmachinepreferences", "virtualmachineclusterpreferences"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"get"}},
	}, securemetrics.ReviewRules()...)
}

// Server answers the admission reviews. It reads the API live, not from
// a cache: a VM applied right after its template must find it.
type Server struct {
	Client  client.Reader
	CertDir string // tls.crt and tls.key
	// Callers tells the API server's reviews from anyone else's: a
	// review makes the validator read the API with its own authority.
	Callers frontproxy.Callers
	// MetricsGuard checks a scraper's token (securemetrics.Guard); nil:
	// no /metrics.
	MetricsGuard func(http.Handler) http.Handler
	Log          *slog.Logger

	rejected prometheus.Counter // set up by Handler
}

// Handler serves the paths of the contract, and GET /metrics: the Go
// runtime's and the process's metrics and upstream's
// kubevirt_ssp_template_validator_rejected_total (VMs refused for their
// rules), on the same port, behind MetricsGuard.
func (s *Server) Handler() http.Handler {
	s.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubevirt_ssp_template_validator_rejected_total", Help: "The total number of VMs refused for their template's rules"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.rejected, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	securemetrics.Route(mux, s.MetricsGuard, reg)
	hook := func(path string, admit admission.Func) {
		mux.Handle("POST "+path, frontproxy.OnlyAPIServer(s.Callers, admission.Handler(admit)))
	}
	hook(PathVirtualMachine, s.admitVM)
	hook(PathTemplate, s.admitTemplate)
	mux.HandleFunc("GET "+PathReady, func(w http.ResponseWriter, _ *http.Request) {
		if _, err := admission.Certificate(s.CertDir); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	return mux
}

// ListenAndServe serves Handler over HTTPS on addr until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves Handler over HTTPS on ln until ctx ends (admission.ServeTLS).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Callers == nil {
		return errors.New("virt-template-validator: no Callers: the webhooks would answer anyone")
	}
	s.Log.Info("serving", "addr", ln.Addr().String(), "certDir", s.CertDir)
	return admission.ServeTLS(ctx, ln, s.Handler(), s.CertDir)
}

func (s *Server) admitVM(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allow()
	}
	vm := &v1.VirtualMachine{}
	if resp := admission.Decode(req.Object.Raw, vm, "the VirtualMachine"); resp != nil {
		return resp
	}
	// A VM being deleted is updated to take its finalizers off: never
	// stand in the way of that.
	if vm.DeletionTimestamp != nil {
		return admission.Allow()
	}
	if _, skip := vm.Annotations[tv.AnnotationSkipValidations]; skip {
		return admission.Allow()
	}
	if req.Operation == admissionv1.Update {
		old := &v1.VirtualMachine{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err == nil && sameForRules(old, vm) {
			return admission.Allow()
		}
	}
	raw, source, err := s.rules(ctx, vm)
	if err != nil {
		s.Log.Error("reading the rules", "vm", req.Namespace+"/"+req.Name, "err", err)
		return admission.Refuse(http.StatusInternalServerError, err.Error())
	}
	rules, err := tv.ParseRules(raw)
	if err != nil {
		return admission.Refuse(http.StatusUnprocessableEntity, fmt.Sprintf("the validation rules of %s: %v", source, err))
	}
	if len(rules) == 0 {
		return admission.Allow()
	}
	exp, err := s.expanded(ctx, vm)
	if err != nil {
		s.Log.Error("reading the instance type", "vm", req.Namespace+"/"+req.Name, "err", err)
		return admission.Refuse(http.StatusInternalServerError, err.Error())
	}
	res, err := tv.Evaluate(rules, exp)
	if err != nil {
		return admission.Refuse(http.StatusBadRequest, err.Error())
	}
	warnings := make([]string, len(res.Warnings))
	for i, f := range res.Warnings {
		warnings[i] = f.Path + ": " + f.String()
	}
	if len(res.Violations) == 0 {
		if len(warnings) > 0 {
			s.Log.Info("admitted with warnings", "vm", req.Namespace+"/"+req.Name, "rules", source, "warnings", warnings)
		}
		return admission.Allow(warnings...)
	}
	causes := make([]metav1.StatusCause, len(res.Violations))
	for i, f := range res.Violations {
		causes[i] = metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: f.Path, Message: f.String()}
	}
	resp := admission.DenyCauses(causes)
	resp.Warnings = warnings
	s.Log.Info("refused", "vm", req.Namespace+"/"+req.Name, "rules", source, "violations", resp.Result.Message)
	s.rejected.Inc()
	return resp
}

// expanded returns the VM with its instance type and preference applied
// to its template, as its VMI will have them (virt-controller expands
// with the same find and expand). A VM that names neither, or whose can't
// be applied, is returned as written: a type that does not exist yet
// (KubeVirt admits the VM, which waits for it), a conflicting or
// unsupported setting (virt-api refuses the VM, saying which). Only a
// failure to read the API is an error.
func (s *Server) expanded(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachine, error) {
	if (vm.Spec.Instancetype == nil && vm.Spec.Preference == nil) || vm.Spec.Template == nil {
		return vm, nil
	}
	e, err := find.ForVM(ctx, s.Client, vm)
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) && !apierrors.IsNotFound(err) {
			return nil, err
		}
		return vm, nil
	}
	out := vm.DeepCopy()
	if errs := e.Apply(&out.Spec.Template.Spec, &out.Spec.Template.ObjectMeta); len(errs) > 0 {
		return vm, nil
	}
	return out, nil
}

// sameForRules reports whether an update leaves what the rules see as it
// was: the template spec and what selects the rules. Such an update (a
// finalizer, a label, a start changing the run strategy) is not refused
// for rules that changed since the VM was admitted, nor warned again.
func sameForRules(old, vm *v1.VirtualMachine) bool {
	for _, k := range []string{tv.AnnotationValidations, tv.AnnotationSkipValidations} {
		o, oldHas := old.Annotations[k]
		n, has := vm.Annotations[k]
		if o != n || oldHas != has {
			return false
		}
	}
	for _, k := range []string{tv.LabelTemplate, tv.LabelTemplateNamespace} {
		if old.Labels[k] != vm.Labels[k] {
			return false
		}
	}
	return equality.Semantic.DeepEqual(old.Spec.Template, vm.Spec.Template)
}

// rules returns a VM's rules as JSON and where they come from: its own
// annotation, else the template its labels name. A template that does not
// exist, or a cluster without templates, gives none (upstream: such a VM
// has no parent template to validate it).
func (s *Server) rules(ctx context.Context, vm *v1.VirtualMachine) (raw, source string, err error) {
	if raw := vm.Annotations[tv.AnnotationValidations]; raw != "" {
		return raw, "annotation " + tv.AnnotationValidations, nil
	}
	ref, ok := tv.TemplateRef(vm.Labels)
	if !ok {
		return "", "", nil
	}
	t := &unstructured.Unstructured{}
	t.SetGroupVersionKind(schema.GroupVersionKind{Group: tv.TemplateGroup, Version: tv.TemplateVersion, Kind: tv.TemplateKind})
	if err := s.Client.Get(ctx, ref, t); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return "", "", nil
		}
		return "", "", fmt.Errorf("reading template %s: %w", ref, err)
	}
	return tv.TemplateRules(t), "template " + ref.String(), nil
}

// admitTemplate refuses to delete a template while VMs it was processed
// into are validated: VMs whose labels name it, not being deleted nor
// skipping validation, that carry rules of their own or get the
// template's.
func (s *Server) admitTemplate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Delete {
		return admission.Allow()
	}
	t := &unstructured.Unstructured{}
	if resp := admission.Decode(req.OldObject.Raw, &t.Object, "the Template"); resp != nil {
		return resp
	}
	vms := &metav1.PartialObjectMetadataList{}
	vms.SetGroupVersionKind(v1.GroupVersion.WithKind("VirtualMachineList"))
	if err := s.Client.List(ctx, vms, client.MatchingLabels{tv.LabelTemplate: req.Name, tv.LabelTemplateNamespace: req.Namespace}); err != nil {
		s.Log.Error("listing the template's VMs", "template", req.Namespace+"/"+req.Name, "err", err)
		return admission.Refuse(http.StatusInternalServerError, "listing the VMs of the template: "+err.Error())
	}
	hasRules := tv.TemplateRules(t) != ""
	var using []string
	for _, vm := range vms.Items {
		_, skip := vm.Annotations[tv.AnnotationSkipValidations]
		if vm.DeletionTimestamp != nil || skip {
			continue
		}
		if hasRules || vm.Annotations[tv.AnnotationValidations] != "" {
			using = append(using, vm.Namespace+"/"+vm.Name)
		}
	}
	if len(using) == 0 {
		return admission.Allow()
	}
	slices.Sort(using)
	s.Log.Info("refused deleting a template", "template", req.Namespace+"/"+req.Name, "vms", using)
	return admission.Refuse(http.StatusForbidden, "Template cannot be deleted, because the following VMs are referencing it for validation: "+strings.Join(using, ", "))
}
