package templatevalidator

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/virtapi"
)

// Defaulted returns a copy of the VM's spec.template as its VMI will be,
// for the rules to see what the VM will run with, however it says it:
// virt-api's defaults (machine type, a disk per volume, the pod network's
// NIC), the guest memory (memory.guest, else the memory request, else the
// limit: api/vmispec.GuestMemory, KubeVirt's order), the memory request
// (else the limit, else the guest memory, as KubeVirt defaults it) and
// the vCPU topology (sockets, cores and threads 1 where unset, what the
// launcher counts). So a rule on .spec.domain.memory.guest checks a VM
// that only sets resources.requests.memory, and the other way round.
func Defaulted(vm *v1.VirtualMachine) (*v1.VirtualMachineInstanceTemplateSpec, error) {
	t := &v1.VirtualMachineInstanceTemplateSpec{}
	if vm.Spec.Template != nil {
		t = vm.Spec.Template.DeepCopy()
	}
	s, err := virtapi.Defaulted(&t.Spec)
	if err != nil {
		return nil, fmt.Errorf("VM %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	t.Spec = *s
	d := &t.Spec.Domain
	if guest, err := vmispec.GuestMemory(&t.Spec); err == nil {
		if d.Memory == nil {
			d.Memory = &v1.Memory{}
		}
		if d.Memory.Guest == nil {
			d.Memory.Guest = &guest
		}
		if _, ok := d.Resources.Requests[corev1.ResourceMemory]; !ok {
			req := guest
			if l, ok := d.Resources.Limits[corev1.ResourceMemory]; ok {
				req = l
			}
			if d.Resources.Requests == nil {
				d.Resources.Requests = corev1.ResourceList{}
			}
			d.Resources.Requests[corev1.ResourceMemory] = req
		}
	}
	if d.CPU == nil {
		d.CPU = &v1.CPU{}
	}
	for _, n := range []*uint32{&d.CPU.Sockets, &d.CPU.Cores, &d.CPU.Threads} {
		if *n == 0 {
			*n = 1
		}
	}
	return t, nil
}
