package hco

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/api/certs"
	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

// Operand is one CR the HCO makes.
type Operand struct {
	GVK schema.GroupVersionKind
	// CRD is the operand's CRD: the operand is made once it exists.
	CRD  string
	Name string
	// Namespaced operands go into the HCO CR's namespace.
	Namespaced bool
	// JSONPatchAnnotation on the HCO CR is a JSON patch applied onto the
	// operand (the escape hatch for what the HCO spec does not say).
	JSONPatchAnnotation string
}

// Operands are the CRs the HCO makes, in the order it makes them (and
// reports them in relatedObjects).
var Operands = []Operand{
	{GVK: kvv1.KubeVirtGroupVersionKind, CRD: kvv1.KubeVirtCRDName, Name: "kubevirt-kubevirt-hyperconverged", Namespaced: true,
		JSONPatchAnnotation: "kubevirt.kubevirt.io/jsonpatch"},
	{GVK: schema.GroupVersionKind{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "CDI"}, CRD: "cdis.cdi.kubevirt.io",
		Name: "cdi-kubevirt-hyperconverged", JSONPatchAnnotation: "containerizeddataimporter.kubevirt.io/jsonpatch"},
	{GVK: schema.GroupVersionKind{Group: "networkaddonsoperator.network.kubevirt.io", Version: "v1", Kind: "NetworkAddonsConfig"},
		CRD: "networkaddonsconfigs.networkaddonsoperator.network.kubevirt.io", Name: "cluster",
		JSONPatchAnnotation: "networkaddonsconfigs.kubevirt.io/jsonpatch"},
	{GVK: schema.GroupVersionKind{Group: "ssp.kubevirt.io", Version: "v1beta3", Kind: "SSP"}, CRD: sspOperandCRD,
		Name: "ssp-kubevirt-hyperconverged", Namespaced: true, JSONPatchAnnotation: "ssp.kubevirt.io/jsonpatch"},
}

// sspOperandCRD is the SSP's CRD: the golden images need it.
const sspOperandCRD = "ssps.ssp.kubevirt.io"

// Labels and annotations on every operand.
const (
	// AppLabel names the HCO CR an operand comes from, as upstream.
	AppLabel       = "app"
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "hco-operator"
	// SpecHashAnnotation is the hash of the spec the HCO last applied: an
	// operand whose spec differs while the hash matches was edited by
	// someone else (counted by the out-of-band metric), one whose hash
	// differs follows a change of the HCO CR.
	SpecHashAnnotation = "hco.kubevirt.io/spec-hash"
	// Finalizer keeps the HCO CR until its operands are gone.
	Finalizer = "kubevirt.io/hyperconverged"
)

// Defaults are upstream's, for what the HCO CR leaves out.
const (
	DefaultCommonTemplatesNamespace = "openshift"
	DefaultUninstallStrategy        = hcov1.BlockUninstallIfWorkloadsExist
	templateValidatorReplicas       = 2
)

// The condition reasons, upstream's where it has them.
const (
	ReasonCompleted         = "ReconcileCompleted"
	ReasonInit              = "Init"
	ReasonInvalidRequest    = "InvalidRequest"
	ReasonUnsupportedFields = "UnsupportedFields"
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonTainted           = "UnsupportedFeatureAnnotation"
	ReasonDeleting          = "Deleting"
)

// Action is what a reconcile does after deciding.
type Action int

// The actions.
const (
	// Nothing: only the status is written.
	Nothing Action = iota
	// Apply applies Decision.Objects.
	Apply
	// DeleteOperands deletes Decision.Objects and waits for them to go.
	DeleteOperands
	// Finalize removes the finalizer: no operand is left.
	Finalize
)

// Observed is what a reconcile read.
type Observed struct {
	HCO *hcov1.HyperConverged
	// Namespace is the operator's: the one HCO CR lives there.
	Namespace string
	// Version is the operator's, reported in status.versions.
	Version string
	// UnknownFields are the spec's fields kubevmm does not declare, as
	// stored (see kvv1.UnknownFields).
	UnknownFields []string
	// CRDs: the operands' CRDs that exist, by name.
	CRDs map[string]bool
	// Current are the operands that exist, by kind.
	Current map[string]*unstructured.Unstructured
}

