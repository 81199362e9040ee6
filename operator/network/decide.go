package network

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/network/install"
)

// The components, by their spec key.
const (
	KeyMultus      = "multus"
	KeyLinuxBridge = "linuxBridge"
	KeyKubeMacPool = "kubeMacPool"
)

// CAKey is the key of the CA bundle in kubemacpool's Secret
// (install.KubeMacPoolSecret): the CAs that signed its serving
// certificate and the previous ones, the webhook's caBundle.
const CAKey = "ca.crt"

// Options are the operator's: the components' images and the nodes' CNI
// directories (install.Config, whose PullPolicy is the default when the
// spec sets none), and the version it reports.
type Options struct {
	install.Config
	KubeMacPoolImage string
	Version          string
	// CertSettle is how long a new CA is published before kubemacpool's
	// valid certificate is replaced by one it signs (certs.MakePlan).
	CertSettle time.Duration
}

// Workload is what a reconcile read of one DaemonSet or Deployment.
type Workload struct {
	// Ready: it runs its current spec everywhere it should.
	Ready bool
}

// Observed is what a reconcile read.
type Observed struct {
	Config *networkaddonsv1.NetworkAddonsConfig
	// UnknownFields are the spec's fields kubevmm does not declare, as
	// stored.
	UnknownFields []string
	// Workloads are the components' DaemonSets and Deployments, by
	// "Kind namespace/name".
	Workloads map[string]Workload
	// KubeMacPoolRange is the range in kubemacpool's ConfigMap, nil
	// without one; RandomRange a fresh random range, for a kubeMacPool
	// without a range and no ConfigMap yet.
	KubeMacPoolRange, RandomRange *[2]string
	// KubeMacPoolCerts is what kubemacpool's CA and certificate Secrets
	// hold.
	KubeMacPoolCerts certs.Stored
}

// Decision is what to apply, what to delete (the objects of components
// whose key is absent) and the status to write.
type Decision struct {
	Apply  []*unstructured.Unstructured
	Delete []client.Object
	Status networkaddonsv1.NetworkAddonsConfigStatus
	// CertsDue is when kubemacpool's certificates are next due;
	// Renewed says which Apply renews, and why.
	CertsDue time.Time
	Renewed  []string
}

// component is one spec key's objects.
type component struct {
	key     string
	wanted  bool
	objects []client.Object
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, opts Options, now metav1.Time) Decision {
	nac := o.Config
	st := *nac.Status.DeepCopy()
	st.OperatorVersion, st.TargetVersion, st.ObservedGeneration = opts.Version, opts.Version, nac.Generation
	conds := func(available, progressing, degraded corev1.ConditionStatus, reason, msg string) {
		st.Conditions = kit.SetConditions(st.Conditions, available, progressing, degraded, reason, msg, now)
	}
	failed := func(reason, msg string) Decision {
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, reason, msg)
		return Decision{Status: st}
	}
	if len(o.UnknownFields) > 0 {
		return failed("InvalidConfiguration", "not supported by kubevmm: spec."+strings.Join(o.UnknownFields, ", spec."))
	}
	cfg := opts.Config
	if nac.Spec.ImagePullPolicy != "" {
		cfg.PullPolicy = nac.Spec.ImagePullPolicy
	}
	multus, err := install.MultusObjects(cfg)
	if err != nil {
		return failed("FailedToRender", err.Error())
	}
	kmp, plan, err := kubeMacPoolObjects(o, opts, cfg.PullPolicy, now)
	if err != nil {
		return failed("InvalidConfiguration", err.Error())
	}
	comps := []component{
		{KeyMultus, nac.Spec.Multus != nil, multus},
		{KeyLinuxBridge, nac.Spec.LinuxBridge != nil, install.LinuxBridgeObjects(cfg)},
		{KeyKubeMacPool, nac.Spec.KubeMacPool != nil, kmp},
	}
	owner := *metav1.NewControllerRef(nac, networkaddonsv1.GroupVersion.WithKind("NetworkAddonsConfig"))
	d := Decision{CertsDue: plan.Due, Renewed: plan.Renewed}
	var notReady []string
	st.Containers = nil
	for _, c := range comps {
		for _, obj := range c.objects {
			if !c.wanted && obj.GetObjectKind().GroupVersionKind().Kind == "CustomResourceDefinition" {
				// The NetworkAttachmentDefinition CRD stays: users'
				// definitions live in it.
				continue
			}
			if !c.wanted {
				d.Delete = append(d.Delete, obj)
				continue
			}
			u, err := toApply(obj, owner)
			if err != nil {
				return failed("FailedToRender", err.Error())
			}
			d.Apply = append(d.Apply, u)
			var pod *corev1.PodTemplateSpec
			switch w := obj.(type) {
			case *appsv1.DaemonSet:
				pod = &w.Spec.Template
			case *appsv1.Deployment:
				pod = &w.Spec.Template
			default:
				continue
			}
			kind := obj.GetObjectKind().GroupVersionKind().Kind
			key := workloadKey(kind, obj.GetNamespace(), obj.GetName())
			if !o.Workloads[key].Ready {
				notReady = append(notReady, key)
			}
			for _, ctr := range pod.Spec.Containers {
				st.Containers = append(st.Containers, networkaddonsv1.Container{Namespace: obj.GetNamespace(), ParentKind: kind,
					ParentName: obj.GetName(), Name: ctr.Name, Image: ctr.Image})
			}
		}
	}
	if len(notReady) > 0 {
		conds(corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, "Deploying", "not ready yet: "+strings.Join(notReady, ", "))
	} else {
		st.ObservedVersion = opts.Version
		conds(corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, "AsExpected", "every component requested is ready")
	}
	d.Status = st
	return d
}

