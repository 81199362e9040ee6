package datavolume

import (
	"encoding/json"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// AppLabel marks the PVCs and pods CDI makes (upstream's label).
const AppLabel = "app"

// AppName is AppLabel's value.
const AppName = "containerized-data-importer"

// Env is what the claim of a DataVolume depends on besides the
// DataVolume: the cluster's StorageClasses, the StorageProfiles (by
// name) and CDIConfig's status.
type Env struct {
	Classes  []storagev1.StorageClass
	Profiles map[string]*cdiv1.StorageProfile
	Config   cdiv1.CDIConfigStatus
}

// invalidError is a DataVolume whose spec cannot make a claim: the
// DataVolume fails, saying why.
type invalidError struct{ msg string }

func (e invalidError) Error() string { return e.msg }

// Size is the DataVolume's requested size and the field it comes from.
func Size(dv *cdiv1.DataVolume) (resource.Quantity, string) {
	if dv.Spec.PVC != nil {
		return dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage], "spec.pvc.resources.requests.storage"
	}
	if dv.Spec.Storage != nil {
		return dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage], "spec.storage.resources.requests.storage"
	}
	return resource.Quantity{}, "spec.storage.resources.requests.storage"
}

// Claim is the PVC a DataVolume makes: `pvc` as it is, or `storage` with
// the StorageProfile's access and volume modes where it names none, the
// default class where it names none, and a Filesystem claim grown by the
// filesystem overhead so that the image's size fits. The annotations
// tell the import (or upload) controller what fills it.
func Claim(dv *cdiv1.DataVolume, env Env) (*corev1.PersistentVolumeClaim, error) {
	size, field := Size(dv)
	if size.Sign() <= 0 {
		return nil, invalidError{fmt.Sprintf("%s must be positive, not %s", field, size.String())}
	}
	var spec corev1.PersistentVolumeClaimSpec
	if dv.Spec.PVC != nil {
		spec = *dv.Spec.PVC.DeepCopy()
	} else {
		s, err := fromStorage(dv.Spec.Storage, env)
		if err != nil {
			return nil, err
		}
		spec = s
	}
	ann, err := annotations(dv)
	if err != nil {
		return nil, err
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: dv.Name, Namespace: dv.Namespace, Labels: map[string]string{AppLabel: AppName},
			Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: cdiv1.GroupVersion.String(), Kind: "DataVolume", Name: dv.Name, UID: dv.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: spec,
	}, nil
}

func fromStorage(s *cdiv1.StorageSpec, env Env) (corev1.PersistentVolumeClaimSpec, error) {
	spec := corev1.PersistentVolumeClaimSpec{AccessModes: s.AccessModes, Selector: s.Selector, Resources: *s.Resources.DeepCopy(),
		VolumeName: s.VolumeName, StorageClassName: s.StorageClassName, VolumeMode: s.VolumeMode}
	class := ptr.Deref(s.StorageClassName, "")
	if class == "" {
		for _, sc := range env.Classes {
			if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
				class = sc.Name
			}
		}
		if class == "" {
			return spec, invalidError{"spec.storage.storageClassName is unset and the cluster has no default StorageClass"}
		}
		spec.StorageClassName = ptr.To(class)
	}
	if spec.VolumeMode != nil && *spec.VolumeMode == cdiv1.PersistentVolumeFromStorageProfile {
		spec.VolumeMode = nil
	}
	if len(spec.AccessModes) == 0 || spec.VolumeMode == nil {
		var sets []cdiv1.ClaimPropertySet
		if p := env.Profiles[class]; p != nil {
			sets = p.Status.ClaimPropertySets
		}
		set, ok := pick(sets, spec.VolumeMode)
		if !ok {
			return spec, invalidError{fmt.Sprintf("spec.storage: no accessModes given and StorageProfile %s names none", class)}
		}
		if len(spec.AccessModes) == 0 {
			spec.AccessModes = set.AccessModes
		}
		if spec.VolumeMode == nil {
			spec.VolumeMode = set.VolumeMode
		}
	}
	if ptr.Deref(spec.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeFilesystem {
		size := spec.Resources.Requests[corev1.ResourceStorage]
		grown, err := withOverhead(size, overhead(env.Config, class))
		if err != nil {
			return spec, err
		}
		spec.Resources.Requests[corev1.ResourceStorage] = grown
	}
	return spec, nil
}

