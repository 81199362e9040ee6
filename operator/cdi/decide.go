package cdi

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Finalizer keeps a CDI until its uninstall strategy lets it go
// (upstream's name).
const Finalizer = "operator.cdi.kubevirt.io"

// DefaultFilesystemOverhead is upstream's global filesystem overhead.
const DefaultFilesystemOverhead cdiv1.Percent = "0.06"

// DefaultPodResources are upstream's importer pod requests and limits.
var DefaultPodResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("60M")},
	Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("750m"), corev1.ResourceMemory: resource.MustParse("600M")},
}

// knownClaimProperties are the access and volume modes of the
// provisioners CDI knows, the first the default (upstream's capabilities
// table has the same role).
var knownClaimProperties = map[string][]cdiv1.ClaimPropertySet{
	"kubevirt.io.hostpath-provisioner": {
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)},
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock)},
	},
}

// Options are the operator's: the components' images and the version it
// reports.
type Options struct {
	install.Config
	Version string
}

// Observed is what a reconcile read.
type Observed struct {
	CDI *cdiv1.CDI
	// First is the name of the oldest CDI: the only one deployed for.
	First string
	// UnknownFields are the spec's fields kubevmm does not declare.
	UnknownFields []string
	// Ready says, by name, whether each component Deployment runs its
	// current spec.
	Ready map[string]bool
	// StorageClasses are the cluster's; Profiles its StorageProfiles by
	// name (their spec is the user's).
	StorageClasses []storagev1.StorageClass
	Profiles       map[string]*cdiv1.StorageProfile
	// DataVolumes counts the cluster's DataVolumes (a deleted CDI waits
	// for none to be left).
	DataVolumes int
}

// Decision is what to apply (in order), the statuses to write and
// whether to hold the CDI's finalizer.
type Decision struct {
	Apply         []*unstructured.Unstructured
	ConfigStatus  *cdiv1.CDIConfigStatus
	ProfileStatus map[string]cdiv1.StorageProfileStatus
	Status        cdiv1.CDIStatus
	// AddFinalizer and RemoveFinalizer change the CDI's finalizers.
	AddFinalizer, RemoveFinalizer bool
}

// Decide is the operator's logic, a pure function of what was read (now
// stamps changed conditions).
func Decide(o Observed, opts Options, now metav1.Time) Decision {
	c := o.CDI
	st := *c.Status.DeepCopy()
	st.OperatorVersion, st.TargetVersion = opts.Version, opts.Version
	conds := func(available, progressing, degraded corev1.ConditionStatus, reason, msg string) {
		for _, t := range []cdiv1.ConditionType{cdiv1.ConditionAvailable, cdiv1.ConditionProgressing, cdiv1.ConditionDegraded} {
			s := map[cdiv1.ConditionType]corev1.ConditionStatus{cdiv1.ConditionAvailable: available, cdiv1.ConditionProgressing: progressing,
				cdiv1.ConditionDegraded: degraded}[t]
			st.Conditions = cdiv1.SetCondition(st.Conditions, cdiv1.Condition{Type: t, ConditionState: cdiv1.ConditionState{Status: s, Reason: reason, Message: msg}}, now)
		}
	}
	hasFinalizer := false
	for _, f := range c.Finalizers {
		hasFinalizer = hasFinalizer || f == Finalizer
	}
	if c.DeletionTimestamp != nil {
		st.Phase = cdiv1.CDIPhaseDeleting
		if strategy(c) == cdiv1.UninstallBlockUninstallIfWorkloadsExist && o.DataVolumes > 0 {
			conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, "UninstallBlocked",
				fmt.Sprintf("%d DataVolumes exist and spec.uninstallStrategy is BlockUninstallIfWorkloadsExist: delete them to uninstall", o.DataVolumes))
			return Decision{Status: st}
		}
		return Decision{Status: st, RemoveFinalizer: hasFinalizer}
	}
	failed := func(reason, msg string) Decision {
		st.Phase = cdiv1.CDIPhaseError
		conds(corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionTrue, reason, msg)
		return Decision{Status: st}
	}
	if o.First != c.Name {
		return failed("ConflictingCDI", fmt.Sprintf("there is one CDI per cluster: CDI %s is it", o.First))
	}
	unknown := o.UnknownFields
	if strategy(c) == cdiv1.UninstallRemoveWorkloads {
		unknown = append(unknown, "uninstallStrategy (only BlockUninstallIfWorkloadsExist)")
	}
	if len(unknown) > 0 {
		return failed("InvalidConfiguration", "not supported by kubevmm: spec."+strings.Join(unknown, ", spec."))
	}
	cfg := opts.Config
	if c.Spec.ImagePullPolicy != "" {
		cfg.PullPolicy = c.Spec.ImagePullPolicy
	}
	objs, err := install.Objects(cfg)
	if err != nil {
		return failed("FailedToRender", err.Error())
	}
	owner := metav1.OwnerReference{APIVersion: cdiv1.GroupVersion.String(), Kind: "CDI", Name: c.Name, UID: c.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	d := Decision{AddFinalizer: !hasFinalizer, ProfileStatus: map[string]cdiv1.StorageProfileStatus{}}
	var notReady []string
	for _, obj := range objs {
		u, err := toApply(obj, owner)
		if err != nil {
			return failed("FailedToRender", err.Error())
		}
		d.Apply = append(d.Apply, u)
		if _, ok := obj.(*appsv1.Deployment); ok && !o.Ready[obj.GetName()] {
			notReady = append(notReady, "Deployment "+obj.GetNamespace()+"/"+obj.GetName())
		}
	}
	if err := configAndProfiles(o, owner, &d); err != nil {
		return failed("FailedToRender", err.Error())
	}
	if len(notReady) > 0 {
		st.Phase = cdiv1.CDIPhaseDeploying
		conds(corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, "DeployStarted", "not ready yet: "+strings.Join(notReady, ", "))
	} else {
		st.Phase = cdiv1.CDIPhaseDeployed
		st.ObservedVersion = opts.Version
		conds(corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, "DeployCompleted", "every component is ready")
	}
	d.Status = st
	return d
}

