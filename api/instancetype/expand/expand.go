// Package expand applies an instance type and a preference to a VM's
// template, as KubeVirt's virt-controller does when it creates the VMI and
// as its virt-api does for admission and the expand-spec subresource: the
// instance type's CPU and memory (a template that sets them conflicts),
// then each preferred value where the template leaves the field unset.
package expand

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// conflictMessage is KubeVirt's wording, one error per field.
const conflictMessage = "VM field %s conflicts with selected instance type"

func conflict(p *field.Path) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: p.String(), BadValue: field.OmitValueType{}, Detail: fmt.Sprintf(conflictMessage, p.String())}
}

// Conflicts lists the fields of the VMI spec s (at path p, e.g.
// spec.template.spec) and its metadata that an instance type sets, so a VM
// naming one must leave them unset. With it nil (the type is not known
// yet) it lists the ones every instance type sets: the vCPU topology and
// the guest memory, and CPU and memory requests and limits.
func Conflicts(p *field.Path, s *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta, it *v1beta1.VirtualMachineInstancetypeSpec) field.ErrorList {
	var errs field.ErrorList
	d := p.Child("domain")
	res := d.Child("resources")
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := s.Domain.Resources.Requests[name]; ok {
			errs = append(errs, conflict(res.Child("requests", string(name))))
		}
		if _, ok := s.Domain.Resources.Limits[name]; ok {
			errs = append(errs, conflict(res.Child("limits", string(name))))
		}
	}
	if c := s.Domain.CPU; c != nil {
		for _, f := range []struct {
			name string
			set  bool
		}{{"sockets", c.Sockets != 0}, {"cores", c.Cores != 0}, {"threads", c.Threads != 0}} {
			if f.set {
				errs = append(errs, conflict(d.Child("cpu", f.name)))
			}
		}
	}
	if m := s.Domain.Memory; m != nil && m.Guest != nil {
		errs = append(errs, conflict(d.Child("memory", "guest")))
	}
	if it == nil {
		return errs
	}
	if it.NodeSelector != nil && s.NodeSelector != nil {
		errs = append(errs, conflict(p.Child("nodeSelector")))
	}
	for k, v := range it.Annotations {
		if got, ok := meta.Annotations[k]; ok && got != v {
			errs = append(errs, conflict(field.NewPath("annotations").Key(k)))
		}
	}
	return errs
}

// Apply expands s and meta (a copy of a VM's template, at path p) with the
// instance type it and the preference pref, either of which may be nil.
// Errors name the conflicting field of the template, or the preference's
// requirement the VM does not meet; s is complete only without errors.
// Settings the types have and kubevmm does not honour are for
// UnsupportedInstancetype and UnsupportedPreference to refuse, first.
func Apply(p *field.Path, s *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) field.ErrorList {
	if it != nil {
		if errs := Conflicts(p, s, meta, it); len(errs) > 0 {
			return errs
		}
	}
	if errs := checkRequirements(p, s, it, pref); len(errs) > 0 {
		return errs
	}
	if it != nil {
		applyInstancetype(s, meta, it, pref)
	}
	if pref != nil {
		applyPreference(s, meta, pref)
	}
	return nil
}

func applyInstancetype(s *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) {
	if s.Domain.CPU == nil {
		s.Domain.CPU = &v1.CPU{}
	}
	s.Domain.CPU.Sockets, s.Domain.CPU.Cores, s.Domain.CPU.Threads = Topology(it.CPU.Guest, pref)
	if s.Domain.Memory == nil {
		s.Domain.Memory = &v1.Memory{}
	}
	g := it.Memory.Guest.DeepCopy()
	s.Domain.Memory.Guest = &g
	if it.NodeSelector != nil {
		s.NodeSelector = maps.Clone(it.NodeSelector)
	}
	addMissing(meta, it.Annotations)
}

