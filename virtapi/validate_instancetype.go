package virtapi

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/expand"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// validateMatchers checks a VM's spec.instancetype and spec.preference:
// a name, a kind KubeVirt knows, no inference from volumes (that needs
// CDI's DataVolumes). Whether the type exists is not checked here, as in
// KubeVirt: virt-controller reports a missing one on the VM.
func validateMatchers(p *field.Path, it *v1.InstancetypeMatcher, pref *v1.PreferenceMatcher) field.ErrorList {
	var errs field.ErrorList
	check := func(mp *field.Path, name, kind, infer string, policy *string, kindOK bool, kinds []string) {
		if name == "" {
			errs = append(errs, required(mp.Child("name"), "the name of the %s", kinds[0]))
		}
		if !kindOK {
			errs = append(errs, notSupported(mp.Child("kind"), kind, "kinds: "+strings.Join(kinds, ", ")))
		}
		if infer != "" {
			errs = append(errs, unsupported(mp, "inferFromVolume", "volumes are containerDisks, which carry no instance type labels"))
		}
		if policy != nil {
			errs = append(errs, unsupported(mp, "inferFromVolumeFailurePolicy", "volumes are containerDisks, which carry no instance type labels"))
		}
	}
	if it != nil {
		_, ok := v1beta1.InstancetypeKind(it.Kind)
		check(p.Child("instancetype"), it.Name, it.Kind, it.InferFromVolume, it.InferFromVolumeFailurePolicy, ok,
			[]string{v1beta1.KindClusterInstancetype, v1beta1.KindInstancetype})
	}
	if pref != nil {
		_, ok := v1beta1.PreferenceKind(pref.Kind)
		check(p.Child("preference"), pref.Name, pref.Kind, pref.InferFromVolume, pref.InferFromVolumeFailurePolicy, ok,
			[]string{v1beta1.KindClusterPreference, v1beta1.KindPreference})
	}
	return errs
}

// validateVMTemplate validates the template of a VM. With an instance
// type, the template must leave the CPU topology and memory to it (a
// conflict names the field, as KubeVirt's webhook does), and the guest
// memory it lacks is not an error: the VMI virt-controller renders from
// the type is validated in full when it is created.
func validateVMTemplate(t *field.Path, vm *v1.VirtualMachine) field.ErrorList {
	s := &vm.Spec.Template.Spec
	errs := ValidateVMISpec(t.Child("spec"), s, t.Child("metadata"), vm.Spec.Template.ObjectMeta.Annotations)
	if vm.Spec.Instancetype == nil {
		return errs
	}
	memory := t.Child("spec", "domain", "memory", "guest").String()
	out := expand.Conflicts(t.Child("spec"), s, &vm.Spec.Template.ObjectMeta, nil)
	for _, e := range errs {
		if e.Type == field.ErrorTypeRequired && e.Field == memory {
			continue
		}
		out = append(out, e)
	}
	return out
}

// validateMatcherUpdates refuses, as KubeVirt does, an update that renames
// a VM's instance type or preference but keeps the revision captured for
// the old name: the VM would go on running the old one. (An old matcher
// without a revision is virt-controller's to fill in.)
func validateMatcherUpdates(p *field.Path, old, vm *v1.VirtualMachine) field.ErrorList {
	var errs field.ErrorList
	check := func(name string, oldName, oldRev, newName, newRev string) {
		if oldRev != "" && oldName != newName && oldRev == newRev {
			errs = append(errs, invalid(p.Child(name, "revisionName"), newRev, "the Matcher Name has been updated without updating the RevisionName"))
		}
	}
	if o, n := old.Spec.Instancetype, vm.Spec.Instancetype; o != nil && n != nil {
		check("instancetype", o.Name, o.RevisionName, n.Name, n.RevisionName)
	}
	if o, n := old.Spec.Preference, vm.Spec.Preference; o != nil && n != nil {
		check("preference", o.Name, o.RevisionName, n.Name, n.RevisionName)
	}
	return errs
}
