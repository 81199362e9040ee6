package ssp

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/conditions"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	templatecrds "github.com/kubevmm/kubevmm/api/template/crds"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/ssp/instancetypes"
	"github.com/kubevmm/kubevmm/operator/ssp/templates"
)

// ManagedBy is the value of ManagedByLabel on everything the SSP operator
// deploys (upstream's): cluster-scoped objects and the common templates
// (in another namespace) cannot be owned by the SSP, so the label and the
// primary-resource annotations are how it finds what it made.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "ssp-operator"
)

// The annotations naming the SSP an object was deployed for (upstream's,
// from operator-lib's handler).
const (
	AnnotationPrimaryResource     = "operator-sdk/primary-resource"
	AnnotationPrimaryResourceType = "operator-sdk/primary-resource-type"
)

// The common templates' type label: the validator's template webhook
// checks the deletion of these only.
const (
	TemplateTypeLabel = "template.kubevirt.io/type"
	TemplateTypeBase  = "base"
)

// Options are the operator's: its namespace and the validator's image.
type Options struct {
	// Namespace is the operator's own: the SSP is reconciled there only,
	// so the validator's certificates (Secrets) are written there only
	// and the operator is granted Secrets there only (a Role).
	Namespace     string
	ImageRegistry string
	ImageTag      string
	PullPolicy    corev1.PullPolicy
	// CertSettle is how long a new CA is published before the
	// validator's valid certificate is replaced by one it signs
	// (certs.MakePlan).
	CertSettle time.Duration
}

// Action is what a reconcile does after deciding.
type Action int

// The actions.
const (
	// Nothing: only the status is written.
	Nothing Action = iota
	// Deploy applies Decision.Objects.
	Deploy
	// Cleanup deletes what was deployed for the SSP, kind by kind.
	Cleanup
	// Finalize removes the finalizer: nothing is left.
	Finalize
)

// Observed is what a reconcile read.
type Observed struct {
	SSP *sspv1beta3.SSP
	// Active: this is the cluster's one SSP (the oldest); Other names the
	// one that is when it is not.
	Active bool
	Other  string
	// UnknownFields are the spec's fields kubevmm does not declare, as
	// stored.
	UnknownFields []string
	// NamespaceExists: spec.commonTemplates.namespace exists.
	NamespaceExists bool
	// Certs is what the validator's CA and certificate Secrets hold;
	// CertStrategy the cluster's KubeVirt certificateRotateStrategy
	// (KubeVirt's defaults without one), CertStrategyErr why it cannot
	// be used.
	Certs           certs.Stored
	CertStrategy    certs.Strategy
	CertStrategyErr error
	// ValidatorReady: the validator's Deployment runs its current spec
	// with every replica available.
	ValidatorReady bool
	// Remaining counts what was deployed for the SSP outside its
	// namespace that still exists (read while it is deleted only).
	Remaining int
	// DataImportCrons are the golden images' crons deployed for the SSP.
	DataImportCrons []client.ObjectKey
}