// Decision is what to do and the status to write.
type Decision struct {
	Action Action
	// Objects are the operands to apply, or to delete.
	Objects []*unstructured.Unstructured
	// Replace are operands with spec fields someone else added, as read
	// with the spec the HCO wants: updated (not applied) before the apply,
	// since an apply cannot drop a field another manager set to the
	// same value.
	Replace []*unstructured.Unstructured
	// Reverted names the operands ("kind/name") edited out of band that
	// this apply puts back.
	Reverted []string
	Status   hcov1.HyperConvergedStatus
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, now metav1.Time) Decision {
	hc := o.HCO
	st := *hc.Status.DeepCopy()
	st.ObservedGeneration = hc.Generation
	st.Versions = []hcov1.Version{{Name: "operator", Version: o.Version}}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: hc.Generation, LastTransitionTime: now})
	}
	if hc.Name != hcov1.Name || hc.Namespace != o.Namespace {
		msg := fmt.Sprintf("Request does not match expected name (%s) and namespace (%s)", hcov1.Name, o.Namespace)
		set(hcov1.ConditionReconcileComplete, metav1.ConditionFalse, ReasonInvalidRequest, msg)
		set(hcov1.ConditionAvailable, metav1.ConditionFalse, ReasonInvalidRequest, msg)
		set(hcov1.ConditionDegraded, metav1.ConditionTrue, ReasonInvalidRequest, msg)
		st.SystemHealthStatus = "error"
		// It made nothing and has nothing to remove.
		if hc.DeletionTimestamp != nil {
			return Decision{Action: Finalize, Status: st}
		}
		return Decision{Action: Nothing, Status: st}
	}
	if hc.DeletionTimestamp != nil {
		return decideDelete(o, &st, set)
	}
	tainted := false
	for _, op := range Operands {
		if hc.Annotations[op.JSONPatchAnnotation] != "" {
			tainted = true
		}
	}
	if tainted {
		set(hcov1.ConditionTaintedConfiguration, metav1.ConditionTrue, ReasonTainted, "Unsupported feature was activated via an HCO annotation")
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, hcov1.ConditionTaintedConfiguration)
	}
	failed := func(reason, msg string) Decision {
		set(hcov1.ConditionReconcileComplete, metav1.ConditionFalse, reason, msg)
		set(hcov1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
		set(hcov1.ConditionUpgradeable, metav1.ConditionFalse, reason, msg)
		if apimeta.FindStatusCondition(st.Conditions, hcov1.ConditionAvailable) == nil {
			set(hcov1.ConditionAvailable, metav1.ConditionFalse, reason, msg)
		}
		st.SystemHealthStatus = "error"
		return Decision{Action: Nothing, Status: st}
	}
	if f := append(slices.Clone(o.UnknownFields), Unsupported(&hc.Spec)...); len(f) > 0 {
		return failed(ReasonUnsupportedFields, "not supported by kubevmm: spec."+strings.Join(f, ", spec."))
	}
	d, err := applyDecision(o, &st)
	if err != nil {
		reason := ReasonUnsupportedFields
		if errors.As(err, new(annotationError)) {
			reason = ReasonInvalidAnnotation
		}
		return failed(reason, err.Error())
	}
	set(hcov1.ConditionReconcileComplete, metav1.ConditionTrue, ReasonCompleted, "Reconcile completed successfully")
	aggregate(o, &st, set)
	d.Status = st
	return d
}

