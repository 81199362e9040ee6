package virtapi

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"strings"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// validateDataVolumeVolume checks a dataVolume volume: the DataVolume
// named as Kubernetes names objects (a hotpluggable one is checked by
// validateHotplugVolumes).
func validateDataVolumeVolume(vp *field.Path, dv *v1.DataVolumeSource) field.ErrorList {
	dp := vp.Child("dataVolume")
	return validateObjectName(dp.Child("name"), dv.Name, "the DataVolume in the VMI's namespace")
}

// validateObjectName: set, and a DNS-1123 subdomain.
func validateObjectName(p *field.Path, name, what string) field.ErrorList {
	if name == "" {
		return field.ErrorList{required(p, "%s", what)}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, invalid(p, name, "%s", msg))
	}
	return errs
}

// validateDataVolumeTemplates checks a VM's spec.dataVolumeTemplates as
// KubeVirt's VM admitter does (a name, unique, in the VM's namespace,
// used by a dataVolume volume of the template) and each spec by the rules
// CDI's DataVolume CRD has (api/cdi/v1beta1's CEL rules: exactly one of
// source and sourceRef, exactly one source, exactly one of pvc and
// storage with a storage request unless it clones, the sources kubevmm does not import
// refused by name), so that a VM is refused at once rather than its
// DataVolume later. ns is the VM's namespace.
func validateDataVolumeTemplates(p *field.Path, vm *v1.VirtualMachine, ns string) field.ErrorList {
	var errs field.ErrorList
	used := map[string]bool{}
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.DataVolume != nil {
				used[v.DataVolume.Name] = true
			}
		}
	}
	seen := map[string]bool{}
	for i := range vm.Spec.DataVolumeTemplates {
		t := &vm.Spec.DataVolumeTemplates[i]
		tp := p.Index(i)
		name := t.ObjectMeta.Name
		errs = append(errs, uniqueName(tp.Child("metadata", "name"), name, seen, "dataVolumeTemplate")...)
		if name != "" {
			errs = append(errs, validateObjectName(tp.Child("metadata", "name"), name, "")...)
			if !used[name] {
				errs = append(errs, invalid(tp.Child("metadata", "name"), name, "must be referenced by a dataVolume volume of spec.template.spec.volumes"))
			}
		}
		if t.ObjectMeta.Namespace != "" && t.ObjectMeta.Namespace != ns {
			errs = append(errs, invalid(tp.Child("metadata", "namespace"), t.ObjectMeta.Namespace, "must be the VM's namespace (%s)", ns))
		}
		if t.Kind != "" && t.Kind != "DataVolume" {
			errs = append(errs, notSupported(tp.Child("kind"), t.Kind, "DataVolume"))
		}
		if t.APIVersion != "" && t.APIVersion != cdiv1.GroupVersion.String() {
			errs = append(errs, notSupported(tp.Child("apiVersion"), t.APIVersion, cdiv1.GroupVersion.String()))
		}
		if len(t.Spec.Raw) == 0 {
			errs = append(errs, required(tp.Child("spec"), "the DataVolume's spec"))
			continue
		}
		spec, err := t.DataVolumeSpec()
		if err != nil {
			errs = append(errs, invalid(tp.Child("spec"), field.OmitValueType{}, "%v", err))
			continue
		}
		errs = append(errs, validateDataVolumeSpec(tp.Child("spec"), spec)...)
	}
	return errs
}

