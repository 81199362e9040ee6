package virt

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

// ManagedBy is the value of install.ManagedByLabel on everything
// virt-operator deploys: cluster-scoped objects cannot have a namespaced
// owner, so the label (as in KubeVirt) is how it finds what it made.
const ManagedBy = "virt-operator"

// The install-strategy annotations say which version and registry an
// object was deployed for.
const (
	AnnotationVersion  = "kubevirt.io/install-strategy-version"
	AnnotationRegistry = "kubevirt.io/install-strategy-registry"
)

// Action is what a reconcile does after deciding.
type Action int

// The actions.
const (
	// Nothing: only the status is written.
	Nothing Action = iota
	// Deploy applies Decision.Objects.
	Deploy
	// DeleteWorkloads deletes every VM and VMI (uninstall, RemoveWorkloads).
	DeleteWorkloads
	// DeleteComponents deletes what virt-operator deployed, CRDs last.
	DeleteComponents
	// Finalize removes the finalizer: nothing is left.
	Finalize
)

// Observed is what a reconcile read.
type Observed struct {
	KubeVirt *v1.KubeVirt
	// Active: this is the one KubeVirt CR of the cluster (the oldest).
	Active bool
	// Workloads counts the VMs and VMIs of the cluster.
	Workloads int
	// Ready: virt-api, virt-controller and virt-handler run the current
	// spec and are available.
	Ready bool
	// Components are virt-api, virt-controller and virt-handler as read,
	// by name; one not deployed is missing.
	Components map[string]Component
	// Remaining counts the objects virt-operator deployed that still
	// exist (read during uninstall only).
	Remaining int
	// Certs is what the certificates' Secrets and ConfigMap hold.
	Certs CertsRead
	// UnknownFields are the spec's fields kubevmm does not declare (see
	// v1.UnknownFields), as stored.
	UnknownFields []string
}

// Component is one of virt-api, virt-controller and virt-handler as read.
type Component struct {
	// Version and Registry are its install-strategy annotations: what it
	// was last applied for.
	Version, Registry string
	// RolledOut: it runs its current spec and is available everywhere.
	RolledOut bool
}

// atVersion: c was applied for tag and registry and has rolled out.
func (c Component) atVersion(tag, registry string) bool {
	return c.Version == tag && c.Registry == registry && c.RolledOut
}

// holdVirtAPI says whether virt-api must keep its deployed version for
// now: on an update (virt-api is deployed, for another version), as in
// KubeVirt's install strategy, virt-controller and virt-handler roll
// first, and virt-api only once both run the new version; a new virt-api
// must not admit objects the old controllers do not know. A first install
// deploys everything at once.
func holdVirtAPI(c map[string]Component, tag, registry string) bool {
	api, ok := c[install.VirtAPIName]
	if !ok || (api.Version == tag && api.Registry == registry) {
		return false
	}
	return !c[install.VirtControllerName].atVersion(tag, registry) || !c[install.VirtHandlerName].atVersion(tag, registry)
}

// stage is where the installation stands towards tag and registry:
// whether virt-api waits (holdVirtAPI), and whether all three components
// run that version.
func stage(o Observed, tag, registry string) (hold, current bool) {
	current = o.Ready
	for _, n := range []string{install.VirtAPIName, install.VirtControllerName, install.VirtHandlerName} {
		current = current && o.Components[n].atVersion(tag, registry)
	}
	return holdVirtAPI(o.Components, tag, registry), current
}

