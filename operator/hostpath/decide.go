package hostpath

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Options are the operator's: the driver's image, its pull policy when
// the spec sets none, the kubelet's root directory on the nodes, and the
// version it reports.
type Options struct {
	Image       string
	PullPolicy  corev1.PullPolicy
	KubeletRoot string
	Version     string
}

// Observed is what a reconcile read.
type Observed struct {
	HPP *hppv1.HostPathProvisioner
	// UnknownFields are the spec's fields kubevmm does not declare, as
	// stored.
	UnknownFields []string
	// Other is the HostPathProvisioner that deploys the driver when it is
	// not HPP (the oldest one does), "" when HPP is that one.
	Other string
	// DaemonSetReady: the driver's DaemonSet exists and runs its current
	// spec on every node it should.
	DaemonSetReady bool
}

// Decision is what to apply (server-side, owned by the
// HostPathProvisioner) and the status to write.
type Decision struct {
	Apply  []*unstructured.Unstructured
	Status hppv1.HostPathProvisionerStatus
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, opts Options, now metav1.Time) Decision {
	hpp := o.HPP
	st := *hpp.Status.DeepCopy()
	st.OperatorVersion, st.TargetVersion = opts.Version, opts.Version
	conds := func(available, progressing, degraded corev1.ConditionStatus, reason, msg string) {
		st.Conditions = kit.SetConditions(st.Conditions, available, progressing, degraded, reason, msg, now)
	}
	if msg := refusal(o); msg != "" {
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, "InvalidConfiguration", msg)
		return Decision{Status: st}
	}
	c := install.Config{Image: opts.Image, PullPolicy: opts.PullPolicy, KubeletRoot: opts.KubeletRoot,
		NodeSelector: hpp.Spec.Workload.NodeSelector, Tolerations: hpp.Spec.Workload.Tolerations, Affinity: hpp.Spec.Workload.Affinity}
	if hpp.Spec.ImagePullPolicy != "" {
		c.PullPolicy = hpp.Spec.ImagePullPolicy
	}
	for _, p := range hpp.Spec.StoragePools {
		c.Pools = append(c.Pools, install.Pool{Name: p.Name, Path: p.Path})
	}
	owner := *metav1.NewControllerRef(hpp, hppv1.GroupVersion.WithKind("HostPathProvisioner"))
	var d Decision
	for _, obj := range install.Objects(c) {
		u, err := toApply(obj, owner)
		if err != nil {
			conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, "FailedToRender", err.Error())
			return Decision{Status: st}
		}
		d.Apply = append(d.Apply, u)
	}
	phase := hppv1.StoragePoolPending
	if o.DaemonSetReady {
		phase = hppv1.StoragePoolReady
	}
	st.StoragePoolStatuses = nil
	for _, p := range hpp.Spec.StoragePools {
		st.StoragePoolStatuses = append(st.StoragePoolStatuses, hppv1.StoragePoolStatus{Name: p.Name, Phase: phase})
	}
	if o.DaemonSetReady {
		st.ObservedVersion = opts.Version
		conds(corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, "Complete", "the CSI driver runs on every node it should")
	} else {
		conds(corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, "Deploying",
			"not ready yet: DaemonSet "+install.Namespace+"/"+install.Name)
	}
	d.Status = st
	return d
}

// refusal says why the spec cannot be deployed, "" when it can: what
// kubevmm does not implement, named, or another HostPathProvisioner
// deploying the driver already.
func refusal(o Observed) string {
	spec := o.HPP.Spec
	var why []string
	if o.Other != "" {
		why = append(why, fmt.Sprintf("HostPathProvisioner %s deploys the hostpath provisioner already: there is one per cluster", o.Other))
	}
	if len(o.UnknownFields) > 0 {
		why = append(why, "not supported by kubevmm: spec."+strings.Join(o.UnknownFields, ", spec."))
	}
	if spec.PathConfig != nil {
		why = append(why, "spec.pathConfig: upstream's legacy provisioner is not supported by kubevmm, use spec.storagePools")
	}
	if len(spec.FeatureGates) > 0 {
		why = append(why, "spec.featureGates: kubevmm implements none of "+strings.Join(spec.FeatureGates, ", "))
	}
	if len(spec.StoragePools) == 0 && spec.PathConfig == nil {
		why = append(why, "spec.storagePools: at least one pool is needed")
	}
	paths := map[string]string{}
	for i, p := range spec.StoragePools {
		if other, dup := paths[p.Path]; dup {
			why = append(why, fmt.Sprintf("spec.storagePools[%d].path: %s is pool %s's directory already", i, p.Path, other))
		}
		paths[p.Path] = p.Name
	}
	return strings.Join(why, "; ")
}

// toApply is obj as the apply configuration the operator applies, owned
// by the HostPathProvisioner.
func toApply(obj client.Object, owner metav1.OwnerReference) (*unstructured.Unstructured, error) {
	u, err := kit.ApplyConfiguration(obj)
	if err != nil {
		return nil, err
	}
	u.SetOwnerReferences([]metav1.OwnerReference{owner})
	return u, nil
}