// applyDecision is the operands to apply (those whose CRDs exist), their
// relatedObjects in st, and what of them drifted.
func applyDecision(o Observed, st *hcov1.HyperConvergedStatus) (Decision, error) {
	hc := o.HCO
	d := Decision{Action: Apply}
	st.RelatedObjects = nil
	st.DataImportCronTemplates = goldenImages(&hc.Spec)
	if len(st.DataImportCronTemplates) > 0 && o.CRDs[sspOperandCRD] {
		// Before the SSP, whose crons go there.
		d.Objects = append(d.Objects, bootImageNamespaceObject(hc))
	}
	for _, op := range Operands {
		if !o.CRDs[op.CRD] {
			continue // its operator is not installed (yet): made once it is
		}
		u, err := desired(hc, op)
		if err != nil {
			return d, err
		}
		d.Objects = append(d.Objects, u)
		st.RelatedObjects = append(st.RelatedObjects, corev1.ObjectReference{APIVersion: op.GVK.GroupVersion().String(), Kind: op.GVK.Kind,
			Name: u.GetName(), Namespace: u.GetNamespace()})
		cur := o.Current[op.GVK.Kind]
		if cur == nil {
			continue
		}
		// Applied only onto what was read: an edit since then fails the
		// apply (a conflict), and the next pass sees, reverts and counts
		// it, rather than this one reverting it unseen.
		u.SetResourceVersion(cur.GetResourceVersion())
		want, _ := json.Marshal(u.Object["spec"])
		have, _ := json.Marshal(cur.Object["spec"])
		if jsonEqual(want, have) {
			continue
		}
		if cur.GetAnnotations()[SpecHashAnnotation] == u.GetAnnotations()[SpecHashAnnotation] {
			d.Reverted = append(d.Reverted, operandName(op.GVK.Kind, u.GetName()))
		}
		if !jsonKeysSubset(have, want) {
			rep := cur.DeepCopy()
			rep.Object["spec"] = runtime.DeepCopyJSONValue(u.Object["spec"])
			d.Replace = append(d.Replace, rep)
		}
	}
	return d, nil
}

// operandName is how an operand is named in Reverted and in the
// out-of-band counter's component_name label: "kind/name", lower case.
func operandName(kind, name string) string {
	return strings.ToLower(kind + "/" + name)
}

// aggregate sets Available, Progressing, Degraded and Upgradeable from the
// operands' own conditions: each reason names the first operand (in
// Operands order) that is not available, progressing or degraded.
func aggregate(o Observed, st *hcov1.HyperConvergedStatus, set func(string, metav1.ConditionStatus, string, string)) {
	var notAvail, progressing, degraded string
	var notAvailMsg, progMsg, degMsg string
	for _, op := range Operands {
		if !o.CRDs[op.CRD] {
			continue
		}
		kind := op.GVK.Kind
		cur := o.Current[kind]
		if cur == nil {
			if progressing == "" {
				progressing, progMsg = kind+"Progressing", kind+" "+op.Name+" is being created"
			}
			if notAvail == "" {
				notAvail, notAvailMsg = kind+"NotAvailable", kind+" "+op.Name+" does not exist yet"
			}
			continue
		}
		conds := operandConditions(cur)
		if c := conds[hcov1.ConditionAvailable]; c.status != "True" && notAvail == "" {
			notAvail, notAvailMsg = kind+"NotAvailable", cmp.Or(c.message, kind+" "+op.Name+" is not available")
		}
		if c := conds[hcov1.ConditionProgressing]; (c.status == "True" || len(conds) == 0) && progressing == "" {
			progressing, progMsg = kind+"Progressing", cmp.Or(c.message, kind+" "+op.Name+" reports no conditions yet")
		}
		if c := conds[hcov1.ConditionDegraded]; c.status == "True" && degraded == "" {
			degraded, degMsg = kind+"Degraded", cmp.Or(c.message, kind+" "+op.Name+" is degraded")
		}
	}
	if notAvail != "" {
		set(hcov1.ConditionAvailable, metav1.ConditionFalse, notAvail, notAvailMsg)
	} else {
		set(hcov1.ConditionAvailable, metav1.ConditionTrue, ReasonCompleted, "Reconcile completed successfully")
	}
	if progressing != "" {
		set(hcov1.ConditionProgressing, metav1.ConditionTrue, progressing, progMsg)
	} else {
		set(hcov1.ConditionProgressing, metav1.ConditionFalse, ReasonCompleted, "Reconcile completed successfully")
	}
	if degraded != "" {
		set(hcov1.ConditionDegraded, metav1.ConditionTrue, degraded, degMsg)
	} else {
		set(hcov1.ConditionDegraded, metav1.ConditionFalse, ReasonCompleted, "Reconcile completed successfully")
	}
	switch {
	case degraded != "":
		set(hcov1.ConditionUpgradeable, metav1.ConditionFalse, degraded, degMsg)
	case progressing != "":
		set(hcov1.ConditionUpgradeable, metav1.ConditionFalse, progressing, progMsg)
	default:
		set(hcov1.ConditionUpgradeable, metav1.ConditionTrue, ReasonCompleted, "Reconcile completed successfully")
	}
	switch {
	case degraded != "":
		st.SystemHealthStatus = "error"
	case notAvail != "" || progressing != "":
		st.SystemHealthStatus = "warning"
	default:
		st.SystemHealthStatus = "healthy"
	}
}