// Decision is what to do and the status to write.
type Decision struct {
	Action  Action
	Objects []*unstructured.Unstructured
	Status  v1.KubeVirtStatus
	// CertsDue is when a certificate is next due for renewal (Deploy).
	CertsDue time.Time
	// Renewed says which certificates Objects renew, and why.
	Renewed []string
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, defaults Options, now metav1.Time) Decision {
	kv := o.KubeVirt
	st := *kv.Status.DeepCopy()
	st.ObservedGeneration = &kv.Generation
	set := func(t v1.KubeVirtConditionType, s corev1.ConditionStatus, reason, msg string) {
		st.Conditions = v1.SetKubeVirtCondition(st.Conditions, v1.KubeVirtCondition{Type: t, Status: s, Reason: reason, Message: msg}, now)
	}
	if !o.Active {
		set(v1.KubeVirtConditionSynchronized, corev1.ConditionFalse, v1.KubeVirtReasonExistingDeployment,
			"another KubeVirt CR is the cluster's installation; this one is ignored")
		return Decision{Action: Nothing, Status: st}
	}
	// The installation now (the CR it deferred to may be gone).
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c v1.KubeVirtCondition) bool { return c.Type == v1.KubeVirtConditionSynchronized })
	if kv.DeletionTimestamp != nil {
		return decideDelete(o, &st, set)
	}

	tag, registry := cmp.Or(kv.Spec.ImageTag, defaults.ImageTag), cmp.Or(kv.Spec.ImageRegistry, defaults.ImageRegistry)
	st.TargetKubeVirtVersion, st.TargetKubeVirtRegistry = tag, registry
	failed := func(msg string) Decision {
		if st.Phase == "" {
			st.Phase = v1.KubeVirtPhaseDeploying
		}
		set(v1.KubeVirtConditionAvailable, corev1.ConditionFalse, v1.KubeVirtReasonDeploymentFailed, msg)
		set(v1.KubeVirtConditionProgressing, corev1.ConditionFalse, v1.KubeVirtReasonDeploymentFailed, msg)
		set(v1.KubeVirtConditionDegraded, corev1.ConditionTrue, v1.KubeVirtReasonDeploymentFailed, msg)
		return Decision{Action: Nothing, Status: st}
	}
	if f := append(v1.UnmodeledFields(kv.Spec), o.UnknownFields...); len(f) > 0 {
		return failed("not supported by kubevmm: spec." + strings.Join(f, ", spec."))
	}
	strat, err := strategy(kv.Spec.CertificateRotateStrategy)
	if err != nil {
		return failed(err.Error())
	}
	plan, err := planCertificates(o.Certs, strat, defaults.Namespace, now.Time, defaults.SecretPropagation)
	if err != nil {
		return failed("certificates: " + err.Error())
	}
	objs, err := desired(kv, plan, defaults, tag, registry)
	if err != nil {
		return failed(err.Error())
	}
	if f := workloadUpdateFields(kv.Spec.WorkloadUpdateStrategy); f != "" {
		return failed(f)
	}
	hold, current := stage(o, tag, registry)
	if hold {
		objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool {
			return u.GetKind() == "Deployment" && u.GetName() == install.VirtAPIName
		})
	}
	// An update: a version was deployed and available, another is the
	// target. The installation stays available while it rolls.
	updating := st.ObservedKubeVirtVersion != "" && (st.ObservedKubeVirtVersion != tag || st.ObservedKubeVirtRegistry != registry)
	set(v1.KubeVirtConditionCreated, corev1.ConditionTrue, v1.KubeVirtReasonAllResourcesCreated, "all resources were created")
	switch {
	case current:
		st.Phase = v1.KubeVirtPhaseDeployed
		st.ObservedKubeVirtVersion, st.ObservedKubeVirtRegistry = tag, registry
		set(v1.KubeVirtConditionAvailable, corev1.ConditionTrue, v1.KubeVirtReasonAllComponentsReady, "all components are ready")
		set(v1.KubeVirtConditionProgressing, corev1.ConditionFalse, v1.KubeVirtReasonAllComponentsReady, "all components are ready")
	case updating:
		st.Phase = v1.KubeVirtPhaseDeploying
		step := "virt-api"
		if hold {
			step = "virt-controller and virt-handler (virt-api after them)"
		}
		msg := fmt.Sprintf("updating from %s/%s to %s/%s: rolling %s", st.ObservedKubeVirtRegistry, st.ObservedKubeVirtVersion, registry, tag, step)
		set(v1.KubeVirtConditionAvailable, corev1.ConditionTrue, v1.KubeVirtReasonAllComponentsReady, "the components of "+st.ObservedKubeVirtVersion+" serve while "+tag+" rolls out")
		set(v1.KubeVirtConditionProgressing, corev1.ConditionTrue, v1.KubeVirtReasonUpdateInProgress, msg)
	default:
		st.Phase = v1.KubeVirtPhaseDeploying
		set(v1.KubeVirtConditionAvailable, corev1.ConditionFalse, v1.KubeVirtReasonDeploymentInProgress, "deploying version "+tag)
		set(v1.KubeVirtConditionProgressing, corev1.ConditionTrue, v1.KubeVirtReasonDeploymentInProgress, "deploying version "+tag)
	}
	set(v1.KubeVirtConditionDegraded, corev1.ConditionFalse, v1.KubeVirtReasonAllComponentsReady, "")
	return Decision{Action: Deploy, Objects: objs, Status: st, CertsDue: plan.due, Renewed: plan.renewed}
}

