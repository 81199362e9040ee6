package templatevalidator_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/template/process"
	"github.com/kubevmm/kubevmm/operator/ssp/templates"
	tv "github.com/kubevmm/kubevmm/templatevalidator"
)

// TestCommonTemplates: every common template's rules parse, the VM it is
// processed into satisfies them, and the same VM with less memory than
// its minimal-memory rule is refused with the template's message.
func TestCommonTemplates(t *testing.T) {
	tmpls, err := templates.Common(templates.Namespace)
	require.NoError(t, err)
	require.NotEmpty(t, tmpls)
	for _, tp := range tmpls {
		t.Run(tp.Name, func(t *testing.T) {
			raw, err := json.Marshal(tp)
			require.NoError(t, err)
			u := &unstructured.Unstructured{}
			require.NoError(t, json.Unmarshal(raw, &u.Object))
			fromTemplate := tv.TemplateRules(u)
			require.NotEmpty(t, fromTemplate, "the template has rules")

			objs, err := process.Process(tp, map[string]string{"NAME": "vm1"})
			require.NoError(t, err)
			var vm *v1.VirtualMachine
			for _, o := range objs {
				if o.GetKind() == "VirtualMachine" {
					b, err := json.Marshal(o.Object)
					require.NoError(t, err)
					vm = &v1.VirtualMachine{}
					require.NoError(t, json.Unmarshal(b, vm))
				}
			}
			require.NotNil(t, vm, "the template makes a VM")
			ref, ok := tv.TemplateRef(vm.Labels)
			require.True(t, ok, "the VM's labels name its template")
			assert.Equal(t, tp.Namespace+"/"+tp.Name, ref.String())
			assert.Equal(t, fromTemplate, vm.Annotations[tv.AnnotationValidations], "the VM carries the template's rules")

			rules, err := tv.ParseRules(fromTemplate)
			require.NoError(t, err)
			res, err := tv.Evaluate(rules, vm)
			require.NoError(t, err)
			assert.Equal(t, tv.Result{}, res, "the template's own VM satisfies its rules")

			var min int64
			for _, r := range rules {
				if r.Name == "minimal-required-memory" {
					min = r.Min.Int
				}
			}
			require.NotZero(t, min, "a minimal-required-memory rule")
			vm.Spec.Template.Spec.Domain.Memory.Guest = resource.NewQuantity(min-1<<20, resource.BinarySI)
			res, err = tv.Evaluate(rules, vm)
			require.NoError(t, err)
			require.Len(t, res.Violations, 1)
			assert.Equal(t, "This VM requires more memory.", res.Violations[0].Message)
			assert.Equal(t, ".spec.domain.memory.guest", res.Violations[0].Path)
		})
	}
}