type condition struct{ status, message string }

// operandConditions reads an operand's status.conditions (every operand
// kind has type, status and message).
func operandConditions(u *unstructured.Unstructured) map[string]condition {
	out := map[string]condition{}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		msg, _ := m["message"].(string)
		out[t] = condition{status: s, message: msg}
	}
	return out
}

func decideDelete(o Observed, st *hcov1.HyperConvergedStatus, set func(string, metav1.ConditionStatus, string, string)) Decision {
	set(hcov1.ConditionAvailable, metav1.ConditionFalse, ReasonDeleting, "uninstalling")
	set(hcov1.ConditionUpgradeable, metav1.ConditionFalse, ReasonDeleting, "uninstalling")
	var left []*unstructured.Unstructured
	var names []string
	for _, op := range Operands {
		if u := o.Current[op.GVK.Kind]; u != nil {
			left = append(left, u)
			names = append(names, op.GVK.Kind+" "+u.GetName())
		}
	}
	if len(left) > 0 {
		set(hcov1.ConditionProgressing, metav1.ConditionTrue, ReasonDeleting, "waiting for the operators to remove "+strings.Join(names, ", "))
		return Decision{Action: DeleteOperands, Objects: left, Status: *st}
	}
	set(hcov1.ConditionProgressing, metav1.ConditionFalse, ReasonDeleting, "every operand was removed")
	return Decision{Action: Finalize, Status: *st}
}

// Unsupported names the declared fields whose values kubevmm does not
// honour: they are accepted at their upstream defaults only.
func Unsupported(s *hcov1.HyperConvergedSpec) []string {
	var out []string
	for _, g := range s.FeatureGates {
		if g.State != hcov1.FeatureGateDisabled {
			out = append(out, fmt.Sprintf("featureGates[%s] (no HCO feature gate is implemented)", g.Name))
		}
	}
	v := s.Virtualization
	if ptr.Deref(v.LiveMigrationConfig.AllowWorkloadDisruption, false) {
		out = append(out, "virtualization.liveMigrationConfig.allowWorkloadDisruption")
	}
	if w := v.WorkloadUpdateStrategy; w != nil {
		for i, m := range w.WorkloadUpdateMethods {
			if m != string(kvv1.WorkloadUpdateMethodLiveMigrate) && m != string(kvv1.WorkloadUpdateMethodEvict) {
				out = append(out, fmt.Sprintf("virtualization.workloadUpdateStrategy.workloadUpdateMethods[%d] %q (LiveMigrate or Evict)", i, m))
			}
		}
		if w.BatchEvictionSize != nil && *w.BatchEvictionSize < 1 {
			out = append(out, "virtualization.workloadUpdateStrategy.batchEvictionSize (at least 1)")
		}
		if w.BatchEvictionInterval != nil && w.BatchEvictionInterval.Duration <= 0 {
			out = append(out, "virtualization.workloadUpdateStrategy.batchEvictionInterval (positive)")
		}
	}
	if m := v.VirtualMachineOptions; m != nil && (ptr.Deref(m.DisableFreePageReporting, false) || ptr.Deref(m.DisableSerialConsoleLog, false)) {
		out = append(out, "virtualization.virtualMachineOptions")
	}
	if h := v.HigherWorkloadDensity; h != nil && h.MemoryOvercommitPercentage != 0 && h.MemoryOvercommitPercentage != 100 {
		out = append(out, "virtualization.higherWorkloadDensity.memoryOvercommitPercentage (only 100)")
	}
	if r := v.VmiCPUAllocationRatio; r != nil && *r != 10 {
		out = append(out, "virtualization.vmiCPUAllocationRatio (only 10)")
	}
	if ptr.Deref(s.Deployment.DeployVMConsoleProxy, false) {
		out = append(out, "deployment.deployVmConsoleProxy")
	}
	if !ptr.Deref(s.Deployment.DeployNetworkResourcesInjector, true) {
		out = append(out, "deployment.deployNetworkResourcesInjector (only true)")
	}
	return out
}

