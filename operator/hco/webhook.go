package hco

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/certs"
	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/api/hco/v1beta1"
)

// The hco-webhook's paths.
const (
	ValidatePath = "/validate-hco-kubevirt-io-hyperconverged"
	ConvertPath  = "/convert"
)

// Upstream's certificate lifetimes, for what certConfig leaves out.
var (
	defaultCADuration        = 48 * time.Hour
	defaultCARenewBefore     = 24 * time.Hour
	defaultServerDuration    = 24 * time.Hour
	defaultServerRenewBefore = 12 * time.Hour
)

// certStrategy is c with upstream's defaults for what it leaves out: the
// KubeVirt CR's certificateRotateStrategy.selfSigned, which virt-operator
// rotates the certificates by.
func certStrategy(c hcov1.CertConfig) certs.Strategy {
	d := func(v *metav1.Duration, def time.Duration) time.Duration {
		if v == nil {
			return def
		}
		return v.Duration
	}
	return certs.Strategy{
		CA:     certs.Config{Duration: d(c.CA.Duration, defaultCADuration), RenewBefore: d(c.CA.RenewBefore, defaultCARenewBefore)},
		Server: certs.Config{Duration: d(c.Server.Duration, defaultServerDuration), RenewBefore: d(c.Server.RenewBefore, defaultServerRenewBefore)},
	}
}

// ValidateCertConfig refuses lifetimes virt-operator could not rotate by
// (certs.Strategy.Validate: each renewBefore less than its duration, the
// CA's duration at least the serving certificates', none too short),
// naming the field under path ("spec.security.certConfig" in v1,
// "spec.certConfig" in v1beta1).
func ValidateCertConfig(c hcov1.CertConfig, path string) error {
	if err := certStrategy(c).Validate(); err != nil {
		return fmt.Errorf("%s.%w", path, err)
	}
	return nil
}

// DecodeHCO reads a HyperConverged in either version, as v1, with the
// fields of its spec (as written, in its version) kubevmm does not declare.
func DecodeHCO(raw []byte) (hc *hcov1.HyperConverged, unknown []string, certPath string, err error) {
	var doc struct {
		APIVersion string          `json:"apiVersion"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, nil, "", fmt.Errorf("decoding the HyperConverged: %w", err)
	}
	if len(doc.Spec) == 0 {
		doc.Spec = []byte("{}")
	}
	switch doc.APIVersion {
	case v1beta1.GroupVersion.String():
		b := &v1beta1.HyperConverged{}
		if err := json.Unmarshal(raw, b); err != nil {
			return nil, nil, "", fmt.Errorf("decoding the HyperConverged: %w", err)
		}
		unknown, err = kvv1.UnknownFields(doc.Spec, b.Spec)
		return v1beta1.ToV1(b), unknown, "spec.certConfig", err
	default:
		hc = &hcov1.HyperConverged{}
		if err := json.Unmarshal(raw, hc); err != nil {
			return nil, nil, "", fmt.Errorf("decoding the HyperConverged: %w", err)
		}
		unknown, err = kvv1.UnknownFields(doc.Spec, hc.Spec)
		return hc, unknown, "spec.security.certConfig", err
	}
}

// Validator is the hco-webhook's admission of HyperConverged CRs.
type Validator struct {
	// Reader lists the workloads (a delete under
	// BlockUninstallIfWorkloadsExist).
	Reader client.Reader
	// Namespace is the one an HCO CR may be created in.
	Namespace string
}

// Review admits creates and updates of a CR kubevmm can honour, and a
// delete unless its uninstall strategy blocks it. Its refusals are 403
// Forbidden, as upstream's (controller-runtime's Denied).
func (v *Validator) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation == admissionv1.Delete {
		return v.admitDelete(ctx, req)
	}
	hc, unknown, certPath, err := DecodeHCO(req.Object.Raw)
	if err != nil {
		return admission.Refuse(http.StatusBadRequest, err.Error())
	}
	if req.Operation == admissionv1.Create && (hc.Name != hcov1.Name || hc.Namespace != v.Namespace) {
		return admission.Refuse(http.StatusForbidden, fmt.Sprintf("a HyperConverged must be named %s in namespace %s, not %s in %s",
			hcov1.Name, v.Namespace, hc.Name, hc.Namespace))
	}
	if hc.DeletionTimestamp != nil {
		return admission.Allow() // being deleted: its finalizer is removed by an update
	}
	if len(unknown) > 0 {
		return admission.Refuse(http.StatusForbidden, fmt.Sprintf("not supported by kubevmm: spec.%s", strings.Join(unknown, ", spec.")))
	}
	if err := ValidateCertConfig(hc.Spec.Security.CertConfig, certPath); err != nil {
		return admission.Refuse(http.StatusForbidden, err.Error())
	}
	if err := Validate(hc); err != nil {
		return admission.Refuse(http.StatusForbidden, err.Error())
	}
	return admission.Allow()
}

func (v *Validator) admitDelete(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if len(req.OldObject.Raw) == 0 {
		return admission.Allow()
	}
	hc, _, _, err := DecodeHCO(req.OldObject.Raw)
	if err != nil {
		return admission.Refuse(http.StatusBadRequest, err.Error())
	}
	if uninstallStrategy(&hc.Spec) != hcov1.BlockUninstallIfWorkloadsExist {
		return admission.Allow()
	}
	vms, vmis, err := countWorkloads(ctx, v.Reader)
	if err != nil {
		return admission.Refuse(http.StatusInternalServerError, err.Error())
	}
	if vms+vmis > 0 {
		return admission.Refuse(http.StatusForbidden, fmt.Sprintf("uninstallStrategy BlockUninstallIfWorkloadsExist: %d VirtualMachines and %d VirtualMachineInstances exist; delete them first",
			vms, vmis))
	}
	return admission.Allow()
}

// countWorkloads counts the cluster's VMs and VMIs; none when their CRDs
// are not installed.
func countWorkloads(ctx context.Context, r client.Reader) (vms, vmis int, err error) {
	var n [2]int
	for i, l := range []client.ObjectList{&kvv1.VirtualMachineList{}, &kvv1.VirtualMachineInstanceList{}} {
		if err := r.List(ctx, l); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return 0, 0, fmt.Errorf("listing workloads: %w", err)
		}
		n[i] = apimeta.LenList(l)
	}
	return n[0], n[1], nil
}

// ConversionHandler serves the CRD's ConversionReviews with
// v1beta1.Convert.
func ConversionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		review := &apiextensionsv1.ConversionReview{}
		if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
			return
		}
		review.Response = convertReview(review.Request)
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
}

// convertReview converts every object of req, or fails the whole review
// naming the object that does not convert.
func convertReview(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for i, obj := range req.Objects {
		out, err := v1beta1.Convert(obj.Raw, req.DesiredAPIVersion)
		if err != nil {
			resp.ConvertedObjects = nil
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: fmt.Sprintf("object %d: %v", i, err)}
			return resp
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	return resp
}

// RegisterWebhooks registers the HyperConverged webhooks on ws (whose TLS
// must request client certificates): the validation answers the API
// server only (callers), as every webhook of the platform does; the
// conversion is a pure function of what it is sent, and the API server
// calls conversion webhooks without the admission plugins' credentials.
func RegisterWebhooks(ws webhook.Server, reader client.Reader, namespace string, callers frontproxy.Callers) {
	ws.Register(ValidatePath, frontproxy.OnlyAPIServer(callers, admission.Handler((&Validator{Reader: reader, Namespace: namespace}).Review)))
	ws.Register(ConvertPath, ConversionHandler())
}
