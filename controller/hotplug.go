package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// A VM's volume requests (status.volumeRequests, from virt-api's
// addvolume/removevolume on virtualmachines) are applied, oldest first, to
// the VM's template (the volume persists) and to its running VMI (the
// guest gets or loses the disk), then dropped:
//
//	pending --apply--> template and VMI patched --next pass--> both hold it: dropped
//
// Applying is idempotent: a volume already added (or already gone) counts
// as done, so a pass cut short between the two writes is finished by the
// next. A request that cannot be applied (a removevolume of a volume that
// is not hot-plugged) is dropped with a log line: virt-api checked it
// against the template, which changed since.

// volumeRequestsPlan is what applying a VM's volume requests changes: the
// template's spec and the VMI's (nil: unchanged), and the requests that
// could not be applied.
type volumeRequestsPlan struct {
	template, vmi *v1.VirtualMachineInstanceSpec
	refused       []error
}

// planVolumeRequests applies reqs to copies of the template's spec and,
// when vmiSpec is not nil, the running VMI's.
func planVolumeRequests(template, vmiSpec *v1.VirtualMachineInstanceSpec, reqs []v1.VirtualMachineVolumeRequest) volumeRequestsPlan {
	var p volumeRequestsPlan
	t := template.DeepCopy()
	var vs *v1.VirtualMachineInstanceSpec
	if vmiSpec != nil {
		vs = vmiSpec.DeepCopy()
	}
	for _, r := range reqs {
		apply := func(s *v1.VirtualMachineInstanceSpec) error {
			switch {
			case r.AddVolumeOptions != nil:
				if err := s.AddHotplugVolume(r.AddVolumeOptions); !errors.Is(err, v1.ErrVolumeExists) {
					return err
				}
			case r.RemoveVolumeOptions != nil:
				if err := s.RemoveHotplugVolume(r.RemoveVolumeOptions.Name); !errors.Is(err, v1.ErrNoVolume) {
					return err
				}
			}
			return nil
		}
		if err := apply(t); err != nil {
			p.refused = append(p.refused, fmt.Errorf("template: %w", err))
			continue
		}
		if vs != nil {
			if err := apply(vs); err != nil {
				p.refused = append(p.refused, fmt.Errorf("VMI: %w", err))
			}
		}
	}
	if !equality.Semantic.DeepEqual(t, template) {
		p.template = t
	}
	if vs != nil && !equality.Semantic.DeepEqual(vs, vmiSpec) {
		p.vmi = vs
	}
	return p
}

// applyVolumeRequests carries out the VM's volume requests: the
// template's spec, then the running VMI's. done: both held every request
// already, which status may drop. A VMI that was created from the
// template's generation is moved to the new one: a hot-plugged volume
// needs no restart (no RestartRequired).
func (a *vmAction) applyVolumeRequests(ctx context.Context) (done bool, syncErr *syncError) {
	vm, vmi := a.vm, a.vmi
	if len(vm.Status.VolumeRequests) == 0 || vm.Spec.Template == nil {
		return true, nil
	}
	running := vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	var vmiSpec *v1.VirtualMachineInstanceSpec
	if running {
		vmiSpec = &vmi.Spec
	}
	p := planVolumeRequests(&vm.Spec.Template.Spec, vmiSpec, vm.Status.VolumeRequests)
	logger := log.FromContext(ctx)
	for _, err := range p.refused {
		logger.Info("volume request not applied", "error", err)
	}
	if p.template == nil && p.vmi == nil {
		return true, nil
	}
	upToDate := running && vmi.Annotations[VMGenerationAnnotation] == strconv.FormatInt(vm.Generation, 10)
	if p.template != nil {
		orig := vm.DeepCopy()
		vm.Spec.Template.Spec = *p.template
		if err := a.r.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("applying volume requests to VM %s/%s: %w", vm.Namespace, vm.Name, err), retry: true}
		}
		logger.Info("volume requests applied to the template", "generation", vm.Generation)
		a.specChanged = true
	}
	if running && (p.vmi != nil || upToDate) {
		orig := vmi.DeepCopy()
		if p.vmi != nil {
			vmi.Spec = *p.vmi
		}
		if upToDate {
			vmi.Annotations[VMGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
		}
		if err := a.r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("applying volume requests to VMI %s/%s: %w", vmi.Namespace, vmi.Name, err), retry: true}
		}
		logger.Info("volume requests applied to the VMI")
	}
	return false, nil
}
