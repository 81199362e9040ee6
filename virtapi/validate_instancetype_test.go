package virtapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// TestValidateVMInstancetype: a VM sized by an instance type needs no
// memory of its own, and is refused, naming the field, when its template
// sets what the type sets or its matchers are malformed.
func TestValidateVMInstancetype(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*v1.VirtualMachine)
		cause metav1.StatusCause // zero: admitted
	}{
		{name: "sized by its type", edit: func(*v1.VirtualMachine) {}},
		{name: "lower-case plural kinds", edit: func(vm *v1.VirtualMachine) {
			vm.Spec.Instancetype.Kind = "virtualmachineinstancetypes"
			vm.Spec.Preference.Kind = "virtualmachineclusterpreferences"
		}},
		{name: "cores conflict", edit: func(vm *v1.VirtualMachine) { vm.Spec.Template.Spec.Domain.CPU = &v1.CPU{Cores: 2} }, cause: metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.template.spec.domain.cpu.cores",
			Message: `spec.template.spec.domain.cpu.cores: Invalid value: VM field spec.template.spec.domain.cpu.cores conflicts with selected instance type`,
		}},
		{name: "unknown kind", edit: func(vm *v1.VirtualMachine) { vm.Spec.Instancetype.Kind = "Flavor" }, cause: metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec.instancetype.kind",
			Message: `spec.instancetype.kind: "Flavor" is not supported by kubevmm (kinds: VirtualMachineClusterInstancetype, VirtualMachineInstancetype)`,
		}},
		{name: "no preference name", edit: func(vm *v1.VirtualMachine) { vm.Spec.Preference.Name = "" }, cause: metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueRequired, Field: "spec.preference.name",
			Message: "spec.preference.name: Required value: the name of the VirtualMachineClusterPreference",
		}},
		{name: "inferred from a volume", edit: func(vm *v1.VirtualMachine) { vm.Spec.Instancetype.InferFromVolume = "root" }, cause: metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueNotSupported, Field: "spec.instancetype.inferFromVolume",
			Message: "spec.instancetype.inferFromVolume: is not supported by kubevmm: volumes are containerDisks, which carry no instance type labels",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &v1.VirtualMachine{}
			require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
			vm.Spec.Template.Spec.Domain.Resources = v1.ResourceRequirements{}
			vm.Spec.Template.Spec.Domain.Memory = nil
			vm.Spec.Template.Spec.Domain.CPU = nil
			vm.Spec.Instancetype = &v1.InstancetypeMatcher{Name: "u1.small"}
			vm.Spec.Preference = &v1.PreferenceMatcher{Name: "fedora", Kind: "VirtualMachineClusterPreference"}
			tc.edit(vm)
			b, err := json.Marshal(vm)
			require.NoError(t, err)
			r := review(t, PathValidateVM, admissionv1.Create, b)
			if tc.cause == (metav1.StatusCause{}) {
				require.True(t, r.Allowed, "%v", r.Result)
				return
			}
			require.False(t, r.Allowed)
			require.NotEmpty(t, r.Result.Details.Causes)
			assert.Equal(t, tc.cause, r.Result.Details.Causes[0])
		})
	}

	// Without an instance type the template still needs its memory.
	vm := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
	vm.Spec.Template.Spec.Domain.Resources = v1.ResourceRequirements{}
	vm.Spec.Template.Spec.Domain.Memory = nil
	vm.Spec.Preference = &v1.PreferenceMatcher{Name: "fedora"}
	vm.Spec.Instancetype = nil
	vm.Spec.RunStrategy = ptr.To(v1.RunStrategyHalted)
	vm.Spec.Running = nil
	b, err := json.Marshal(vm)
	require.NoError(t, err)
	r := review(t, PathValidateVM, admissionv1.Create, b)
	require.False(t, r.Allowed)
	assert.Equal(t, "spec.template.spec.domain.memory.guest", r.Result.Details.Causes[0].Field)
}

// TestValidateVMMatcherUpdate: renaming the instance type while keeping
// the revision captured for the old one is refused; renaming it and
// clearing the revision is not.
func TestValidateVMMatcherUpdate(t *testing.T) {
	base := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), base))
	base.Spec.Template.Spec.Domain.Resources = v1.ResourceRequirements{}
	base.Spec.Template.Spec.Domain.Memory = nil
	base.Spec.Template.Spec.Domain.CPU = nil
	base.Spec.Instancetype = &v1.InstancetypeMatcher{Name: "u1.small", RevisionName: "testvm-u1.small-v1beta1-uid-1"}
	update := func(edit func(*v1.InstancetypeMatcher)) *admissionv1.AdmissionResponse {
		vm := base.DeepCopy()
		edit(vm.Spec.Instancetype)
		o, err := json.Marshal(base)
		require.NoError(t, err)
		n, err := json.Marshal(vm)
		require.NoError(t, err)
		return validateVM(&admissionv1.AdmissionRequest{Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: n}, OldObject: runtime.RawExtension{Raw: o}})
	}
	r := update(func(m *v1.InstancetypeMatcher) { m.Name = "u1.medium" })
	require.False(t, r.Allowed)
	assert.Equal(t, "spec.instancetype.revisionName", r.Result.Details.Causes[0].Field)
	assert.Contains(t, r.Result.Details.Causes[0].Message, "the Matcher Name has been updated without updating the RevisionName")
	r = update(func(m *v1.InstancetypeMatcher) { m.Name, m.RevisionName = "u1.medium", "" })
	assert.True(t, r.Allowed, "%v", r.Result)
}