// Topology lays out n vCPUs as (sockets, cores, threads) the way KubeVirt
// does for the preference's preferredCPUTopology, with one difference: with
// no topology preferred (or "any"), KubeVirt makes each vCPU a socket and
// kubevmm a core, because both of its backends show the guest a single
// socket (a VMI with sockets > 1 is refused). An explicit sockets, threads
// or spread topology is laid out as KubeVirt does, and such a VMI with
// more than one vCPU is refused naming domain.cpu.sockets or threads.
func Topology(n uint32, pref *v1beta1.VirtualMachinePreferenceSpec) (sockets, cores, threads uint32) {
	sockets, cores, threads = 1, 1, 1
	if n <= 1 {
		return sockets, cores, threads
	}
	var t v1beta1.PreferredCPUTopology
	if pref != nil && pref.CPU != nil && pref.CPU.PreferredCPUTopology != nil {
		t = *pref.CPU.PreferredCPUTopology
	}
	switch t {
	case v1beta1.Sockets, v1beta1.DeprecatedPreferSockets:
		sockets = n
	case v1beta1.Threads, v1beta1.DeprecatedPreferThreads:
		threads = n
	case v1beta1.Spread, v1beta1.DeprecatedPreferSpread:
		ratio, across := spreadOptions(pref)
		switch across {
		case v1beta1.SpreadAcrossCoresThreads:
			threads, cores = ratio, n/ratio
		case v1beta1.SpreadAcrossSocketsCoresThreads:
			threads, cores, sockets = 2, ratio, n/2/ratio
		default:
			cores, sockets = ratio, n/ratio
		}
	default:
		cores = n
	}
	return sockets, cores, threads
}

// spreadOptions: KubeVirt's defaults are a ratio of 2 across sockets and
// cores; preferSpreadSocketToCoreRatio is the older spelling of the ratio.
func spreadOptions(pref *v1beta1.VirtualMachinePreferenceSpec) (uint32, v1beta1.SpreadAcross) {
	ratio, across := uint32(2), v1beta1.SpreadAcrossSocketsCores
	if pref.PreferSpreadSocketToCoreRatio != 0 {
		ratio = pref.PreferSpreadSocketToCoreRatio
	}
	if o := pref.CPU.SpreadOptions; o != nil {
		if o.Across != nil {
			across = *o.Across
		}
		if o.Ratio != nil && *o.Ratio != 0 {
			ratio = *o.Ratio
		}
	}
	return ratio, across
}

func addMissing(meta *metav1.ObjectMeta, from map[string]string) {
	if len(from) == 0 {
		return
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	for k, v := range from {
		if _, ok := meta.Annotations[k]; !ok {
			meta.Annotations[k] = v
		}
	}
}

// vcpus is the VMI's vCPU count as KubeVirt counts it for requirements.
func vcpus(s *v1.VirtualMachineInstanceSpec) uint32 {
	c := s.Domain.CPU
	if c == nil {
		return 1
	}
	n := uint32(1)
	for _, x := range []uint32{c.Sockets, c.Cores, c.Threads} {
		if x > 0 {
			n *= x
		}
	}
	return n
}

// checkRequirements: a preference's requirements are met by the instance
// type when there is one, else by the template itself (errors name where
// the short value comes from, as KubeVirt's do).
func checkRequirements(p *field.Path, s *v1.VirtualMachineInstanceSpec, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) field.ErrorList {
	if pref == nil || pref.Requirements == nil {
		return nil
	}
	r := pref.Requirements
	var errs field.ErrorList
	if r.CPU != nil {
		have, at := vcpus(s), p.Child("domain", "cpu")
		if it != nil {
			have, at = it.CPU.Guest, field.NewPath("spec", "instancetype")
		}
		if have < r.CPU.Guest {
			errs = append(errs, field.Invalid(at, have, fmt.Sprintf("insufficient CPU resources of %d vCPU provided, preference requires %d vCPU", have, r.CPU.Guest)))
		}
	}
	if r.Memory != nil {
		at := p.Child("domain", "memory")
		var have string
		short := true
		switch {
		case it != nil:
			at = field.NewPath("spec", "instancetype")
			have, short = it.Memory.Guest.String(), it.Memory.Guest.Cmp(r.Memory.Guest) < 0
		case s.Domain.Memory != nil && s.Domain.Memory.Guest != nil:
			have, short = s.Domain.Memory.Guest.String(), s.Domain.Memory.Guest.Cmp(r.Memory.Guest) < 0
		default:
			if q, ok := s.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
				have, short = q.String(), q.Cmp(r.Memory.Guest) < 0
			}
		}
		if short {
			errs = append(errs, field.Invalid(at, have, fmt.Sprintf("insufficient Memory resources of %s provided, preference requires %s", have, r.Memory.Guest.String())))
		}
	}
	return errs
}
