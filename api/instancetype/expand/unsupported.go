package expand

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// The machine type every VMI gets (virt-api's default); a preference for
// another one could never apply, the VM's template having it already.
const machineType = "q35"

// UnsupportedInstancetype lists the settings of an instance type kubevmm
// does not honour, as errors under p (the type's spec).
func UnsupportedInstancetype(p *field.Path, it *v1beta1.VirtualMachineInstancetypeSpec) field.ErrorList {
	var errs field.ErrorList
	for _, f := range v1.UnmodeledFields(it) {
		errs = append(errs, field.Forbidden(p.Child(f), "not supported by kubevmm"))
	}
	set := map[string]bool{
		"schedulerName":             it.SchedulerName != "",
		"ioThreadsPolicy":           it.IOThreadsPolicy != nil,
		"cpu.model":                 it.CPU.Model != nil,
		"cpu.dedicatedCPUPlacement": it.CPU.DedicatedCPUPlacement != nil && *it.CPU.DedicatedCPUPlacement,
		"cpu.isolateEmulatorThread": it.CPU.IsolateEmulatorThread != nil && *it.CPU.IsolateEmulatorThread,
		"cpu.maxSockets":            it.CPU.MaxSockets != nil,
		"memory.overcommitPercent":  it.Memory.OvercommitPercent != 0,
		"memory.maxGuest":           it.Memory.MaxGuest != nil,
	}
	return append(errs, forbidden(p, set)...)
}

// UnsupportedPreference lists the settings of a preference kubevmm does
// not honour, as errors under p (the preference's spec).
func UnsupportedPreference(p *field.Path, pref *v1beta1.VirtualMachinePreferenceSpec) field.ErrorList {
	var errs field.ErrorList
	for _, f := range v1.UnmodeledFields(pref) {
		errs = append(errs, field.Forbidden(p.Child(f), "not supported by kubevmm"))
	}
	set := map[string]bool{}
	if d := pref.Devices; d != nil {
		set["devices.preferredSoundModel"] = d.PreferredSoundModel != ""
		set["devices.preferredPanicDeviceModel"] = d.PreferredPanicDeviceModel != nil
		set["devices.preferredVideoType"] = d.PreferredVideoType != nil
	}
	if v := pref.Volumes; v != nil {
		set["volumes.preferredStorageClassName"] = v.PreferredStorageClassName != ""
	}
	errs = append(errs, forbidden(p, set)...)
	if m := pref.Machine; m != nil && m.PreferredMachineType != "" && m.PreferredMachineType != machineType {
		errs = append(errs, field.NotSupported(p.Child("machine", "preferredMachineType"), m.PreferredMachineType, []string{machineType}))
	}
	return errs
}

func forbidden(p *field.Path, set map[string]bool) field.ErrorList {
	var errs field.ErrorList
	for _, f := range slices.Sorted(maps.Keys(set)) {
		if set[f] {
			errs = append(errs, field.Forbidden(p.Child(f), "not supported by kubevmm"))
		}
	}
	return errs
}