// desired is the operand op as the HCO CR says, its JSON patch
// annotation applied.
func desired(hc *hcov1.HyperConverged, op Operand) (*unstructured.Unstructured, error) {
	var spec map[string]any
	var err error
	switch op.GVK.Kind {
	case "KubeVirt":
		spec, err = kubeVirtSpec(&hc.Spec)
	case "CDI":
		spec = map[string]any{"uninstallStrategy": string(uninstallStrategy(&hc.Spec))}
	case "NetworkAddonsConfig":
		spec, err = networkSpec(&hc.Spec)
	case "SSP":
		spec, err = sspSpec(&hc.Spec)
	}
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(op.GVK)
	u.SetName(op.Name)
	if op.Namespaced {
		u.SetNamespace(hc.Namespace)
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: hcov1.GroupVersion.String(), Kind: "HyperConverged",
			Name: hc.Name, UID: hc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
	}
	u.SetLabels(map[string]string{AppLabel: hc.Name, ManagedByLabel: ManagedBy})
	if p := hc.Annotations[op.JSONPatchAnnotation]; p != "" {
		if err := patchSpec(u, op.JSONPatchAnnotation, p); err != nil {
			return nil, annotationError{err}
		}
	}
	b, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op.GVK.Kind, op.Name, err)
	}
	sum := sha256.Sum256(b)
	u.SetAnnotations(map[string]string{SpecHashAnnotation: hex.EncodeToString(sum[:8])})
	// Numbers as the API server's objects have them (int64).
	if b, err = u.MarshalJSON(); err == nil {
		err = u.UnmarshalJSON(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op.GVK.Kind, op.Name, err)
	}
	return u, nil
}

// annotationError is a JSON patch annotation that does not apply.
type annotationError struct{ error }

// Validate is what Decide refuses in a HyperConverged CR, as one error
// (for the hco-webhook, which refuses it at admission).
func Validate(hc *hcov1.HyperConverged) error {
	if f := Unsupported(&hc.Spec); len(f) > 0 {
		return fmt.Errorf("not supported by kubevmm: spec.%s", strings.Join(f, ", spec."))
	}
	for _, op := range Operands {
		if _, err := desired(hc, op); err != nil {
			return err
		}
	}
	return nil
}

// patchSpec applies the JSON patch p (annotation ann's value) onto u; it
// may change the spec only.
func patchSpec(u *unstructured.Unstructured, ann, p string) error {
	var ops []struct {
		Path string `json:"path"`
		From string `json:"from"`
	}
	if err := json.Unmarshal([]byte(p), &ops); err != nil {
		return fmt.Errorf("annotation %s: not a JSON patch: %w", ann, err)
	}
	for i, op := range ops {
		for _, path := range []string{op.Path, op.From} {
			if path != "" && !strings.HasPrefix(path, "/spec/") {
				return fmt.Errorf("annotation %s: operation %d: path %q is outside /spec/", ann, i, path)
			}
		}
	}
	jp, err := jsonpatch.DecodePatch([]byte(p))
	if err != nil {
		return fmt.Errorf("annotation %s: %w", ann, err)
	}
	doc, err := u.MarshalJSON()
	if err != nil {
		return fmt.Errorf("annotation %s: %w", ann, err)
	}
	out, err := jp.Apply(doc)
	if err != nil {
		return fmt.Errorf("annotation %s: applying onto %s %s: %w", ann, u.GetKind(), u.GetName(), err)
	}
	return u.UnmarshalJSON(out)
}