// Decision is what to do and the status to write.
type Decision struct {
	Action  Action
	Objects []*unstructured.Unstructured
	Status  sspv1beta3.SSPStatus
	// CertsDue is when a certificate is next due (Deploy); Renewed says
	// which Objects renews, and why.
	CertsDue time.Time
	Renewed  []string
	// Prune are deployed DataImportCrons no template names any more
	// (Deploy).
	Prune []client.ObjectKey
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, opts Options, now metav1.Time) Decision {
	s := o.SSP
	st := *s.Status.DeepCopy()
	st.OperatorVersion = opts.ImageTag
	set := func(t sspv1beta3.ConditionType, status corev1.ConditionStatus, msg string) {
		st.Conditions = conditions.Set(st.Conditions, sspv1beta3.Condition{Type: t, Status: status, Reason: string(t), Message: msg}, now)
	}
	conds := func(available, progressing, degraded corev1.ConditionStatus, msg string) {
		set(sspv1beta3.ConditionAvailable, available, msg)
		set(sspv1beta3.ConditionProgressing, progressing, msg)
		set(sspv1beta3.ConditionDegraded, degraded, msg)
	}
	if s.DeletionTimestamp != nil {
		st.Phase = sspv1beta3.PhaseDeleting
		if o.Remaining > 0 {
			conds(corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, fmt.Sprintf("deleting %d deployed objects", o.Remaining))
			return Decision{Action: Cleanup, Status: st}
		}
		st.Phase = sspv1beta3.PhaseDeleted
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionFalse, "everything deployed was removed")
		return Decision{Action: Finalize, Status: st}
	}
	if s.Namespace != opts.Namespace {
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue,
			fmt.Sprintf("the SSP must be in the operator's namespace, %s: this one is ignored", opts.Namespace))
		return Decision{Action: Nothing, Status: st}
	}
	if !o.Active {
		// Upstream refuses a second SSP at admission; here it is refused
		// by its status, and nothing is deployed for it.
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue,
			fmt.Sprintf("there is one SSP per cluster and %s is the cluster's: this one is ignored", o.Other))
		return Decision{Action: Nothing, Status: st}
	}
	if paused(s) {
		st.Paused = true
		return Decision{Action: Nothing, Status: st}
	}
	st.Paused = false
	st.ObservedGeneration = s.Generation
	st.TargetVersion = opts.ImageTag
	if st.Phase == "" {
		st.Phase = sspv1beta3.PhaseDeploying
	}
	failed := func(msg string) Decision {
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, msg)
		return Decision{Action: Nothing, Status: st}
	}
	if len(o.UnknownFields) > 0 {
		return failed("not supported by kubevmm: spec." + strings.Join(o.UnknownFields, ", spec."))
	}
	if !o.NamespaceExists {
		return failed(fmt.Sprintf("spec.commonTemplates.namespace: namespace %q does not exist", s.Spec.CommonTemplates.Namespace))
	}
	if o.CertStrategyErr != nil {
		return failed(o.CertStrategyErr.Error())
	}
	plan, err := validatorCerts(o, s.Namespace, now, opts.CertSettle)
	if err != nil {
		return failed("the validator's certificate: " + err.Error())
	}
	objs, err := desired(s, opts, plan)
	if err != nil {
		return failed(err.Error())
	}
	if o.ValidatorReady {
		st.Phase = sspv1beta3.PhaseDeployed
		st.ObservedVersion = opts.ImageTag
		conds(corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, "all SSP resources are available")
	} else {
		st.Phase = sspv1beta3.PhaseDeploying
		conds(corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse,
			fmt.Sprintf("Deployment %s/%s: not every replica is available", s.Namespace, ValidatorName))
	}
	return Decision{Action: Deploy, Objects: objs, Status: st, CertsDue: plan.Due, Renewed: plan.Renewed, Prune: pruned(s, o.DataImportCrons)}
}

// paused: the SSP carries the paused annotation, true (upstream reads it
// as a boolean; anything else is not paused).
func paused(s *sspv1beta3.SSP) bool {
	return strings.EqualFold(s.Annotations[sspv1beta3.OperatorPausedAnnotation], "true") || s.Annotations[sspv1beta3.OperatorPausedAnnotation] == "1"
}

// desired is every object to apply, in an order that applies: the
// Template CRD, the instance types and preferences, the common templates,
// the validator, then the golden images' DataImportCrons. Each is labelled and annotated with the SSP; those
// in the SSP's namespace are owned by it too.
func desired(s *sspv1beta3.SSP, opts Options, cp certs.Plan) ([]*unstructured.Unstructured, error) {
	crd, err := templatecrds.CRD()
	if err != nil {
		return nil, err
	}
	all := []client.Object{crd}
	common, err := instancetypes.Common()
	if err != nil {
		return nil, err
	}
	all = append(all, common...)
	tmpls, err := templates.Common(s.Spec.CommonTemplates.Namespace)
	if err != nil {
		return nil, err
	}
	for _, t := range tmpls {
		all = append(all, t)
	}
	// The Secrets before the webhooks that trust their bundle.
	all = append(all, certSecrets(cp, s.Namespace)...)
	all = append(all, validator(s, opts, cp.Bundle)...)
	// Last: the crons' CRD is CDI's, which may not be served yet.
	all = append(all, goldenImages(s)...)
	owner := metav1.OwnerReference{APIVersion: sspv1beta3.GroupVersion.String(), Kind: "SSP", Name: s.Name, UID: s.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	out := make([]*unstructured.Unstructured, 0, len(all))
	for _, obj := range all {
		u, err := kit.ApplyConfiguration(obj)
		if err != nil {
			return nil, err
		}
		l := u.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[ManagedByLabel] = ManagedBy
		u.SetLabels(l)
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[AnnotationPrimaryResource], a[AnnotationPrimaryResourceType] = s.Namespace+"/"+s.Name, "SSP."+sspv1beta3.GroupName
		u.SetAnnotations(a)
		if u.GetNamespace() == s.Namespace {
			u.SetOwnerReferences([]metav1.OwnerReference{owner})
		}
		out = append(out, u)
	}
	return out, nil
}
