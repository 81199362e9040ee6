package virtapi

import (
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Defaulted returns a copy of the VMI spec s with the defaults this
// webhook's mutation gives it (defaultSpec), for readers that must see a
// spec as the VMI will have it before the API server has defaulted it
// (virt-template-validator's rules). The patch is the mutation's own, so
// the two never differ.
func Defaulted(s *v1.VirtualMachineInstanceSpec) (*v1.VirtualMachineInstanceSpec, error) {
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("defaulting the VMI spec: %w", err)
	}
	out := s.DeepCopy()
	ops := defaultSpec(s, "")
	if len(ops) == 0 {
		return out, nil
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("defaulting the VMI spec: %w", err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, fmt.Errorf("defaulting the VMI spec: %w", err)
	}
	if doc, err = patch.Apply(doc); err != nil {
		return nil, fmt.Errorf("defaulting the VMI spec: %w", err)
	}
	out = &v1.VirtualMachineInstanceSpec{}
	if err := json.Unmarshal(doc, out); err != nil {
		return nil, fmt.Errorf("defaulting the VMI spec: %w", err)
	}
	return out, nil
}