// workloadUpdateFields names what spec.workloadUpdateStrategy holds that
// virt-controller cannot follow ("" when nothing).
func workloadUpdateFields(w v1.KubeVirtWorkloadUpdateStrategy) string {
	for i, m := range w.WorkloadUpdateMethods {
		if m != v1.WorkloadUpdateMethodLiveMigrate && m != v1.WorkloadUpdateMethodEvict {
			return fmt.Sprintf("spec.workloadUpdateStrategy.workloadUpdateMethods[%d] %q: must be LiveMigrate or Evict", i, m)
		}
	}
	if w.BatchEvictionSize != nil && *w.BatchEvictionSize < 1 {
		return fmt.Sprintf("spec.workloadUpdateStrategy.batchEvictionSize %d: must be at least 1", *w.BatchEvictionSize)
	}
	if w.BatchEvictionInterval != nil && w.BatchEvictionInterval.Duration <= 0 {
		return fmt.Sprintf("spec.workloadUpdateStrategy.batchEvictionInterval %s: must be positive", w.BatchEvictionInterval.Duration)
	}
	return ""
}

// decideDelete: set writes the conditions into st.
func decideDelete(o Observed, st *v1.KubeVirtStatus, set func(v1.KubeVirtConditionType, corev1.ConditionStatus, string, string)) Decision {
	kv := o.KubeVirt
	st.Phase = v1.KubeVirtPhaseDeleting
	set(v1.KubeVirtConditionAvailable, corev1.ConditionFalse, v1.KubeVirtReasonDeletionInProgress, "uninstalling")
	switch {
	case o.Workloads > 0 && kv.Spec.UninstallStrategy == v1.KubeVirtUninstallBlockUninstallIfWorkloadsExist:
		set(v1.KubeVirtConditionDegraded, corev1.ConditionTrue, v1.KubeVirtReasonWorkloadsExist,
			fmt.Sprintf("uninstallStrategy BlockUninstallIfWorkloadsExist: %d VirtualMachines and VirtualMachineInstances exist; delete them to finish", o.Workloads))
		return Decision{Action: Nothing, Status: *st}
	case o.Workloads > 0:
		set(v1.KubeVirtConditionProgressing, corev1.ConditionTrue, v1.KubeVirtReasonDeletionInProgress,
			fmt.Sprintf("deleting %d VirtualMachines and VirtualMachineInstances", o.Workloads))
		return Decision{Action: DeleteWorkloads, Status: *st}
	case o.Remaining > 0:
		set(v1.KubeVirtConditionProgressing, corev1.ConditionTrue, v1.KubeVirtReasonDeletionInProgress,
			fmt.Sprintf("deleting %d deployed objects", o.Remaining))
		return Decision{Action: DeleteComponents, Status: *st}
	}
	st.Phase = v1.KubeVirtPhaseDeleted
	set(v1.KubeVirtConditionProgressing, corev1.ConditionFalse, v1.KubeVirtReasonDeletionInProgress, "everything deployed was removed")
	set(v1.KubeVirtConditionDegraded, corev1.ConditionFalse, v1.KubeVirtReasonDeletionInProgress, "")
	return Decision{Action: Finalize, Status: *st}
}