func uninstallStrategy(s *hcov1.HyperConvergedSpec) hcov1.UninstallStrategy {
	if s.Deployment.UninstallStrategy != "" {
		return s.Deployment.UninstallStrategy
	}
	return DefaultUninstallStrategy
}

// kubeVirtSpec: liveMigrationConfig (upstream's defaults) becomes
// configuration.migrations, security.certConfig
// certificateRotateStrategy.selfSigned; the uninstall strategy and the
// workload update strategy (upstream HCO's defaults) are passed on.
func kubeVirtSpec(s *hcov1.HyperConvergedSpec) (map[string]any, error) {
	lm := s.Virtualization.LiveMigrationConfig
	m := kvv1.MigrationConfiguration{
		ParallelMigrationsPerCluster:      ptr.To(ptr.Deref(lm.ParallelMigrationsPerCluster, 5)),
		ParallelOutboundMigrationsPerNode: ptr.To(ptr.Deref(lm.ParallelOutboundMigrationsPerNode, 1)),
		CompletionTimeoutPerGiB:           ptr.To(ptr.Deref(lm.CompletionTimeoutPerGiB, 20)),
		ProgressTimeout:                   ptr.To(ptr.Deref(lm.ProgressTimeout, 150)),
		AllowAutoConverge:                 ptr.To(ptr.Deref(lm.AllowAutoConverge, false)),
		AllowPostCopy:                     ptr.To(ptr.Deref(lm.AllowPostCopy, false)),
	}
	if lm.BandwidthPerMigration != nil {
		q, err := resource.ParseQuantity(*lm.BandwidthPerMigration)
		if err != nil {
			return nil, fmt.Errorf("virtualization.liveMigrationConfig.bandwidthPerMigration %q: %w", *lm.BandwidthPerMigration, err)
		}
		m.BandwidthPerMigration = &q
	}
	// certConfig, with upstream HCO's defaults, as upstream passes it on.
	cs := certStrategy(s.Security.CertConfig)
	cert := func(c certs.Config) *kvv1.CertConfig {
		return &kvv1.CertConfig{Duration: &metav1.Duration{Duration: c.Duration}, RenewBefore: &metav1.Duration{Duration: c.RenewBefore}}
	}
	kv := kvv1.KubeVirtSpec{UninstallStrategy: kvv1.KubeVirtUninstallStrategy(uninstallStrategy(s)),
		Configuration:             kvv1.KubeVirtConfiguration{Migrations: &m},
		CertificateRotateStrategy: kvv1.KubeVirtCertificateRotateStrategy{SelfSigned: &kvv1.KubeVirtSelfSignConfiguration{CA: cert(cs.CA), Server: cert(cs.Server)}},
		WorkloadUpdateStrategy:    workloadUpdateStrategy(s.Virtualization.WorkloadUpdateStrategy)}
	return toMap(kv)
}

// workloadUpdateStrategy is w with upstream HCO's defaults: LiveMigrate,
// batches of 10 per minute. Methods set to an empty list stay empty: no
// automatic workload updates.
func workloadUpdateStrategy(w *hcov1.WorkloadUpdateStrategy) kvv1.KubeVirtWorkloadUpdateStrategy {
	if w == nil {
		w = &hcov1.WorkloadUpdateStrategy{}
	}
	out := kvv1.KubeVirtWorkloadUpdateStrategy{
		WorkloadUpdateMethods: []kvv1.WorkloadUpdateMethod{kvv1.WorkloadUpdateMethodLiveMigrate},
		BatchEvictionSize:     ptr.To(ptr.Deref(w.BatchEvictionSize, kvv1.DefaultBatchEvictionSize)),
		BatchEvictionInterval: ptr.To(ptr.Deref(w.BatchEvictionInterval, kvv1.DefaultBatchEvictionInterval)),
	}
	if w.WorkloadUpdateMethods != nil {
		out.WorkloadUpdateMethods = make([]kvv1.WorkloadUpdateMethod, 0, len(w.WorkloadUpdateMethods))
		for _, m := range w.WorkloadUpdateMethods {
			out.WorkloadUpdateMethods = append(out.WorkloadUpdateMethods, kvv1.WorkloadUpdateMethod(m))
		}
	}
	return out
}