// validateDataVolumeSpec is CDI's CRD rules on a DataVolumeSpec
// (api/cdi/v1beta1 DataVolumeSpec and DataVolumeSource markers).
func validateDataVolumeSpec(p *field.Path, s *cdiv1.DataVolumeSpec) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.Source == nil && s.SourceRef == nil:
		errs = append(errs, required(p.Child("source"), "one of source and sourceRef"))
	case s.Source != nil && s.SourceRef != nil:
		errs = append(errs, field.Forbidden(p.Child("sourceRef"), "source and sourceRef are mutually exclusive"))
	case s.SourceRef != nil && s.SourceRef.Kind != "DataSource":
		errs = append(errs, notSupported(p.Child("sourceRef", "kind"), s.SourceRef.Kind, "DataSource"))
	case s.SourceRef != nil && s.SourceRef.Name == "":
		errs = append(errs, required(p.Child("sourceRef", "name"), "the DataSource's name"))
	}
	// A clone takes its source's size when it asks for none.
	clone := s.SourceRef != nil || (s.Source != nil && s.Source.PVC != nil)
	if src := s.Source; src != nil {
		sp := p.Child("source")
		kinds := []struct {
			name, why string
			set       bool
		}{
			{"http", "", src.HTTP != nil},
			{"upload", "", src.Upload != nil},
			{"blank", "", src.Blank != nil},
			{"pvc", "", src.PVC != nil},
			{"registry", "", src.Registry != nil},
			{"s3", "", src.S3 != nil},
			{"gcs", "", src.GCS != nil},
			{"imageio", "", src.Imageio != nil},
			{"vddk", "", src.VDDK != nil},
			{"snapshot", "not yet", src.Snapshot != nil},
		}
		n := 0
		for i, k := range kinds {
			if !k.set {
				continue
			}
			n++
			if i >= 5 {
				errs = append(errs, unsupported(sp, k.name, k.why))
			}
		}
		if n != 1 {
			errs = append(errs, invalid(sp, field.OmitValueType{}, "must set exactly one source"))
		}
		if h := src.HTTP; h != nil && h.URL == "" {
			errs = append(errs, required(sp.Child("http", "url"), "the image's URL"))
		}
		if c := src.PVC; c != nil && c.Name == "" {
			errs = append(errs, required(sp.Child("pvc", "name"), "the source PVC's name"))
		}
		if r := src.Registry; r != nil {
			errs = append(errs, validateRegistrySource(sp.Child("registry"), r)...)
		}
	}
	switch {
	case (s.PVC == nil) == (s.Storage == nil):
		errs = append(errs, invalid(p, field.OmitValueType{}, "exactly one of pvc and storage is required"))
	case s.PVC != nil:
		if _, ok := s.PVC.Resources.Requests["storage"]; !ok && !clone {
			errs = append(errs, required(p.Child("pvc", "resources", "requests", "storage"), "the claim's size"))
		}
		if s.PVC.DataSource != nil || s.PVC.DataSourceRef != nil {
			errs = append(errs, field.Forbidden(p.Child("pvc", "dataSource"), "the DataVolume's source fills the PVC"))
		}
	case s.Storage != nil:
		if _, ok := s.Storage.Resources.Requests["storage"]; !ok && !clone {
			errs = append(errs, required(p.Child("storage", "resources", "requests", "storage"), "the claim's size"))
		}
		if s.Storage.DataSource != nil || s.Storage.DataSourceRef != nil {
			errs = append(errs, field.Forbidden(p.Child("storage", "dataSource"), "the DataVolume's source fills the PVC"))
		}
	}
	if s.ContentType != "" && s.ContentType != cdiv1.ContentTypeKubeVirt {
		errs = append(errs, notSupported(p.Child("contentType"), string(s.ContentType), "only kubevirt"))
	}
	if s.Preallocation != nil && *s.Preallocation {
		errs = append(errs, unsupported(p, "preallocation", ""))
	}
	if len(s.Checkpoints) > 0 {
		errs = append(errs, unsupported(p, "checkpoints", "multi-stage import"))
	}
	return errs
}

// validateRegistrySource is the DataVolume CRD's rules on a registry
// source (api/cdi/v1beta1 DataVolumeSourceRegistry), which a VM's
// dataVolumeTemplates meet here, before virt-controller creates the
// DataVolume: a docker:// URL, no OpenShift image stream, a known pull
// method, and credentials and CAs only where the importer pod pulls.
func validateRegistrySource(p *field.Path, r *cdiv1.DataVolumeSourceRegistry) field.ErrorList {
	var errs field.ErrorList
	switch {
	case r.ImageStream != nil:
		errs = append(errs, unsupported(p, "imageStream", "OpenShift image streams"))
	case r.URL == nil || *r.URL == "":
		errs = append(errs, required(p.Child("url"), "the image, docker://host[:port]/repository[:tag|@sha256:digest]"))
	case !strings.HasPrefix(*r.URL, "docker://"):
		errs = append(errs, invalid(p.Child("url"), *r.URL, "want docker://host[:port]/repository[:tag|@sha256:digest]"))
	}
	if m := r.PullMethod; m != nil {
		switch *m {
		case cdiv1.RegistryPullPod:
		case cdiv1.RegistryPullNode:
			if r.SecretRef != nil || r.CertConfigMap != nil {
				errs = append(errs, field.Forbidden(p.Child("pullMethod"), "node pulls with the node's credentials and trust: secretRef and certConfigMap apply to pullMethod pod only"))
			}
		default:
			errs = append(errs, notSupported(p.Child("pullMethod"), string(*m), "pod, node"))
		}
	}
	return errs
}