// kubeMacPoolObjects are kubemacpool's objects, its certificates' Secrets
// first (the operator's: made and rotated by the spec's
// selfSignConfiguration): with the spec's range, else the one it runs
// with (its ConfigMap), else the random one the reconcile picked. Without
// the key they are only deleted: a fixed range and CA then, as only
// their kinds and names count.
func kubeMacPoolObjects(o Observed, opts Options, pull corev1.PullPolicy, now metav1.Time) ([]client.Object, certs.Plan, error) {
	c := install.KubeMacPoolConfig{Image: opts.KubeMacPoolImage, PullPolicy: pull}
	spec := o.Config.Spec.KubeMacPool
	switch {
	case spec == nil:
		c.RangeStart, c.RangeEnd, c.CABundle = "02:00:00:00:00:00", "02:00:00:ff:ff:ff", []byte("unused")
	case spec.RangeStart != "" || spec.RangeEnd != "":
		c.RangeStart, c.RangeEnd = spec.RangeStart, spec.RangeEnd
	case o.KubeMacPoolRange != nil:
		c.RangeStart, c.RangeEnd = o.KubeMacPoolRange[0], o.KubeMacPoolRange[1]
	default:
		c.RangeStart, c.RangeEnd = o.RandomRange[0], o.RandomRange[1]
	}
	var plan certs.Plan
	var secrets []client.Object
	if spec != nil {
		st, err := selfSignStrategy(o.Config.Spec.SelfSignConfiguration)
		if err != nil {
			return nil, plan, err
		}
		if plan, err = kubeMacPoolCerts(o, st, now, opts.CertSettle); err != nil {
			return nil, plan, fmt.Errorf("kubemacpool's certificate: %w", err)
		}
		c.CABundle, secrets = plan.Bundle, kubeMacPoolSecrets(plan)
	} else {
		secrets = kubeMacPoolSecrets(plan)
	}
	objs, err := install.KubeMacPoolObjects(c)
	if err != nil {
		return nil, plan, fmt.Errorf("spec.%w", err)
	}
	return append(secrets, objs...), plan, nil
}

func workloadKey(kind, ns, name string) string { return kind + " " + ns + "/" + name }

// toApply is obj as the apply configuration the operator applies: owned by
// the NetworkAddonsConfig, except the CRD (deleting the
// NetworkAddonsConfig must not delete users' NetworkAttachmentDefinitions).
func toApply(obj client.Object, owner metav1.OwnerReference) (*unstructured.Unstructured, error) {
	u, err := kit.ApplyConfiguration(obj)
	if err != nil {
		return nil, err
	}
	if obj.GetObjectKind().GroupVersionKind().Kind != "CustomResourceDefinition" {
		u.SetOwnerReferences([]metav1.OwnerReference{owner})
	}
	return u, nil
}
