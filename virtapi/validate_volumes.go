package virtapi

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// validateDiskVolume checks a persistentVolumeClaim or emptyDisk volume:
// a claim named as Kubernetes names objects, an emptyDisk of some
// capacity. Hotplug is not supported (no hotplug volumes in kubevmm).
func validateDiskVolume(vp *field.Path, v *v1.Volume) field.ErrorList {
	var errs field.ErrorList
	if c := v.PersistentVolumeClaim; c != nil {
		cp := vp.Child("persistentVolumeClaim")
		if c.ClaimName == "" {
			errs = append(errs, required(cp.Child("claimName"), "the PVC in the VMI's namespace"))
		}
		for _, msg := range validation.IsDNS1123Subdomain(c.ClaimName) {
			if c.ClaimName != "" {
				errs = append(errs, invalid(cp.Child("claimName"), c.ClaimName, "%s", msg))
			}
		}
		if c.Hotpluggable {
			errs = append(errs, unsupported(cp, "hotpluggable", "volumes are attached when the VMI starts"))
		}
	}
	if e := v.EmptyDisk; e != nil && e.Capacity.Sign() <= 0 {
		errs = append(errs, invalid(vp.Child("emptyDisk", "capacity"), e.Capacity.String(), "must be greater than zero"))
	}
	return errs
}
