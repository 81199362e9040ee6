package virtapi

import (
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// validateDiskVolume checks a persistentVolumeClaim, ephemeral, hostDisk
// or emptyDisk volume: a claim named as Kubernetes names objects, an
// ephemeral volume with its claim, a hostDisk as KubeVirt checks it
// (an absolute file path, type Disk or DiskOrCreate, the latter with a
// capacity), an emptyDisk of some capacity. Hotpluggable volumes are
// checked apart (validateHotplugVolumes).
func validateDiskVolume(vp *field.Path, v *v1.Volume) field.ErrorList {
	var errs field.ErrorList
	if c := v.PersistentVolumeClaim; c != nil {
		cp := vp.Child("persistentVolumeClaim")
		errs = append(errs, validateClaimName(cp.Child("claimName"), c.ClaimName)...)
	}
	if e := v.Ephemeral; e != nil {
		ep := vp.Child("ephemeral", "persistentVolumeClaim")
		if e.PersistentVolumeClaim == nil {
			errs = append(errs, required(ep, "the PVC the overlay is over"))
		} else {
			errs = append(errs, validateClaimName(ep.Child("claimName"), e.PersistentVolumeClaim.ClaimName)...)
		}
	}
	if h := v.HostDisk; h != nil {
		hp := vp.Child("hostDisk")
		switch {
		case h.Path == "":
			errs = append(errs, required(hp.Child("path"), "the image's path on the node"))
		case !filepath.IsAbs(h.Path) || filepath.Clean(h.Path) != h.Path || filepath.Dir(h.Path) == h.Path:
			errs = append(errs, invalid(hp.Child("path"), h.Path, "must be an absolute, clean path of a file"))
		}
		switch h.Type {
		case v1.HostDiskExists:
		case v1.HostDiskExistsOrCreate:
			if h.Capacity.Sign() <= 0 {
				errs = append(errs, required(hp.Child("capacity"), "the size of the image DiskOrCreate creates"))
			}
		default:
			errs = append(errs, invalid(hp.Child("type"), h.Type, "must be %s or %s", v1.HostDiskExists, v1.HostDiskExistsOrCreate))
		}
	}
	if e := v.EmptyDisk; e != nil && e.Capacity.Sign() <= 0 {
		errs = append(errs, invalid(vp.Child("emptyDisk", "capacity"), e.Capacity.String(), "must be greater than zero"))
	}
	return errs
}

// validateClaimName checks a claim's name: set, and named as Kubernetes
// names objects.
func validateClaimName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{required(p, "the PVC in the VMI's namespace")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, invalid(p, name, "%s", msg))
	}
	return errs
}