// networkSpec: multus and the Linux bridge plugin, kubemacpool with the
// CR's range (both ends or neither: the NetworkAddonsConfig then picks a
// random one), selfSignConfiguration from certConfig.
func networkSpec(s *hcov1.HyperConvergedSpec) (map[string]any, error) {
	pool := map[string]any{}
	if s.Networking != nil && s.Networking.KubeMacPoolConfiguration != nil {
		c := s.Networking.KubeMacPoolConfiguration
		const f = "networking.kubeMacPoolConfiguration"
		switch {
		case c.RangeStart == nil && c.RangeEnd == nil:
		case c.RangeStart == nil || c.RangeEnd == nil:
			return nil, fmt.Errorf("%s: rangeStart and rangeEnd go together", f)
		default:
			start, err := net.ParseMAC(*c.RangeStart)
			if err != nil {
				return nil, fmt.Errorf("%s.rangeStart: %w", f, err)
			}
			end, err := net.ParseMAC(*c.RangeEnd)
			if err != nil {
				return nil, fmt.Errorf("%s.rangeEnd: %w", f, err)
			}
			if len(start) != 6 || len(end) != 6 || start[0]&1 != 0 || bytes.Compare(end, start) <= 0 {
				return nil, fmt.Errorf("%s: %s-%s is not a unicast range with rangeEnd after rangeStart", f, start, end)
			}
			pool["rangeStart"], pool["rangeEnd"] = *c.RangeStart, *c.RangeEnd
		}
	}
	// certConfig, with upstream HCO's defaults, as upstream passes it on:
	// durations are rotate intervals, renewBefores overlap intervals.
	cs := certStrategy(s.Security.CertConfig)
	selfSign := map[string]any{"caRotateInterval": cs.CA.Duration.String(), "caOverlapInterval": cs.CA.RenewBefore.String(),
		"certRotateInterval": cs.Server.Duration.String(), "certOverlapInterval": cs.Server.RenewBefore.String()}
	return map[string]any{"multus": map[string]any{}, "linuxBridge": map[string]any{}, "kubeMacPool": pool, "selfSignConfiguration": selfSign}, nil
}

// sspSpec is the SSP's spec: the common templates' namespace, the golden
// images and the validator's replicas.
func sspSpec(s *hcov1.HyperConvergedSpec) (map[string]any, error) {
	common := map[string]any{"namespace": ptr.Deref(s.WorkloadSources.CommonTemplatesNamespace, DefaultCommonTemplatesNamespace)}
	if g := goldenImages(s); len(g) > 0 {
		tmpls := make([]any, len(g))
		for i := range g {
			m, err := toMap(g[i].DataImportCronTemplate)
			if err != nil {
				return nil, err
			}
			unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
			tmpls[i] = m
		}
		common["dataImportCronTemplates"] = tmpls
	}
	return map[string]any{"commonTemplates": common, "templateValidator": map[string]any{"replicas": int64(templateValidatorReplicas)}}, nil
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func decode(b []byte) any {
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

func jsonEqual(a, b []byte) bool { return reflect.DeepEqual(decode(a), decode(b)) }

// jsonKeysSubset: every field of a is in b (values aside: lists and
// scalars the HCO sets are put back by the apply itself).
func jsonKeysSubset(a, b []byte) bool { return keysSubset(decode(a), decode(b)) }

func keysSubset(a, b any) bool {
	am, ok := a.(map[string]any)
	if !ok {
		return true
	}
	bm, ok := b.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range am {
		if w, ok := bm[k]; !ok || !keysSubset(v, w) {
			return false
		}
	}
	return true
}