// pick is the first property set of the volume mode asked for (any
// without one).
func pick(sets []cdiv1.ClaimPropertySet, mode *corev1.PersistentVolumeMode) (cdiv1.ClaimPropertySet, bool) {
	for _, s := range sets {
		if mode == nil || (s.VolumeMode != nil && *s.VolumeMode == *mode) {
			return s, true
		}
	}
	return cdiv1.ClaimPropertySet{}, false
}

// Overhead is the share of a Filesystem claim of class kept for the
// filesystem, as CDIConfig's status says (0.06 without one).
func Overhead(cfg cdiv1.CDIConfigStatus, class string) float64 { return overhead(cfg, class) }

func overhead(cfg cdiv1.CDIConfigStatus, class string) float64 {
	p := cdiv1.Percent("0.06")
	if f := cfg.FilesystemOverhead; f != nil {
		if f.Global != "" {
			p = f.Global
		}
		if v, ok := f.StorageClass[class]; ok && v != "" {
			p = v
		}
	}
	var v float64
	if _, err := fmt.Sscanf(string(p), "%g", &v); err != nil || v < 0 || v >= 1 {
		return 0.06
	}
	return v
}

// withOverhead is size grown so that size is what is left after the
// overhead, rounded up to a MiB.
func withOverhead(size resource.Quantity, overhead float64) (resource.Quantity, error) {
	const mib = 1 << 20
	b, ok := size.AsInt64()
	if !ok {
		return size, invalidError{"the requested size " + size.String() + " is too large"}
	}
	grown := math.Ceil(float64(b) / (1 - overhead))
	n := (int64(grown) + mib - 1) / mib * mib
	return *resource.NewQuantity(n, resource.BinarySI), nil
}

// annotations tell the transfer controllers what fills the claim.
func annotations(dv *cdiv1.DataVolume) (map[string]string, error) {
	ann := map[string]string{cdiv1.AnnContentType: string(cdiv1.ContentTypeKubeVirt)}
	if dv.Spec.PriorityClassName != "" {
		ann[cdiv1.AnnPriorityClassName] = dv.Spec.PriorityClassName
	}
	src := dv.Spec.Source
	switch {
	case src == nil:
		return nil, invalidError{"spec.source is required"}
	case src.HTTP != nil:
		h := src.HTTP
		ann[cdiv1.AnnSource], ann[cdiv1.AnnEndpoint] = cdiv1.SourceHTTP, h.URL
		for k, v := range map[string]string{cdiv1.AnnSecret: h.SecretRef, cdiv1.AnnCertConfigMap: h.CertConfigMap, cdiv1.AnnChecksum: h.Checksum} {
			if v != "" {
				ann[k] = v
			}
		}
		for k, v := range map[string][]string{cdiv1.AnnExtraHeaders: h.ExtraHeaders, cdiv1.AnnSecretExtraHeaders: h.SecretExtraHeaders} {
			if len(v) > 0 {
				b, err := json.Marshal(v)
				if err != nil {
					return nil, fmt.Errorf("encoding %s: %w", k, err)
				}
				ann[k] = string(b)
			}
		}
	case src.Registry != nil:
		registryAnnotations(ann, src.Registry)
	case src.Blank != nil:
		ann[cdiv1.AnnSource] = cdiv1.SourceNone
	case src.Upload != nil:
		ann[cdiv1.AnnUploadRequest] = ""
	default:
		return nil, invalidError{"spec.source: no source kubevmm imports"}
	}
	return ann, nil
}