// configAndProfiles adds CDIConfig config and the StorageProfiles to d.
func configAndProfiles(o Observed, owner metav1.OwnerReference, d *Decision) error {
	// The CDI's config is the CDIConfig's spec; its status is the
	// configuration in effect.
	spec := cdiv1.CDIConfigSpec{}
	if c := o.CDI.Spec.Config; c != nil {
		spec = *c
	}
	cc := &cdiv1.CDIConfig{TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.GroupVersion.String(), Kind: "CDIConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: cdiv1.CDIConfigName}, Spec: spec}
	u, err := toApply(cc, owner)
	if err != nil {
		return err
	}
	d.Apply = append(d.Apply, u)
	cs := ConfigStatus(spec, o.StorageClasses)
	d.ConfigStatus = &cs
	for i := range o.StorageClasses {
		sc := &o.StorageClasses[i]
		sp := &cdiv1.StorageProfile{TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.GroupVersion.String(), Kind: "StorageProfile"},
			ObjectMeta: metav1.ObjectMeta{Name: sc.Name}}
		if u, err = toApply(sp, owner); err != nil {
			return err
		}
		// The spec is the user's: applied empty, it owns none of it.
		u.Object["spec"] = map[string]any{}
		d.Apply = append(d.Apply, u)
		d.ProfileStatus[sc.Name] = ProfileStatus(sc, o.Profiles[sc.Name])
	}
	return nil
}

func strategy(c *cdiv1.CDI) cdiv1.CDIUninstallStrategy {
	return ptr.Deref(c.Spec.UninstallStrategy, cdiv1.UninstallBlockUninstallIfWorkloadsExist)
}

// ConfigStatus is the configuration in effect for spec: the upload proxy
// URL only when overridden (no upload proxy is deployed yet), scratch
// space on the override, else the default StorageClass; upstream's
// filesystem overhead and pod resources unless set.
func ConfigStatus(spec cdiv1.CDIConfigSpec, classes []storagev1.StorageClass) cdiv1.CDIConfigStatus {
	st := cdiv1.CDIConfigStatus{UploadProxyURL: spec.UploadProxyURLOverride, DefaultPodResourceRequirements: DefaultPodResources.DeepCopy(),
		FilesystemOverhead: &cdiv1.FilesystemOverhead{Global: DefaultFilesystemOverhead}}
	if spec.ScratchSpaceStorageClass != nil {
		st.ScratchSpaceStorageClass = *spec.ScratchSpaceStorageClass
	} else {
		for _, sc := range classes {
			if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
				st.ScratchSpaceStorageClass = sc.Name
			}
		}
	}
	if spec.PodResourceRequirements != nil {
		st.DefaultPodResourceRequirements = spec.PodResourceRequirements.DeepCopy()
	}
	if f := spec.FilesystemOverhead; f != nil {
		if f.Global != "" {
			st.FilesystemOverhead.Global = f.Global
		}
		st.FilesystemOverhead.StorageClass = f.StorageClass
	}
	// Every class gets its overhead, as upstream lists them.
	if len(classes) > 0 {
		m := map[string]cdiv1.Percent{}
		for _, sc := range classes {
			m[sc.Name] = st.FilesystemOverhead.Global
			if p, ok := st.FilesystemOverhead.StorageClass[sc.Name]; ok {
				m[sc.Name] = p
			}
		}
		st.FilesystemOverhead.StorageClass = m
	}
	return st
}

// ProfileStatus is the advice for sc: the profile's spec where it says,
// else what CDI knows of the provisioner.
func ProfileStatus(sc *storagev1.StorageClass, p *cdiv1.StorageProfile) cdiv1.StorageProfileStatus {
	st := cdiv1.StorageProfileStatus{StorageClass: ptr.To(sc.Name), Provisioner: ptr.To(sc.Provisioner), CloneStrategy: ptr.To("copy")}
	st.ClaimPropertySets = knownClaimProperties[sc.Provisioner]
	if p != nil {
		if len(p.Spec.ClaimPropertySets) > 0 {
			st.ClaimPropertySets = p.Spec.ClaimPropertySets
		}
		if p.Spec.CloneStrategy != nil {
			st.CloneStrategy = p.Spec.CloneStrategy
		}
	}
	return st
}

// toApply is obj as the apply configuration the operator applies: owned by
// the CDI, except the CRDs (deleting the CDI must not delete users'
// DataVolumes).
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

// First is the name of the oldest of cdis (by creation, then name).
func First(cdis []cdiv1.CDI) string {
	sort.Slice(cdis, func(i, j int) bool {
		a, b := cdis[i].CreationTimestamp, cdis[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return cdis[i].Name < cdis[j].Name
	})
	if len(cdis) == 0 {
		return ""
	}
	return cdis[0].Name
}