// desired is every object to apply: the CRDs first, the CA bundle and
// the CA, then install's (the leaf Secrets among them), labelled and
// annotated, with the CR's patches applied.
func desired(kv *v1.KubeVirt, certs certPlan, o Options, tag, registry string) ([]*unstructured.Unstructured, error) {
	cc, err := clusterConfig(kv.Spec.Configuration)
	if err != nil {
		return nil, err
	}
	caObjs, leaves := certs.objects(o.Namespace)
	objs, err := install.Objects(install.Config{Namespace: o.Namespace, ImageRegistry: registry, ImageTag: tag,
		PullPolicy: corev1.PullPolicy(cmp.Or(string(kv.Spec.ImagePullPolicy), string(o.PullPolicy))),
		PluginDir:  o.PluginDir, KubeletRoot: o.KubeletRoot, Configuration: cc, CABundle: certs.bundle, Certificates: leaves, ManagedBy: ManagedBy})
	if err != nil {
		return nil, err
	}
	crds, err := install.CRDs()
	if err != nil {
		return nil, err
	}
	all := make([]client.Object, 0, len(crds)+len(caObjs)+len(objs))
	for _, c := range crds {
		c.Labels = map[string]string{install.ManagedByLabel: ManagedBy}
		all = append(all, c)
	}
	all = append(append(all, caObjs...), objs...)
	patches := kv.Spec.CustomizeComponents.Patches
	used := make([]bool, len(patches))
	out := make([]*unstructured.Unstructured, 0, len(all))
	for _, obj := range all {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", kind, obj.GetName(), err)
		}
		for i, p := range patches {
			if p.ResourceType != kind || p.ResourceName != obj.GetName() {
				continue
			}
			used[i] = true
			if b, err = applyPatch(b, obj, p); err != nil {
				return nil, fmt.Errorf("spec.customizeComponents.patches[%d] (%s %s): %w", i, kind, obj.GetName(), err)
			}
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", kind, obj.GetName(), err)
		}
		// What a patch may not change: where the object is and whose it is.
		if u.GetName() != obj.GetName() || u.GetNamespace() != obj.GetNamespace() || u.GetKind() != kind {
			return nil, fmt.Errorf("spec.customizeComponents.patches: a patch of %s %s changes its kind, name or namespace", kind, obj.GetName())
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[AnnotationVersion], ann[AnnotationRegistry] = tag, registry
		u.SetAnnotations(ann)
		l := u.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[install.ManagedByLabel] = ManagedBy
		u.SetLabels(l)
		out = append(out, u)
	}
	for i, ok := range used {
		if !ok {
			return nil, fmt.Errorf("spec.customizeComponents.patches[%d]: no %s %q is deployed", i, patches[i].ResourceType, patches[i].ResourceName)
		}
	}
	return out, nil
}

func applyPatch(doc []byte, obj runtime.Object, p v1.CustomizeComponentsPatch) ([]byte, error) {
	switch p.Type {
	case v1.JSONPatchType:
		jp, err := jsonpatch.DecodePatch([]byte(p.Patch))
		if err != nil {
			return nil, fmt.Errorf("json patch: %w", err)
		}
		return jp.Apply(doc)
	case v1.MergePatchType:
		return jsonpatch.MergePatch(doc, []byte(p.Patch))
	case v1.StrategicMergePatchType:
		if _, ok := obj.(*unstructured.Unstructured); ok {
			return nil, fmt.Errorf("a strategic merge patch needs a built-in kind; use json or merge")
		}
		return strategicpatch.StrategicMergePatch(doc, []byte(p.Patch), obj)
	}
	return nil, fmt.Errorf("type %q: must be json, merge or strategic", p.Type)
}

// clusterConfig is spec.configuration as virt-controller reads it.
func clusterConfig(c v1.KubeVirtConfiguration) (controller.ClusterConfig, error) {
	var cc controller.ClusterConfig
	if c.Migrations != nil {
		cc.Migrations = *c.Migrations
	}
	if c.DeveloperConfiguration != nil {
		cc.DeveloperConfiguration.FeatureGates = c.DeveloperConfiguration.FeatureGates
	}
	if err := cc.Validate(); err != nil {
		return cc, fmt.Errorf("spec.configuration.%w", err)
	}
	return cc, nil
}
